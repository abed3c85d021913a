"""The per-caller rate limits' shared counters (:class:`~lakesync.ports.RateLimitCounter`) on DynamoDB.

One item per caller key and fixed window in the dedup table, under a key no deltaId record can take (gateway ids never
start with ``~``): ``pk = ~rate#{window}#{key}``, the count in ``n``, and ``exp`` for the table's TTL (the item is
deleted, free of charge, after its window has ended). A take is one conditional ``UpdateItem``: ``ADD n :want`` when
``n <= limit - want`` (or the item is new). When the condition fails the refused write returns the count
(``ReturnValuesOnConditionCheckFailure``), and what is left below the limit, if anything, is taken with one more
conditional write. An item is well under 1 KB: each write costs one write unit, a refused one too.

Each caller's window is its own partition, so a busy caller never makes a hot key for anyone else.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import TYPE_CHECKING, Any, Final, cast

from botocore.exceptions import ClientError

from lakesync.aws.errors import condition_failed, error_code
from lakesync.aws.tables import TableNames
from lakesync.core.errors import StorageError

if TYPE_CHECKING:
    from mypy_boto3_dynamodb import DynamoDBClient

KEY_PREFIX: Final = "~rate#"
_ATTEMPTS: Final = 4
"""Conditional writes of one take at most: the count moves only upwards, so each refusal leaves less to ask for."""


def counter_key(key: str, window: int) -> str:
    """The item key of ``key``'s counter in ``window``."""
    return f"{KEY_PREFIX}{window}#{key}"


class DynamoDBRateLimitCounter:
    """:class:`~lakesync.ports.RateLimitCounter` in the dedup table."""

    def __init__(self, client: DynamoDBClient, names: TableNames) -> None:
        self._db = client
        self._table = names.dedup

    def take(self, key: str, window: int, want: int, limit: int, expires_at: int) -> int:
        pk = counter_key(key, window)
        want = min(want, limit)
        for _ in range(_ATTEMPTS):
            if want <= 0:
                return 0
            count = self._add(pk, want, limit, expires_at)
            if count is None:
                return want
            want = limit - count
        return 0

    def _add(self, pk: str, want: int, limit: int, expires_at: int) -> int | None:
        """``None`` when ``want`` was added; else the count that refused it."""
        try:
            self._db.update_item(
                TableName=self._table,
                Key={"pk": {"S": pk}},
                UpdateExpression="ADD #n :want SET #e = if_not_exists(#e, :exp)",
                ConditionExpression="attribute_not_exists(#n) OR #n <= :room",
                ExpressionAttributeNames={"#n": "n", "#e": "exp"},
                ExpressionAttributeValues={
                    ":want": {"N": str(want)},
                    ":room": {"N": str(limit - want)},
                    ":exp": {"N": str(expires_at)},
                },
                ReturnValuesOnConditionCheckFailure="ALL_OLD",
            )
        except ClientError as exc:
            if not condition_failed(exc):
                raise StorageError(f"DynamoDB UpdateItem failed: {error_code(exc)}") from exc
            item = cast("Mapping[str, Any]", exc.response.get("Item") or {})
            count = item.get("n", {}).get("N")
            return limit if count is None else int(count)
        return None
