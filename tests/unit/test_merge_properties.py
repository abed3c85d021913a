"""Algebraic properties of per-column LWW (lakesync.core.merge) on generated deltas of one row: the state is a pure
function of the set of deltas (order and duplicates do not matter), merge is idempotent, join is a semilattice join,
and fold equals a closed form computed here independently from the set."""

from __future__ import annotations

import dataclasses
import json
from typing import Any

from hypothesis import given, settings
from hypothesis import strategies as st

from lakesync.core.canonical import JsonValue, stable_stringify
from lakesync.core.delta import ColumnDelta, DeltaOp, RowDelta, make_delta
from lakesync.core.hlc import encode
from lakesync.core.merge import (
    RowState,
    fold,
    join,
    merge,
    merge_all,
    state_from_json,
    state_json_text,
    state_to_json,
)

SETTINGS = settings(max_examples=200, deadline=None)

# Few clients (including an astral one and U+FF01, whose UTF-16 and code-point orders disagree), few columns and a
# tiny HLC range, so equal versions and equal-version conflicts are common.
CLIENTS = ["a", "b", "Z", "\uff01", "\U0001f600"]
COLUMNS = ["x", "y", "z"]
HLCS = [encode(1_700_000_000_000, c) for c in range(3)]
# 1 and True (0 and False) are equal in Python but not as JSON: the state must keep them apart.
VALUES: list[JsonValue] = [
    None,
    True,
    False,
    0,
    1,
    -1,
    2.5,
    "",
    "a",
    "1",
    "\U0001f600",
    "\uff01",
    [],
    [1],
    {},
    {"k": 1},
]
COLUMN_WRITES = [ColumnDelta(c, v) for c in COLUMNS for v in VALUES]


def _build_delta(op: DeltaOp, client: str, hlc: int, columns: list[ColumnDelta], keep_on_delete: bool) -> RowDelta:
    delta = make_delta(op, table="todos", row_id="row-1", client_id=client, hlc=hlc, columns=tuple(columns))
    if op is DeltaOp.DELETE and keep_on_delete:
        delta = dataclasses.replace(delta, columns=tuple(columns))  # a DELETE carrying (ignored) columns
    return delta


# Column lists may repeat a column name (the later value counts within one delta).
DELTAS = st.builds(
    _build_delta,
    st.sampled_from(list(DeltaOp)),
    st.sampled_from(CLIENTS),
    st.sampled_from(HLCS),
    st.lists(st.sampled_from(COLUMN_WRITES), max_size=4),
    st.booleans(),
)
DELTA_LISTS = st.lists(DELTAS, min_size=1, max_size=8)


def _utf16(s: str) -> bytes:
    return s.encode("utf-16-be", "surrogatepass")


def snapshot(state: RowState | None) -> Any:
    """Every field of a state, with values as canonical JSON (so ``1`` and ``True`` cannot pass for each other)."""
    if state is None:
        return None
    tomb = None if state.tombstone is None else (state.tombstone.hlc, state.tombstone.client_id)
    written = None if state.written is None else (state.written.hlc, state.written.client_id)
    columns = sorted((name, c.hlc, c.client_id, stable_stringify(c.value)) for name, c in state.columns.items())
    return state.table, state.row_id, tomb, written, columns


def closed_form(batch: list[RowDelta]) -> Any:
    """The documented closed form, computed straight from the set of deltas, in the shape of :func:`snapshot`."""
    deletes = [(d.hlc, _utf16(d.client_id), d.client_id) for d in batch if d.op is DeltaOp.DELETE]
    writes = [d for d in batch if d.op is not DeltaOp.DELETE]
    tomb = max(deletes, default=None)

    def above(version: tuple[int, bytes, str]) -> bool:
        return tomb is None or version > tomb

    best: dict[str, tuple[Any, ...]] = {}
    for d in writes:
        version = (d.hlc, _utf16(d.client_id), d.client_id)
        if not above(version):
            continue
        for name, value in {c.column: c.value for c in d.columns}.items():
            text = stable_stringify(value)
            candidate = (version, _utf16(text), text)
            if name not in best or candidate[:2] > best[name][:2]:
                best[name] = candidate
    max_write = max(((d.hlc, _utf16(d.client_id), d.client_id) for d in writes), default=None)
    written = max_write if max_write is not None and above(max_write) else None
    return (
        "todos",
        "row-1",
        None if tomb is None else (tomb[0], tomb[2]),
        None if written is None else (written[0], written[2]),
        sorted((name, v[0][0], v[0][2], v[2]) for name, v in best.items()),
    )


def _fold(batch: list[RowDelta]) -> RowState:
    state = fold(batch)
    assert state is not None
    return state


@SETTINGS
@given(batch=DELTA_LISTS, data=st.data())
def test_fold_is_independent_of_order_and_duplicates(batch: list[RowDelta], data: st.DataObject) -> None:
    # Given a set of deltas and a shuffled copy with some of them repeated
    repeats = data.draw(st.lists(st.sampled_from(batch), max_size=4))
    shuffled = data.draw(st.permutations(batch + repeats))

    # When both are folded, Then the states are identical
    assert snapshot(fold(shuffled)) == snapshot(fold(batch))


@SETTINGS
@given(batch=DELTA_LISTS)
def test_fold_equals_the_closed_form_of_the_set(batch: list[RowDelta]) -> None:
    assert snapshot(fold(batch)) == closed_form(batch)


@SETTINGS
@given(batch=DELTA_LISTS, extra=DELTAS)
def test_merge_is_idempotent(batch: list[RowDelta], extra: RowDelta) -> None:
    # Given a state and a delta merged into it once
    first = merge(fold(batch), extra)

    # When the same delta is merged again
    again = merge(first.state, extra)

    # Then nothing changes, nothing is published, and the receipts repeat
    assert snapshot(again.state) == snapshot(first.state)
    assert not again.changed
    assert again.effective is None
    assert again.receipts == first.receipts
    # And every delta already folded in is a no-op as well
    state = _fold(batch)
    assert all(not merge(state, d).changed for d in batch)


@SETTINGS
@given(batch=DELTA_LISTS)
def test_merge_receipts_and_changed_agree_with_the_state(batch: list[RowDelta]) -> None:
    state: RowState | None = None
    for delta in batch:
        # When each delta is merged in turn
        result = merge(state, delta)
        after = result.state

        # Then changed is exactly "the state differs", and effective is published iff changed
        assert result.changed == (snapshot(after) != snapshot(state))
        assert (result.effective is not None) == result.changed
        # And each receipt names the version now holding its column
        for receipt in result.receipts:
            held = after.columns.get(receipt.column)
            holder = (held.hlc, held.client_id) if held is not None else None
            tomb = None if after.tombstone is None else (after.tombstone.hlc, after.tombstone.client_id)
            # (a live column is always newer than the tombstone, so it is what holds the column)
            assert (receipt.winner_hlc, receipt.winner_client_id) == (holder if held is not None else tomb)
            winner = (receipt.winner_hlc, _utf16(receipt.winner_client_id))
            own = (delta.hlc, _utf16(delta.client_id))
            mine = _utf16(stable_stringify(delta.values()[receipt.column]))
            if receipt.applied:
                assert winner == own
                assert held is not None
                assert _utf16(stable_stringify(held.value)) == mine
            else:
                # A lost write lost to a greater version, to a DELETE of its own version, or to a greater value
                # at its own version
                assert winner >= own
                if winner == own and tomb != (delta.hlc, delta.client_id):
                    assert held is not None
                    assert _utf16(stable_stringify(held.value)) > mine
        state = after


@SETTINGS
@given(batch=DELTA_LISTS)
def test_merge_effective_deltas_reproduce_the_state_downstream(batch: list[RowDelta]) -> None:
    # Given the deltas a merging replica publishes downstream
    state: RowState | None = None
    published = []
    for delta in batch:
        result = merge(state, delta)
        state = result.state
        if result.effective is not None:
            published.append(result.effective)

    # When a downstream replica folds only those, Then it reaches the same state
    assert snapshot(fold(published)) == snapshot(state)


@SETTINGS
@given(a=DELTA_LISTS, b=DELTA_LISTS)
def test_join_is_commutative(a: list[RowDelta], b: list[RowDelta]) -> None:
    sa, sb = _fold(a), _fold(b)
    assert snapshot(join(sa, sb)) == snapshot(join(sb, sa))


@SETTINGS
@given(a=DELTA_LISTS, b=DELTA_LISTS, c=DELTA_LISTS)
def test_join_is_associative(a: list[RowDelta], b: list[RowDelta], c: list[RowDelta]) -> None:
    sa, sb, sc = _fold(a), _fold(b), _fold(c)
    assert snapshot(join(join(sa, sb), sc)) == snapshot(join(sa, join(sb, sc)))


@SETTINGS
@given(a=DELTA_LISTS)
def test_join_is_idempotent(a: list[RowDelta]) -> None:
    sa = _fold(a)
    assert snapshot(join(sa, sa)) == snapshot(sa)


@SETTINGS
@given(a=DELTA_LISTS, b=DELTA_LISTS)
def test_fold_of_a_union_is_the_join_of_the_folds(a: list[RowDelta], b: list[RowDelta]) -> None:
    assert snapshot(fold(a + b)) == snapshot(join(_fold(a), _fold(b)))


@SETTINGS
@given(batch=DELTA_LISTS, data=st.data())
def test_effective_deltas_fold_into_a_cached_state_that_is_behind_or_ahead(
    batch: list[RowDelta], data: st.DataObject
) -> None:
    # Given the states a merging replica passes through and the effective deltas it logs (the DynamoDB row index is
    # such a cache: a row may hold the log up to some entry, or a little past the entries a reader folds from)
    states: list[RowState | None] = [None]
    logged: list[tuple[int, RowDelta]] = []
    for i, delta in enumerate(batch):
        result = merge(states[-1], delta)
        states.append(result.state)
        if result.effective is not None:
            logged.append((i, result.effective))
    start = data.draw(st.integers(0, len(batch)), label="fold the log from delta")
    cached = data.draw(st.integers(start, len(batch)), label="the cached state holds deltas up to")

    # When the log from `start` is folded into the cached state
    state = states[cached]
    for i, effective in logged:
        if i >= start:
            state = merge(state, effective).state

    # Then it is the replica's final state
    assert snapshot(state) == snapshot(states[-1])


@SETTINGS
@given(st.lists(DELTAS, min_size=1, max_size=8), st.floats(allow_nan=False, allow_infinity=False))
def test_state_json_text_reusing_earlier_entries_encodes_what_state_to_json_says(
    deltas: list[RowDelta], number: float
) -> None:
    # Every intermediate state is encoded reusing the previous call's entries, as the materialiser does.
    deltas.append(
        make_delta("UPDATE", table="todos", row_id="row-1", client_id="a", hlc=HLCS[-1] + 1, columns={"n": number})
    )
    state: RowState | None = None
    parts = None
    for delta in deltas:
        state = merge(state, delta).state
        text, parts = state_json_text(state, parts)
        assert json.loads(text) == state_to_json(state)
        decoded = state_from_json("todos", "row-1", json.loads(text))
        assert decoded == state
        assert all(
            type(v) is type(c.value) for v, c in ((decoded.columns[n].value, c) for n, c in state.columns.items())
        )


@SETTINGS
@given(before=DELTA_LISTS, batch=DELTA_LISTS, start_empty=st.booleans())
def test_merge_all_is_repeated_merge(before: list[RowDelta], batch: list[RowDelta], start_empty: bool) -> None:
    start = None if start_empty else fold(before)
    expected, changed = start, False
    for delta in batch:
        result = merge(expected, delta)
        expected, changed = result.state, changed or result.changed

    state, merged_changed = merge_all(start, batch)

    assert snapshot(state) == snapshot(expected)
    assert merged_changed == changed
    if start is not None and state is not None:
        # Columns no delta wrote keep their objects (the materialiser re-encodes only the others).
        written = {c.column for d in batch for c in d.columns}
        assert all(state.columns[n] is c for n, c in start.columns.items() if n not in written and n in state.columns)
