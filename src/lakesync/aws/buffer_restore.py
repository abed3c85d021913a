"""The buffer's side of a restore from the lake (:mod:`lakesync.gateway.restore`, docs/lake.md): reading what the
old buffer can still tell (:class:`DynamoDBBufferSurvey`) and writing the rebuilt one (:class:`DynamoDBRestoreTarget`),
with the items of :mod:`lakesync.aws.buffer.items`."""

from __future__ import annotations

from collections.abc import Callable, Sequence
from typing import TYPE_CHECKING, Any, TypeVar

from botocore.exceptions import BotoCoreError, ClientError

from lakesync.aws.buffer.items import DOUBT_PREFIX, HeadAttr, head_key, registry_item, row_item
from lakesync.aws.buffer.store import DynamoDBBufferStore
from lakesync.aws.errors import condition_failed, error_code
from lakesync.aws.items import (
    REGISTRY_PREFIX,
    RESTORE_MARK,
    Item,
    batch_get_all,
    batch_write,
    batch_write_all,
    num_attr,
    query_all,
    str_attr,
)
from lakesync.aws.table_setup import table_names
from lakesync.aws.tables import TableNames, table_specs
from lakesync.core.errors import StorageError
from lakesync.core.flush_requests import FLUSH_REQUEST_PREFIX
from lakesync.core.log import ShardHead, ShardId, StoredRow
from lakesync.core.restore import CONFIG_KINDS, RestoreTargetNotEmptyError, SavedConfig
from lakesync.io_pool import results_of, submit
from lakesync.ports import commit_hlc_at

if TYPE_CHECKING:
    from mypy_boto3_dynamodb import DynamoDBClient

__all__ = ["DynamoDBBufferSurvey", "DynamoDBRestoreTarget", "clear_tables", "restored_head_item"]

_T = TypeVar("_T")

_NOT_CONFIG = (REGISTRY_PREFIX, FLUSH_REQUEST_PREFIX, DOUBT_PREFIX, RESTORE_MARK)
"""Config sort keys that are the buffer's state, not the gateway's configuration: rebuilt or dropped by a restore."""


def restored_head_item(head: ShardHead) -> Item:
    """The item of a restored head: every attribute of ``head``, its rows all applied (``ra`` = ``seq``)."""
    item: Item = {
        **head_key(head.shard),
        HeadAttr.SEQ: num_attr(head.seq),
        HeadAttr.ROWS_APPLIED: num_attr(head.seq),
        HeadAttr.BYTES_TOTAL: num_attr(head.bytes_total),
        HeadAttr.DELTAS_TOTAL: num_attr(head.deltas_total),
        HeadAttr.FLUSHED_SEQ: num_attr(head.flushed_seq),
        HeadAttr.FLUSHED_BYTES: num_attr(head.flushed_bytes),
        HeadAttr.FLUSHED_DELTAS: num_attr(head.flushed_deltas),
        HeadAttr.LAST_COMMIT_HLC: num_attr(head.last_commit_hlc),
        HeadAttr.RELEASED_SEQ: num_attr(head.released_seq),
        HeadAttr.RELEASED_HLC: num_attr(head.released_hlc),
    }
    if head.published_seq is not None:
        item[HeadAttr.PUBLISHED_SEQ] = num_attr(head.published_seq)
    return item


def _storage(what: str, read: Callable[[], _T]) -> _T:
    """``read()``, its SDK failures as :class:`StorageError` (a missing table included)."""
    try:
        return read()
    except (ClientError, BotoCoreError) as exc:
        raise StorageError(f"DynamoDB {what} failed: {error_code(exc)}") from exc


class DynamoDBBufferSurvey:
    """The old buffer of a restore, read through the buffer's own store (heads as the log has them)."""

    def __init__(self, client: DynamoDBClient, names: TableNames) -> None:
        self._db = client
        self._t = names
        self._store = DynamoDBBufferStore(client, names)

    def shards(self, gateway: str) -> list[ShardId]:
        """The gateway's shard registry."""
        return _storage("Query", lambda: self._store.list_shards(gateway))

    def heads(self, shards: Sequence[ShardId]) -> dict[ShardId, ShardHead]:
        """The heads of ``shards``, moved over chunks committed past them."""
        return _storage("BatchGetItem", lambda: self._store.get_heads(shards))

    def first_commit_after(self, shard: ShardId, seq: int) -> int | None:
        """The commit HLC of the entry at ``seq + 1`` (``None``: not in the log any more)."""
        return _storage("Query", lambda: commit_hlc_at(self._store, shard, seq + 1))

    def config(self, gateway: str) -> SavedConfig:
        """The items of the gateway's config partition that are its configuration (rules, schemas, destinations,
        connectors, connector positions), counted by kind."""
        items = _storage(
            "Query",
            lambda: list(
                query_all(
                    self._db,
                    TableName=self._t.config,
                    KeyConditionExpression="gw = :gw",
                    ExpressionAttributeValues={":gw": str_attr(gateway)},
                    ConsistentRead=True,
                )
            ),
        )
        kept = [item for item in items if not item["sk"]["S"].startswith(_NOT_CONFIG)]
        kinds: dict[str, int] = {}
        for item in kept:
            kind = _kind(item["sk"]["S"])
            kinds[kind] = kinds.get(kind, 0) + 1
        return SavedConfig(tuple(kept), dict(sorted(kinds.items())))


def _kind(sort_key: str) -> str:
    for prefix, kind in sorted(CONFIG_KINDS.items(), key=lambda p: -len(p[0])):
        if sort_key == prefix or (prefix.endswith("#") and sort_key.startswith(prefix)):
            return kind
    return "other: " + sort_key.split("#", 1)[0]


class DynamoDBRestoreTarget:
    """The buffer tables a restore writes into; ``threads``: row batches written at once."""

    def __init__(self, client: DynamoDBClient, names: TableNames, *, threads: int = 8) -> None:
        self._db = client
        self._t = names
        self._threads = max(1, threads)

    def hold(self, gateway: str, *, started_ms: int, take_over: bool = False) -> None:
        """Write the gateway's restore mark: from now on its pushes and pulls are refused (503 ``RESTORING``) until
        :meth:`release`. ``take_over``: even when a mark is there (a restore that stopped before it ended).

        Raises:
            RestoreTargetNotEmptyError: another restore's mark is there (without ``take_over``).
        """
        request: dict[str, Any] = {
            "TableName": self._t.config,
            "Item": {"gw": str_attr(gateway), "sk": str_attr(RESTORE_MARK), "startedMs": num_attr(started_ms)},
        }
        if not take_over:
            request["ConditionExpression"] = "attribute_not_exists(sk)"
        try:
            self._db.put_item(**request)
        except ClientError as exc:
            if condition_failed(exc):
                raise RestoreTargetNotEmptyError(
                    f"a restore of gateway {gateway!r} holds the buffer tables (another restore is running, or one"
                    " stopped before it ended): wait for it, or restore again with --replace"
                ) from exc
            raise StorageError(f"DynamoDB PutItem failed: {error_code(exc)}") from exc

    def release(self, gateway: str) -> None:
        """Remove the gateway's restore mark: pushes and pulls are served again."""
        _storage(
            "DeleteItem",
            lambda: self._db.delete_item(
                TableName=self._t.config, Key={"gw": str_attr(gateway), "sk": str_attr(RESTORE_MARK)}
            ),
        )

    def holds(self, gateway: str, shards: Sequence[ShardId]) -> bool:
        """Whether the config table has sync rules or a registered shard of ``gateway``, or the heads table a head of
        ``shards``."""
        rules = self._db.get_item(
            TableName=self._t.config, Key={"gw": str_attr(gateway), "sk": str_attr("rules")}, ConsistentRead=True
        )
        registered = self._db.query(
            TableName=self._t.config,
            KeyConditionExpression="gw = :gw AND begins_with(sk, :p)",
            ExpressionAttributeValues={":gw": str_attr(gateway), ":p": str_attr(REGISTRY_PREFIX)},
            ConsistentRead=True,
            Limit=1,
        )
        if "Item" in rules or registered.get("Items"):
            return True
        return bool(shards) and bool(batch_get_all(self._db, self._t.heads, [head_key(s) for s in shards]))

    def put_rows(self, gateway: str, rows: Sequence[StoredRow]) -> None:
        """Write rows at their main keys, a few batches of 25 at once."""
        items = [row_item(gateway, row) for row in rows]
        step = max(25, -(-len(items) // self._threads))
        results_of(
            [submit(batch_write_all, self._db, self._t.rows, items[i : i + step]) for i in range(0, len(items), step)]
        )

    def put_config(self, items: Sequence[object]) -> None:
        """Write configuration items as they were read."""
        batch_write_all(self._db, self._t.config, [_item(i) for i in items])

    def put_heads(self, heads: Sequence[ShardHead]) -> None:
        """Write each head where none is (a head written meanwhile, by a push begun before the restore's mark, is
        not overwritten).

        Raises:
            StorageError: a head is there already (the restore must be run again with ``--replace``).
        """
        for head in heads:
            try:
                self._db.put_item(
                    TableName=self._t.heads,
                    Item=restored_head_item(head),
                    ConditionExpression="attribute_not_exists(#shard)",
                    ExpressionAttributeNames={"#shard": HeadAttr.SHARD},
                )
            except ClientError as exc:
                if condition_failed(exc):
                    raise StorageError(
                        f"shard {head.shard.key} was committed to while the restore wrote it: restore again with"
                        " --replace (the gateway stays refused until a restore ends)"
                    ) from exc
                raise StorageError(f"DynamoDB PutItem failed: {error_code(exc)}") from exc

    def register(self, shards: Sequence[ShardId]) -> None:
        """Add ``shards`` to the registry."""
        batch_write_all(self._db, self._t.config, [registry_item(s) for s in shards])


def _item(value: object) -> Item:
    if not isinstance(value, dict):
        raise TypeError(f"not a DynamoDB item: {type(value).__name__}")
    item: dict[str, Any] = value
    return item


def clear_tables(client: DynamoDBClient, names: TableNames) -> int:
    """Delete every item of the buffer tables that exist but the restore marks (item by item, not the tables: the
    local stack journals item writes, so a crash cannot bring the items back, and the deltas table keeps its stream);
    returns how many."""
    existing = table_names(client)
    deleted = 0
    for spec in table_specs(names):
        table = spec["TableName"]
        if table not in existing:
            continue
        keys = [k["AttributeName"] for k in spec["KeySchema"]]
        for page in client.get_paginator("scan").paginate(
            TableName=table,
            ProjectionExpression=", ".join(f"#k{i}" for i in range(len(keys))),
            ExpressionAttributeNames={f"#k{i}": key for i, key in enumerate(keys)},
            ConsistentRead=True,
        ):
            items = [i for i in page.get("Items", []) if table != names.config or i["sk"]["S"] != RESTORE_MARK]
            for start in range(0, len(items), 25):
                batch_write(client, table, [{"DeleteRequest": {"Key": item}} for item in items[start : start + 25]])
            deleted += len(items)
    return deleted
