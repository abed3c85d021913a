"""Sync rules: which rows each client may see.

A rules document (:class:`SyncRules`) holds named buckets. A bucket (:class:`Bucket`) covers some tables (none listed
= every table) and AND-s its filters (:class:`Filter`); a row is visible to a client when it falls into ANY bucket.
No rules, or rules with zero buckets and no stream, mean no filtering at all: everything is visible
(:func:`rules_apply`). Streams (:mod:`lakesync.core.streams`) add rows on demand, per subscription; a client's buckets
and subscriptions together are its scope (:mod:`lakesync.core.scope`). The filter model and its one evaluation are in
:mod:`lakesync.core.filters`, where a filter may also take its values from a membership table.

The JSON shape, the validation order and its messages (:func:`parse_sync_rules`), claim resolution
(:func:`resolve_filter_value`), the matching of one sparse delta (:func:`delta_matches_bucket`), :func:`filter_deltas`
and :func:`resolve_client_buckets` are those of the original TypeScript LakeSync. Two rules are our own.

**Filter values.** A value starting with the exact, case-sensitive prefix ``jwt:`` names a claim (the key is the rest,
possibly empty): a missing claim or an empty array claim resolves to ``[]`` and the filter fails for every operator,
``neq`` included. Any other value is the literal ``[value]`` (never split on commas). The row's column value is
coerced with JavaScript ``String(value)`` (:func:`~lakesync.core.canonical.js_string_coerce`), and a column that is
absent fails the filter for every operator. ``eq`` and ``in`` test membership in the resolved list, ``neq``
non-membership.

**Comparisons (ours; replaces the original's parseFloat + localeCompare).** ``gt``/``lt``/``gte``/``lte`` compare the
column's string with the FIRST resolved value (of an array claim, its first element). If BOTH strings, whole and
untrimmed, match ``-?[0-9]+(\\.[0-9]+)?([eE][+-]?[0-9]+)?`` they are compared as exact decimal numbers (so big
integers, negative numbers and exponents compare exactly, and ``"1e3"`` equals ``"1000"``). Otherwise both are compared
as strings in plain UTF-16 code-unit order -- no locale, no case folding, no accent folding. So ``"12abc"``,
``" 42"``, ``"0x10"``, ``"Infinity"``, ``"+1"``, ``".5"`` and ``"1."`` are strings, and ISO dates such as
``"2024-12-31"`` compare as strings (correctly), where the original parsed the numeric prefix ``2024`` of both sides.

**Row-level delivery (ours; the original never delivers DELETEs to filtered buckets).** The gateway evaluates rules
against ROWS, not sparse deltas: a change is delivered to a client when the row matched one of the client's buckets
before the change OR matches after it (:func:`change_visible`). A DELETE is matched against the row as it was just
before the delete, and an UPDATE that moves a row out of a bucket is delivered once so that the client sees it leave.
In :func:`row_matches` an absent row (``None``) never matches a bucket with filters, while a bucket without filters
matches every row of its tables, absent or not. :func:`filter_deltas` and :func:`delta_matches_bucket` keep the
original's evaluation of the sparse delta (a filter column missing from the delta fails the filter) for compatibility.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any, TypeGuard

from lakesync.core.canonical import JsonValue, js_stringify, utf8_size
from lakesync.core.claims import Claims
from lakesync.core.delta import DeltaOp, RowDelta
from lakesync.core.errors import PayloadTooLargeError, SyncRuleError
from lakesync.core.filters import (
    JWT_PREFIX,
    Condition,
    Filter,
    FilterOp,
    MembershipSource,
    Row,
    compare_filter_values,
    filter_holds,
    filter_values,
    js_object,
    parse_filter,
    resolve_filter,
    resolve_filter_value,
)
from lakesync.core.streams import (
    MAX_STREAMS,
    Stream,
    check_membership_limits,
    check_stream_limits,
    parse_streams,
)
from lakesync.core.write_policy import (
    ABSENT,
    DEFAULT_POLICY,
    TablePolicy,
    WriteOp,
    WritePolicy,
    is_reserved_table,
    parse_table_policies,
    parse_write_policy,
)

MAX_BUCKETS = 256
"""Most buckets a rules document saved through the admin route may have (every pull evaluates them)."""
MAX_BUCKET_TABLES = 256
"""Most tables one bucket may list."""
MAX_BUCKET_FILTERS = 64
"""Most filters one bucket may have."""
MAX_RULES_BYTES = 300 * 1024
"""Largest stored rules document (UTF-8 JSON), well within a 400 KB DynamoDB item."""


@dataclass(frozen=True, slots=True)
class Bucket:
    """A named set of rows: rows of ``tables`` (empty = every table) passing every filter; ``write`` narrows what a
    client may do to them (:mod:`lakesync.core.write_policy`)."""

    name: str
    tables: tuple[str, ...] = ()
    filters: tuple[Filter, ...] = ()
    write: WritePolicy = DEFAULT_POLICY

    def covers_table(self, table: str) -> bool:
        """Whether rows of ``table`` can fall into this bucket."""
        return not self.tables or table in self.tables

    def to_json(self) -> dict[str, Any]:
        """The JSON shape ``{"name", "tables", "filters", "write"?}``."""
        doc: dict[str, Any] = {
            "name": self.name,
            "tables": list(self.tables),
            "filters": [f.to_json() for f in self.filters],
        }
        if not self.write.is_default:
            doc["write"] = self.write.to_json()
        return doc


@dataclass(frozen=True, slots=True)
class SyncRules:
    """A validated sync-rules document: its buckets, the policies of some tables and its streams
    (:mod:`lakesync.core.streams`)."""

    version: int
    buckets: tuple[Bucket, ...] = ()
    tables: Mapping[str, TablePolicy] = field(default_factory=dict)
    streams: tuple[Stream, ...] = ()

    def to_json(self) -> dict[str, Any]:
        """The JSON shape ``{"version", "buckets", "tables"?, "streams"?}``."""
        doc: dict[str, Any] = {"version": self.version, "buckets": [b.to_json() for b in self.buckets]}
        if self.tables:
            doc["tables"] = {name: policy.to_json() for name, policy in self.tables.items()}
        if self.streams:
            doc["streams"] = [s.to_json() for s in self.streams]
        return doc

    def stream(self, name: str) -> Stream | None:
        """The stream called ``name``, if the rules declare one."""
        return next((s for s in self.streams if s.name == name), None)

    def membership_tables(self) -> frozenset[str]:
        """The tables the buckets and streams read memberships from: a change of one of their rows may change scopes
        (:meth:`lakesync.core.scope.ScopeIndex.dependents`)."""
        tables = {f.membership.table for b in self.buckets for f in b.filters if f.membership is not None}
        return frozenset(tables).union(*(s.membership_tables() for s in self.streams))

    def admin_only(self, table: str) -> bool:
        """Whether only admins may read and write ``table``."""
        policy = self.tables.get(table)
        return policy is not None and policy.admin_only


def pass_all_rules() -> SyncRules:
    """One bucket ``"all"`` covering every table with no filters."""
    return SyncRules(1, (Bucket("all"),))


def user_scoped_rules(tables: Sequence[str], user_column: str = "user_id") -> SyncRules:
    """One bucket ``"user"`` over ``tables`` whose ``user_column`` equals the token's ``sub``."""
    return SyncRules(1, (Bucket("user", tuple(tables), (Filter(user_column, FilterOp.EQ, JWT_PREFIX + "sub"),)),))


# --- parsing and validation -------------------------------------------------------------------------------------


def _is_positive_integer(value: object) -> bool:
    """A JS number that ``Number.isInteger`` and is at least 1."""
    if isinstance(value, bool):
        return False
    if isinstance(value, int):
        return value >= 1
    return isinstance(value, float) and value.is_integer() and value >= 1


def _non_empty_str(value: object) -> bool:
    return isinstance(value, str) and bool(value)


def _parse_bucket(raw: object, i: int, seen: set[str], *, unknown_op_ok: bool = False) -> Bucket | None:
    """Validate one bucket; ``None`` when ``unknown_op_ok`` and a filter has an unknown operator."""
    obj = js_object(raw)
    if obj is None:
        raise SyncRuleError(f"Bucket at index {i} must be an object")
    name = obj.get("name")
    if not isinstance(name, str) or not name:
        raise SyncRuleError(f"Bucket at index {i} must have a non-empty name")
    if name in seen:
        raise SyncRuleError(f'Duplicate bucket name: "{name}"')
    seen.add(name)
    tables = obj.get("tables")
    if not isinstance(tables, list):
        raise SyncRuleError(f'Bucket "{name}" tables must be an array')
    if not all(_non_empty_str(t) for t in tables):
        raise SyncRuleError(f'Bucket "{name}" tables must contain non-empty strings')
    raw_filters = obj.get("filters")
    if not isinstance(raw_filters, list):
        raise SyncRuleError(f'Bucket "{name}" filters must be an array')
    filters = [
        parse_filter(f, f'Bucket "{name}" filter at index {j}', unknown_op_ok=unknown_op_ok)
        for j, f in enumerate(raw_filters)
    ]
    if any(f is None for f in filters):
        return None
    write = parse_write_policy(obj.get("write", ABSENT), f'Bucket "{name}"')
    return Bucket(name, tuple(tables), tuple(f for f in filters if f is not None), write)


def parse_sync_rules(obj: object) -> SyncRules:
    """Validate a sync-rules JSON document and build the typed model.

    Checks run in the original's order and the first failure wins; unknown extra fields are ignored and any version
    ``>= 1`` is accepted. Our additions come after the original's checks: the ``"tables"`` policies, then the
    ``"streams"`` (:func:`~lakesync.core.streams.parse_streams`, whose unknown fields are refused). A bucket filter may
    take its values from a ``"membership"`` instead of a ``"value"`` (:mod:`lakesync.core.filters`).

    Raises:
        SyncRuleError: with the original's exact message, or ours naming the stream and field.
    """
    config = js_object(obj)
    if config is None:
        raise SyncRuleError("Sync rules config must be an object")
    version = config.get("version")
    if not _is_positive_integer(version):
        raise SyncRuleError("Sync rules version must be a positive integer")
    assert isinstance(version, int | float)
    raw_buckets = config.get("buckets")
    if not isinstance(raw_buckets, list):
        raise SyncRuleError("Sync rules buckets must be an array")
    seen: set[str] = set()
    buckets = []
    for i, raw in enumerate(raw_buckets):
        bucket = _parse_bucket(raw, i, seen)
        assert bucket is not None
        buckets.append(bucket)
    tables = parse_table_policies(config.get("tables", ABSENT))
    for bucket in buckets:
        for table in bucket.tables:
            if table in tables and tables[table].admin_only:
                raise SyncRuleError(f'Bucket "{bucket.name}" lists table "{table}", which is admin-only')
    admin_only = frozenset(name for name, policy in tables.items() if policy.admin_only)
    streams = parse_streams(config.get("streams", ABSENT), admin_only)
    return SyncRules(int(version), tuple(buckets), tables, streams)


def check_sync_rules_limits(rules: SyncRules) -> None:
    """Check the bounds of a rules document about to be stored (ours; the admin route runs it after
    :func:`parse_sync_rules`; stored rules are read back without it).

    Raises:
        SyncRuleError: more than :data:`MAX_BUCKETS` buckets, or a bucket with more than :data:`MAX_BUCKET_TABLES`
            tables or :data:`MAX_BUCKET_FILTERS` filters; more than :data:`~lakesync.core.streams.MAX_STREAMS`
            streams, or a stream over its bounds (:func:`~lakesync.core.streams.check_stream_limits`); a bucket or
            stream reading too many or too large memberships (HTTP 400).
        PayloadTooLargeError: the stored document would exceed :data:`MAX_RULES_BYTES` (HTTP 413).
    """
    if len(rules.buckets) > MAX_BUCKETS:
        raise SyncRuleError(f"Sync rules may have at most {MAX_BUCKETS} buckets; got {len(rules.buckets):,}")
    for bucket in rules.buckets:
        if len(bucket.tables) > MAX_BUCKET_TABLES:
            raise SyncRuleError(f'Bucket "{bucket.name}" may list at most {MAX_BUCKET_TABLES} tables')
        if len(bucket.filters) > MAX_BUCKET_FILTERS:
            raise SyncRuleError(f'Bucket "{bucket.name}" may have at most {MAX_BUCKET_FILTERS} filters')
        check_membership_limits(f'Bucket "{bucket.name}"', bucket.filters)
    if len(rules.streams) > MAX_STREAMS:
        raise SyncRuleError(f"Sync rules may have at most {MAX_STREAMS} streams; got {len(rules.streams):,}")
    for stream in rules.streams:
        check_stream_limits(stream, MAX_BUCKET_FILTERS)
    size = utf8_size(rules.to_json())
    if size > MAX_RULES_BYTES:
        raise PayloadTooLargeError(f"Sync rules document is {size:,} bytes; the limit is {MAX_RULES_BYTES:,}")


# --- matching ---------------------------------------------------------------------------------------------------


def _delta_values(delta: RowDelta) -> dict[str, JsonValue]:
    """The delta's columns; the FIRST entry of a repeated column wins, as in the original."""
    values: dict[str, JsonValue] = {}
    for col in delta.columns:
        values.setdefault(col.column, col.value)
    return values


def resolve_bucket(bucket: Bucket, claims: Claims, memberships: MembershipSource | None = None) -> Condition:
    """``bucket`` as a plain condition: its filters' values resolved against ``claims`` and ``memberships``."""
    return Condition(bucket.tables, tuple(resolve_filter(f, claims, None, memberships) for f in bucket.filters))


def bucket_matches_row(
    bucket: Bucket, table: str, row: Row | None, claims: Claims, memberships: MembershipSource | None = None
) -> bool:
    """Whether ``row`` of ``table`` falls into ``bucket`` (an absent row passes only a bucket without filters).

    A membership filter reads ``memberships`` at each call (without them it never holds): to judge many rows,
    resolve the bucket once (:func:`resolve_bucket`, or a :class:`~lakesync.core.scope.Scope`).
    """
    if not bucket.covers_table(table):
        return False
    if not bucket.filters:
        return True
    return row is not None and all(
        filter_holds(f.column, f.op, filter_values(f, claims, None, memberships), row) for f in bucket.filters
    )


def matches_bucket(delta: RowDelta, bucket: Bucket, claims: Claims) -> bool:
    """The original's test of one sparse delta: its table, and every filter against the delta's own columns."""
    return bucket_matches_row(bucket, delta.table, _delta_values(delta), claims)


def delta_matches_bucket(delta: dict[str, Any], bucket: dict[str, Any], claims: dict[str, Any]) -> bool:
    """:func:`matches_bucket` on the JSON shapes: a wire delta, a bucket and a claims map.

    A filter whose operator is not one of the seven never matches (so neither does its bucket), as in the original.

    Raises:
        ValidationError: if the delta is malformed.
        SyncRuleError: if the bucket is malformed in any other way.
    """
    typed_delta = RowDelta.from_json(delta)
    typed_bucket = _parse_bucket(bucket, 0, set(), unknown_op_ok=True)
    if typed_bucket is None:
        return False
    return matches_bucket(typed_delta, typed_bucket, claims)


def rules_apply(rules: SyncRules | None) -> TypeGuard[SyncRules]:
    """Whether ``rules`` filter what clients see: ``None``, or zero buckets, no stream and no admin-only table, make
    everything visible."""
    return rules is not None and (
        bool(rules.buckets) or bool(rules.streams) or any(p.admin_only for p in rules.tables.values())
    )


def confines(rules: SyncRules) -> bool:
    """Whether ``rules`` confine clients to their scope: they have buckets or streams (else every row a table policy
    does not hide is in scope)."""
    return bool(rules.buckets) or bool(rules.streams)


def row_matches(
    rules: SyncRules | None, claims: Claims, table: str, row: Row | None, memberships: MembershipSource | None = None
) -> bool:
    """Whether the client with ``claims`` may see ``row`` of ``table`` (``None`` = the row does not exist) through
    its buckets.

    Rows of an admin-only table are never visible to a client; without buckets and streams every other row is. A
    stream's rows are visible only through a subscription (:class:`~lakesync.core.scope.Scope`).
    """
    if not rules_apply(rules):
        return True
    if rules.admin_only(table):
        return False
    if not confines(rules):
        return True
    return any(bucket_matches_row(b, table, row, claims, memberships) for b in rules.buckets)


def change_visible(
    rules: SyncRules | None,
    claims: Claims,
    table: str,
    before: Row | None,
    after: Row | None,
    memberships: MembershipSource | None = None,
) -> bool:
    """Whether a change of a row of ``table`` from ``before`` to ``after`` is delivered to the client.

    True when the row was visible before the change or is visible after it; ``None`` marks an absent row (an
    INSERT has no ``before``, a DELETE no ``after``).
    """
    return row_matches(rules, claims, table, before, memberships) or row_matches(
        rules, claims, table, after, memberships
    )


# --- writes -----------------------------------------------------------------------------------------------------


@dataclass(frozen=True, slots=True)
class WriteRefusal:
    """Why a client may not make a write: a stable ``code`` and a ``reason`` for people."""

    code: str
    reason: str


RESERVED_TABLE = "RESERVED_TABLE"
"""Refusal code: the table is one of the engine's own (``_lakesync_*``)."""
ADMIN_ONLY_TABLE = "ADMIN_ONLY_TABLE"
"""Refusal code: only admins may write the table."""
OPERATION_NOT_ALLOWED = "OPERATION_NOT_ALLOWED"
"""Refusal code: a policy does not allow this kind of write (insert, update, delete)."""
COLUMN_NOT_WRITABLE = "COLUMN_NOT_WRITABLE"
"""Refusal code: the write sets a read-only column, or changes an immutable one."""
OUT_OF_SCOPE = "OUT_OF_SCOPE"
"""Refusal code: the row is outside the client's buckets before or after the write."""


def write_kind(delta: RowDelta, before: Row | None) -> WriteOp:
    """What ``delta`` does to a row whose live values are ``before`` (``None``: it does not exist)."""
    if delta.op is DeltaOp.DELETE:
        return WriteOp.DELETE
    return WriteOp.INSERT if before is None else WriteOp.UPDATE


def _same_value(before: Row | None, column: str, value: JsonValue) -> bool:
    return before is not None and column in before and js_stringify(before[column]) == js_stringify(value)


def _policy_refusal(
    policy: WritePolicy, where: str, kind: WriteOp, delta: RowDelta, before: Row | None
) -> WriteRefusal | None:
    """Why ``policy`` (of a bucket or table named by ``where``) refuses the write, or ``None``."""
    if kind not in policy.ops:
        return WriteRefusal(OPERATION_NOT_ALLOWED, f"{where} does not allow a client to {kind.value} rows")
    if kind is WriteOp.DELETE or not (policy.read_only_columns or policy.immutable_columns):
        return None
    for col in delta.columns:
        if _same_value(before, col.column, col.value):
            continue
        if col.column in policy.read_only_columns:
            return WriteRefusal(COLUMN_NOT_WRITABLE, f"{where}: column {col.column!r} is read-only for clients")
        if kind is WriteOp.UPDATE and col.column in policy.immutable_columns:
            return WriteRefusal(
                COLUMN_NOT_WRITABLE, f"{where}: column {col.column!r} is set when the row is created, never changed"
            )
    return None


@dataclass(frozen=True, slots=True)
class Grant:
    """A part of a client's scope as the write rule sees it: the rows of ``condition``, written within ``write``;
    ``origin`` names the bucket or subscription in refusals (``Bucket "team"``)."""

    origin: str
    condition: Condition
    write: WritePolicy = DEFAULT_POLICY


def bucket_grants(
    rules: SyncRules, claims: Claims, memberships: MembershipSource | None = None, table: str | None = None
) -> list[Grant]:
    """The grants of the buckets of ``rules`` (those covering ``table`` when given), resolved against ``claims``."""
    return [
        Grant(f'Bucket "{b.name}"', resolve_bucket(b, claims, memberships), b.write)
        for b in rules.buckets
        if table is None or b.covers_table(table)
    ]


def _scope_refusal(
    grants: Sequence[Grant], delta: RowDelta, kind: WriteOp, row: Row, when: str, before: Row | None
) -> WriteRefusal | None:
    """Why no grant holding ``row`` (the row ``when`` the change) lets the client make the write, or ``None``."""
    refusal = None
    for grant in grants:
        if grant.condition.matches(delta.table, row):
            refusal = _policy_refusal(grant.write, grant.origin, kind, delta, before)
            if refusal is None:
                return None
    return refusal or WriteRefusal(
        OUT_OF_SCOPE, f"Row {delta.table}:{delta.row_id} is outside the client's sync rules {when} the write"
    )


def check_write(
    rules: SyncRules | None,
    claims: Claims,
    delta: RowDelta,
    before: Row | None,
    after: Row | None,
    memberships: MembershipSource | None = None,
) -> WriteRefusal | None:
    """Why a client with ``claims`` may not make ``delta`` through its buckets, or ``None`` when it may.

    ``before`` and ``after`` are the row's live values just before the delta and merged with it (``None``: the row
    does not exist); ``memberships`` give membership filters their values. A client may write a row only if a bucket
    holds it before the write and one holds it after (:func:`row_matches`, the read rule), each of them allowing the
    write by its policy, and the table's policy allows it too. Tables named ``_lakesync_*`` are never written by
    clients. Without buckets and streams every row may be written, as far as the table policies allow. A write that
    leaves no row on either side (a delete of a row that is gone) needs a bucket of the table whose policy allows it.
    With subscriptions, judge through the client's scope (:meth:`lakesync.core.scope.Scope.check_write`).
    """
    if rules is None or not confines(rules):
        return check_write_in(rules, (), delta, before, after)
    return check_write_in(rules, bucket_grants(rules, claims, memberships, delta.table), delta, before, after)


def check_write_in(
    rules: SyncRules | None, grants: Sequence[Grant], delta: RowDelta, before: Row | None, after: Row | None
) -> WriteRefusal | None:
    """:func:`check_write` with the client's scope given as ``grants`` (its buckets' and subscriptions')."""
    if is_reserved_table(delta.table):
        return WriteRefusal(RESERVED_TABLE, f"Table {delta.table!r} is written by the engine only")
    if rules is None:
        return None
    kind = write_kind(delta, before)
    table_policy = rules.tables.get(delta.table)
    if table_policy is not None:
        if table_policy.admin_only:
            return WriteRefusal(ADMIN_ONLY_TABLE, f"Table {delta.table!r} is written by admins only")
        refusal = _policy_refusal(table_policy.write, f"Table {delta.table!r}", kind, delta, before)
        if refusal is not None:
            return refusal
    if not confines(rules):
        return None
    covering = [g for g in grants if g.condition.covers_table(delta.table)]
    sides = [(row, when) for row, when in ((before, "before"), (after, "after")) if row is not None]
    for row, when in sides:
        refusal = _scope_refusal(covering, delta, kind, row, when, before)
        if refusal is not None:
            return refusal
    if sides:
        return None
    if any(_policy_refusal(g.write, "", kind, delta, before) is None for g in covering):
        return None
    return WriteRefusal(OUT_OF_SCOPE, f"No sync rule lets the client write table {delta.table!r}")


def filter_deltas(rules: SyncRules | None, claims: Claims, deltas: Iterable[RowDelta]) -> list[RowDelta]:
    """The deltas matching any bucket, judged on each sparse delta alone (the original's pull filter), in order."""
    if not rules_apply(rules):
        return list(deltas)
    return [d for d in deltas if any(matches_bucket(d, b, claims) for b in rules.buckets)]


def resolve_client_buckets(rules: SyncRules | None, claims: Claims) -> list[str]:
    """Names of the buckets whose every ``jwt:`` filter resolves to a non-empty list, in rule order."""
    if rules is None:
        return []
    return [
        b.name
        for b in rules.buckets
        if all(resolve_filter_value(f.value, claims) for f in b.filters if f.value.startswith(JWT_PREFIX))
    ]


__all__ = [
    "ADMIN_ONLY_TABLE",
    "COLUMN_NOT_WRITABLE",
    "JWT_PREFIX",
    "OPERATION_NOT_ALLOWED",
    "OUT_OF_SCOPE",
    "RESERVED_TABLE",
    "Bucket",
    "Claims",
    "Filter",
    "FilterOp",
    "Grant",
    "Row",
    "SyncRules",
    "WriteRefusal",
    "bucket_grants",
    "bucket_matches_row",
    "change_visible",
    "check_sync_rules_limits",
    "check_write",
    "check_write_in",
    "compare_filter_values",
    "confines",
    "delta_matches_bucket",
    "filter_deltas",
    "matches_bucket",
    "parse_sync_rules",
    "pass_all_rules",
    "resolve_bucket",
    "resolve_client_buckets",
    "resolve_filter_value",
    "row_matches",
    "rules_apply",
    "write_kind",
]
