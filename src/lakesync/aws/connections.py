"""The WebSocket sessions (:class:`~lakesync.ports.ConnectionStore`) on DynamoDB.

One item per session in the connections table (:func:`lakesync.aws.tables.connections_table_spec`): ``id`` = API
Gateway's ``connectionId``, ``gw``, ``cid`` (the token's ``sub``), ``cl`` (the custom claims as JSON), ``enc``, ``at``
(connected at) and ``exp`` (epoch seconds the session ends: the table's TTL attribute). The WebSocket API has no
``$disconnect`` route, so a closed session's item is deleted by TTL -- which is lazy, so a broadcast closes and deletes
an expired session it finds -- or by the broadcast that finds it gone.

A broadcast lists its gateway's sessions from the ``by_gateway`` index, which projects every attribute: one paged
``Query`` per broadcast, no read per session. The index is eventually consistent, so a session opened a moment ago
may be missing from a broadcast (the port allows it: a client pulls when it connects). A session's own reads
(``get_connection``, for every message it sends) are strongly consistent ``GetItem``s.
"""

from __future__ import annotations

import json
from collections.abc import Iterator
from typing import TYPE_CHECKING, Any

from botocore.exceptions import ClientError

from lakesync.aws.items import query_all, storage_error, utf8_json
from lakesync.aws.tables import CONNECTIONS_INDEX, TTL_ATTRIBUTE
from lakesync.core.realtime import Connection, Encoding

if TYPE_CHECKING:
    from mypy_boto3_dynamodb import DynamoDBClient

__all__ = ["DynamoDBConnectionStore"]


def _item(connection: Connection) -> dict[str, Any]:
    claims = {k: v if isinstance(v, str) else list(v) for k, v in connection.claims.items()}
    return {
        "id": {"S": connection.connection_id},
        "gw": {"S": connection.gateway},
        "cid": {"S": connection.client_id},
        "cl": {"S": utf8_json(claims)},
        "enc": {"S": connection.encoding.value},
        "at": {"N": str(connection.connected_at)},
        TTL_ATTRIBUTE: {"N": str(connection.expires_at)},
    }


def _connection(item: dict[str, Any]) -> Connection:
    claims = json.loads(item["cl"]["S"])
    return Connection(
        connection_id=item["id"]["S"],
        gateway=item["gw"]["S"],
        client_id=item["cid"]["S"],
        claims={k: v if isinstance(v, str) else tuple(v) for k, v in claims.items()},
        encoding=Encoding(item["enc"]["S"]),
        expires_at=int(item[TTL_ATTRIBUTE]["N"]),
        connected_at=int(item["at"]["N"]),
    )


class DynamoDBConnectionStore:
    """:class:`~lakesync.ports.ConnectionStore` in the connections table (see the module docstring).

    Args:
        client: A DynamoDB client.
        table: The connections table's name.
        page_size: Sessions per ``Query`` page of :meth:`list_connections` (DynamoDB also stops a page at 1 MB).
    """

    def __init__(self, client: DynamoDBClient, table: str, *, page_size: int = 1000) -> None:
        self._db = client
        self._table = table
        self._page_size = page_size

    def put_connection(self, connection: Connection) -> None:
        try:
            self._db.put_item(TableName=self._table, Item=_item(connection))
        except ClientError as exc:
            raise storage_error(exc, "PutItem") from exc

    def get_connection(self, connection_id: str) -> Connection | None:
        try:
            item = self._db.get_item(TableName=self._table, Key={"id": {"S": connection_id}}, ConsistentRead=True).get(
                "Item"
            )
        except ClientError as exc:
            raise storage_error(exc, "GetItem") from exc
        return None if item is None else _connection(item)

    def remove_connection(self, connection_id: str) -> None:
        try:
            self._db.delete_item(TableName=self._table, Key={"id": {"S": connection_id}})
        except ClientError as exc:
            raise storage_error(exc, "DeleteItem") from exc

    def list_connections(self, gateway: str) -> list[Connection]:
        return [_connection(item) for item in self._pages(gateway)]

    def _pages(self, gateway: str) -> Iterator[dict[str, Any]]:
        return query_all(
            self._db,
            page_size=lambda: self._page_size,
            TableName=self._table,
            IndexName=CONNECTIONS_INDEX,
            KeyConditionExpression="gw = :g",
            ExpressionAttributeValues={":g": {"S": gateway}},
        )
