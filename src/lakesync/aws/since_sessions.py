"""The ``since`` sessions of original clients (:mod:`lakesync.gateway.since`) on DynamoDB.

One item per client in the dedup table, under a key no deltaId record can take (gateway ids never start with ``~``):
``pk = ~since#{gateway}#{clientId}``, the session JSON in ``s``, its version in ``v``, and ``exp`` for the table's
TTL (an idle session expires). A put is guarded by the version read, so two requests of one client cannot lose each
other's handouts. Each client's item is its own partition: sessions never make a hot key.
"""

from __future__ import annotations

import json
from typing import TYPE_CHECKING, Any

from botocore.exceptions import ClientError

from lakesync.aws.errors import condition_failed
from lakesync.aws.items import storage_error
from lakesync.aws.tables import TableNames
from lakesync.core.log import CommitConflict
from lakesync.core.since import SinceSession

if TYPE_CHECKING:
    from mypy_boto3_dynamodb import DynamoDBClient

KEY_PREFIX = "~since#"


def session_key(gateway: str, client_id: str) -> str:
    """The item key of a client's session."""
    return f"{KEY_PREFIX}{gateway}#{client_id}"


class DynamoDBSinceSessions:
    """:class:`~lakesync.ports.SinceSessionStore` in the dedup table."""

    def __init__(self, client: DynamoDBClient, names: TableNames) -> None:
        self._db = client
        self._table = names.dedup

    def get(self, gateway: str, client_id: str) -> SinceSession | None:
        try:
            item = self._db.get_item(
                TableName=self._table, Key={"pk": {"S": session_key(gateway, client_id)}}, ConsistentRead=True
            ).get("Item")
        except ClientError as exc:
            raise storage_error(exc, "GetItem") from exc
        if item is None:
            return None
        return SinceSession.from_json(json.loads(item["s"]["S"]), int(item["v"]["N"]))

    def put(self, gateway: str, client_id: str, session: SinceSession, expires_at: int) -> None:
        guard: dict[str, Any] = {"ConditionExpression": "attribute_not_exists(pk)"}
        if session.version:
            guard = {"ConditionExpression": "v = :v", "ExpressionAttributeValues": {":v": {"N": str(session.version)}}}
        try:
            self._db.put_item(
                TableName=self._table,
                Item={
                    "pk": {"S": session_key(gateway, client_id)},
                    "s": {"S": session.encode()},
                    "v": {"N": str(session.version + 1)},
                    "exp": {"N": str(expires_at)},
                },
                **guard,
            )
        except ClientError as exc:
            if condition_failed(exc):
                raise CommitConflict() from exc
            raise storage_error(exc, "PutItem") from exc
