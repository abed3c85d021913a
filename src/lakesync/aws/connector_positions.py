"""Connector poll positions in the config table, with a lease (:class:`lakesync.ports.ConnectorPositionStore`).

The head item ``(gw, "cpos#{name}")`` holds ``ver`` (N), the lease ``ls`` (S) and its expiry ``lu`` (N, epoch ms),
and the position: zlib-compressed JSON in ``z`` (B) when it fits one item, otherwise ``nc`` chunks of at most
:data:`CHUNK_BYTES` in items ``(gw, "cposd#{name}#{ver:012d}#{i:05d}")`` written *before* the head moves to that
version (a diff-mode snapshot of a large table is megabytes). Every transition is one conditional UpdateItem of the
head: acquire (``ver = :v`` and no live lease), renew (``ls = :token``: a take-over replaced the token, so a renewal
racing it fails), commit (``ver = :v`` and ``ls = :token``), release (``ls = :token``).
Chunks of a superseded version are deleted after the commit; a reader that finds its version's chunks gone re-reads
the head.
"""

from __future__ import annotations

import json
import zlib
from collections.abc import Mapping
from typing import TYPE_CHECKING, Any, Final

from botocore.exceptions import ClientError

from lakesync.aws.errors import condition_failed
from lakesync.aws.items import num_attr, query_all, storage_error, str_attr
from lakesync.aws.tables import TableNames
from lakesync.core.errors import StorageError
from lakesync.ports import StoredPosition

if TYPE_CHECKING:
    from mypy_boto3_dynamodb import DynamoDBClient

POSITION_PREFIX: Final = "cpos#"
CHUNK_PREFIX: Final = "cposd#"
CHUNK_BYTES: Final = 350_000
"""Largest chunk item payload, under DynamoDB's 400 KB item limit with the keys."""


def _chunk_key(name: str, version: int, index: int) -> str:
    return f"{CHUNK_PREFIX}{name}#{version:012d}#{index:05d}"


class DynamoDBPositionStore:
    """See the module docstring."""

    def __init__(self, client: DynamoDBClient, names: TableNames) -> None:
        self._db = client
        self._table = names.config

    def _key(self, gateway: str, name: str) -> dict[str, Any]:
        return {"gw": str_attr(gateway), "sk": str_attr(POSITION_PREFIX + name)}

    def read_position(self, gateway: str, name: str) -> StoredPosition:
        for _ in range(5):
            try:
                item = self._db.get_item(TableName=self._table, Key=self._key(gateway, name), ConsistentRead=True).get(
                    "Item"
                )
            except ClientError as exc:
                raise storage_error(exc, "GetItem") from exc
            if item is None:
                return StoredPosition({})
            version = int(item["ver"]["N"]) if "ver" in item else 0
            lease = item["ls"]["S"] if "ls" in item else None
            lease_until = int(item["lu"]["N"]) if "lu" in item else 0
            if "z" in item:
                data: bytes | None = bytes(item["z"]["B"])
            elif "nc" in item:
                data = self._read_chunks(gateway, name, version, int(item["nc"]["N"]))
                if data is None:
                    continue  # superseded and deleted meanwhile: read the new head
            else:
                data = None
            position = json.loads(zlib.decompress(data)) if data else {}
            return StoredPosition(position, version, lease, lease_until)
        raise StorageError(f"Position of connector {name!r} keeps changing while it is read")

    def _read_chunks(self, gateway: str, name: str, version: int, count: int) -> bytes | None:
        keys = [{"gw": str_attr(gateway), "sk": str_attr(_chunk_key(name, version, i))} for i in range(count)]
        found: dict[str, bytes] = {}
        for start in range(0, len(keys), 100):
            pending: Any = {self._table: {"Keys": keys[start : start + 100], "ConsistentRead": True}}
            while pending:
                try:
                    out = self._db.batch_get_item(RequestItems=pending)
                except ClientError as exc:
                    raise storage_error(exc, "BatchGetItem") from exc
                for item in out.get("Responses", {}).get(self._table, []):
                    found[item["sk"]["S"]] = bytes(item["d"]["B"])
                pending = out.get("UnprocessedKeys") or None
        parts = [found.get(_chunk_key(name, version, i)) for i in range(count)]
        if any(p is None for p in parts):
            return None
        return b"".join(p for p in parts if p is not None)

    def _update(self, gateway: str, name: str, **kwargs: Any) -> bool:
        try:
            self._db.update_item(TableName=self._table, Key=self._key(gateway, name), **kwargs)
        except ClientError as exc:
            if condition_failed(exc):
                return False
            raise storage_error(exc, "UpdateItem") from exc
        return True

    def acquire(self, gateway: str, name: str, version: int, token: str, until_ms: int, now_ms: int) -> bool:
        version_check = "attribute_not_exists(ver)" if version == 0 else "ver = :v"
        values: dict[str, Any] = {":t": str_attr(token), ":u": num_attr(until_ms), ":now": num_attr(now_ms)}
        if version:
            values[":v"] = num_attr(version)
        return self._update(
            gateway,
            name,
            UpdateExpression="SET ls = :t, lu = :u",
            ConditionExpression=f"({version_check}) AND (attribute_not_exists(ls) OR lu <= :now)",
            ExpressionAttributeValues=values,
        )

    def commit(self, gateway: str, name: str, token: str, version: int, position: Mapping[str, Any]) -> bool:
        data = zlib.compress(json.dumps(position, separators=(",", ":"), ensure_ascii=False).encode("utf-8"), 6)
        new_version = version + 1
        values: dict[str, Any] = {":t": str_attr(token), ":nv": num_attr(new_version)}
        version_check = "attribute_not_exists(ver)" if version == 0 else "ver = :v"
        if version:
            values[":v"] = num_attr(version)
        previous = self._chunk_count(gateway, name)
        if len(data) <= CHUNK_BYTES:
            values[":z"] = {"B": data}
            expression = "SET ver = :nv, z = :z REMOVE ls, lu, nc"
            chunks = 0
        else:
            chunks = -(-len(data) // CHUNK_BYTES)
            self._write_chunks(gateway, name, new_version, data, chunks)
            values[":nc"] = num_attr(chunks)
            expression = "SET ver = :nv, nc = :nc REMOVE ls, lu, z"
        done = self._update(
            gateway,
            name,
            UpdateExpression=expression,
            ConditionExpression=f"({version_check}) AND ls = :t",
            ExpressionAttributeValues=values,
        )
        if not done:
            if chunks:
                self._delete_chunks(gateway, name, new_version, chunks)
            return False
        if previous:
            self._delete_chunks(gateway, name, version, previous)
        return True

    def _chunk_count(self, gateway: str, name: str) -> int:
        try:
            item = self._db.get_item(
                TableName=self._table,
                Key=self._key(gateway, name),
                ConsistentRead=True,
                ProjectionExpression="nc",
            ).get("Item")
        except ClientError as exc:
            raise storage_error(exc, "GetItem") from exc
        return int(item["nc"]["N"]) if item and "nc" in item else 0

    def _write_chunks(self, gateway: str, name: str, version: int, data: bytes, count: int) -> None:
        for i in range(count):
            try:
                self._db.put_item(
                    TableName=self._table,
                    Item={
                        "gw": str_attr(gateway),
                        "sk": str_attr(_chunk_key(name, version, i)),
                        "d": {"B": data[i * CHUNK_BYTES : (i + 1) * CHUNK_BYTES]},
                    },
                )
            except ClientError as exc:
                raise storage_error(exc, "PutItem") from exc

    def _delete_chunks(self, gateway: str, name: str, version: int, count: int) -> None:
        for i in range(count):
            try:
                self._db.delete_item(
                    TableName=self._table, Key={"gw": str_attr(gateway), "sk": str_attr(_chunk_key(name, version, i))}
                )
            except ClientError as exc:
                raise storage_error(exc, "DeleteItem") from exc

    def release(self, gateway: str, name: str, token: str) -> bool:
        return self._update(
            gateway,
            name,
            UpdateExpression="REMOVE ls, lu",
            ConditionExpression="ls = :t",
            ExpressionAttributeValues={":t": str_attr(token)},
        )

    def renew(self, gateway: str, name: str, token: str, until_ms: int) -> bool:
        return self._update(
            gateway,
            name,
            UpdateExpression="SET lu = :u",
            ConditionExpression="ls = :t",
            ExpressionAttributeValues={":t": str_attr(token), ":u": num_attr(until_ms)},
        )

    def leases(self, gateway: str) -> dict[str, str]:
        found: dict[str, str] = {}
        for item in query_all(
            self._db,
            TableName=self._table,
            KeyConditionExpression="gw = :gw AND begins_with(sk, :p)",
            FilterExpression="attribute_exists(ls)",
            ProjectionExpression="sk, ls",
            ExpressionAttributeValues={":gw": str_attr(gateway), ":p": str_attr(POSITION_PREFIX)},
            ConsistentRead=True,
        ):
            found[item["sk"]["S"].removeprefix(POSITION_PREFIX)] = item["ls"]["S"]
        return found

    def delete_position(self, gateway: str, name: str) -> None:
        count = self._chunk_count(gateway, name)
        stored = self.read_position(gateway, name)
        try:
            self._db.delete_item(TableName=self._table, Key=self._key(gateway, name))
        except ClientError as exc:
            raise storage_error(exc, "DeleteItem") from exc
        if count:
            self._delete_chunks(gateway, name, stored.version, count)
