"""Streams: rows a client subscribes to on demand, with parameters, beside the static buckets.

A rules document may declare ``"streams"`` beside ``"buckets"`` (versioned with it)::

    {"name": "project_tasks", "table": "tasks",
     "filters": [{"column": "project_id", "op": "eq", "value": "param:project"}],
     "params": {"project": {"subscription": {"membership": {
         "table": "memberships", "column": "project",
         "where": [{"column": "user", "op": "eq", "value": "jwt:sub"}]}}}},
     "write": {"ops": ["insert", "update"]},
     "ttlSeconds": {"default": 3600, "max": 86400}}

A :class:`Stream` is one table and AND-ed filters (a bucket's shape and operators, where a value may also be
``param:<name>``). Each parameter (:class:`StreamParam`) says what may supply it: a claim of the token
(``{"claim": "sub"}``, never the client), or the client's subscription, checked against values the token allows
(``{"subscription": {"allowed": "jwt:projects"}}``, a filter value or an array of them) or against a membership table
(``{"subscription": {"membership": {...}}}``). A :class:`Subscription` names a stream and the client's parameters;
:func:`check_stream_params` says why one is refused (:class:`SubscriptionRefusal`, a stable code), and
:mod:`lakesync.core.scope` turns the accepted ones into the client's scope. Unknown fields are refused.
"""

from __future__ import annotations

import re
from collections.abc import Collection, Mapping
from dataclasses import dataclass, field
from typing import Any

from lakesync.core.claims import Claims
from lakesync.core.errors import SyncRuleError
from lakesync.core.filters import (
    JWT_PREFIX,
    PARAM_PREFIX,
    Filter,
    Membership,
    MembershipSource,
    Params,
    checked_table,
    member_values,
    parse_filter,
    parse_membership,
    resolve_filter_value,
)
from lakesync.core.write_policy import ABSENT, DEFAULT_POLICY, WritePolicy, parse_write_policy

MAX_STREAMS = 64
"""Most streams a rules document saved through the admin route may have."""
MAX_STREAM_PARAMS = 8
"""Most parameters one stream may declare."""
MAX_MEMBERSHIP_WHERE = 8
"""Most filters one membership may have."""
MAX_MEMBERSHIPS = 4
"""Most memberships one bucket or stream may read (its filters' and its parameters'): each is a lookup per scope."""
MAX_PARAM_CHARS = 256
"""Longest parameter value a client may send."""
MAX_CLIENT_SUBSCRIPTIONS = 64
"""Most subscriptions one client may hold at a time."""
DEFAULT_TTL_SECONDS = 86_400
"""A subscription's lifetime when neither the client nor the stream says (one day)."""
MAX_TTL_SECONDS = 30 * 86_400
"""The longest lifetime a stream may allow (thirty days)."""

_NAME = re.compile(r"[A-Za-z0-9][A-Za-z0-9_.-]{0,63}")
_PARAM_NAME = re.compile(r"[A-Za-z_][A-Za-z0-9_]{0,63}")
_STREAM_FIELDS = frozenset({"name", "table", "filters", "params", "write", "ttlSeconds"})


@dataclass(frozen=True, slots=True)
class StreamParam:
    """A named parameter and what may supply it: exactly one of a token ``claim``, the subscription checked against
    ``allowed`` filter values (literals or ``jwt:`` references), or the subscription checked against a
    ``membership``."""

    name: str
    claim: str | None = None
    allowed: tuple[str, ...] = ()
    membership: Membership | None = None

    @property
    def from_subscription(self) -> bool:
        """Whether the client supplies the value (else the token does)."""
        return self.claim is None

    def to_json(self) -> dict[str, Any]:
        """The JSON shape of the source: ``{"claim"}`` or ``{"subscription": {"allowed" | "membership"}}``."""
        if self.claim is not None:
            return {"claim": self.claim}
        if self.membership is not None:
            return {"subscription": {"membership": self.membership.to_json()}}
        allowed: str | list[str] = self.allowed[0] if len(self.allowed) == 1 else list(self.allowed)
        return {"subscription": {"allowed": allowed}}


@dataclass(frozen=True, slots=True)
class StreamTtl:
    """How long a subscription lasts: ``default_seconds`` unless the client asks, never more than ``max_seconds``."""

    default_seconds: int = DEFAULT_TTL_SECONDS
    max_seconds: int = MAX_TTL_SECONDS

    def seconds(self, requested: int | None) -> int:
        """The lifetime of a subscription for which the client asked ``requested`` seconds (clamped to the max)."""
        return self.default_seconds if requested is None else max(1, min(requested, self.max_seconds))


DEFAULT_TTL = StreamTtl()


@dataclass(frozen=True, slots=True)
class Stream:
    """A stream: rows of ``table`` passing every filter, for the parameters of a subscription."""

    name: str
    table: str
    filters: tuple[Filter, ...] = ()
    params: tuple[StreamParam, ...] = ()
    write: WritePolicy = DEFAULT_POLICY
    ttl: StreamTtl | None = None

    def param(self, name: str) -> StreamParam | None:
        """The declared parameter ``name``, if any."""
        return next((p for p in self.params if p.name == name), None)

    @property
    def lifetime(self) -> StreamTtl:
        """The stream's lifetimes (the engine's when it gives none)."""
        return self.ttl or DEFAULT_TTL

    def expires_at(self, now_ms: int, requested_seconds: int | None = None) -> int:
        """When a subscription made at ``now_ms`` (epoch milliseconds) for ``requested_seconds`` runs out."""
        return now_ms + 1000 * self.lifetime.seconds(requested_seconds)

    def membership_tables(self) -> frozenset[str]:
        """The tables this stream's filters and parameters read memberships from."""
        memberships = [f.membership for f in self.filters] + [p.membership for p in self.params]
        return frozenset(m.table for m in memberships if m is not None)

    def to_json(self) -> dict[str, Any]:
        """The JSON shape ``{"name", "table", "filters", "params", "write"?, "ttlSeconds"?}``."""
        doc: dict[str, Any] = {
            "name": self.name,
            "table": self.table,
            "filters": [f.to_json() for f in self.filters],
            "params": {p.name: p.to_json() for p in self.params},
        }
        if not self.write.is_default:
            doc["write"] = self.write.to_json()
        if self.ttl is not None:
            doc["ttlSeconds"] = {"default": self.ttl.default_seconds, "max": self.ttl.max_seconds}
        return doc


# --- parsing ----------------------------------------------------------------------------------------------------


def _positive_int(value: object) -> bool:
    return isinstance(value, int) and not isinstance(value, bool) and value >= 1


def _parse_ttl(raw: object, where: str) -> StreamTtl | None:
    if raw is ABSENT:
        return None
    if not isinstance(raw, Mapping) or not raw or set(raw) - {"default", "max"}:
        raise SyncRuleError(f"{where} ttlSeconds must be an object with default and/or max")
    for key in sorted(raw):
        value = raw[key]
        if not _positive_int(value):
            raise SyncRuleError(f"{where} ttlSeconds {key} must be a positive integer")
        assert isinstance(value, int)
        if value > MAX_TTL_SECONDS:
            raise SyncRuleError(f"{where} ttlSeconds {key} may be at most {MAX_TTL_SECONDS:,}")
    maximum = int(raw.get("max", MAX_TTL_SECONDS))
    default = int(raw.get("default", min(DEFAULT_TTL_SECONDS, maximum)))
    if default > maximum:
        raise SyncRuleError(f"{where} ttlSeconds default must not exceed max")
    return StreamTtl(default, maximum)


def _parse_allowed(raw: object, where: str) -> tuple[str, ...]:
    values = [raw] if isinstance(raw, str) else raw
    if not isinstance(values, list) or not values or not all(isinstance(v, str) and v for v in values):
        raise SyncRuleError(f"{where} allowed must be a non-empty string or a non-empty array of them")
    return tuple(values)


def _parse_param(name: object, raw: object, where: str) -> StreamParam:
    if not isinstance(name, str) or not _PARAM_NAME.fullmatch(name):
        raise SyncRuleError(f"{where} parameter names must be letters, digits or '_' (at most 64, not a digit first)")
    where = f'{where} parameter "{name}"'
    if not isinstance(raw, Mapping) or len(raw) != 1 or not set(raw) <= {"claim", "subscription"}:
        raise SyncRuleError(f"{where} must be an object with one of: claim, subscription")
    if "claim" in raw:
        claim = raw["claim"]
        if not isinstance(claim, str) or not claim:
            raise SyncRuleError(f"{where} claim must be a non-empty string")
        return StreamParam(name, claim=claim)
    sub = raw["subscription"]
    if not isinstance(sub, Mapping) or len(sub) != 1 or not set(sub) <= {"allowed", "membership"}:
        raise SyncRuleError(f"{where} subscription must be an object with one of: allowed, membership")
    if "allowed" in sub:
        return StreamParam(name, allowed=_parse_allowed(sub["allowed"], where))
    return StreamParam(name, membership=parse_membership(sub["membership"], where, params=()))


def _parse_params(raw: object, where: str) -> tuple[StreamParam, ...]:
    if raw is ABSENT:
        return ()
    if not isinstance(raw, Mapping):
        raise SyncRuleError(f"{where} params must be an object of parameter name to source")
    return tuple(_parse_param(name, body, where) for name, body in raw.items())


def _stream_header(raw: object, i: int, seen: set[str], admin_only: Collection[str]) -> tuple[str, str]:
    """The name and table of the ``i``-th stream, checked."""
    if not isinstance(raw, Mapping):
        raise SyncRuleError(f"Stream at index {i} must be an object")
    name = raw.get("name")
    if not isinstance(name, str) or not _NAME.fullmatch(name):
        raise SyncRuleError(
            f"Stream at index {i} must have a name of letters, digits, '_', '.' or '-' (at most 64, not '_' first)"
        )
    if name in seen:
        raise SyncRuleError(f'Duplicate stream name: "{name}"')
    seen.add(name)
    where = f'Stream "{name}"'
    table = checked_table(raw, where, _STREAM_FIELDS)
    if table in admin_only:
        raise SyncRuleError(f'{where} table "{table}" is admin-only')
    return name, table


def _parse_stream(raw: object, i: int, seen: set[str], admin_only: Collection[str]) -> Stream:
    name, table = _stream_header(raw, i, seen, admin_only)
    assert isinstance(raw, Mapping)
    where = f'Stream "{name}"'
    params = _parse_params(raw.get("params", ABSENT), where)
    names = [p.name for p in params]
    raw_filters = raw.get("filters", [])
    if not isinstance(raw_filters, list):
        raise SyncRuleError(f"{where} filters must be an array")
    filters = tuple(
        f
        for j, r in enumerate(raw_filters)
        if (f := parse_filter(r, f"{where} filter at index {j}", params=names)) is not None
    )
    used = {v[len(PARAM_PREFIX) :] for f in filters for v in f.references() if v.startswith(PARAM_PREFIX)}
    for param in params:
        if param.name not in used:
            raise SyncRuleError(f'{where} parameter "{param.name}" is not used by any filter')
    write = parse_write_policy(raw.get("write", ABSENT), where)
    return Stream(name, table, filters, params, write, _parse_ttl(raw.get("ttlSeconds", ABSENT), where))


def parse_streams(raw: object, admin_only: Collection[str] = ()) -> tuple[Stream, ...]:
    """Validate a rules document's ``"streams"`` array (:data:`ABSENT`: none); ``admin_only`` are the document's
    admin-only tables, which no stream may serve.

    Raises:
        SyncRuleError: the first malformed stream, naming it and the field.
    """
    if raw is ABSENT:
        return ()
    if not isinstance(raw, list):
        raise SyncRuleError("Sync rules streams must be an array")
    seen: set[str] = set()
    return tuple(_parse_stream(s, i, seen, admin_only) for i, s in enumerate(raw))


def membership_count(filters: tuple[Filter, ...], params: tuple[StreamParam, ...] = ()) -> int:
    """How many memberships a bucket's or stream's filters and parameters read."""
    return sum(f.membership is not None for f in filters) + sum(p.membership is not None for p in params)


def check_stream_limits(stream: Stream, max_filters: int) -> None:
    """Check one stream's bounds (:func:`lakesync.core.rules.check_sync_rules_limits` runs it).

    Raises:
        SyncRuleError: too many parameters, filters, memberships or membership filters.
    """
    where = f'Stream "{stream.name}"'
    if len(stream.params) > MAX_STREAM_PARAMS:
        raise SyncRuleError(f"{where} may declare at most {MAX_STREAM_PARAMS} parameters")
    if len(stream.filters) > max_filters:
        raise SyncRuleError(f"{where} may have at most {max_filters} filters")
    check_membership_limits(where, stream.filters, stream.params)


def check_membership_limits(where: str, filters: tuple[Filter, ...], params: tuple[StreamParam, ...] = ()) -> None:
    """Check that ``filters`` and ``params`` (of the bucket or stream ``where`` names) read few, small memberships.

    Raises:
        SyncRuleError: more than :data:`MAX_MEMBERSHIPS` memberships, or one with more than
            :data:`MAX_MEMBERSHIP_WHERE` filters.
    """
    if membership_count(filters, params) > MAX_MEMBERSHIPS:
        raise SyncRuleError(f"{where} may read at most {MAX_MEMBERSHIPS} memberships")
    memberships = [f.membership for f in filters] + [p.membership for p in params]
    if any(m is not None and len(m.where) > MAX_MEMBERSHIP_WHERE for m in memberships):
        raise SyncRuleError(f"{where} membership may have at most {MAX_MEMBERSHIP_WHERE} filters")


# --- subscriptions ----------------------------------------------------------------------------------------------


@dataclass(frozen=True, slots=True)
class Subscription:
    """A client's subscription to ``stream`` with its parameters (sorted by name) until ``expires_at`` (epoch
    milliseconds; ``None``: no expiry)."""

    stream: str
    params: tuple[tuple[str, str], ...] = ()
    expires_at: int | None = field(default=None, compare=False)

    @classmethod
    def of(cls, stream: str, params: Mapping[str, str] | None = None, expires_at: int | None = None) -> Subscription:
        """A subscription with ``params`` given as a mapping."""
        return cls(stream, tuple(sorted((params or {}).items())), expires_at)

    @property
    def param_map(self) -> dict[str, str]:
        """The parameters as a mapping."""
        return dict(self.params)

    def expired(self, now_ms: int | None) -> bool:
        """Whether the subscription has run out at ``now_ms`` (``None``: time is not considered)."""
        return now_ms is not None and self.expires_at is not None and self.expires_at <= now_ms

    def label(self) -> str:
        """``Stream "name" (a=1, b=2)``, for messages."""
        args = ", ".join(f"{k}={v}" for k, v in self.params)
        return f'Stream "{self.stream}" ({args})'

    def to_json(self) -> dict[str, Any]:
        """The JSON shape ``{"stream", "params", "expiresAt"?}``."""
        doc: dict[str, Any] = {"stream": self.stream, "params": self.param_map}
        if self.expires_at is not None:
            doc["expiresAt"] = self.expires_at
        return doc


@dataclass(frozen=True, slots=True)
class SubscriptionRefusal:
    """Why a subscription is refused: a stable ``code`` and a ``reason`` for people."""

    code: str
    reason: str


UNKNOWN_STREAM = "UNKNOWN_STREAM"
"""Refusal code: the rules declare no stream of that name."""
MISSING_PARAM = "MISSING_PARAM"
"""Refusal code: the client did not give a parameter the stream needs from it."""
UNEXPECTED_PARAM = "UNEXPECTED_PARAM"
"""Refusal code: the client gave a parameter the stream does not declare, or one the token supplies."""
INVALID_PARAM = "INVALID_PARAM"
"""Refusal code: a parameter value is not a non-empty string of at most :data:`MAX_PARAM_CHARS` characters."""
NOT_ALLOWED = "NOT_ALLOWED"
"""Refusal code: the token does not allow the value (or lacks the claim a parameter comes from)."""
EXPIRED = "EXPIRED"
"""Refusal code: the subscription's lifetime has run out."""


def _unexpected(stream: Stream, params: Mapping[str, object]) -> SubscriptionRefusal | None:
    for name in sorted(params):
        value = params[name]
        declared = stream.param(name)
        if declared is None:
            return SubscriptionRefusal(UNEXPECTED_PARAM, f'Stream "{stream.name}" has no parameter "{name}"')
        if declared.claim is not None:
            return SubscriptionRefusal(
                UNEXPECTED_PARAM,
                f'Stream "{stream.name}" parameter "{name}" comes from the token\'s claim "{declared.claim}"',
            )
        if not isinstance(value, str) or not value or len(value) > MAX_PARAM_CHARS:
            return SubscriptionRefusal(
                INVALID_PARAM,
                f'Stream "{stream.name}" parameter "{name}" must be a non-empty string of at most '
                f"{MAX_PARAM_CHARS} characters",
            )
    return None


def allowed_values(param: StreamParam, claims: Claims, memberships: MembershipSource | None) -> frozenset[str]:
    """The values the token allows a client to give ``param`` (a subscription parameter)."""
    if param.membership is not None:
        if memberships is None:
            return frozenset()
        return frozenset(member_values(param.membership, claims, None, memberships))
    return frozenset(v for value in param.allowed for v in resolve_filter_value(value, claims))


def check_stream_params(
    stream: Stream, claims: Claims, params: Mapping[str, object], memberships: MembershipSource | None = None
) -> SubscriptionRefusal | None:
    """Why a client with ``claims`` may not subscribe to ``stream`` with ``params``, or ``None`` when it may.

    Checked in order: every given parameter is declared, supplied by the subscription and a valid string; every
    token-supplied parameter's claim is present; every subscription parameter is given and allowed.
    """
    refusal = _unexpected(stream, params)
    if refusal is not None:
        return refusal
    for param in stream.params:
        where = f'Stream "{stream.name}" parameter "{param.name}"'
        if param.claim is not None:
            if not resolve_filter_value(JWT_PREFIX + param.claim, claims):
                return SubscriptionRefusal(NOT_ALLOWED, f'{where} needs the token\'s claim "{param.claim}"')
            continue
        value = params.get(param.name)
        if value is None:
            return SubscriptionRefusal(MISSING_PARAM, f"{where} is required")
        if value not in allowed_values(param, claims, memberships):
            return SubscriptionRefusal(NOT_ALLOWED, f"{where}: the value is not allowed for this client")
    return None


def stream_params(stream: Stream, claims: Claims, subscription: Subscription) -> Params:
    """The values each ``param:<name>`` of ``stream`` resolves to for ``subscription`` (a claim may give several)."""
    given = subscription.param_map
    resolved: dict[str, tuple[str, ...]] = {}
    for param in stream.params:
        if param.claim is not None:
            resolved[param.name] = tuple(resolve_filter_value(JWT_PREFIX + param.claim, claims))
        elif param.name in given:
            resolved[param.name] = (given[param.name],)
    return resolved


__all__ = [
    "DEFAULT_TTL",
    "DEFAULT_TTL_SECONDS",
    "EXPIRED",
    "INVALID_PARAM",
    "MAX_CLIENT_SUBSCRIPTIONS",
    "MAX_MEMBERSHIPS",
    "MAX_MEMBERSHIP_WHERE",
    "MAX_PARAM_CHARS",
    "MAX_STREAMS",
    "MAX_STREAM_PARAMS",
    "MAX_TTL_SECONDS",
    "MISSING_PARAM",
    "NOT_ALLOWED",
    "UNEXPECTED_PARAM",
    "UNKNOWN_STREAM",
    "Stream",
    "StreamParam",
    "StreamTtl",
    "Subscription",
    "SubscriptionRefusal",
    "allowed_values",
    "check_membership_limits",
    "check_stream_limits",
    "check_stream_params",
    "membership_count",
    "parse_streams",
    "stream_params",
]
