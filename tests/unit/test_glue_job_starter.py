"""lakesync.aws.jobs.GlueJobStarter against a scripted Glue client: when it starts a run, when an unfinished run
already serves the request, and how it waits out a busy job or throttling -- paced by the poll interval, within its
budget, never in a hot loop.
"""

from __future__ import annotations

from datetime import UTC, datetime
from typing import Any

import pytest
from botocore.exceptions import ClientError, EndpointConnectionError

from lakesync.aws.jobs import GlueJobStarter
from lakesync.core.errors import StorageError
from lakesync.core.flush_requests import CLOCK_SKEW_MS

AT_MS = 1_700_000_000_000
POLL_S = 10.0


def _run(run_id: str, state: str, started_ms: int | None) -> dict[str, Any]:
    run: dict[str, Any] = {"Id": run_id, "JobRunState": state}
    if started_ms is not None:
        run["StartedOn"] = datetime.fromtimestamp(started_ms / 1000, tz=UTC)
    return run


def _error(code: str, operation: str) -> ClientError:
    return ClientError({"Error": {"Code": code, "Message": code}}, operation)


class ScriptedGlue:
    """A Glue client whose answers are scripted per call; it records every call it gets."""

    def __init__(self, runs: list[list[dict[str, Any]] | Exception], starts: list[str | Exception]) -> None:
        self.runs = runs
        self.starts = starts
        self.calls: list[str] = []

    def get_job_runs(self, **kwargs: Any) -> dict[str, Any]:
        self.calls.append("GetJobRuns")
        assert kwargs["JobName"] == "flush"
        answer = self.runs.pop(0) if len(self.runs) > 1 else self.runs[0]
        if isinstance(answer, Exception):
            raise answer
        return {"JobRuns": answer}

    def start_job_run(self, **kwargs: Any) -> dict[str, Any]:
        self.calls.append("StartJobRun")
        assert kwargs == {"JobName": "flush"}
        answer = self.starts.pop(0) if len(self.starts) > 1 else self.starts[0]
        if isinstance(answer, Exception):
            raise answer
        return {"JobRunId": answer}


class FakeTime:
    def __init__(self) -> None:
        self.now = 0.0
        self.sleeps: list[float] = []

    def monotonic(self) -> float:
        return self.now

    def sleep(self, seconds: float) -> None:
        self.sleeps.append(seconds)
        self.now += seconds


def _starter(glue: ScriptedGlue, clock: FakeTime) -> GlueJobStarter:
    return GlueJobStarter(glue, "flush", poll_interval_s=POLL_S, monotonic=clock.monotonic, sleep=clock.sleep)  # type: ignore[arg-type]


BUSY = _error("ConcurrentRunsExceededException", "StartJobRun")
EARLIER_RUN = _run("jr_earlier", "RUNNING", AT_MS - 30_000)


def test_starter_starts_a_run_when_none_is_unfinished():
    # Given a job whose history holds only finished runs
    glue, clock = ScriptedGlue([[_run("jr_old", "SUCCEEDED", AT_MS - 600_000)]], ["jr_new"]), FakeTime()
    # When a run is ensured for a request
    result = _starter(glue, clock).ensure_run_after(AT_MS, wait_s=60)
    # Then one run was started at once
    assert (result.outcome, result.run_id, result.attempts) == ("started", "jr_new", 1)
    assert glue.calls == ["GetJobRuns", "StartJobRun"] and clock.sleeps == []


@pytest.mark.parametrize(
    "run",
    [_run("jr_cover", "STARTING", AT_MS + CLOCK_SKEW_MS), _run("jr_cover", "WAITING", None)],
    ids=["started-after", "queued"],
)
def test_starter_does_not_start_when_an_unfinished_run_serves_the_request(run):
    glue, clock = ScriptedGlue([[run]], ["jr_never"]), FakeTime()
    result = _starter(glue, clock).ensure_run_after(AT_MS, wait_s=60)
    assert (result.outcome, result.run_id, result.attempts) == ("covered", "jr_cover", 0)
    assert glue.calls == ["GetJobRuns"]


def test_starter_waits_for_a_run_that_began_before_the_request_then_starts_one():
    # Given a run that began before the request and finishes after two polls
    glue = ScriptedGlue(
        [[EARLIER_RUN], [EARLIER_RUN], [_run("jr_earlier", "SUCCEEDED", AT_MS - 30_000)]],
        [BUSY, BUSY, "jr_next"],
    )
    clock = FakeTime()
    # When a run is ensured for the request
    result = _starter(glue, clock).ensure_run_after(AT_MS, wait_s=120)
    # Then a new run was started as soon as the job was free, after waiting one poll interval each time
    assert (result.outcome, result.run_id, result.attempts) == ("started", "jr_next", 3)
    assert clock.sleeps == [POLL_S, POLL_S]


def test_starter_gives_up_when_the_budget_runs_out_and_names_the_blocking_run():
    # Given a job busy for longer than the budget with a run that began before the request
    glue, clock = ScriptedGlue([[EARLIER_RUN]], [BUSY]), FakeTime()
    # When a run is ensured with 45 s to wait
    result = _starter(glue, clock).ensure_run_after(AT_MS, wait_s=45)
    # Then it deferred, having tried once per poll interval and never past the budget
    assert (result.outcome, result.run_id, result.reason) == ("deferred", "jr_earlier", "busy")
    assert result.blocking is not None and not result.blocking.covers(AT_MS)
    assert clock.sleeps == [POLL_S] * 4 and clock.now <= 45
    assert glue.calls.count("StartJobRun") == result.attempts == 5


def test_starter_without_budget_tries_once():
    glue, clock = ScriptedGlue([[EARLIER_RUN]], [BUSY]), FakeTime()
    result = _starter(glue, clock).ensure_run_after(AT_MS, wait_s=0)
    assert result.outcome == "deferred" and result.attempts == 1
    assert clock.sleeps == []


@pytest.mark.parametrize(
    "failure",
    [
        _error("ThrottlingException", "StartJobRun"),
        _error("InternalServiceException", "StartJobRun"),
        EndpointConnectionError(endpoint_url="https://glue.eu-west-1.amazonaws.com"),
    ],
    ids=["throttled", "internal", "network"],
)
def test_starter_waits_out_transient_failures(failure):
    glue, clock = ScriptedGlue([[]], [failure, "jr_new"]), FakeTime()
    result = _starter(glue, clock).ensure_run_after(AT_MS, wait_s=60)
    assert (result.outcome, result.run_id, result.attempts) == ("started", "jr_new", 2)
    assert clock.sleeps == [POLL_S]


def test_starter_defers_when_throttling_outlasts_the_budget():
    throttled = _error("ThrottlingException", "GetJobRuns")
    glue, clock = ScriptedGlue([throttled], ["jr_never"]), FakeTime()
    result = _starter(glue, clock).ensure_run_after(AT_MS, wait_s=25)
    assert (result.outcome, result.reason, result.attempts) == ("deferred", "ThrottlingException", 0)
    assert "StartJobRun" not in glue.calls and len(clock.sleeps) == 2


@pytest.mark.parametrize(
    ("runs", "starts"),
    [
        ([_error("EntityNotFoundException", "GetJobRuns")], ["jr_never"]),
        ([[]], [_error("AccessDeniedException", "StartJobRun")]),
    ],
    ids=["no-such-job", "access-denied"],
)
def test_starter_raises_at_once_on_errors_waiting_cannot_fix(runs, starts):
    glue, clock = ScriptedGlue(runs, starts), FakeTime()
    with pytest.raises(StorageError, match=r"Glue (GetJobRuns|StartJobRun) \(flush\) failed"):
        _starter(glue, clock).ensure_run_after(AT_MS, wait_s=60)
    assert clock.sleeps == []


def test_starter_rejects_a_non_positive_poll_interval():
    with pytest.raises(ValueError):
        GlueJobStarter(ScriptedGlue([[]], ["x"]), "flush", poll_interval_s=0)  # type: ignore[arg-type]
