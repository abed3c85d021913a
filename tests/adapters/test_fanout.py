"""FanOut: the primary is written synchronously, a failing secondary never fails a write; its batches are queued,
retried in order and observable, and a secondary that lost batches is repaired from the primary's states."""

from __future__ import annotations

import logging
from collections.abc import Callable, Sequence
from typing import Any

import pytest

from lakesync.adapters import FanOutDestination, SqlStateDestination
from lakesync.core.delta import RowDelta
from lakesync.core.errors import DestinationError
from lakesync.core.schema import TableSchema
from lakesync.ports import ApplyStats
from tests.adapters.conftest import H, dele, ins, schema_of, upd

pytestmark = pytest.mark.integration

Open = Callable[[str, str], SqlStateDestination]


class Flaky:
    """A real destination that can be switched off (as a database that is down)."""

    def __init__(self, inner: SqlStateDestination, error: Exception | None = None) -> None:
        self.inner = inner
        self.name = inner.name
        self.down = False
        self.error = error or DestinationError(f"destination {inner.name} failed: connection refused")
        self.calls = 0

    def apply(self, schema: TableSchema, deltas: Sequence[RowDelta]) -> ApplyStats:
        self.calls += 1
        if self.down:
            raise self.error
        return self.inner.apply(schema, deltas)

    def rows(self, schema: TableSchema) -> dict[str, dict[str, Any]]:
        return self.inner.rows(schema)

    def close(self) -> None:
        self.inner.close()


def test_a_failing_secondary_is_queued_logged_and_caught_up_in_order(
    open_state: Open, table: str, caplog: pytest.LogCaptureFixture
) -> None:
    schema = schema_of(table)
    primary, maria, lite = open_state("postgres", "fan"), open_state("mariadb", "fan"), open_state("sqlite", "fan")
    flaky = Flaky(maria)
    fanout = FanOutDestination("fan", primary, [flaky, lite])
    fanout.apply(schema, [ins(table, "r1", H(1), title="a")])

    flaky.down = True
    batches = [
        [upd(table, "r1", H(2), title="b")],
        [ins(table, "r2", H(3), title="c"), upd(table, "r1", H(4), n=4)],
        [dele(table, "r2", H(5))],
    ]
    with caplog.at_level(logging.WARNING, logger="lakesync.adapters.fanout"):
        stats = [fanout.apply(schema, batch) for batch in batches]
    # The writes succeed with the primary's figures; the healthy secondary has everything.
    assert [(s.upserted, s.deleted) for s in stats] == [(1, 0), (2, 0), (0, 1)]
    expected = {"r1": {"title": "b", "done": None, "n": 4.0}}
    assert primary.rows(schema) == expected and lite.rows(schema) == expected
    # The failing one is behind, and it shows.
    assert maria.rows(schema) == {"r1": {"title": "a", "done": None, "n": None}}
    failing, healthy = fanout.status()
    assert (failing.name, failing.pending_batches, failing.pending_deltas) == ("mariadb-fan", 3, 4)
    assert failing.failures == 3 and "connection refused" in (failing.last_error or "")
    assert not failing.in_sync and healthy.in_sync and healthy.failures == 0
    assert flaky.calls == 4  # while down, each write tries the oldest queued batch once, not the whole queue
    assert sum("secondary mariadb-fan failed" in r.getMessage() for r in caplog.records) == 3
    # Reads come from the primary.
    assert fanout.rows(schema) == expected

    # Back up: the next write sends the queue first, then itself.
    flaky.down = False
    fanout.apply(schema, [upd(table, "r1", H(6), done=True)])
    expected = {"r1": {"title": "b", "done": True, "n": 4.0}}
    assert maria.rows(schema) == expected == primary.rows(schema)
    failing, _ = fanout.status()
    assert failing.in_sync and failing.last_error is None and failing.pending_deltas == 0


def test_retry_pending_catches_up_without_a_new_write(open_state: Open, table: str) -> None:
    schema = schema_of(table)
    primary, lite = open_state("sqlite", "primary"), open_state("sqlite", "secondary")
    # Any exception of a secondary is isolated, not only DestinationError.
    flaky = Flaky(lite, RuntimeError("driver bug"))
    fanout = FanOutDestination("fan", primary, [flaky])
    flaky.down = True
    fanout.apply(schema, [ins(table, "r", H(1), title="x")])
    assert fanout.status()[0].last_error == "RuntimeError"
    assert fanout.retry_pending()[0].pending_batches == 1  # still down
    flaky.down = False
    assert fanout.retry_pending()[0].in_sync
    assert lite.rows(schema) == primary.rows(schema) == {"r": {"title": "x", "done": None, "n": None}}


def test_a_failing_primary_fails_the_call_and_no_secondary_is_written(open_state: Open, table: str) -> None:
    schema = schema_of(table)
    primary, lite = Flaky(open_state("sqlite", "primary")), open_state("sqlite", "secondary")
    fanout = FanOutDestination("fan", primary, [lite])
    primary.down = True
    with pytest.raises(DestinationError, match="connection refused"):
        fanout.apply(schema, [ins(table, "r", H(1), title="x")])
    assert lite.rows(schema) == {} and fanout.status()[0].in_sync


def test_a_full_queue_drops_the_oldest_marks_the_secondary_diverged_and_resync_repairs_it(
    open_state: Open, table: str, caplog: pytest.LogCaptureFixture
) -> None:
    schema = schema_of(table)
    primary, maria = open_state("postgres", "fan_full"), Flaky(open_state("mariadb", "fan_full"))
    fanout = FanOutDestination("fan", primary, [maria], max_pending_deltas=3)
    maria.down = True
    with caplog.at_level(logging.ERROR, logger="lakesync.adapters.fanout"):
        for i in range(1, 6):
            fanout.apply(schema, [ins(table, f"r{i}", H(i), title=f"t{i}"), dele(table, "r1", H(i))])
    status = fanout.status()[0]
    assert status.diverged and status.dropped_deltas == 8 and status.pending_deltas == 2
    assert any("needs a resync" in r.getMessage() for r in caplog.records)
    maria.down = False
    # Draining the queue alone would not bring back what was dropped ...
    fanout.retry_pending()
    assert set(maria.rows(schema)) == {"r5"} and fanout.status()[0].diverged
    # ... a resync from the primary's states does, and is idempotent.
    for _ in range(2):
        (after,) = fanout.resync([schema])
        assert after.in_sync and after.dropped_deltas == 0
    assert (
        maria.rows(schema)
        == primary.rows(schema)
        == {f"r{i}": {"title": f"t{i}", "done": None, "n": None} for i in range(2, 6)}
    )
    # The tombstone was copied too: a late write older than the delete cannot resurrect r1 on the secondary.
    maria.inner.apply(schema, [upd(table, "r1", H(1), title="late")])
    assert "r1" not in maria.rows(schema)
