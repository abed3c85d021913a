"""Starting the flush job on AWS Glue so that it serves given flush requests, without ever starting it in a loop.

:meth:`GlueJobStarter.ensure_run_after` makes sure a flush run that begins after a request was recorded exists (the
rule is :meth:`lakesync.core.flush_requests.ActiveRun.covers`):

1. it lists the job's unfinished runs (``GetJobRuns``, newest first, one page); if one covers the request, done;
2. otherwise it starts one (``StartJobRun``); with job-run queuing on, a busy job answers with a queued run, which
   covers everything recorded before it;
3. if the job is busy with a run that began *before* the request (``ConcurrentRunsExceededException``), or Glue
   throttles or fails transiently, it waits :attr:`~GlueJobStarter.poll_interval_s` and tries again, until its wait
   budget is spent. Then it gives up with outcome ``deferred`` and the caller reports the requests for a retry.

Invariants: at most one ``GetJobRuns`` and one ``StartJobRun`` call per poll interval, so a long run is waited
out, never hammered. Errors that waiting cannot fix (no such job, access denied, invalid input) raise
:class:`~lakesync.core.errors.StorageError` at once.

The lake tick (:mod:`lakesync.aws.lake_tick`) uses the same starter without waiting: :meth:`GlueJobStarter.runs`
reads the job's recent runs (newest first, page by page only while the caller needs more) and
:meth:`GlueJobStarter.try_start` starts one run or says why not (``busy``, or Glue's error code when waiting may
help); the next tick is its retry.

:class:`FlushEngines` is the flush's two engines -- the Glue job and the flush function
(:class:`lakesync.aws.flush_runs.FunctionJobStarter`) -- as one starter for the tick and the trigger: the runs of
both, and a start given to the engine :func:`lakesync.core.lake_work.choose_flush_engine` picks for the backlog, never
while a run of either is unfinished.
"""

from __future__ import annotations

import time
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass
from datetime import datetime
from typing import TYPE_CHECKING, Any, Final, Literal

from botocore.exceptions import BotoCoreError, ClientError

from lakesync.aws.errors import error_code
from lakesync.core.errors import StorageError
from lakesync.core.flush_requests import ActiveRun, covering_run
from lakesync.core.lake_work import ACTIVE_STATES, FLUSH_ENGINES, FlushEngine, JobRun, choose_flush_engine

if TYPE_CHECKING:
    from mypy_boto3_glue import GlueClient

__all__ = [
    "ACTIVE_STATES",
    "DEFAULT_POLL_INTERVAL_S",
    "HISTORY_PAGES",
    "FlushEngines",
    "GlueJobStarter",
    "RunStarter",
    "TransientJobError",
    "TriggerResult",
    "glue_client",
]

DEFAULT_POLL_INTERVAL_S: Final = 10.0
"""Seconds between two attempts while the job is busy or Glue is throttling."""

RUNS_PAGE_SIZE: Final = 50
"""Runs read per ``GetJobRuns`` call; Glue lists the newest first, so unfinished runs are on the first page."""

HISTORY_PAGES: Final = 4
"""Most ``GetJobRuns`` pages :meth:`GlueJobStarter.runs` reads (the newest runs; Glue keeps 90 days of history)."""

_BUSY: Final = "ConcurrentRunsExceededException"
_TRANSIENT: Final = frozenset(
    {"ThrottlingException", "InternalServiceException", "OperationTimeoutException", "ServiceUnavailableException"}
)

Outcome = Literal["started", "covered", "deferred"]


def glue_client(**kwargs: str) -> GlueClient:
    """A Glue client; ``kwargs`` (endpoint_url, region_name, credentials) override the environment.

    Glue's control plane answers more slowly than DynamoDB, so its timeouts are longer than the API functions'.
    """
    import boto3
    from botocore.config import Config

    config = Config(retries={"mode": "standard", "max_attempts": 3}, connect_timeout=2, read_timeout=10)
    return boto3.client("glue", config=config, **kwargs)  # type: ignore[call-overload,no-any-return]


@dataclass(frozen=True, slots=True)
class TriggerResult:
    """What :meth:`GlueJobStarter.ensure_run_after` did.

    Attributes:
        outcome: ``started`` (a new run), ``covered`` (an unfinished run already serves the request) or
            ``deferred`` (the wait budget ran out; the request needs a retry).
        run_id: The started or covering run; for ``deferred`` the run the job was busy with, if one was seen.
        blocking: For ``deferred``: the unfinished run that did not cover the request, if one was seen.
        attempts: ``StartJobRun`` calls made.
        reason: For ``deferred``: the last obstacle (``busy`` or a Glue error code).
    """

    outcome: Outcome
    run_id: str | None = None
    blocking: ActiveRun | None = None
    attempts: int = 0
    reason: str = ""


class TransientJobError(Exception):
    """The job service (Glue, or Lambda for the flush function) could not answer now; waiting may help."""

    def __init__(self, code: str) -> None:
        super().__init__(code)
        self.code = code


class RunStarter:
    """:meth:`ensure_run_after` over a job's :meth:`active_runs` and :meth:`start` (Glue's or the flush function's)."""

    poll_interval_s: float
    _monotonic: Callable[[], float]
    _sleep: Callable[[float], None]

    job_name: str

    def active_runs(self) -> list[ActiveRun]:
        raise NotImplementedError

    def start(self) -> str | None:
        raise NotImplementedError

    def runs(self, *, enough: Callable[[Sequence[JobRun]], bool] | None = None, pages: int = 1) -> list[JobRun]:
        raise NotImplementedError

    def try_start(self) -> tuple[str | None, str]:
        raise NotImplementedError

    def ensure_run_after(self, at_ms: int, *, wait_s: float) -> TriggerResult:
        """Make sure a run that begins after ``at_ms`` (a request's time, epoch ms) exists, waiting up to ``wait_s``.

        Raises:
            StorageError: the service refused for a reason waiting cannot fix.
        """
        deadline = self._monotonic() + max(0.0, wait_s)
        attempts = 0
        blocking: ActiveRun | None = None
        reason = ""
        while True:
            try:
                runs = self.active_runs()
                covering = covering_run(runs, at_ms)
                if covering is not None:
                    return TriggerResult("covered", covering.run_id, attempts=attempts)
                attempts += 1
                run_id = self.start()
                if run_id is not None:
                    return TriggerResult("started", run_id, attempts=attempts)
                blocking = _latest(runs) or blocking
                reason = "busy"
            except TransientJobError as exc:
                reason = exc.code
            if self._monotonic() + self.poll_interval_s > deadline:
                return TriggerResult(
                    "deferred", blocking.run_id if blocking else None, blocking, attempts=attempts, reason=reason
                )
            self._sleep(self.poll_interval_s)


class GlueJobStarter(RunStarter):
    """Starts one Glue job; the client, the clock and the sleep are injected.

    ``execution_class`` (``STANDARD`` or ``FLEX``) overrides the job's own for the runs this starter starts
    (``None``: the job's).
    """

    def __init__(
        self,
        client: GlueClient,
        job_name: str,
        *,
        execution_class: Literal["STANDARD", "FLEX"] | None = None,
        poll_interval_s: float = DEFAULT_POLL_INTERVAL_S,
        monotonic: Callable[[], float] = time.monotonic,
        sleep: Callable[[float], None] = time.sleep,
    ) -> None:
        if poll_interval_s <= 0:
            raise ValueError("poll_interval_s must be positive")
        self.client = client
        self.job_name = job_name
        self._run_options: dict[str, Any] = {"ExecutionClass": execution_class} if execution_class else {}
        self.poll_interval_s = poll_interval_s
        self._monotonic = monotonic
        self._sleep = sleep

    def active_runs(self) -> list[ActiveRun]:
        """The job's unfinished runs on the newest page of its run history.

        Raises:
            StorageError: Glue refused (no such job, access denied...).
        """
        response = self._call("GetJobRuns", self.client.get_job_runs, JobName=self.job_name, MaxResults=RUNS_PAGE_SIZE)
        return [_active_run(run) for run in response.get("JobRuns", []) if run.get("JobRunState") in ACTIVE_STATES]

    def runs(
        self, *, enough: Callable[[Sequence[JobRun]], bool] | None = None, pages: int = HISTORY_PAGES
    ) -> list[JobRun]:
        """The job's runs, newest first, read page by page until ``enough(runs read so far)`` holds (default: one
        page) or ``pages`` pages were read.

        Raises:
            StorageError: Glue refused or could not answer (the caller's next attempt may succeed).
        """
        out: list[JobRun] = []
        kwargs: dict[str, Any] = {"JobName": self.job_name, "MaxResults": RUNS_PAGE_SIZE}
        for _ in range(max(1, pages)):
            try:
                response = self._call("GetJobRuns", self.client.get_job_runs, **kwargs)
            except TransientJobError as exc:
                raise StorageError(f"Glue GetJobRuns ({self.job_name}) failed: {exc.code}") from exc
            out.extend(_job_run(run) for run in response.get("JobRuns", []))
            token = response.get("NextToken")
            if not token or enough is None or enough(out):
                break
            kwargs["NextToken"] = token
        return out

    def try_start(self) -> tuple[str | None, str]:
        """Start a run once, without waiting: ``(run id, "")``, or ``(None, why)`` when the job is busy (``busy``) or
        Glue could not answer now (its error code); the caller's next attempt may succeed.

        Raises:
            StorageError: Glue refused for a reason waiting cannot fix.
        """
        try:
            response = self._call("StartJobRun", self.client.start_job_run, JobName=self.job_name, **self._run_options)
        except TransientJobError as exc:
            return None, "busy" if exc.code == _BUSY else exc.code
        return str(response["JobRunId"]), ""

    def start(self) -> str | None:
        """Start a run; its id, or ``None`` when the job already runs as often as it may.

        Raises:
            StorageError: Glue refused for a reason waiting cannot fix.
        """
        try:
            response = self._call("StartJobRun", self.client.start_job_run, JobName=self.job_name, **self._run_options)
        except TransientJobError as exc:
            if exc.code == _BUSY:
                return None
            raise
        return str(response["JobRunId"])

    def _call(self, operation: str, method: Callable[..., Any], **kwargs: Any) -> Any:
        try:
            return method(**kwargs)
        except ClientError as exc:
            code = error_code(exc)
            if code == _BUSY or code in _TRANSIENT:
                raise TransientJobError(code) from exc
            raise StorageError(f"Glue {operation} ({self.job_name}) failed: {code}") from exc
        except BotoCoreError as exc:
            raise TransientJobError(type(exc).__name__) from exc


class FlushEngines(RunStarter):
    """The flush's engines as one starter (module docstring).

    Either engine's unfinished run is the flush's: it covers what began before it (the tick's and the trigger's
    rule), and while one is unfinished no run of the other starts -- both would only take turns on the flush lease,
    and a Glue run that finds the lease held fails (a minute billed for nothing). A start reads the backlog and goes
    to the engine chosen for it; :attr:`last_choice` says which, for the caller's report.

    Args:
        engines: The deployed engines' starters (one, with an override: that one always).
        backlog: Reads the backlog (the shards' unflushed entries) when a run is to start.
        max_backlog: The largest backlog the function is given (``flushFunctionMaxBacklog``).
    """

    job_name = "flush"

    def __init__(
        self,
        engines: Mapping[FlushEngine, RunStarter],
        *,
        backlog: Callable[[], int],
        max_backlog: int,
        poll_interval_s: float = DEFAULT_POLL_INTERVAL_S,
        monotonic: Callable[[], float] = time.monotonic,
        sleep: Callable[[float], None] = time.sleep,
    ) -> None:
        if not engines or not set(engines) <= set(FLUSH_ENGINES):
            raise ValueError(f"a flush needs engines among {list(FLUSH_ENGINES)}")
        self.engines = dict(engines)
        self.max_backlog = max_backlog
        self._backlog = backlog
        self.poll_interval_s = poll_interval_s
        self._monotonic = monotonic
        self._sleep = sleep
        self.last_choice: tuple[FlushEngine, int] | None = None
        """The engine the last start went to and the backlog it was chosen for."""
        self.runs_of: dict[str, FlushEngine] = {}
        """The engine of each run the last :meth:`runs` or :meth:`active_runs` listed, by run id."""

    def runs(
        self, *, enough: Callable[[Sequence[JobRun]], bool] | None = None, pages: int = HISTORY_PAGES
    ) -> list[JobRun]:
        """Both engines' runs, newest first (by start; each engine's read until ``enough`` holds of its own)."""
        out: list[JobRun] = []
        for engine, starter in self.engines.items():
            listed = starter.runs(enough=enough, pages=pages)
            self.runs_of.update((run.run_id, engine) for run in listed)
            out.extend(listed)
        return sorted(out, key=lambda run: run.started_ms or 0, reverse=True)

    def active_runs(self) -> list[ActiveRun]:
        """Both engines' unfinished runs."""
        out: list[ActiveRun] = []
        for engine, starter in self.engines.items():
            listed = starter.active_runs()
            self.runs_of.update((run.run_id, engine) for run in listed)
            out.extend(listed)
        return out

    def choose(self) -> tuple[FlushEngine, int]:
        """The engine a run started now goes to, and the backlog read for it.

        Raises:
            StorageError: reading the backlog failed.
        """
        if len(self.engines) == 1:
            return next(iter(self.engines)), 0
        backlog = self._backlog()
        return choose_flush_engine(backlog, max_backlog=self.max_backlog, engines=self.engines), backlog

    def try_start(self) -> tuple[str | None, str]:
        """Start a run on the chosen engine unless a run of either is unfinished: ``(run id, "")``, or ``(None,
        "busy" | the service's error code)``.

        Raises:
            StorageError: a read failed, or the service refused for a reason waiting cannot fix.
        """
        try:
            if self.active_runs():
                return None, "busy"
        except TransientJobError as exc:
            return None, exc.code
        engine, backlog = self.choose()
        self.last_choice = (engine, backlog)
        return self.engines[engine].try_start()

    def start(self) -> str | None:
        """Start a run on the chosen engine; its id, or ``None`` while a run of either engine is unfinished.

        Raises:
            TransientJobError: the service could not answer now.
            StorageError: a read failed, or the service refused for a reason waiting cannot fix.
        """
        if self.active_runs():
            return None
        engine, backlog = self.choose()
        self.last_choice = (engine, backlog)
        return self.engines[engine].start()


def _active_run(run: Any) -> ActiveRun:
    return ActiveRun(
        run_id=str(run.get("Id", "")), started_ms=_ms(run.get("StartedOn")), queued=run.get("JobRunState") == "WAITING"
    )


def _job_run(run: Any) -> JobRun:
    return JobRun(
        run_id=str(run.get("Id", "")),
        state=str(run.get("JobRunState", "")),
        started_ms=_ms(run.get("StartedOn")),
        completed_ms=_ms(run.get("CompletedOn")),
    )


def _ms(value: object) -> int | None:
    return round(value.timestamp() * 1000) if isinstance(value, datetime) else None


def _latest(runs: Sequence[ActiveRun]) -> ActiveRun | None:
    """The most recently started of ``runs`` (the one a retry waits for)."""
    started = [run for run in runs if run.started_ms is not None]
    return max(started, key=lambda run: run.started_ms or 0) if started else (runs[0] if runs else None)
