"""Clients' stream subscriptions (:class:`~lakesync.ports.SubscriptionStore`) on DynamoDB.

One item per client in the dedup table, beside the ``since`` sessions and under a key no deltaId record can take
(gateway ids never start with ``~``): ``pk = ~subs#{gateway}#{clientId}``, the client's subscriptions as a JSON array
in ``s``, a version in ``v`` and ``exp`` for the table's TTL (the last expiry among them: the item goes once every
subscription has run out). At most :data:`~lakesync.core.streams.MAX_CLIENT_SUBSCRIPTIONS` subscriptions of at most
8 parameters of 256 characters each keep the item far under DynamoDB's 400 KB.

Every change is a read and a put guarded by the version read, retried from a fresh read when another request of the
client wrote first: the bound is checked against the set actually replaced, so two subscribes at the bound cannot
both be stored. Each client's item is its own partition: subscriptions never make a hot key, and they stay out of the
config table, whose gateway partition every pull reads (``rules``...``shard$``, docs/buffer.md).

The scopes pulls served the client (:meth:`get_served`, :mod:`lakesync.gateway.scope_change`) are an item of their
own, ``pk = ~scope#{gateway}#{clientId}``: a JSON object of fingerprint to what the scope covers
(:meth:`~lakesync.core.scope.Scope.to_json`) in ``f``, the latest :data:`~lakesync.ports.MAX_SERVED_SCOPES` kept, and
fewer while it would pass :data:`SERVED_BYTES`. It is put unconditionally: a pull only adds the scope it is about to
hand out, so two racing pulls of one client at worst drop each other's newest scope, whose cursor then answers 410
and reloads.
"""

from __future__ import annotations

import contextlib
import json
from collections.abc import Mapping
from typing import TYPE_CHECKING, Any, Final

from botocore.exceptions import ClientError

from lakesync.aws.errors import condition_failed
from lakesync.aws.items import storage_error
from lakesync.aws.tables import TableNames
from lakesync.core.errors import CommitConflictError
from lakesync.core.scope import Scope, held_scope
from lakesync.core.streams import Subscription
from lakesync.ports import keep_served, put_subscription

if TYPE_CHECKING:
    from mypy_boto3_dynamodb import DynamoDBClient

KEY_PREFIX: Final = "~subs#"
SERVED_PREFIX: Final = "~scope#"
SERVED_BYTES: Final = 300_000
"""Most bytes of served scopes one item holds (DynamoDB's item limit is 400 KB)."""
ATTEMPTS: Final = 8
"""Read-and-put rounds a change gets against concurrent changes of the same client's subscriptions."""


def subscriptions_key(gateway: str, client_id: str) -> str:
    """The item key of a client's subscriptions."""
    return f"{KEY_PREFIX}{gateway}#{client_id}"


class DynamoDBSubscriptionStore:
    """:class:`~lakesync.ports.SubscriptionStore` in the dedup table."""

    def __init__(self, client: DynamoDBClient, names: TableNames) -> None:
        self._db = client
        self._table = names.dedup

    def get(self, gateway: str, client_id: str, now_ms: int) -> list[Subscription]:
        held, _ = self._read(subscriptions_key(gateway, client_id))
        return [s for s in held if not s.expired(now_ms)]

    def put(self, gateway: str, client_id: str, subscription: Subscription, now_ms: int, limit: int) -> bool:
        key = subscriptions_key(gateway, client_id)
        for _ in range(ATTEMPTS):
            held, version = self._read(key)
            after = put_subscription(held, subscription, now_ms, limit)
            if after is None:
                return False
            if self._write(key, after, version, now_ms):
                return True
        raise CommitConflictError(f"Subscriptions of client {client_id!r} kept changing; retry")

    def remove(self, gateway: str, client_id: str, subscription: Subscription, now_ms: int) -> bool:
        key = subscriptions_key(gateway, client_id)
        for _ in range(ATTEMPTS):
            held, version = self._read(key)
            live = [s for s in held if not s.expired(now_ms)]
            if subscription not in live:
                return False
            if self._write(key, [s for s in live if s != subscription], version, now_ms):
                return True
        raise CommitConflictError(f"Subscriptions of client {client_id!r} kept changing; retry")

    def get_served(self, gateway: str, client_id: str) -> dict[str, Scope]:
        item = self._get(f"{SERVED_PREFIX}{gateway}#{client_id}")
        if item is None:
            return {}
        served: dict[str, Scope] = {}
        for fingerprint, doc in json.loads(item["f"]["S"]).items():
            with contextlib.suppress(ValueError):  # a scope kept in another form is not one this pull can tell
                served[fingerprint] = held_scope(doc)
        return served

    def put_served(self, gateway: str, client_id: str, scope: Scope, held: Mapping[str, Scope] | None = None) -> None:
        kept = self.get_served(gateway, client_id) if held is None else held
        served = {fp: s.to_json() for fp, s in keep_served(kept, scope).items()}
        while True:
            text = json.dumps(served, separators=(",", ":"), ensure_ascii=False)
            if len(text.encode()) <= SERVED_BYTES or len(served) == 1:
                break
            served.pop(next(iter(served)))
        item = {"pk": {"S": f"{SERVED_PREFIX}{gateway}#{client_id}"}, "f": {"S": text}}
        try:
            self._db.put_item(TableName=self._table, Item=item)
        except ClientError as exc:
            raise storage_error(exc, "PutItem") from exc

    def _get(self, key: str) -> dict[str, Any] | None:
        try:
            item = self._db.get_item(TableName=self._table, Key={"pk": {"S": key}}, ConsistentRead=True).get("Item")
        except ClientError as exc:
            raise storage_error(exc, "GetItem") from exc
        return item

    def _read(self, key: str) -> tuple[list[Subscription], int]:
        item = self._get(key)
        if item is None:
            return [], 0
        docs = json.loads(item["s"]["S"])
        held = [_subscription(d) for d in docs]
        return held, int(item["v"]["N"])

    def _write(self, key: str, held: list[Subscription], version: int, now_ms: int) -> bool:
        """Store ``held`` as version ``version + 1`` if the stored version is still ``version``; whether it was."""
        guard: dict[str, Any] = {"ConditionExpression": "attribute_not_exists(pk)"}
        if version:
            guard = {"ConditionExpression": "v = :v", "ExpressionAttributeValues": {":v": {"N": str(version)}}}
        item: dict[str, Any] = {
            "pk": {"S": key},
            "s": {"S": json.dumps([s.to_json() for s in held], separators=(",", ":"), ensure_ascii=False)},
            "v": {"N": str(version + 1)},
        }
        expiry = _item_expiry(held, now_ms)
        if expiry is not None:
            item["exp"] = {"N": str(expiry)}
        try:
            self._db.put_item(TableName=self._table, Item=item, **guard)
        except ClientError as exc:
            if condition_failed(exc):
                return False
            raise storage_error(exc, "PutItem") from exc
        return True


def _subscription(doc: dict[str, Any]) -> Subscription:
    return Subscription.of(doc["stream"], doc["params"], doc.get("expiresAt"))


def _item_expiry(held: list[Subscription], now_ms: int) -> int | None:
    """The item's TTL (epoch seconds): when its last subscription runs out (now, when it holds none); ``None`` when
    one never does."""
    expiries = [s.expires_at for s in held]
    if any(e is None for e in expiries):
        return None
    return -(-max([now_ms, *(e for e in expiries if e is not None)]) // 1000)
