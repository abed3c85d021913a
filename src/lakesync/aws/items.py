"""DynamoDB items: attribute values, the config table's keys, row states as text, and the batched and paged requests
every store sends (with what a failed request means to the caller)."""

from __future__ import annotations

import json
import random
import re
import time
from collections.abc import Callable, Iterator
from typing import TYPE_CHECKING, Any, Final, cast

from botocore.exceptions import ClientError

from lakesync.aws.errors import error_code
from lakesync.core.canonical import JsonValue
from lakesync.core.errors import StorageBusyError, StorageError
from lakesync.core.log import ShardId
from lakesync.core.merge import RowState, state_from_json, state_to_json
from lakesync.io_pool import results_of, submit

if TYPE_CHECKING:
    from mypy_boto3_dynamodb import DynamoDBClient

__all__ = [
    "CONNECTOR_PREFIX",
    "DESTINATION_PREFIX",
    "REGISTRY_PREFIX",
    "THROTTLED_CODES",
    "Item",
    "batch_get_all",
    "batch_get_slice",
    "batch_write",
    "batch_write_all",
    "decode_row_state",
    "destination_key",
    "encode_row_state",
    "num_attr",
    "query_all",
    "registry_key",
    "registry_shard",
    "storage_error",
    "str_attr",
    "utf8_json",
]

Item = dict[str, Any]
"""A DynamoDB item in the low-level client's shape."""

_LONE_SURROGATE = re.compile(r"[\ud800-\udfff]")


def utf8_json(value: JsonValue) -> str:
    """Compact JSON for a DynamoDB string: UTF-8 as it is (what the push size limits measure); only lone surrogates,
    which UTF-8 cannot carry, are written as JSON escapes."""
    return _utf8_safe(json.dumps(value, separators=(",", ":"), ensure_ascii=False))


def _utf8_safe(text: str) -> str:
    """``text`` with every surrogate code point written as a JSON escape (UTF-8 cannot carry them)."""
    if not _LONE_SURROGATE.search(text):
        return text
    return _LONE_SURROGATE.sub(lambda m: f"\\u{ord(m.group(0)):04x}", text)


RESTORE_MARK = "rules#restoring"
"""Config-table sort key of the item a restore from the lake holds while it rebuilds the gateway's buffer: pushes and
pulls read it with the rules (it sorts right after ``rules``) and are refused while it is there."""

REGISTRY_PREFIX = "shard#"
"""Sort-key prefix of the shard registry items in the config table (``shard#{shard key}``)."""


def registry_key(shard: ShardId) -> str:
    """The config-table sort key registering ``shard``."""
    return f"{REGISTRY_PREFIX}{shard.key}"


def registry_shard(key: str) -> ShardId:
    """Inverse of :func:`registry_key`."""
    return ShardId.parse(key.removeprefix(REGISTRY_PREFIX))


DESTINATION_PREFIX = "dest#"
"""Sort-key prefix of the materialisation destinations in the config table (``dest#{name}``); it sorts before
``rules``, so destinations stay outside the pull's ``rules``..``shard$`` range."""


CONNECTOR_PREFIX = "conn#"
"""Sort-key prefix of the registered connectors in the config table (``conn#{name}``); it sorts before ``rules``.
Their poll positions are ``cpos#{name}`` (and ``cposd#…`` chunks, :mod:`lakesync.aws.connector_positions`)."""


def destination_key(name: str) -> str:
    """The config-table sort key of the destination ``name``."""
    return f"{DESTINATION_PREFIX}{name}"


def str_attr(value: str) -> dict[str, str]:
    """A DynamoDB string attribute value."""
    return {"S": value}


def num_attr(value: int) -> dict[str, str]:
    """A DynamoDB number attribute value."""
    return {"N": str(value)}


def encode_row_state(state: RowState) -> str:
    """JSON text of a row's LWW state (:func:`lakesync.core.merge.state_to_json`)."""
    return utf8_json(state_to_json(state))


def decode_row_state(table: str, row_id: str, text: str) -> RowState:
    """Inverse of :func:`encode_row_state`."""
    return state_from_json(table, row_id, json.loads(text), trusted=True)


THROTTLED_CODES: Final = frozenset(
    {"ProvisionedThroughputExceededException", "ThrottlingException", "RequestLimitExceeded"}
)
"""Error codes of a request DynamoDB refused for capacity (after the SDK's own retries): worth retrying later."""


def storage_error(exc: ClientError, what: str) -> StorageError:
    """What a failed request means to the caller: throttling is :class:`StorageBusyError` (503, retry later), anything
    else :class:`StorageError` (500)."""
    code = error_code(exc)
    if code in THROTTLED_CODES:
        return StorageBusyError(f"DynamoDB is throttling {what} requests ({code}); retry later")
    return StorageError(f"DynamoDB {what} failed: {code}")


def batch_get_all(db: DynamoDBClient, table: str, keys: list[Item]) -> list[Item]:
    """Consistent BatchGetItem of any number of keys (100 keys per request, the requests side by side), following
    UnprocessedKeys."""
    slices = [[(table, key) for key in keys[start : start + 100]] for start in range(0, len(keys), 100)]
    parts = (
        [batch_get_slice(db, slices[0])]
        if len(slices) == 1
        else results_of([submit(batch_get_slice, db, part) for part in slices])
    )
    return [item for part in parts for _, items in part for item in items]


def batch_get_slice(db: DynamoDBClient, keys: list[tuple[str, Item]]) -> list[tuple[str, list[Item]]]:
    """One BatchGetItem of up to 100 keys, following UnprocessedKeys: the items found, by table."""
    request: dict[str, Any] = {}
    for table, key in keys:
        request.setdefault(table, {"Keys": [], "ConsistentRead": True})["Keys"].append(key)
    found: list[tuple[str, list[Item]]] = []
    while request:
        try:
            out = db.batch_get_item(RequestItems=request)
        except ClientError as exc:
            raise storage_error(exc, "BatchGetItem") from exc
        found.extend(out["Responses"].items())
        request = dict(out.get("UnprocessedKeys") or {})
    return found


def batch_write_all(db: DynamoDBClient, table: str, items: list[Item], *, attempts: int = 8) -> None:
    """BatchWriteItem of any number of puts (25 per request), retrying UnprocessedItems with backoff."""
    for start in range(0, len(items), 25):
        puts = [{"PutRequest": {"Item": item}} for item in items[start : start + 25]]
        batch_write(db, table, puts, attempts=attempts)


def batch_write(
    db: DynamoDBClient,
    table: str,
    requests: list[Item],
    *,
    attempts: int = 8,
    sending: Callable[[], bool] | None = None,
) -> list[Item]:
    """One BatchWriteItem of up to 25 write requests, retrying UnprocessedItems with backoff. ``sending``: asked
    before each request; once it says no, the requests not written yet are returned unsent."""
    for attempt in range(attempts):
        if sending is not None and not sending():
            return requests
        try:
            out = db.batch_write_item(RequestItems=cast(Any, {table: requests}))
        except ClientError as exc:
            raise storage_error(exc, "BatchWriteItem") from exc
        requests = cast(list[Item], (out.get("UnprocessedItems") or {}).get(table, []))
        if not requests:
            return []
        time.sleep(min(0.5, 0.01 * 2**attempt) * random.uniform(0.5, 1.0))
    raise StorageError(f"DynamoDB BatchWriteItem left items unprocessed after {attempts} attempts")


def config_items(db: DynamoDBClient, table: str, gateway: str, prefix: str) -> Iterator[Item]:
    """Every item of ``gateway``'s partition of the config table whose sort key starts with ``prefix`` (consistent
    reads, paged)."""
    return query_all(
        db,
        TableName=table,
        KeyConditionExpression="gw = :gw AND begins_with(sk, :p)",
        ExpressionAttributeValues={":gw": str_attr(gateway), ":p": str_attr(prefix)},
        ConsistentRead=True,
    )


def query_all(db: DynamoDBClient, *, page_size: Callable[[], int] | None = None, **kwargs: Any) -> Iterator[Item]:
    """Every item of a Query, following LastEvaluatedKey (``page_size()``: the Limit of each next request)."""
    while True:
        if page_size is not None:
            kwargs["Limit"] = max(1, page_size())
        try:
            out = db.query(**kwargs)
        except ClientError as exc:
            raise storage_error(exc, "Query") from exc
        yield from out.get("Items", [])
        last = out.get("LastEvaluatedKey")
        if not last:
            return
        kwargs["ExclusiveStartKey"] = last
