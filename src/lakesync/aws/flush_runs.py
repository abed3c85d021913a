"""The flush as a Lambda function: its runs, recorded in the config table, and the starter of the tick and the trigger.

When the flush runs as a function (:mod:`lakesync.aws.flush_function`) instead of a Glue job, nothing lists its runs
the way Glue's ``GetJobRuns`` does, yet the lake tick and the flush trigger decide from a job's runs (an unfinished run
that began after a request serves it; compaction waits for a flush that finished after it began). So each run is
recorded as an item of the config table, beside the flush lease:

* ``gw`` = ``#lakesync``, ``sk`` = ``flushrun#<run id>``, where the run id starts with the time it was queued
  (13 digits of epoch ms), so a ``Query`` newest-first lists the runs as Glue does;
* ``state``: ``WAITING`` when queued (asynchronous ``Invoke``), ``RUNNING`` once the function took it up,
  ``SUCCEEDED`` or ``FAILED`` when it ended; ``st`` (queued or started, epoch ms) and ``ct`` (completed).

A record still unfinished after the function's timeout (plus the asynchronous queue's event age for a queued one)
has ended whatever it says -- its invocation timed out or was dropped -- and is listed as ``TIMEOUT``, so a crashed
run never blocks the flush. :class:`FunctionJobStarter` is busy while a run is unfinished (the flush allows one run at
a time, as the Glue job's ``MaxConcurrentRuns`` of 1 does); a start that races another is still safe, because the
flush lease lets one run write at a time and the other waits for it (:mod:`lakesync.aws.flush_function`).
"""

from __future__ import annotations

import json
import time
import uuid
from collections.abc import Callable, Sequence
from typing import TYPE_CHECKING, Any, Final

from botocore.exceptions import BotoCoreError, ClientError

from lakesync.aws.errors import error_code
from lakesync.aws.flush_store import LEASE_GATEWAY
from lakesync.aws.jobs import DEFAULT_POLL_INTERVAL_S, RunStarter, TransientJobError
from lakesync.aws.tables import TableNames
from lakesync.core.errors import StorageError
from lakesync.core.flush_requests import ActiveRun
from lakesync.core.hlc import system_clock
from lakesync.core.lake_work import JobRun

if TYPE_CHECKING:
    from mypy_boto3_dynamodb import DynamoDBClient
    from mypy_boto3_lambda import LambdaClient

__all__ = ["ASYNC_EVENT_AGE_S", "RUN_PREFIX", "FlushRunLog", "FunctionJobStarter", "new_run_id"]

RUN_PREFIX: Final = "flushrun#"
KEPT_RUNS: Final = 30
"""Run records kept: the newest ones; older records are deleted by the run that ends after them."""
ASYNC_EVENT_AGE_S: Final = 3600
"""How long Lambda keeps a queued asynchronous invocation of the flush function (the stack's event invoke config)."""
_LISTED: Final = 25
_TRANSIENT_LAMBDA: Final = frozenset(
    {"TooManyRequestsException", "ServiceException", "EC2ThrottledException", "ResourceConflictException"}
)


def new_run_id(now_ms: int) -> str:
    """A run id that sorts by the time it was made."""
    return f"{now_ms:013d}-{uuid.uuid4().hex[:12]}"


def _key(run_id: str) -> dict[str, Any]:
    return {"gw": {"S": LEASE_GATEWAY}, "sk": {"S": RUN_PREFIX + run_id}}


class FlushRunLog:
    """The flush function's run records (module docstring).

    Args:
        client: A DynamoDB client.
        tables: The deployment's tables (the records live in ``config``).
        timeout_s: The function's timeout: a run unfinished for longer has ended.
        now_ms: The wall clock.
    """

    def __init__(
        self,
        client: DynamoDBClient,
        tables: TableNames,
        *,
        timeout_s: int = 900,
        now_ms: Callable[[], int] = system_clock,
    ) -> None:
        self._db = client
        self._table = tables.config
        self._timeout_ms = timeout_s * 1000
        self._now_ms = now_ms

    def queued(self, run_id: str, at_ms: int) -> None:
        """Record a run handed to the function."""
        self._put(run_id, "WAITING", at_ms)

    def running(self, run_id: str, at_ms: int) -> None:
        """Record that the function took the run up (a run it was not queued for is recorded here first)."""
        self._put(run_id, "RUNNING", at_ms)

    def finished(self, run_id: str, succeeded: bool, at_ms: int, detail: str = "") -> None:
        """Record the end of a run, and drop records beyond the newest :data:`KEPT_RUNS`."""
        try:
            self._db.update_item(
                TableName=self._table,
                Key=_key(run_id),
                UpdateExpression="SET #s = :s, ct = :ct, detail = :d",
                ExpressionAttributeNames={"#s": "state"},
                ExpressionAttributeValues={
                    ":s": {"S": "SUCCEEDED" if succeeded else "FAILED"},
                    ":ct": {"N": str(at_ms)},
                    ":d": {"S": detail[:1000]},
                },
            )
            for old in self._query(KEPT_RUNS + 10)[KEPT_RUNS:]:
                self._db.delete_item(TableName=self._table, Key={"gw": old["gw"], "sk": old["sk"]})
        except (ClientError, BotoCoreError) as exc:
            raise StorageError(f"recording the end of flush run {run_id} failed: {exc}") from exc

    def _put(self, run_id: str, state: str, at_ms: int) -> None:
        try:
            self._db.put_item(
                TableName=self._table,
                Item={**_key(run_id), "state": {"S": state}, "st": {"N": str(at_ms)}},
            )
        except (ClientError, BotoCoreError) as exc:
            raise StorageError(f"recording flush run {run_id} failed: {exc}") from exc

    def _query(self, limit: int) -> list[dict[str, Any]]:
        out = self._db.query(
            TableName=self._table,
            KeyConditionExpression="gw = :gw AND begins_with(sk, :p)",
            ExpressionAttributeValues={":gw": {"S": LEASE_GATEWAY}, ":p": {"S": RUN_PREFIX}},
            ScanIndexForward=False,
            ConsistentRead=True,
            Limit=limit,
        )
        return list(out.get("Items", []))

    def runs(self) -> list[JobRun]:
        """The newest runs, newest first, as the tick reads a job's runs (an unfinished one past its time listed as
        ``TIMEOUT``).

        Raises:
            StorageError: the read failed.
        """
        try:
            items = self._query(_LISTED)
        except (ClientError, BotoCoreError) as exc:
            raise StorageError(f"reading the flush runs failed: {exc}") from exc
        now = self._now_ms()
        out = []
        for item in items:
            state = item.get("state", {}).get("S", "")
            started = int(item["st"]["N"]) if "st" in item else None
            completed = int(item["ct"]["N"]) if "ct" in item else None
            limit = self._timeout_ms + (ASYNC_EVENT_AGE_S * 1000 if state == "WAITING" else 0) + 60_000
            if state in ("WAITING", "RUNNING") and (started is None or now - started > limit):
                state, completed = "TIMEOUT", None
            out.append(JobRun(item["sk"]["S"].removeprefix(RUN_PREFIX), state, started, completed))
        return out


class FunctionJobStarter(RunStarter):
    """Starts the flush function the way :class:`~lakesync.aws.jobs.GlueJobStarter` starts the Glue job: one run at
    a time, each recorded in :class:`FlushRunLog`, handed to the function by an asynchronous ``Invoke``.

    Args:
        lambda_client: A Lambda client.
        function_name: The flush function.
        log: Its run records.
        now_ms: The wall clock.
    """

    def __init__(
        self,
        lambda_client: LambdaClient,
        function_name: str,
        log: FlushRunLog,
        *,
        now_ms: Callable[[], int] = system_clock,
        poll_interval_s: float = DEFAULT_POLL_INTERVAL_S,
        monotonic: Callable[[], float] = time.monotonic,
        sleep: Callable[[float], None] = time.sleep,
    ) -> None:
        self.client = lambda_client
        self.function_name = function_name
        self.job_name = function_name
        self.log = log
        self._now_ms = now_ms
        self.poll_interval_s = poll_interval_s
        self._monotonic = monotonic
        self._sleep = sleep

    def runs(self, *, enough: Callable[[Sequence[JobRun]], bool] | None = None, pages: int = 1) -> list[JobRun]:
        """The recorded runs, newest first (one read: :data:`KEPT_RUNS` is the whole history)."""
        return self.log.runs()

    def active_runs(self) -> list[ActiveRun]:
        """The unfinished runs."""
        return [run.as_active() for run in self.log.runs() if run.active]

    def try_start(self) -> tuple[str | None, str]:
        """Start a run unless one is unfinished: ``(run id, "")`` or ``(None, "busy" | Lambda's error code)``.

        Raises:
            StorageError: Lambda or DynamoDB refused for a reason waiting cannot fix.
        """
        try:
            run_id = self.start()
        except TransientJobError as exc:
            return None, exc.code
        return (run_id, "") if run_id is not None else (None, "busy")

    def start(self) -> str | None:
        """Queue a run; its id, or ``None`` while a run is unfinished.

        Raises:
            StorageError: Lambda or DynamoDB refused for a reason waiting cannot fix.
        """
        if self.active_runs():
            return None
        now = self._now_ms()
        run_id = new_run_id(now)
        self.log.queued(run_id, now)
        try:
            self.client.invoke(
                FunctionName=self.function_name,
                InvocationType="Event",
                Payload=json.dumps({"run": run_id}).encode(),
            )
        except ClientError as exc:
            code = error_code(exc)
            self.log.finished(run_id, False, self._now_ms(), f"Invoke refused: {code}")
            if code in _TRANSIENT_LAMBDA:
                raise TransientJobError(code) from exc
            raise StorageError(f"Lambda Invoke ({self.function_name}) failed: {code}") from exc
        except BotoCoreError as exc:
            self.log.finished(run_id, False, self._now_ms(), f"Invoke failed: {type(exc).__name__}")
            raise TransientJobError(type(exc).__name__) from exc
        return run_id
