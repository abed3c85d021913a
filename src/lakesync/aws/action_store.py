"""The actions table: cached action results and idempotency claims (:class:`DynamoDBActionStore`)."""

from __future__ import annotations

import json
from collections.abc import Mapping, Sequence
from typing import TYPE_CHECKING, Any

from botocore.exceptions import ClientError

from lakesync.aws.errors import condition_failed
from lakesync.aws.items import batch_get_all, num_attr, storage_error, str_attr, utf8_json
from lakesync.aws.tables import TTL_ATTRIBUTE, TableNames

if TYPE_CHECKING:
    from mypy_boto3_dynamodb import DynamoDBClient

__all__ = ["DynamoDBActionStore"]


def _action_record_key(gateway: str, client_id: str, key: str) -> str:
    """:func:`lakesync.core.actions.action_record_key`, imported on the first use: only the actions function stores
    action records, and every other function loads this module without ``core.actions`` (``test_fn_imports``)."""
    from lakesync.core.actions import action_record_key

    return action_record_key(gateway, client_id, key)


class DynamoDBActionStore:
    """Action idempotency records with a TTL, one item per (gateway, client, key): the partition key is
    :func:`~lakesync.core.actions.action_record_key`."""

    def __init__(self, client: DynamoDBClient, names: TableNames) -> None:
        self._db = client
        self._t = names

    def get(self, gateway: str, client_id: str, keys: Sequence[str], now_s: int) -> dict[str, dict[str, Any]]:
        by_pk = {_action_record_key(gateway, client_id, k): k for k in keys}
        if not by_pk:
            return {}
        items = batch_get_all(self._db, self._t.actions, [{"pk": str_attr(pk)} for pk in by_pk])
        found = {}
        for item in items:
            if int(item[TTL_ATTRIBUTE]["N"]) > now_s:
                found[by_pk[item["pk"]["S"]]] = json.loads(item["rec"]["S"])
        return found

    def claim(self, gateway: str, client_id: str, key: str, expires_at: int, now_s: int) -> bool:
        try:
            self._db.put_item(
                TableName=self._t.actions,
                Item={
                    "pk": str_attr(_action_record_key(gateway, client_id, key)),
                    "rec": str_attr(utf8_json({"status": "pending"})),
                    TTL_ATTRIBUTE: num_attr(expires_at),
                },
                ConditionExpression="attribute_not_exists(pk) OR #exp <= :now",
                ExpressionAttributeNames={"#exp": TTL_ATTRIBUTE},
                ExpressionAttributeValues={":now": num_attr(now_s)},
            )
        except ClientError as exc:
            if condition_failed(exc):
                return False
            raise storage_error(exc, "PutItem") from exc
        return True

    def put(
        self, gateway: str, client_id: str, keys: Sequence[str], record: Mapping[str, Any], expires_at: int
    ) -> None:
        text = utf8_json(dict(record))
        try:
            for key in dict.fromkeys(keys):
                self._db.put_item(
                    TableName=self._t.actions,
                    Item={
                        "pk": str_attr(_action_record_key(gateway, client_id, key)),
                        "rec": str_attr(text),
                        TTL_ATTRIBUTE: num_attr(expires_at),
                    },
                )
        except ClientError as exc:
            raise storage_error(exc, "PutItem") from exc

    def release(self, gateway: str, client_id: str, key: str) -> None:
        try:
            self._db.delete_item(
                TableName=self._t.actions, Key={"pk": str_attr(_action_record_key(gateway, client_id, key))}
            )
        except ClientError as exc:
            raise storage_error(exc, "DeleteItem") from exc
