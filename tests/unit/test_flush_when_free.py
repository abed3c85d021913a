"""A flush run that meets another run's lease waits for it (the two engines take turns on one lease)."""

from __future__ import annotations

import pytest
from lakesync_infra.function_access import FLUSH_TIMEOUT_S

from lakesync.core.errors import FlushBusyError, FlushError
from lakesync.lake.flush import LEASE_POLL_S, FlushReport, flush_when_free
from lakesync.spark.flush import DEFAULT_LEASE_WAIT_S, FlushJobArgs


def _report(deltas: int) -> FlushReport:
    return FlushReport(
        run_id="r",
        snapshot_id=None,
        deltas=deltas,
        bytes=0,
        shards=0,
        heads_advanced=0,
        requests_cleared=0,
        released=0,
        watermarks={},
    )


class Runs:
    """Attempts that find the lease held ``busy`` times, then flush."""

    def __init__(self, busy: int, error: FlushError | None = None) -> None:
        self.busy, self.error, self.attempts = busy, error, 0

    def __call__(self) -> FlushReport:
        self.attempts += 1
        if self.error is not None:
            raise self.error
        if self.attempts <= self.busy:
            raise FlushBusyError("Flush already in progress (lease held by other-run)")
        return _report(7)


def test_a_run_waits_while_the_lease_is_held_then_flushes() -> None:
    # Given a lease held for two attempts, and time to wait
    runs, slept = Runs(busy=2), []
    # When the run is made
    report = flush_when_free(runs, may_wait=lambda s: True, sleep=slept.append)
    # Then it waited between attempts and flushed once the lease was free
    assert report.deltas == 7
    assert (runs.attempts, slept) == (3, [LEASE_POLL_S, LEASE_POLL_S])


def test_a_run_gives_up_when_its_wait_budget_ends() -> None:
    # Given a lease held for good, and time for one wait only
    runs, slept, budget = Runs(busy=99), [], [LEASE_POLL_S]

    def may_wait(wait_s: float) -> bool:
        if budget and budget[0] >= wait_s:
            budget[0] -= wait_s
            return True
        return False

    # When the run is made, it fails as busy after that one wait
    with pytest.raises(FlushBusyError):
        flush_when_free(runs, may_wait=may_wait, sleep=slept.append)
    assert (runs.attempts, slept) == (2, [LEASE_POLL_S])


def test_any_other_flush_failure_is_raised_at_once() -> None:
    runs, slept = Runs(busy=0, error=FlushError("a range could not be read whole")), []
    with pytest.raises(FlushError, match="whole"):
        flush_when_free(runs, may_wait=lambda s: True, sleep=slept.append)
    assert (runs.attempts, slept) == (1, [])


def test_the_flush_job_waits_as_long_as_the_flush_function_can_hold_the_lease() -> None:
    options = {"table_prefix": "p", "warehouse": "w"}
    assert FlushJobArgs.parse(options).lease_wait_s == DEFAULT_LEASE_WAIT_S == FLUSH_TIMEOUT_S
    assert FlushJobArgs.parse({**options, "lease_wait_s": "30"}).lease_wait_s == 30.0
    for bad in ("-1", "soon", "nan"):
        with pytest.raises(ValueError, match="lease_wait_s"):
            FlushJobArgs.parse({**options, "lease_wait_s": bad})
