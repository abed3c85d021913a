"""True per-column last-write-wins: the one merge rule of LakeSync.

The gateway's row index, the Spark compaction, the materialiser and the client all merge with this module.

Versions
    A write's *version* is ``(hlc, client_id)``: ordered by HLC, then by client id in UTF-16 code-unit order (the
    JavaScript string order, :func:`~lakesync.core.canonical.utf16_key`; Python's ``str`` order differs between
    astral characters and U+E000..U+FFFF).

State of a row (:class:`RowState`)
    Per column ``(value, hlc, client_id)``; a row *tombstone* (the greatest DELETE version seen, or ``None``); and
    ``written``, the greatest INSERT/UPDATE version seen, kept only while it is above the tombstone (a write at or
    below the tombstone can never matter again, because the tombstone only grows).

The rule (:func:`merge`)
    * INSERT and UPDATE behave alike. A column write at version ``v`` wins iff ``v > tombstone`` and ``v`` is greater
      than the stored version of that column. Two writes of one column with the *same* version but different values:
      the greater ``stable_stringify(value)`` (UTF-16 order) wins, so the outcome does not depend on arrival order.
      Same version and same canonical value: a no-op. Within one delta a repeated column name counts once, with its
      last value (as in :func:`~lakesync.core.delta.apply_delta`).
    * A DELETE at ``d`` raises the tombstone to ``max(tombstone, d)`` and drops every column whose version is ``<=``
      the tombstone: a delete wins a tie with a write of equal version. Columns a DELETE carries are ignored.
    * A later write resurrects the row with only the columns it carries (possibly none: an INSERT without columns
      after a delete brings back an empty row).
    * The row exists iff ``written`` is above the tombstone; :meth:`RowState.values` is ``None`` otherwise.

Closed form
    The state of a *set* of deltas of one row is a pure function of the set: ``tombstone`` = the max DELETE version;
    each column = the write of that column with the max ``(version, canonical value)`` among those strictly above the
    tombstone; ``written`` = the max write version if it is above the tombstone. Hence merge order and duplicates do
    not matter (merge is commutative and idempotent), and :func:`join` of two states is a semilattice join with
    ``fold(A | B) == join(fold(A), fold(B))``. Distributed jobs (Spark) may compute the closed form directly.

Why not the original's ``resolveLWW`` (reference §3): it merges two *deltas* and stamps every merged column with the
winning delta's HLC, so it keeps no per-column versions and no tombstone; merging against the last merged delta is
only pairwise-correct (``done@t2`` loses against a row whose ``done`` was written at ``t1 < t2`` if another column was
written at ``t3 > t2``), and its equal-HLC-equal-clientId rule ("remote wins") is order-dependent.
"""

from __future__ import annotations

import dataclasses
import functools
import json
from collections.abc import Iterable, Mapping
from dataclasses import dataclass, field
from typing import Any

from lakesync.core.canonical import JsonValue, stable_stringify, utf16_key
from lakesync.core.delta import ColumnDelta, DeltaOp, RowDelta
from lakesync.core.errors import ConflictError


@dataclass(frozen=True, slots=True)
class Version:
    """A write's version ``(hlc, client_id)``, ordered by HLC then client id in UTF-16 code-unit order."""

    hlc: int
    client_id: str

    @property
    def key(self) -> tuple[int, bytes]:
        """The sort key: ``(hlc, utf16_key(client_id))``."""
        return self.hlc, _client_key(self.client_id)

    def __lt__(self, other: Version) -> bool:
        return self.key < other.key

    def __le__(self, other: Version) -> bool:
        return self.key <= other.key

    def __gt__(self, other: Version) -> bool:
        return self.key > other.key

    def __ge__(self, other: Version) -> bool:
        return self.key >= other.key


@functools.lru_cache(maxsize=4096)
def _client_key(client_id: str) -> bytes:
    # Versions compare constantly and a gateway sees few distinct clientIds: encode each once.
    return utf16_key(client_id)


@dataclass(frozen=True, slots=True)
class ColumnState:
    """The current value of one column and the version that wrote it."""

    value: JsonValue
    hlc: int
    client_id: str

    @property
    def version(self) -> Version:
        """The version that wrote this value."""
        return Version(self.hlc, self.client_id)


@dataclass(frozen=True, slots=True)
class RowState:
    """The merged state of one row; compares by value, not hashable (values may be JSON containers).

    Attributes:
        table: The table name.
        row_id: The row id.
        columns: Live columns by name, each strictly above the tombstone and at most ``written``. Order is not
            significant. Treat it (and the JSON values in it) as read-only.
        tombstone: The greatest DELETE version seen, or ``None``.
        written: The greatest INSERT/UPDATE version seen if it is above the tombstone, else ``None``.

    Raises:
        ValueError: on construction, if the fields break the invariants above.
    """

    table: str
    row_id: str
    columns: Mapping[str, ColumnState] = field(default_factory=dict)
    tombstone: Version | None = None
    written: Version | None = None

    def __post_init__(self) -> None:
        object.__setattr__(self, "columns", dict(self.columns))
        tomb = self.tombstone
        if self.written is not None and tomb is not None and self.written <= tomb:
            raise ValueError("RowState.written must be above the tombstone (or None)")
        for name, col in self.columns.items():
            v = col.version
            if self.written is None or v > self.written or (tomb is not None and v <= tomb):
                raise ValueError(f"RowState column {name!r} must be above the tombstone and at most written")

    @property
    def exists(self) -> bool:
        """Whether the row is live (some write is newer than every delete)."""
        return self.written is not None

    def values(self) -> dict[str, JsonValue] | None:
        """The live column values, or ``None`` if the row does not exist."""
        if self.written is None:
            return None
        return {name: col.value for name, col in self.columns.items()}


@dataclass(frozen=True, slots=True)
class ColumnReceipt:
    """What happened to one column of a merged delta.

    Attributes:
        column: The column name.
        applied: True if the column's value is now (or already was, at this very version) the stored one.
        winner_hlc: HLC of the version now holding the column: the delta's own when applied, otherwise the stored
            column version or the tombstone it lost to.
        winner_client_id: Client id of that version.
    """

    column: str
    applied: bool
    winner_hlc: int
    winner_client_id: str


@dataclass(frozen=True, slots=True)
class MergeResult:
    """The outcome of :func:`merge`.

    Attributes:
        state: The row state after the merge (the input state itself when nothing changed).
        receipts: One receipt per distinct column of an INSERT/UPDATE, in the delta's column order; empty for DELETE.
        changed: Whether the state changed.
        effective: The delta to publish downstream, or ``None`` when nothing changed: for INSERT/UPDATE the delta
            restricted to its applied columns (same op, hlc, clientId and deltaId); for a DELETE that advanced the
            tombstone, the delta without columns.
    """

    state: RowState
    receipts: tuple[ColumnReceipt, ...]
    changed: bool
    effective: RowDelta | None


def _derived(
    table: str,
    row_id: str,
    columns: dict[str, ColumnState],
    tombstone: Version | None,
    written: Version | None,
) -> RowState:
    """A state the merge itself derived from a valid one: it holds the invariants by construction, so the checks of
    ``RowState.__post_init__`` (a third of a merge's time) are skipped."""
    state = _new(RowState)
    _set_table(state, table)
    _set_row_id(state, row_id)
    _set_columns(state, columns)
    _set_tombstone(state, tombstone)
    _set_written(state, written)
    return state


# The slots' own setters: a frozen dataclass refuses attribute assignment, its member descriptors do not. Building
# through them skips the frozen ``__init__`` (a third of a fold's time goes to constructing these small objects).
_new = object.__new__
_set_table = RowState.__dict__["table"].__set__
_set_row_id = RowState.__dict__["row_id"].__set__
_set_columns = RowState.__dict__["columns"].__set__
_set_tombstone = RowState.__dict__["tombstone"].__set__
_set_written = RowState.__dict__["written"].__set__
_set_value = ColumnState.__dict__["value"].__set__
_set_hlc = ColumnState.__dict__["hlc"].__set__
_set_client = ColumnState.__dict__["client_id"].__set__
_set_version_hlc = Version.__dict__["hlc"].__set__
_set_version_client = Version.__dict__["client_id"].__set__


def _version(hlc: int, client_id: str) -> Version:
    version = _new(Version)
    _set_version_hlc(version, hlc)
    _set_version_client(version, client_id)
    return version


def _mismatch(left: RowState, table: str, row_id: str) -> ConflictError:
    return ConflictError(
        f"Cannot resolve conflict: mismatched table/rowId ({left.table}:{left.row_id} vs {table}:{row_id})"
    )


def _value_key(value: JsonValue) -> bytes:
    return utf16_key(stable_stringify(value))


def _compare(a: ColumnState, b: ColumnState) -> int:
    """-1, 0 or 1 as write ``a`` orders before, equal to or after write ``b`` (version, then canonical value)."""
    if a.hlc != b.hlc:
        return 1 if a.hlc > b.hlc else -1
    if a.client_id != b.client_id:
        return 1 if _client_key(a.client_id) > _client_key(b.client_id) else -1
    va, vb = _value_key(a.value), _value_key(b.value)
    return (va > vb) - (va < vb)


def _max_version(a: Version | None, b: Version | None) -> Version | None:
    if a is None:
        return b
    if b is None:
        return a
    return a if a >= b else b


def merge(state: RowState | None, delta: RowDelta) -> MergeResult:
    """Merge one delta into a row's state.

    Args:
        state: The row's current state, or ``None`` for a row never seen.
        delta: The delta to merge.

    Returns:
        The new state, per-column receipts, whether anything changed and the effective delta to publish.

    Raises:
        ConflictError: if ``delta`` names another table or row than ``state``.
    """
    if state is None:
        state = RowState(delta.table, delta.row_id)
    elif state.table != delta.table or state.row_id != delta.row_id:
        raise _mismatch(state, delta.table, delta.row_id)
    version = Version(delta.hlc, delta.client_id)
    if delta.op is DeltaOp.DELETE:
        return _merge_delete(state, delta, version)
    return _merge_write(state, delta, version)


def _merge_delete(state: RowState, delta: RowDelta, version: Version) -> MergeResult:
    if state.tombstone is not None and version <= state.tombstone:
        return MergeResult(state, (), False, None)
    columns = {name: col for name, col in state.columns.items() if col.version > version}
    written = state.written if state.written is not None and state.written > version else None
    new_state = _derived(state.table, state.row_id, columns, version, written)
    effective = dataclasses.replace(delta, columns=()) if delta.columns else delta
    return MergeResult(new_state, (), True, effective)


def _merge_write(state: RowState, delta: RowDelta, version: Version) -> MergeResult:
    tomb = state.tombstone
    above_tombstone = tomb is None or version > tomb
    columns = dict(state.columns)
    receipts: list[ColumnReceipt] = []
    lost: set[str] = set()
    changed = False
    hlc, client_id = delta.hlc, delta.client_id
    values = delta.values()
    for name, value in values.items():
        current = columns.get(name)
        if not above_tombstone:
            # A stored column is always above the tombstone, so it is the version holding the column now.
            winner = current.version if current is not None else tomb
            assert winner is not None
            receipts.append(ColumnReceipt(name, False, winner.hlc, winner.client_id))
            lost.add(name)
            continue
        if current is None:
            order = 1
        elif hlc != current.hlc:
            order = 1 if hlc > current.hlc else -1
        elif client_id != current.client_id:
            order = 1 if _client_key(client_id) > _client_key(current.client_id) else -1
        else:
            incoming_key, current_key = _value_key(value), _value_key(current.value)
            order = (incoming_key > current_key) - (incoming_key < current_key)
        if order < 0:
            assert current is not None
            receipts.append(ColumnReceipt(name, False, current.hlc, current.client_id))
            lost.add(name)
            continue
        if order > 0:
            columns[name] = ColumnState(value, hlc, client_id)
            changed = True
        receipts.append(ColumnReceipt(name, True, hlc, client_id))
    written = state.written
    if above_tombstone and (written is None or version > written):
        written = version
        changed = True
    if not changed:
        return MergeResult(state, tuple(receipts), False, None)
    new_state = _derived(state.table, state.row_id, columns, tomb, written)
    if not lost and len(values) == len(delta.columns):
        effective = delta  # every column applied, none repeated: the delta as it came
    else:
        effective_columns = tuple(ColumnDelta(name, value) for name, value in values.items() if name not in lost)
        effective = dataclasses.replace(delta, columns=effective_columns)
    return MergeResult(new_state, tuple(receipts), True, effective)


def join(a: RowState, b: RowState) -> RowState:
    """The semilattice join of two states of the same row: the state of the union of their deltas.

    Raises:
        ConflictError: if the states belong to different rows.
    """
    if a.table != b.table or a.row_id != b.row_id:
        raise _mismatch(a, b.table, b.row_id)
    tomb = _max_version(a.tombstone, b.tombstone)
    columns: dict[str, ColumnState] = {}
    for name in dict.fromkeys([*a.columns, *b.columns]):
        left, right = a.columns.get(name), b.columns.get(name)
        best = left if right is None or (left is not None and _compare(left, right) >= 0) else right
        assert best is not None
        if tomb is None or best.version > tomb:
            columns[name] = best
    written = _max_version(a.written, b.written)
    if written is not None and tomb is not None and written <= tomb:
        written = None
    return _derived(a.table, a.row_id, columns, tomb, written)


def fold(deltas: Iterable[RowDelta]) -> RowState | None:
    """Merge deltas of one row in the given order (any order gives the same state); ``None`` if there are none.

    Raises:
        ConflictError: if the deltas name more than one row.
    """
    return merge_all(None, deltas)[0]


def merge_all(state: RowState | None, deltas: Iterable[RowDelta]) -> tuple[RowState | None, bool]:
    """Merge every delta into ``state``: the state :func:`merge` gives delta after delta, and whether it changed.

    For stores that keep states only (the materialiser, folds): no receipts, no effective deltas and no intermediate
    states are built. Columns no delta wrote keep their very :class:`ColumnState` objects. A property test proves it
    equal to repeated :func:`merge`.

    Raises:
        ConflictError: if a delta names another row than ``state`` (or than the first delta).
    """
    table, row_id, columns, tomb, written = _parts(state)
    own: dict[str, ColumnState] | None = None  # ``columns`` once copied
    changed = False
    for delta in deltas:
        table, row_id = _row_of(delta, table, row_id)
        hlc, client_id = delta.hlc, delta.client_id
        if tomb is not None and not _newer(hlc, client_id, tomb):
            continue  # a delete or write at or below the tombstone changes nothing
        if delta.op is DeltaOp.DELETE:
            tomb = _version(hlc, client_id)
            columns = own = _after_delete(columns, tomb)
            written = _live_write(written, tomb)
            changed = True
            continue
        for name, value in delta.values().items():
            current = columns.get(name)
            if current is not None:
                if hlc != current.hlc:
                    if hlc < current.hlc:
                        continue
                elif client_id != current.client_id:
                    if _client_key(client_id) < _client_key(current.client_id):
                        continue
                elif _value_key(value) <= _value_key(current.value):
                    continue
            if own is None:
                own = dict(columns)
                columns = own
            own[name] = column = _new(ColumnState)
            _set_value(column, value)
            _set_hlc(column, hlc)
            _set_client(column, client_id)
            changed = True
        if written is None or _newer(hlc, client_id, written):
            written, changed = _version(hlc, client_id), True
    if not changed or table is None:
        return state, False
    return _derived(table, row_id, dict(columns) if own is None else own, tomb, written), True


def _parts(
    state: RowState | None,
) -> tuple[str | None, str, Mapping[str, ColumnState], Version | None, Version | None]:
    """``(table, row_id, columns, tombstone, written)`` of a state; nothing yet for ``None``."""
    if state is None:
        return None, "", {}, None, None
    return state.table, state.row_id, state.columns, state.tombstone, state.written


def _row_of(delta: RowDelta, table: str | None, row_id: str) -> tuple[str, str]:
    """The row being merged: the first delta's, which every later one must name too."""
    if table is None:
        return delta.table, delta.row_id
    if delta.table != table or delta.row_id != row_id:
        raise ConflictError(
            f"Cannot resolve conflict: mismatched table/rowId ({table}:{row_id} vs {delta.table}:{delta.row_id})"
        )
    return table, row_id


def _after_delete(columns: Mapping[str, ColumnState], tomb: Version) -> dict[str, ColumnState]:
    """The columns a delete at ``tomb`` leaves: those written after it."""
    return {name: col for name, col in columns.items() if _newer(col.hlc, col.client_id, tomb)}


def _live_write(written: Version | None, tomb: Version) -> Version | None:
    """The greatest write once a delete at ``tomb`` applied: ``None`` unless it is newer than the delete."""
    if written is not None and not _newer(written.hlc, written.client_id, tomb):
        return None
    return written


def _newer(hlc: int, client_id: str, than: Version) -> bool:
    """Whether version ``(hlc, client_id)`` is greater than ``than``."""
    if hlc != than.hlc:
        return hlc > than.hlc
    return client_id != than.client_id and _client_key(client_id) > _client_key(than.client_id)


__all__ = [
    "ColumnReceipt",
    "ColumnState",
    "MergeResult",
    "RowState",
    "Version",
    "fold",
    "join",
    "merge",
    "merge_all",
]


def _version_json(v: Version | None) -> list[Any] | None:
    return None if v is None else [str(v.hlc), v.client_id]


def _version_from_json(raw: list[Any] | None) -> Version | None:
    return None if raw is None else Version(int(raw[0]), raw[1])


def state_to_json(state: RowState) -> dict[str, Any]:
    """The row state as JSON, the one encoding every store uses.

    ``{"c": {column: [value, "hlc", clientId]}, "t": ["hlc", clientId] | null, "w": ["hlc", clientId] | null}``
    (``t`` the tombstone, ``w`` the greatest live write; HLCs as decimal strings).
    """
    return {
        "c": {name: [c.value, str(c.hlc), c.client_id] for name, c in state.columns.items()},
        "t": _version_json(state.tombstone),
        "w": _version_json(state.written),
    }


_encode = json.JSONEncoder(separators=(",", ":")).encode
_encode_str = json.encoder.encode_basestring_ascii  # what ``_encode`` does to a str, without its dispatch

StateParts = dict[str, tuple[ColumnState, str]]
"""Each column's encoded entry in a state's JSON text, with the :class:`ColumnState` it encodes."""


def state_json_text(state: RowState, reuse: StateParts | None = None) -> tuple[str, StateParts]:
    """:func:`state_to_json` as compact JSON text, and the encoded column entries for the next call.

    ``reuse``: the entries returned for an earlier state of the row; an entry is reused when its column still holds
    the very same :class:`ColumnState` object (a merge keeps the objects of columns it did not write), so only the
    columns a merge wrote are encoded again.
    """
    parts: StateParts = {}
    earlier = reuse if reuse is not None else {}
    for name, col in state.columns.items():
        known = earlier.get(name)
        if known is not None and known[0] is col:
            parts[name] = known
        else:
            value = col.value
            kind = type(value)
            if kind is str:
                text = _encode_str(value)
            elif kind is float:
                text = float.__repr__(value)  # JSON's own rendering of a finite float
            else:
                text = _encode(value)
            parts[name] = (col, f'{_encode_str(name)}:[{text},"{col.hlc}",{_encode_str(col.client_id)}]')
    body = ",".join([entry for _, entry in parts.values()])
    tomb, written = state.tombstone, state.written
    t = "null" if tomb is None else f'["{tomb.hlc}",{_encode_str(tomb.client_id)}]'
    w = "null" if written is None else f'["{written.hlc}",{_encode_str(written.client_id)}]'
    return f'{{"c":{{{body}}},"t":{t},"w":{w}}}', parts


def state_from_json(table: str, row_id: str, data: Mapping[str, Any], *, trusted: bool = False) -> RowState:
    """Inverse of :func:`state_to_json`. ``trusted``: the JSON is a state this system encoded (a store's own row),
    so the invariant checks are skipped (they are most of a decode's time)."""
    columns = {name: ColumnState(v[0], int(v[1]), v[2]) for name, v in data["c"].items()}
    tombstone, written = _version_from_json(data["t"]), _version_from_json(data["w"])
    if trusted:
        return _derived(table, row_id, columns, tombstone, written)
    return RowState(table, row_id, columns, tombstone, written)
