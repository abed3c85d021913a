"""Per-column last-write-wins (lakesync.core.merge): the original's pairwise vectors, and the cases where our
per-column state with tombstones differs from (and fixes) the original's delta-vs-delta resolveLWW."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest

from lakesync.core.canonical import JsonValue
from lakesync.core.delta import ColumnDelta, DeltaOp, RowDelta, make_delta
from lakesync.core.errors import ConflictError
from lakesync.core.hlc import encode
from lakesync.core.merge import ColumnReceipt, ColumnState, RowState, Version, fold, join, merge
from tests.factories import delta

VECTORS = Path(__file__).parent.parent / "vectors"
LWW_CASES: list[dict[str, Any]] = json.loads((VECTORS / "lww.json").read_text(encoding="utf-8"))["cases"]

T1, T2, T3, T4 = (encode(1_700_000_000_000 + i, 0) for i in (1, 2, 3, 4))


def _merge_all(*deltas: RowDelta) -> RowState:
    state = fold(deltas)
    assert state is not None
    return state


def _expected_row(case: dict[str, Any]) -> dict[str, JsonValue] | None:
    value = case["expected"]["value"]
    if value["op"] == "DELETE":
        return None
    return {c["column"]: c["value"] for c in value["columns"]}


@pytest.mark.parametrize("case", LWW_CASES, ids=[c["name"] for c in LWW_CASES])
@pytest.mark.parametrize("order", ["local_then_remote", "remote_then_local"])
def test_merge_vector_gives_the_originals_row_in_either_order(case: dict[str, Any], order: str) -> None:
    # Given the two deltas of a resolveLWW vector case
    local = RowDelta.from_json(case["local"])
    remote = RowDelta.from_json(case["remote"])
    first, second = (local, remote) if order == "local_then_remote" else (remote, local)

    if not case["expected"]["ok"]:
        # Then the original's error is ours too
        with pytest.raises(ConflictError) as err:
            fold([first, second])
        if "error" in case["expected"]:
            assert err.value.message == case["expected"]["error"]
        return

    # When both are merged into an empty state
    state = merge(merge(None, first).state, second).state

    # Then the row holds the values of the original's merged delta (a DELETE result is an absent row)
    assert state.values() == _expected_row(case)


def test_merge_equal_version_conflict_is_resolved_by_value_not_arrival_order() -> None:
    # Reference §3 step 2: equal HLC and equal clientId -> "remote wins", which depends on arrival order. Ours: the
    # greater stable_stringify(value) in UTF-16 order wins, whichever delta arrives first (no vector covers this).
    # Given two writes of one column with the same (hlc, clientId) but different values
    small = delta(DeltaOp.UPDATE, client="client-a", hlc=T2, columns={"title": "A"})
    big = delta(DeltaOp.UPDATE, client="client-a", hlc=T2, columns={"title": "B"})

    # When they are merged in both orders
    forward = _merge_all(small, big)
    backward = _merge_all(big, small)

    # Then the same value wins both times: the greater canonical JSON
    assert forward == backward
    assert forward.values() == {"title": "B"}


def test_merge_pairwise_lww_defect_is_fixed() -> None:
    # Given row {title@t3 by B, done@t1 by A}: the original would stamp the whole merged row with t3
    state = _merge_all(
        delta(DeltaOp.INSERT, client="A", hlc=T1, columns={"title": "first", "done": False}),
        delta(DeltaOp.UPDATE, client="B", hlc=T3, columns={"title": "latest"}),
    )
    assert state.columns["done"] == ColumnState(False, T1, "A")

    # When a client pushes done@t2 with t1 < t2 < t3
    result = merge(state, delta(DeltaOp.UPDATE, client="C", hlc=T2, columns={"done": True}))

    # Then done takes the t2 value (it only competes with done's own t1 version) and title keeps its t3 value
    assert result.state.values() == {"title": "latest", "done": True}
    assert result.receipts == (ColumnReceipt("done", True, T2, "C"),)
    assert result.changed


def test_merge_delete_then_older_write_is_rejected() -> None:
    # Given a row deleted at t3
    state = _merge_all(
        delta(DeltaOp.INSERT, client="A", hlc=T1, columns={"title": "x"}), delta(DeltaOp.DELETE, client="B", hlc=T3)
    )
    assert state.values() is None

    # When a write older than the delete arrives
    result = merge(state, delta(DeltaOp.UPDATE, client="C", hlc=T2, columns={"title": "late"}))

    # Then it loses to the tombstone and nothing changes
    assert result.state == state
    assert result.state.values() is None
    assert result.receipts == (ColumnReceipt("title", False, T3, "B"),)
    assert not result.changed
    assert result.effective is None


def test_merge_write_below_the_tombstone_names_the_live_column_it_lost_to() -> None:
    # Given a row deleted at t2 and resurrected by a title written at t4
    state = _merge_all(
        delta(DeltaOp.INSERT, client="A", hlc=T1, columns={"title": "x"}),
        delta(DeltaOp.DELETE, client="B", hlc=T2),
        delta(DeltaOp.UPDATE, client="C", hlc=T4, columns={"title": "back"}),
    )

    # When a write older than the delete arrives for title
    result = merge(state, delta(DeltaOp.UPDATE, client="D", hlc=T1, columns={"title": "stale"}))

    # Then its receipt names the t4 version now holding title, not the tombstone
    assert result.receipts == (ColumnReceipt("title", False, T4, "C"),)
    assert result.state.values() == {"title": "back"}


def test_merge_delete_then_newer_write_resurrects_only_its_columns() -> None:
    # Given a two-column row deleted at t2
    state = _merge_all(
        delta(DeltaOp.INSERT, client="A", hlc=T1, columns={"title": "x", "done": False}),
        delta(DeltaOp.DELETE, client="B", hlc=T2),
    )

    # When a newer write carries one column
    write = delta(DeltaOp.UPDATE, client="C", hlc=T3, columns={"done": True})
    result = merge(state, write)

    # Then the row comes back with only that column, and the write is published unchanged
    assert result.state.values() == {"done": True}
    assert result.effective == write


def test_merge_insert_without_columns_after_delete_resurrects_an_empty_row() -> None:
    # Given a deleted row
    state = _merge_all(
        delta(DeltaOp.INSERT, client="A", hlc=T1, columns={"title": "x"}), delta(DeltaOp.DELETE, client="A", hlc=T2)
    )

    # When an INSERT with no columns arrives after the delete
    result = merge(state, delta(DeltaOp.INSERT, client="A", hlc=T3))

    # Then the row exists again, with no columns
    assert result.state.values() == {}
    assert result.changed
    assert result.effective is not None and result.effective.columns == ()


def test_merge_delete_wins_a_tie_with_a_write_of_equal_version() -> None:
    # Given a write and a delete with the very same (hlc, clientId)
    write = delta(DeltaOp.UPDATE, client="A", hlc=T2, columns={"title": "x"})
    delete = delta(DeltaOp.DELETE, client="A", hlc=T2)

    # When merged in either order, Then the row is deleted
    assert _merge_all(write, delete).values() is None
    assert _merge_all(delete, write).values() is None


def test_merge_tie_breaks_by_client_id_in_utf16_order() -> None:
    # Given equal-HLC writes from an astral-plane clientId and from U+FF01; Python's str order ranks the astral one
    # higher, UTF-16 code units (a surrogate pair starts with 0xD83D) rank U+FF01 higher
    astral, fullwidth = "\U0001f600", "\uff01"
    assert astral > fullwidth
    from_astral = delta(DeltaOp.UPDATE, client=astral, hlc=T2, columns={"title": "astral"})
    from_fullwidth = delta(DeltaOp.UPDATE, client=fullwidth, hlc=T2, columns={"title": "fullwidth"})

    # When merged in either order
    forward = merge(merge(None, from_astral).state, from_fullwidth)
    backward = merge(merge(None, from_fullwidth).state, from_astral)

    # Then U+FF01 wins both times, and the losing receipt names it
    assert forward.state.values() == backward.state.values() == {"title": "fullwidth"}
    assert forward.receipts == (ColumnReceipt("title", True, T2, fullwidth),)
    assert backward.receipts == (ColumnReceipt("title", False, T2, fullwidth),)
    assert Version(T2, fullwidth) > Version(T2, astral)


def test_merge_receipts_name_the_winning_version_per_column() -> None:
    # Given a row whose title was written at t3 and whose done was written at t1
    state = _merge_all(
        delta(DeltaOp.INSERT, client="A", hlc=T1, columns={"title": "x", "done": False}),
        delta(DeltaOp.UPDATE, client="B", hlc=T3, columns={"title": "y"}),
    )

    # When a t2 delta writes both columns plus a new one
    write = delta(DeltaOp.UPDATE, client="C", hlc=T2, columns={"title": "z", "done": True, "note": "n"})
    result = merge(state, write)

    # Then receipts follow the delta's column order; the lost column names the t3 version it lost to
    assert result.receipts == (
        ColumnReceipt("title", False, T3, "B"),
        ColumnReceipt("done", True, T2, "C"),
        ColumnReceipt("note", True, T2, "C"),
    )
    # And the published delta carries only the applied columns, with the original identity
    assert result.effective is not None
    assert result.effective.values() == {"done": True, "note": "n"}
    assert (result.effective.op, result.effective.hlc, result.effective.client_id, result.effective.delta_id) == (
        write.op,
        write.hlc,
        write.client_id,
        write.delta_id,
    )


def test_merge_reapplying_a_merged_delta_reports_applied_but_unchanged() -> None:
    # Given a state that already contains a delta
    write = delta(DeltaOp.UPDATE, client="A", hlc=T2, columns={"title": "x", "done": True})
    first = merge(merge(None, delta(DeltaOp.INSERT, client="B", hlc=T1, columns={"title": "old"})).state, write)

    # When the same delta is merged again
    again = merge(first.state, write)

    # Then its columns are reported applied, but nothing changed and nothing is published
    assert (
        again.receipts
        == first.receipts
        == (
            ColumnReceipt("title", True, T2, "A"),
            ColumnReceipt("done", True, T2, "A"),
        )
    )
    assert first.changed
    assert not again.changed
    assert again.effective is None
    assert again.state == first.state


def test_merge_repeated_column_in_one_delta_takes_its_last_value() -> None:
    # Given a delta naming one column twice
    write = make_delta(
        DeltaOp.UPDATE,
        table="todos",
        row_id="row-1",
        client_id="A",
        hlc=T1,
        columns=[ColumnDelta("title", "first"), ColumnDelta("title", "second")],
    )

    # When it is merged
    result = merge(None, write)

    # Then the later value wins and there is one receipt for the column
    assert result.state.values() == {"title": "second"}
    assert result.receipts == (ColumnReceipt("title", True, T1, "A"),)
    assert result.effective is not None and result.effective.values() == {"title": "second"}


def test_merge_delete_is_published_without_columns_only_when_it_advances_the_tombstone() -> None:
    # Given a delete that carries junk columns
    delete = RowDelta(DeltaOp.DELETE, "todos", "row-1", "A", (ColumnDelta("junk", 1),), T2, "d")

    # When it is merged, Then it is published without its columns
    first = merge(None, delete)
    assert first.changed
    assert first.effective is not None
    assert (first.effective.op, first.effective.columns, first.effective.delta_id) == (DeltaOp.DELETE, (), "d")
    assert first.state.tombstone == Version(T2, "A")

    # When an older delete follows, Then nothing changes
    older = merge(first.state, delta(DeltaOp.DELETE, client="B", hlc=T1))
    assert not older.changed
    assert older.effective is None
    assert older.state == first.state


def test_merge_rejects_a_delta_for_another_row() -> None:
    # Given a state of todos:row-1
    state = _merge_all(delta(DeltaOp.INSERT, client="A", hlc=T1, columns={"title": "x"}))
    other = delta(DeltaOp.UPDATE, "row-2", client="A", hlc=T2, columns={"t": 1})

    # When a delta of todos:row-2 is merged into it, Then the original's ConflictError is raised
    with pytest.raises(ConflictError) as err:
        merge(state, other)
    assert err.value.message == "Cannot resolve conflict: mismatched table/rowId (todos:row-1 vs todos:row-2)"
    assert err.value.code == "CONFLICT"


def test_join_rejects_states_of_different_rows() -> None:
    # Given states of two tables
    a = RowState("todos", "row-1")
    b = RowState("notes", "row-1")

    # When joined, Then ConflictError names both
    with pytest.raises(ConflictError, match=r"\(todos:row-1 vs notes:row-1\)"):
        join(a, b)


def test_join_equals_merging_both_histories() -> None:
    # Given two replicas that saw different deltas of one row
    left = [
        delta(DeltaOp.INSERT, client="A", hlc=T1, columns={"title": "x", "done": False}),
        delta(DeltaOp.DELETE, client="B", hlc=T3),
    ]
    right = [
        delta(DeltaOp.UPDATE, client="C", hlc=T2, columns={"done": True}),
        delta(DeltaOp.UPDATE, client="C", hlc=T4, columns={"note": "n"}),
    ]

    # When their states are joined
    joined = join(_merge_all(*left), _merge_all(*right))

    # Then it is the state of all four deltas: the delete at t3 removed everything but the t4 write
    assert joined == _merge_all(*left, *right)
    assert joined.values() == {"note": "n"}


def test_fold_of_no_deltas_is_none() -> None:
    assert fold([]) is None


def test_row_state_rejects_a_column_at_or_below_the_tombstone() -> None:
    # Given a column written at t1 and a tombstone at t2, When a state is built from them, Then it is refused
    with pytest.raises(ValueError, match="above the tombstone"):
        RowState("todos", "row-1", {"title": ColumnState("x", T1, "A")}, Version(T2, "A"), Version(T3, "A"))


def test_row_state_copies_its_columns() -> None:
    # Given a state built from a caller's dict
    columns = {"title": ColumnState("x", T1, "A")}
    state = RowState("todos", "row-1", columns, None, Version(T1, "A"))

    # When the caller mutates the dict, Then the state is unaffected
    columns.clear()
    assert state.values() == {"title": "x"}
