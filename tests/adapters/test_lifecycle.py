"""Lifecycle: rows move from hot to cold by the age of their LWW state; reads see both tiers, hot first; the move is
copy-then-compare-and-delete, so a crash or a concurrent write never loses or resurrects anything."""

from __future__ import annotations

from collections.abc import Callable, Sequence
from typing import Any

import pytest

from lakesync.adapters import LifecycleDestination, SqlStateDestination, last_change
from lakesync.core.delta import RowDelta
from lakesync.core.errors import DestinationError
from lakesync.core.hlc import encode
from lakesync.core.merge import RowState, fold
from lakesync.core.schema import TableSchema
from tests.adapters.conftest import dele, ins, schema_of, upd

pytestmark = pytest.mark.integration

Open = Callable[[str, str], SqlStateDestination]
DAY = 86_400_000
T0 = 1_700_000_000_000


def at(day: float) -> int:
    """The HLC of a write ``day`` days after T0."""
    return encode(T0 + int(day * DAY), 0)


def expected_rows(deltas: Sequence[RowDelta]) -> dict[str, dict[str, Any]]:
    out = {}
    for row in sorted({d.row_id for d in deltas}):
        state = fold(d for d in deltas if d.row_id == row)
        assert state is not None
        values = state.values()
        if values is not None:
            out[row] = {c: values.get(c) for c in ("title", "done", "n")}
    return out


def ids(dest: SqlStateDestination, schema: TableSchema) -> list[str]:
    return [s.row_id for s in dest.states(schema, limit=1000).states]


def test_old_rows_move_to_cold_by_their_last_change_and_reads_see_both(open_state: Open, table: str) -> None:
    schema = schema_of(table)
    hot, cold = open_state("postgres", "tier"), open_state("mariadb", "tier")
    lifecycle = LifecycleDestination("lc", hot, cold, max_age_ms=30 * DAY, clock=lambda: T0 + 100 * DAY)
    deltas = [
        ins(table, "old", at(1), title="old"),
        ins(table, "touched", at(1), title="t", n=1),
        upd(table, "touched", at(95), n=2),  # an old row with a recent column change is young
        ins(table, "young", at(90), title="y"),
        ins(table, "gone", at(1), title="g"),
        dele(table, "gone", at(2)),  # a deleted row moves too (its tombstone must not be lost)
        ins(table, "late", at(80), title="late"),
        upd(table, "late", at(3), done=True),  # an older write arriving late does not make the row older
    ]
    lifecycle.apply(schema, deltas)
    assert {s.row_id: last_change(s) for s in hot.states(schema).states}["late"] == at(80)

    stats = lifecycle.sweep(schema)
    assert (stats.examined, stats.copied, stats.moved) == (5, 2, 2) and stats.cutoff_hlc == at(70)
    assert ids(hot, schema) == ["late", "touched", "young"]
    assert ids(cold, schema) == ["gone", "old"]
    assert lifecycle.rows(schema) == expected_rows(deltas)
    # Deterministic: the same now finds nothing more to move; a later now moves the rest in turn.
    assert lifecycle.sweep(schema).moved == 0
    assert lifecycle.sweep(schema, now_ms=T0 + 111 * DAY).moved == 1  # late (day 80) is old at day 111
    assert lifecycle.sweep(schema, now_ms=T0 + 200 * DAY).moved == 2
    assert ids(hot, schema) == [] and lifecycle.rows(schema) == expected_rows(deltas)
    # The tombstone moved with the row: a late older write of "gone" cannot resurrect it in cold.
    lifecycle.apply(schema, [upd(table, "gone", at(1.5), title="zombie")])
    assert "gone" not in lifecycle.rows(schema)


def test_a_write_to_a_cold_row_promotes_it_whole_and_hot_shadows_cold(open_state: Open, table: str) -> None:
    schema = schema_of(table)
    hot, cold = open_state("sqlite", "hot"), open_state("sqlite", "cold")
    lifecycle = LifecycleDestination("lc", hot, cold, max_age_ms=DAY, clock=lambda: T0 + 10 * DAY)
    deltas = [ins(table, "r", at(1), title="a", n=1), ins(table, "s", at(1), title="s")]
    lifecycle.apply(schema, deltas)
    lifecycle.sweep(schema)
    assert ids(hot, schema) == []

    # A sparse update of a cold row: hot gets the whole row (not just the column), cold keeps its older copy.
    more = [upd(table, "r", at(9.5), done=True), dele(table, "s", at(9.5))]
    stats = lifecycle.apply(schema, more)
    assert (stats.deltas, stats.upserted, stats.deleted) == (2, 1, 1)
    assert hot.rows(schema) == {"r": {"title": "a", "done": True, "n": 1.0}}
    assert set(cold.rows(schema)) == {"r", "s"}
    # Hot first: "s" is deleted in hot, so cold's live copy is not shown.
    assert lifecycle.rows(schema) == expected_rows(deltas + more)
    assert lifecycle.states_of(schema, ["r", "s"]) == {
        r: fold(d for d in deltas + more if d.row_id == r) for r in ("r", "s")
    }
    # Once old again they move back; cold's copy becomes the join.
    assert lifecycle.sweep(schema, now_ms=T0 + 20 * DAY).moved == 2
    assert cold.rows(schema) == lifecycle.rows(schema) == expected_rows(deltas + more)


class CrashingPurge:
    """A hot tier whose purge fails (the process dies between the copy and the delete)."""

    def __init__(self, inner: SqlStateDestination) -> None:
        self.inner = inner
        self.name = inner.name
        self.crash = True

    def __getattr__(self, name: str) -> Any:
        return getattr(self.inner, name)

    def purge(self, schema: TableSchema, expected: Sequence[RowState]) -> int:
        if self.crash:
            raise DestinationError("killed")
        return self.inner.purge(schema, expected)


def test_a_crash_between_copy_and_delete_loses_nothing_and_a_rerun_finishes(open_state: Open, table: str) -> None:
    schema = schema_of(table)
    inner_hot, cold = open_state("postgres", "crash"), open_state("sqlite", "crash")
    hot = CrashingPurge(inner_hot)
    lifecycle = LifecycleDestination("lc", hot, cold, max_age_ms=DAY, clock=lambda: T0 + 10 * DAY)  # type: ignore[arg-type]
    deltas = [ins(table, f"r{i}", at(1), title=f"t{i}", n=i) for i in range(7)] + [dele(table, "r3", at(2))]
    lifecycle.apply(schema, deltas)
    with pytest.raises(DestinationError, match="killed"):
        lifecycle.sweep(schema, batch=3)
    # The first page was copied, not deleted: in both tiers, and reads are still exact.
    assert ids(cold, schema) == ["r0", "r1", "r2"] and len(ids(inner_hot, schema)) == 7
    assert lifecycle.rows(schema) == expected_rows(deltas)

    hot.crash = False
    stats = lifecycle.sweep(schema, batch=3)
    assert (stats.copied, stats.moved) == (7, 7)
    assert ids(inner_hot, schema) == [] and len(ids(cold, schema)) == 7
    assert lifecycle.rows(schema) == expected_rows(deltas)
    # No duplicate rows in cold (the re-copied page merged into its own rows); a re-run changes nothing.
    before = cold.states(schema).states
    assert lifecycle.sweep(schema, batch=3).examined == 0
    assert (
        cold.states(schema).states == before == tuple(fold(d for d in deltas if d.row_id == f"r{i}") for i in range(7))
    )


def test_a_row_written_during_the_move_stays_hot(open_state: Open, table: str) -> None:
    schema = schema_of(table)
    hot, cold = open_state("mariadb", "race"), open_state("sqlite", "race")
    lifecycle = LifecycleDestination("lc", hot, cold, max_age_ms=DAY, clock=lambda: T0 + 10 * DAY)
    deltas = [ins(table, "r", at(1), title="a"), ins(table, "s", at(1), title="b")]
    lifecycle.apply(schema, deltas)
    real_purge = hot.purge
    late = [upd(table, "r", at(9.9), n=5)]

    def purge_after_a_write(schema: TableSchema, expected: Sequence[RowState]) -> int:
        hot.apply(schema, late)  # another process writes "r" after the sweep read it
        return real_purge(schema, expected)

    hot.purge = purge_after_a_write  # type: ignore[method-assign]
    stats = lifecycle.sweep(schema)
    assert (stats.copied, stats.moved) == (2, 1)
    assert ids(hot, schema) == ["r"] and ids(cold, schema) == ["r", "s"]
    assert lifecycle.rows(schema) == expected_rows(deltas + late)


def test_a_sweep_elsewhere_between_an_applys_reads_cannot_leave_a_partial_row(open_state: Open, table: str) -> None:
    schema = schema_of(table)
    hot, cold = open_state("sqlite", "hot2"), open_state("sqlite", "cold2")
    lifecycle = LifecycleDestination("lc", hot, cold, max_age_ms=DAY, clock=lambda: T0 + 10 * DAY)
    other = LifecycleDestination("other", hot, cold, max_age_ms=DAY, clock=lambda: T0 + 10 * DAY)
    first = [ins(table, "r", at(1), title="a", n=1)]
    lifecycle.apply(schema, first)
    real_states_of = cold.states_of
    calls = []

    def states_of_then_sweep(schema: TableSchema, row_ids: Sequence[str]) -> dict[str, RowState]:
        found = real_states_of(schema, row_ids)
        calls.append(found)
        if len(calls) == 1:
            other.sweep(schema)  # moves "r" to cold after this apply saw it was not there
        return found

    cold.states_of = states_of_then_sweep  # type: ignore[method-assign]
    second = [upd(table, "r", at(9.9), done=True)]
    lifecycle.apply(schema, second)
    assert calls[0] == {} and set(calls[1]) == {"r"}
    # Hot holds the whole row again (promoted after the write), not just "done".
    assert hot.rows(schema) == lifecycle.rows(schema) == expected_rows(first + second)
