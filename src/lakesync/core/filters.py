"""Filters of the sync rules: one condition on a row's column, where its values come from, and its one evaluation.

A :class:`Filter` compares a row's column with values. The values are a literal, a ``jwt:<claim>`` reference, in a
stream a ``param:<name>`` reference (:data:`PARAM_PREFIX`; in a bucket such a value is a literal), or a
:class:`Membership`: the values of a column of another table's rows that pass the membership's own filters (rows of
``tasks`` whose ``project_id`` is among the ``project`` values of the ``memberships`` rows where ``user = jwt:sub``).

Resolving a filter against claims, parameters and a :class:`MembershipSource` gives a plain :class:`Clause` (a
column, an operator and the values); a :class:`Condition` AND-s clauses over some tables. :meth:`Clause.holds` is the
one place a filter is evaluated on a row: buckets (:func:`lakesync.core.rules.bucket_matches_row`), write rules and
scopes (:mod:`lakesync.core.scope`) all go through it. The rule itself (JavaScript ``String`` coercion, exact decimal
comparison, UTF-16 order, a missing column or an empty value list failing every operator) is described in
:mod:`lakesync.core.rules`.
"""

from __future__ import annotations

import enum
import re
from collections.abc import Collection, Iterable, Mapping, Sequence
from dataclasses import dataclass
from typing import Any, Protocol

from lakesync.core.canonical import JsonValue, js_string_coerce, utf16_key
from lakesync.core.claims import Claims
from lakesync.core.errors import SyncRuleError
from lakesync.core.write_policy import ABSENT, is_reserved_table

Row = Mapping[str, JsonValue]
"""A row as column name -> JSON value."""

Params = Mapping[str, Sequence[str]]
"""A stream's parameters resolved for one subscription: name -> the values a ``param:<name>`` filter compares with."""

JWT_PREFIX = "jwt:"
PARAM_PREFIX = "param:"


class FilterOp(enum.StrEnum):
    """The filter operators, in the order the validation message lists them."""

    EQ = "eq"
    IN = "in"
    NEQ = "neq"
    GT = "gt"
    LT = "lt"
    GTE = "gte"
    LTE = "lte"


SET_OPS = frozenset({FilterOp.EQ, FilterOp.IN, FilterOp.NEQ})
"""Operators that test membership in the values (the only ones a membership filter may use)."""
INDEXABLE_OPS = frozenset({FilterOp.EQ, FilterOp.IN})
"""Operators whose clause holds only for a row whose column equals one of the values."""
_OP_LIST = ", ".join(op.value for op in FilterOp)
_SET_OP_LIST = ", ".join(op.value for op in FilterOp if op in SET_OPS)
_OP_VALUES = frozenset(op.value for op in FilterOp)


@dataclass(frozen=True, slots=True)
class Membership:
    """Values read from rows of another table: ``column`` of the ``table`` rows passing every ``where`` filter."""

    table: str
    column: str
    where: tuple[Filter, ...] = ()

    def to_json(self) -> dict[str, Any]:
        """The JSON shape ``{"table", "column", "where"}``."""
        return {"table": self.table, "column": self.column, "where": [f.to_json() for f in self.where]}


@dataclass(frozen=True, slots=True)
class Filter:
    """One condition on a row column: ``value`` is a literal or a reference, unless ``membership`` gives the values."""

    column: str
    op: FilterOp
    value: str = ""
    membership: Membership | None = None

    def to_json(self) -> dict[str, Any]:
        """The JSON shape ``{"column", "op", "value"}`` or ``{"column", "op", "membership"}``."""
        if self.membership is not None:
            return {"column": self.column, "op": self.op.value, "membership": self.membership.to_json()}
        return {"column": self.column, "op": self.op.value, "value": self.value}

    def references(self) -> Iterable[str]:
        """Every value this filter and its membership's filters name (literals and references)."""
        if self.membership is None:
            yield self.value
            return
        for flt in self.membership.where:
            yield flt.value


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


def resolve_value(value: str, claims: Claims, params: Params | None = None) -> list[str]:
    """:func:`resolve_filter_value`, and with ``params`` (a stream's) ``param:<name>`` names a parameter."""
    if params is not None and value.startswith(PARAM_PREFIX):
        return list(params.get(value[len(PARAM_PREFIX) :], ()))
    return resolve_filter_value(value, claims)


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


# --- plain conditions -------------------------------------------------------------------------------------------


def filter_holds(column: str, op: FilterOp, values: Sequence[str], row: Row) -> bool:
    """Whether ``row``'s ``column`` compared by ``op`` with ``values`` holds: the one evaluation of a filter (an
    absent column, or no values, fails every operator)."""
    if column not in row or not values:
        return False
    text = js_string_coerce(row[column])
    match op:
        case FilterOp.EQ | FilterOp.IN:
            return text in values
        case FilterOp.NEQ:
            return text not in values
        case FilterOp.GT:
            return compare_filter_values(text, values[0]) > 0
        case FilterOp.LT:
            return compare_filter_values(text, values[0]) < 0
        case FilterOp.GTE:
            return compare_filter_values(text, values[0]) >= 0
        case FilterOp.LTE:
            return compare_filter_values(text, values[0]) <= 0


@dataclass(frozen=True, slots=True)
class Clause:
    """A filter with its values resolved: ``column`` compared by ``op`` with ``values`` (empty: never holds)."""

    column: str
    op: FilterOp
    values: tuple[str, ...]

    def holds(self, row: Row) -> bool:
        """Whether the clause holds on ``row`` (:func:`filter_holds`)."""
        return filter_holds(self.column, self.op, self.values, row)

    def canonical(self) -> Clause:
        """The same clause in one spelling: for eq/in/neq the values as a sorted set (``eq`` written ``in``, the
        same test), for comparisons the first value only (the one they use)."""
        if self.op not in SET_OPS:
            return Clause(self.column, self.op, self.values[:1])
        op = FilterOp.IN if self.op is FilterOp.EQ else self.op
        return Clause(self.column, op, tuple(sorted(set(self.values))))

    def to_json(self) -> dict[str, Any]:
        """The JSON shape ``{"column", "op", "values"}``."""
        return {"column": self.column, "op": self.op.value, "values": list(self.values)}

    @classmethod
    def from_json(cls, doc: object) -> Clause:
        """The clause :meth:`to_json` gave.

        Raises:
            ValueError: not such a shape.
        """
        if not isinstance(doc, Mapping) or set(doc) != {"column", "op", "values"}:
            raise ValueError("a clause is {column, op, values}")
        column, op, values = doc["column"], doc["op"], doc["values"]
        if not isinstance(column, str) or op not in _OP_VALUES or not isinstance(values, list):
            raise ValueError("a clause has a column, a known op and a list of values")
        if not all(isinstance(v, str) for v in values):
            raise ValueError("a clause's values are strings")
        return cls(column, FilterOp(op), tuple(values))


@dataclass(frozen=True, slots=True)
class Condition:
    """Rows of ``tables`` (empty: every table) on which every clause holds; without clauses, every row of them,
    absent or not."""

    tables: tuple[str, ...] = ()
    clauses: tuple[Clause, ...] = ()

    def covers_table(self, table: str) -> bool:
        """Whether rows of ``table`` can meet this condition."""
        return not self.tables or table in self.tables

    def matches(self, table: str, row: Row | None) -> bool:
        """Whether ``row`` of ``table`` meets the condition (``None``: the row does not exist)."""
        if not self.covers_table(table):
            return False
        if not self.clauses:
            return True
        return row is not None and all(c.holds(row) for c in self.clauses)

    @property
    def satisfiable(self) -> bool:
        """Whether some row can meet the condition (every clause has values)."""
        return all(c.values for c in self.clauses)

    def canonical(self) -> Condition:
        """The same condition in one spelling: tables and clauses sorted and without repeats."""
        clauses = {c.canonical() for c in self.clauses}
        return Condition(
            tuple(sorted(set(self.tables))), tuple(sorted(clauses, key=lambda c: (c.column, c.op, c.values)))
        )

    def restricted_to(self, table: str) -> Condition:
        """The part of the condition on rows of ``table``."""
        return Condition((table,), self.clauses)

    def to_json(self) -> dict[str, Any]:
        """The JSON shape ``{"tables", "clauses"}``."""
        return {"tables": list(self.tables), "clauses": [c.to_json() for c in self.clauses]}

    @classmethod
    def from_json(cls, doc: object) -> Condition:
        """The condition :meth:`to_json` gave.

        Raises:
            ValueError: not such a shape.
        """
        if not isinstance(doc, Mapping) or set(doc) != {"tables", "clauses"}:
            raise ValueError("a condition is {tables, clauses}")
        tables, clauses = doc["tables"], doc["clauses"]
        if not isinstance(tables, list) or not all(isinstance(t, str) for t in tables) or not isinstance(clauses, list):
            raise ValueError("a condition has a list of tables and a list of clauses")
        return cls(tuple(tables), tuple(Clause.from_json(c) for c in clauses))


# --- memberships ------------------------------------------------------------------------------------------------


@dataclass(frozen=True, slots=True)
class MembershipQuery:
    """A membership resolved against claims and parameters: the ``column`` values of the ``table`` rows on which every
    ``where`` clause holds."""

    table: str
    column: str
    where: tuple[Clause, ...] = ()

    def contributes(self, row: Row) -> str | None:
        """The value ``row`` (of :attr:`table`) gives the query, or ``None`` (it fails a clause, or its column is
        absent or null)."""
        value = row.get(self.column)
        if value is None or not all(c.holds(row) for c in self.where):
            return None
        return js_string_coerce(value)


class MembershipSource(Protocol):
    """Reads membership rows: the gateway implements it over its row index, :class:`InMemoryMemberships` in memory."""

    def member_values(self, query: MembershipQuery) -> Collection[str]:
        """The values :meth:`MembershipQuery.contributes` gives over the live rows of ``query.table``."""
        ...


class InMemoryMemberships:
    """A :class:`MembershipSource` over rows held in memory, table by table."""

    def __init__(self, tables: Mapping[str, Iterable[Row]] | None = None) -> None:
        self._tables: dict[str, list[Row]] = {name: list(rows) for name, rows in (tables or {}).items()}

    def put(self, table: str, rows: Iterable[Row]) -> None:
        """Replace the live rows of ``table``."""
        self._tables[table] = list(rows)

    def member_values(self, query: MembershipQuery) -> frozenset[str]:
        """The values the live rows of ``query.table`` give ``query``."""
        values = (query.contributes(row) for row in self._tables.get(query.table, ()))
        return frozenset(v for v in values if v is not None)


def resolve_filter(
    flt: Filter, claims: Claims, params: Params | None = None, memberships: MembershipSource | None = None
) -> Clause:
    """``flt`` as a plain clause: its values resolved against ``claims``, a stream's ``params`` (``None`` in a bucket)
    and ``memberships`` (``None``: a membership filter has no values, so it never holds)."""
    return Clause(flt.column, flt.op, tuple(filter_values(flt, claims, params, memberships)))


def filter_values(
    flt: Filter, claims: Claims, params: Params | None = None, memberships: MembershipSource | None = None
) -> Sequence[str]:
    """The values ``flt`` compares with (:func:`resolve_filter` without building the clause)."""
    if flt.membership is None:
        return resolve_value(flt.value, claims, params)
    if memberships is None:
        return ()
    return member_values(flt.membership, claims, params, memberships)


def member_values(
    membership: Membership, claims: Claims, params: Params | None, memberships: MembershipSource
) -> tuple[str, ...]:
    """The values ``membership`` gives, sorted, read from ``memberships`` with its filters resolved."""
    where = tuple(resolve_filter(w, claims, params).canonical() for w in membership.where)
    return tuple(sorted(memberships.member_values(MembershipQuery(membership.table, membership.column, where))))


# --- parsing ----------------------------------------------------------------------------------------------------


def js_object(value: object) -> Mapping[str, object] | None:
    """``value`` seen as a JavaScript object (``typeof == "object"``, not null); arrays have none of our fields."""
    if isinstance(value, Mapping):
        return value
    if isinstance(value, list | tuple):
        return {}
    return None


def _check_value(value: str, where: str, params: Collection[str] | None) -> None:
    if params is None or not value.startswith(PARAM_PREFIX):
        return
    name = value[len(PARAM_PREFIX) :]
    if name not in params:
        raise SyncRuleError(f'{where} uses undeclared parameter "{name}"')


def parse_filter(
    raw: object,
    where: str,
    *,
    unknown_op_ok: bool = False,
    params: Collection[str] | None = None,
    membership_ok: bool = True,
) -> Filter | None:
    """Validate one filter; ``where`` names it in messages (``Bucket "b" filter at index 0``).

    ``params`` are a stream's declared parameters (``None`` in a bucket, where ``param:`` is a literal); a membership
    filter's own filters may not have a membership (``membership_ok``). Returns ``None`` when ``unknown_op_ok`` and
    the operator is unknown (the original's sparse-delta matching).

    Raises:
        SyncRuleError: the first malformed field, in the original's order (column, op, value).
    """
    obj = js_object(raw)
    if obj is None:
        raise SyncRuleError(f"{where} must be an object")
    column = obj.get("column")
    if not isinstance(column, str) or not column:
        raise SyncRuleError(f"{where} must have a non-empty column")
    op_text = obj.get("op")
    op = FilterOp(op_text) if isinstance(op_text, str) and op_text in _OP_VALUES else None
    if op is None and not unknown_op_ok:
        raise SyncRuleError(f"{where} op must be one of: {_OP_LIST}")
    raw_membership = obj.get("membership", ABSENT)
    if raw_membership is not ABSENT:
        if not membership_ok:
            raise SyncRuleError(f"{where} cannot have a membership")
        if "value" in obj:
            raise SyncRuleError(f"{where} must have a value or a membership, not both")
        if op is not None and op not in SET_OPS:
            raise SyncRuleError(f"{where} op must be one of: {_SET_OP_LIST} with a membership")
        membership = parse_membership(raw_membership, where, params)
        return None if op is None else Filter(column, op, membership=membership)
    value = obj.get("value")
    if not isinstance(value, str) or not value:
        raise SyncRuleError(f"{where} must have a non-empty value")
    _check_value(value, where, params)
    return None if op is None else Filter(column, op, value)


def checked_table(raw: Mapping[str, object], where: str, fields: Collection[str]) -> str:
    """The ``"table"`` of the object ``where`` names, once it has no field beyond ``fields`` and names a table that
    clients may read.

    Raises:
        SyncRuleError: an unknown field, no table, or an engine table (``_lakesync_*``).
    """
    unknown = sorted(set(raw) - set(fields))
    if unknown:
        raise SyncRuleError(f"{where} has unknown fields: {', '.join(unknown)}")
    table = raw.get("table")
    if not isinstance(table, str) or not table:
        raise SyncRuleError(f"{where} must name a table")
    if is_reserved_table(table):
        raise SyncRuleError(f'{where} table "{table}" is the engine\'s own')
    return table


def parse_membership(raw: object, where: str, params: Collection[str] | None = None) -> Membership:
    """Validate a ``"membership"`` object of the filter (or stream parameter) ``where`` names.

    Raises:
        SyncRuleError: malformed, unknown fields, or an engine table (``_lakesync_*``).
    """
    where = f"{where} membership"
    if not isinstance(raw, Mapping):
        raise SyncRuleError(f"{where} must be an object")
    table = checked_table(raw, where, frozenset({"table", "column", "where"}))
    column = raw.get("column")
    if not isinstance(column, str) or not column:
        raise SyncRuleError(f"{where} must name a column")
    raw_where = raw.get("where", [])
    if not isinstance(raw_where, list):
        raise SyncRuleError(f"{where} where must be an array")
    filters = [
        parse_filter(w, f"{where} where at index {k}", params=params, membership_ok=False)
        for k, w in enumerate(raw_where)
    ]
    return Membership(table, column, tuple(f for f in filters if f is not None))


__all__ = [
    "INDEXABLE_OPS",
    "JWT_PREFIX",
    "PARAM_PREFIX",
    "SET_OPS",
    "Clause",
    "Condition",
    "Filter",
    "FilterOp",
    "InMemoryMemberships",
    "Membership",
    "MembershipQuery",
    "MembershipSource",
    "Params",
    "Row",
    "checked_table",
    "compare_filter_values",
    "filter_holds",
    "filter_values",
    "js_object",
    "member_values",
    "parse_filter",
    "parse_membership",
    "resolve_filter",
    "resolve_filter_value",
    "resolve_value",
]
