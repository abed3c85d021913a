"""Stream subscriptions over HTTP: a client subscribes to a stream of the sync rules in force with parameters, lists
its live subscriptions and removes one (docs/streams.md, "Subscribing").

The caller is the token's client (``sub``); each client's subscriptions are its own (a
:class:`~lakesync.ports.SubscriptionStore`), at most :data:`~lakesync.core.streams.MAX_CLIENT_SUBSCRIPTIONS` live
ones. A subscription is named by an ``id`` derived from its stream and parameters, so subscribing again with the same
ones is the same subscription, its expiry refreshed. A refusal is an error whose body adds ``refusal``, the stable code
of :mod:`lakesync.core.streams` (or one of this module's): ``{"error", "code", "refusal"}``.
"""

from __future__ import annotations

import hashlib
import json
from dataclasses import dataclass
from typing import Any, Final

from lakesync.core.claims import Claims
from lakesync.core.errors import ConflictError, ForbiddenError, LakeSyncError, NotFoundError, ValidationError
from lakesync.core.rules import SyncRules
from lakesync.core.streams import (
    MAX_CLIENT_SUBSCRIPTIONS,
    NOT_ALLOWED,
    UNKNOWN_STREAM,
    Stream,
    Subscription,
    SubscriptionRefusal,
    check_stream_params,
)
from lakesync.gateway.basis_cache import fresh_reader
from lakesync.gateway.deps import GatewayDeps
from lakesync.gateway.pull import StoresPullBasis
from lakesync.ports import SubscriptionStore

__all__ = [
    "MAX_TTL_REQUEST",
    "MEMBERSHIP_UNSUPPORTED",
    "TOO_MANY_SUBSCRIPTIONS",
    "UNKNOWN_SUBSCRIPTION",
    "HeldSubscription",
    "SubscriptionRefusedError",
    "list_subscriptions",
    "subscribe",
    "subscription_id",
    "unsubscribe",
]

TOO_MANY_SUBSCRIPTIONS: Final = "TOO_MANY_SUBSCRIPTIONS"
"""Refusal code: the client already holds the most live subscriptions it may (409)."""
UNKNOWN_SUBSCRIPTION: Final = "UNKNOWN_SUBSCRIPTION"
"""Refusal code: the client holds no live subscription of that id (404)."""
MEMBERSHIP_UNSUPPORTED: Final = "MEMBERSHIP_UNSUPPORTED"
"""Refusal code: the stream reads a membership table and the deployment was built without a membership reader
(``GatewayDeps.memberships`` is ``None``; every deployed function and ``lakesync local`` have one) (422)."""
MAX_TTL_REQUEST: Final = 2**31 - 1
"""Largest ``ttlSeconds`` a request may ask (the stream's own maximum applies below it)."""
_FIELDS: Final = frozenset({"stream", "params", "ttlSeconds"})
_ID_CHARS: Final = 32


class SubscriptionRefusedError(LakeSyncError):
    """A refused subscription request: the error body adds the stable ``refusal`` code."""

    def __init__(self, refusal: SubscriptionRefusal) -> None:
        super().__init__(refusal.reason)
        self.refusal = refusal.code

    def to_body(self) -> dict[str, Any]:
        """``{"error", "code", "refusal"}``."""
        return {**super().to_body(), "refusal": self.refusal}


class UnknownSubscriptionError(SubscriptionRefusedError, NotFoundError):
    """404: no such stream (``UNKNOWN_STREAM``) or no such subscription of the caller (``UNKNOWN_SUBSCRIPTION``)."""


class InvalidSubscriptionError(SubscriptionRefusedError, ValidationError):
    """400: a parameter undeclared, supplied by the token, malformed or missing."""


class SubscriptionForbiddenError(SubscriptionRefusedError, ForbiddenError):
    """403: the token does not allow the value (``NOT_ALLOWED``)."""


class TooManySubscriptionsError(SubscriptionRefusedError, ConflictError):
    """409: the client holds :data:`~lakesync.core.streams.MAX_CLIENT_SUBSCRIPTIONS` live subscriptions."""


class UnsupportedSubscriptionError(SubscriptionRefusedError, ValidationError):
    """422: the stream reads memberships and the deployment has no membership reader (``MEMBERSHIP_UNSUPPORTED``)."""

    status = 422


def refused(refusal: SubscriptionRefusal) -> SubscriptionRefusedError:
    """The error answering ``refusal``: 404 unknown stream, 403 not allowed, 400 otherwise."""
    if refusal.code == UNKNOWN_STREAM:
        return UnknownSubscriptionError(refusal)
    if refusal.code == NOT_ALLOWED:
        return SubscriptionForbiddenError(refusal)
    return InvalidSubscriptionError(refusal)


@dataclass(frozen=True, slots=True)
class HeldSubscription:
    """A client's subscription with its ``id``."""

    id: str
    subscription: Subscription

    @classmethod
    def of(cls, subscription: Subscription) -> HeldSubscription:
        """``subscription`` with its id."""
        return cls(subscription_id(subscription), subscription)

    def to_json(self) -> dict[str, Any]:
        """``{"id", "stream", "params", "expiresAt"}``."""
        return {"id": self.id, **self.subscription.to_json()}


def subscription_id(subscription: Subscription) -> str:
    """The id of ``subscription``: 32 hex digits of the SHA-256 of its stream and parameters (not its expiry)."""
    text = json.dumps([subscription.stream, subscription.params], separators=(",", ":"), ensure_ascii=False)
    return hashlib.sha256(text.encode()).hexdigest()[:_ID_CHARS]


@dataclass(frozen=True, slots=True)
class SubscribeRequest:
    """A subscribe request's body: ``{"stream", "params"?, "ttlSeconds"?}``."""

    stream: str
    params: dict[str, object]
    ttl_seconds: int | None

    @classmethod
    def parse(cls, doc: object) -> SubscribeRequest:
        """The request in ``doc``.

        Raises:
            ValidationError: not an object, an unknown field, or a field of the wrong type.
        """
        if not isinstance(doc, dict):
            raise ValidationError("The body must be a JSON object")
        unknown = sorted(set(doc) - _FIELDS)
        if unknown:
            raise ValidationError(f'Unknown field "{unknown[0]}": a subscription has stream, params and ttlSeconds')
        stream, params, ttl = doc.get("stream"), doc.get("params", {}), doc.get("ttlSeconds")
        if not isinstance(stream, str) or not stream:
            raise ValidationError('"stream" must be a non-empty string')
        if not isinstance(params, dict):
            raise ValidationError('"params" must be an object of parameter names to strings')
        if ttl is not None and (type(ttl) is not int or not 1 <= ttl <= MAX_TTL_REQUEST):
            raise ValidationError(f'"ttlSeconds" must be an integer from 1 to {MAX_TTL_REQUEST}')
        return cls(stream, params, ttl)


def subscribe(deps: GatewayDeps, gateway: str, client_id: str, claims: Claims, doc: object) -> HeldSubscription:
    """Subscribe ``client_id`` to the stream named in ``doc`` (checked against the rules in force and ``claims``), or
    refresh the expiry of the same subscription; its lifetime is the stream's (``ttlSeconds`` asked, cut to its max).

    Raises:
        ValidationError: a malformed body (400).
        SubscriptionRefusedError: refused (404 unknown stream, 400 a bad parameter, 403 not allowed -- for a
            membership parameter, no membership row allows the value --, 409 too many, 422 a stream reading
            memberships in a deployment built without a membership reader).
        MembershipTableTooLargeError: the membership table is over the gateway's limit (503).
    """
    request = SubscribeRequest.parse(doc)
    store = _store(deps)
    stream = _stream(_rules(deps, gateway), request.stream)
    if stream.membership_tables() and deps.memberships is None:
        raise UnsupportedSubscriptionError(
            SubscriptionRefusal(
                MEMBERSHIP_UNSUPPORTED,
                f'Stream "{stream.name}" reads the membership tables {sorted(stream.membership_tables())}, '
                "and this deployment has no membership reader",
            )
        )
    refusal = check_stream_params(stream, claims, request.params, deps.membership_source(gateway))
    if refusal is not None:
        raise refused(refusal)
    now_ms = deps.wall_ms()
    params = {name: str(value) for name, value in request.params.items()}  # strings: checked above
    subscription = Subscription.of(stream.name, params, stream.expires_at(now_ms, request.ttl_seconds))
    if not store.put(gateway, client_id, subscription, now_ms, MAX_CLIENT_SUBSCRIPTIONS):
        raise TooManySubscriptionsError(
            SubscriptionRefusal(
                TOO_MANY_SUBSCRIPTIONS,
                f"A client may hold at most {MAX_CLIENT_SUBSCRIPTIONS} subscriptions: unsubscribe from one first",
            )
        )
    return HeldSubscription.of(subscription)


def list_subscriptions(deps: GatewayDeps, gateway: str, client_id: str) -> list[HeldSubscription]:
    """The caller's live subscriptions, sorted by stream and parameters."""
    return [HeldSubscription.of(s) for s in _store(deps).get(gateway, client_id, deps.wall_ms())]


def unsubscribe(deps: GatewayDeps, gateway: str, client_id: str, subscription_id_: str) -> None:
    """Remove the caller's live subscription ``subscription_id_``.

    Raises:
        SubscriptionRefusedError: the caller holds no live subscription of that id (404 ``UNKNOWN_SUBSCRIPTION``).
    """
    store, now_ms = _store(deps), deps.wall_ms()
    held = next((s for s in store.get(gateway, client_id, now_ms) if subscription_id(s) == subscription_id_), None)
    if held is None or not store.remove(gateway, client_id, held, now_ms):
        raise UnknownSubscriptionError(
            SubscriptionRefusal(UNKNOWN_SUBSCRIPTION, f'No subscription "{subscription_id_[:64]}" of this client')
        )


def _store(deps: GatewayDeps) -> SubscriptionStore:
    if deps.subscriptions is None:
        raise NotFoundError("This deployment serves no subscriptions")
    return deps.subscriptions


def _rules(deps: GatewayDeps, gateway: str) -> SyncRules | None:
    """The rules in force, read afresh (a stream an admin has just saved may be subscribed to at once)."""
    reader = deps.pull_basis or StoresPullBasis(deps.config, deps.buffer)
    return fresh_reader(reader).read_pull_basis(gateway).rules


def _stream(rules: SyncRules | None, name: str) -> Stream:
    stream = rules.stream(name) if rules is not None else None
    if stream is None:
        raise refused(SubscriptionRefusal(UNKNOWN_STREAM, f'The sync rules have no stream "{name[:64]}"'))
    return stream
