"""Sync rules: which rows each client may see.

A rules document (:class:`SyncRules`) holds named buckets. A bucket (:class:`Bucket`) covers some tables (none listed
= every table) and AND-s its filters (:class:`Filter`); a row is visible to a client when it falls into ANY bucket.
No rules, or rules with zero buckets, mean no filtering at all: everything is visible (:func:`rules_apply`).

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

import enum
import re
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any, TypeGuard

from lakesync.core.canonical import JsonValue, js_string_coerce, js_stringify, utf8_size, utf16_key
from lakesync.core.claims import Claims
from lakesync.core.delta import DeltaOp, RowDelta
from lakesync.core.errors import PayloadTooLargeError, SyncRuleError
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

Row = Mapping[str, JsonValue]
"""A row as column name -> JSON value."""

JWT_PREFIX = "jwt:"

MAX_BUCKETS = 256
"""Most buckets a rules document saved through the admin route may have (every pull evaluates them)."""
MAX_BUCKET_TABLES = 256
"""Most tables one bucket may list."""
MAX_BUCKET_FILTERS = 64
"""Most filters one bucket may have."""
MAX_RULES_BYTES = 300 * 1024
"""Largest stored rules document (UTF-8 JSON), well within a 400 KB DynamoDB item."""


class FilterOp(enum.StrEnum):
    """The filter operators, in the order the validation message lists them."""

    EQ = "eq"
    IN = "in"
    NEQ = "neq"
    GT = "gt"
    LT = "lt"
    GTE = "gte"
    LTE = "lte"


_OP_LIST = ", ".join(op.value for op in FilterOp)
_OP_VALUES = frozenset(op.value for op in FilterOp)


@dataclass(frozen=True, slots=True)
class Filter:
    """One condition on a row column; ``value`` is a literal or a ``jwt:<claim>`` reference."""

    column: str
    op: FilterOp
    value: str

    def to_json(self) -> dict[str, Any]:
        """The JSON shape ``{"column", "op", "value"}``."""
        return {"column": self.column, "op": self.op.value, "value": self.value}


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
    """A validated sync-rules document: its buckets and the policies of some tables."""

    version: int
    buckets: tuple[Bucket, ...] = ()
    tables: Mapping[str, TablePolicy] = field(default_factory=dict)

    def to_json(self) -> dict[str, Any]:
        """The JSON shape ``{"version", "buckets", "tables"?}``."""
        doc: dict[str, Any] = {"version": self.version, "buckets": [b.to_json() for b in self.buckets]}
        if self.tables:
            doc["tables"] = {name: policy.to_json() for name, policy in self.tables.items()}
        return doc

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


def _js_object(value: object) -> Mapping[str, object] | None:
    """``value`` seen as a JavaScript object (``typeof == "object"``, not null); arrays have none of our fields."""
    if isinstance(value, Mapping):
        return value
    if isinstance(value, list | tuple):
        return {}
    return None


def _is_positive_integer(value: object) -> bool:
    """A JS number that ``Number.isInteger`` and is at least 1."""
    if isinstance(value, bool):
        return False
    if isinstance(value, int):
        return value >= 1
    return isinstance(value, float) and value.is_integer() and value >= 1


def _non_empty_str(value: object) -> bool:
    return isinstance(value, str) and bool(value)


def _parse_filter(raw: object, bucket_name: str, j: int, *, unknown_op_ok: bool) -> Filter | None:
    where = f'Bucket "{bucket_name}" filter at index {j}'
    obj = _js_object(raw)
    if obj is None:
        raise SyncRuleError(f"{where} must be an object")
    column = obj.get("column")
    if not isinstance(column, str) or not column:
        raise SyncRuleError(f"{where} must have a non-empty column")
    op_text = obj.get("op")
    op = FilterOp(op_text) if isinstance(op_text, str) and op_text in _OP_VALUES else None
    if op is None and not unknown_op_ok:
        raise SyncRuleError(f"{where} op must be one of: {_OP_LIST}")
    value = obj.get("value")
    if not isinstance(value, str) or not value:
        raise SyncRuleError(f"{where} must have a non-empty value")
    return None if op is None else Filter(column, op, value)


def _parse_bucket(raw: object, i: int, seen: set[str], *, unknown_op_ok: bool = False) -> Bucket | None:
    """Validate one bucket; ``None`` when ``unknown_op_ok`` and a filter has an unknown operator."""
    obj = _js_object(raw)
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
    filters = [_parse_filter(f, name, j, unknown_op_ok=unknown_op_ok) for j, f in enumerate(raw_filters)]
    if any(f is None for f in filters):
        return None
    write = parse_write_policy(obj.get("write", ABSENT), f'Bucket "{name}"')
    return Bucket(name, tuple(tables), tuple(f for f in filters if f is not None), write)


def parse_sync_rules(obj: object) -> SyncRules:
    """Validate a sync-rules JSON document and build the typed model.

    Checks run in the original's order and the first failure wins; unknown extra fields are ignored and any version
    ``>= 1`` is accepted.

    Raises:
        SyncRuleError: with the original's exact message.
    """
    config = _js_object(obj)
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
    return SyncRules(int(version), tuple(buckets), tables)


def check_sync_rules_limits(rules: SyncRules) -> None:
    """Check the bounds of a rules document about to be stored (ours; the admin route runs it after
    :func:`parse_sync_rules`; stored rules are read back without it).

    Raises:
        SyncRuleError: more than :data:`MAX_BUCKETS` buckets, or a bucket with more than :data:`MAX_BUCKET_TABLES`
            tables or :data:`MAX_BUCKET_FILTERS` filters (HTTP 400).
        PayloadTooLargeError: the stored document would exceed :data:`MAX_RULES_BYTES` (HTTP 413).
    """
    if len(rules.buckets) > MAX_BUCKETS:
        raise SyncRuleError(f"Sync rules may have at most {MAX_BUCKETS} buckets; got {len(rules.buckets):,}")
    for bucket in rules.buckets:
        if len(bucket.tables) > MAX_BUCKET_TABLES:
            raise SyncRuleError(f'Bucket "{bucket.name}" may list at most {MAX_BUCKET_TABLES} tables')
        if len(bucket.filters) > MAX_BUCKET_FILTERS:
            raise SyncRuleError(f'Bucket "{bucket.name}" may have at most {MAX_BUCKET_FILTERS} filters')
    size = utf8_size(rules.to_json())
    if size > MAX_RULES_BYTES:
        raise PayloadTooLargeError(f"Sync rules document is {size:,} bytes; the limit is {MAX_RULES_BYTES:,}")


# --- values and comparison --------------------------------------------------------------------------------------


def resolve_filter_value(value: str, claims: Claims) -> list[str]:
    """The values a filter compares against: the literal ``[value]``, or the claim named after ``jwt:``.

    A missing claim, or an empty array claim, resolves to ``[]``.
    """
    if not value.startswith(JWT_PREFIX):
        return [value]
    claim = claims.get(value[len(JWT_PREFIX) :])
    if claim is None:
        return []
    if isinstance(claim, str):
        return [claim]
    return list(claim)


_NUMBER = re.compile(r"(-?)([0-9]+)(?:\.([0-9]+))?(?:[eE]([+-]?[0-9]+))?")
_INT_CHUNK = 4000  # below the interpreter's int <-> str digit limit


def _decimal_int(text: str) -> int:
    """``int(text)`` for an optionally signed digit string of any length."""
    negative = text.startswith("-")
    digits = text.lstrip("+-").lstrip("0") or "0"
    value = 0
    for start in range(0, len(digits), _INT_CHUNK):
        chunk = digits[start : start + _INT_CHUNK]
        value = value * 10 ** len(chunk) + int(chunk)
    return -value if negative else value


def _number_key(text: str) -> tuple[int, int, str] | None:
    """``(sign, magnitude exponent, significant digits)`` of a full decimal number, else ``None``.

    A non-zero value equals ``sign * 0.<digits> * 10**exponent`` with ``digits`` free of leading and trailing zeros,
    so magnitudes order by exponent first, then by ``digits`` as strings.
    """
    match = _NUMBER.fullmatch(text)
    if match is None:
        return None
    minus, whole, fraction, exponent = match.groups()
    fraction = fraction or ""
    digits = (whole + fraction).lstrip("0")
    if not digits:
        return (0, 0, "")
    magnitude = _decimal_int(exponent or "0") - len(fraction) + len(digits)
    return (-1 if minus else 1, magnitude, digits.rstrip("0"))


def _cmp(a: Any, b: Any) -> int:
    return int(a > b) - int(a < b)


def compare_filter_values(left: str, right: str) -> int:
    """-1, 0 or 1 as ``left`` orders before, equal to or after ``right`` under our comparison rule.

    Both full decimal numbers: exact numeric order. Otherwise: UTF-16 code-unit order of the strings.
    """
    a = _number_key(left)
    b = _number_key(right)
    if a is None or b is None:
        return _cmp(utf16_key(left), utf16_key(right))
    if a[0] != b[0]:
        return _cmp(a[0], b[0])
    return a[0] * _cmp(a[1:], b[1:])


def _filter_holds(flt: Filter, row: Row, claims: Claims) -> bool:
    if flt.column not in row:
        return False
    resolved = resolve_filter_value(flt.value, claims)
    if not resolved:
        return False
    text = js_string_coerce(row[flt.column])
    match flt.op:
        case FilterOp.EQ | FilterOp.IN:
            return text in resolved
        case FilterOp.NEQ:
            return text not in resolved
        case FilterOp.GT:
            return compare_filter_values(text, resolved[0]) > 0
        case FilterOp.LT:
            return compare_filter_values(text, resolved[0]) < 0
        case FilterOp.GTE:
            return compare_filter_values(text, resolved[0]) >= 0
        case FilterOp.LTE:
            return compare_filter_values(text, resolved[0]) <= 0


# --- matching ---------------------------------------------------------------------------------------------------


def _delta_values(delta: RowDelta) -> dict[str, JsonValue]:
    """The delta's columns; the FIRST entry of a repeated column wins, as in the original."""
    values: dict[str, JsonValue] = {}
    for col in delta.columns:
        values.setdefault(col.column, col.value)
    return values


def bucket_matches_row(bucket: Bucket, table: str, row: Row | None, claims: Claims) -> bool:
    """Whether ``row`` of ``table`` falls into ``bucket`` (an absent row passes only a bucket without filters)."""
    if not bucket.covers_table(table):
        return False
    if not bucket.filters:
        return True
    return row is not None and all(_filter_holds(f, row, claims) for f in bucket.filters)


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
    """Whether ``rules`` filter what clients see: ``None``, or zero buckets and no admin-only table, make everything
    visible."""
    return rules is not None and (bool(rules.buckets) or any(p.admin_only for p in rules.tables.values()))


def row_matches(rules: SyncRules | None, claims: Claims, table: str, row: Row | None) -> bool:
    """Whether the client with ``claims`` may see ``row`` of ``table`` (``None`` = the row does not exist).

    Rows of an admin-only table are never visible to a client; without buckets every other row is.
    """
    if not rules_apply(rules):
        return True
    if rules.admin_only(table):
        return False
    if not rules.buckets:
        return True
    return any(bucket_matches_row(b, table, row, claims) for b in rules.buckets)


def change_visible(rules: SyncRules | None, claims: Claims, table: str, before: Row | None, after: Row | None) -> bool:
    """Whether a change of a row of ``table`` from ``before`` to ``after`` is delivered to the client.

    True when the row was visible before the change or is visible after it; ``None`` marks an absent row (an
    INSERT has no ``before``, a DELETE no ``after``).
    """
    return row_matches(rules, claims, table, before) or row_matches(rules, claims, table, after)


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


def _scope_refusal(
    rules: SyncRules, claims: Claims, delta: RowDelta, kind: WriteOp, row: Row, when: str, before: Row | None
) -> WriteRefusal | None:
    """Why no bucket holding ``row`` (the row ``when`` the change) lets the client make the write, or ``None``."""
    refusal = None
    for bucket in rules.buckets:
        if bucket_matches_row(bucket, delta.table, row, claims):
            refusal = _policy_refusal(bucket.write, f'Bucket "{bucket.name}"', kind, delta, before)
            if refusal is None:
                return None
    return refusal or WriteRefusal(
        OUT_OF_SCOPE, f"Row {delta.table}:{delta.row_id} is outside the client's sync rules {when} the write"
    )


def check_write(
    rules: SyncRules | None, claims: Claims, delta: RowDelta, before: Row | None, after: Row | None
) -> WriteRefusal | None:
    """Why a client with ``claims`` may not make ``delta``, or ``None`` when it may.

    ``before`` and ``after`` are the row's live values just before the delta and merged with it (``None``: the row
    does not exist). A client may write a row only if a bucket holds it before the write and one holds it after
    (:func:`row_matches`, the read rule), each of them allowing the write by its policy, and the table's policy
    allows it too. Tables named ``_lakesync_*`` are never written by clients. Without buckets every row may be
    written, as far as the table policies allow. A write that leaves no row on either side (a delete of a row that
    is gone) needs a bucket of the table whose policy allows it.
    """
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
    if not rules.buckets:
        return None
    sides = [(row, when) for row, when in ((before, "before"), (after, "after")) if row is not None]
    for row, when in sides:
        refusal = _scope_refusal(rules, claims, delta, kind, row, when, before)
        if refusal is not None:
            return refusal
    if sides:
        return None
    covering = [b for b in rules.buckets if b.covers_table(delta.table)]
    if any(_policy_refusal(b.write, "", kind, delta, before) is None for b in covering):
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
    "Row",
    "SyncRules",
    "WriteRefusal",
    "bucket_matches_row",
    "change_visible",
    "check_write",
    "compare_filter_values",
    "delta_matches_bucket",
    "filter_deltas",
    "matches_bucket",
    "parse_sync_rules",
    "pass_all_rules",
    "resolve_client_buckets",
    "resolve_filter_value",
    "row_matches",
    "rules_apply",
    "write_kind",
]
