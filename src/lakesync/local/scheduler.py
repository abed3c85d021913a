"""The lake jobs' triggers in the embedded default: what EventBridge schedules and the flush trigger do on AWS.

:class:`LakeScheduler` runs the lake pipeline (flush → compact → checkpoint, :func:`lakesync.local.pipeline.
run_pipeline`) on a background thread of ``lakesync local``:

* every ``interval_s`` seconds (the schedule) -- when ``has_work`` is given, only if it says the lake has work (the
  lake tick's rule without run histories, :meth:`lakesync.aws.lake_tick.LakeTick.has_work`: unflushed deltas,
  unpublished ranges, a release the checkpoints allow, or flushed entries no checkpoint covers), so an idle
  ``lakesync local`` starts no Spark job; a failing check runs the pipeline anyway -- and
* within ``poll_s`` seconds of a recorded flush request (``POST /v1/admin/flush/{gw}``, or a push crossing the flush
  threshold: both record one in the config table, which the flush job clears up to its start).

One run at a time; the Spark session is started on the first run, not at start-up. A failed run is logged and
retried at the next trigger, but not sooner than ``retry_s`` after it; it never stops the HTTP side. :meth:`stop`
lets a run in progress finish, so Ctrl-C never leaves a half-done job (the next run would repair one anyway).
"""

from __future__ import annotations

import logging
import threading
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any, Protocol

logger = logging.getLogger(__name__)


class _Stack(Protocol):
    gateway_ids: tuple[str, ...]

    def dynamodb_client(self) -> Any: ...


PipelineRun = Callable[[], object]
"""One run of the lake pipeline (the scheduler knows nothing of Spark)."""


@dataclass
class LakeScheduler:
    """Background trigger of the lake pipeline (see the module docstring)."""

    stack: _Stack
    run: PipelineRun
    interval_s: float = 300.0
    poll_s: float = 2.0
    retry_s: float = 30.0
    say: Callable[[str], None] = print
    clock: Callable[[], float] = time.monotonic
    has_work: Callable[[], bool] | None = None
    runs: int = 0
    failures: int = 0
    idle: int = 0
    _stop: threading.Event = field(default_factory=threading.Event)
    _thread: threading.Thread | None = None

    def start(self) -> LakeScheduler:
        """Start the background thread (the first scheduled run is ``interval_s`` from now)."""
        if self._thread is not None:
            raise RuntimeError("LakeScheduler is already started")
        self._stop.clear()
        self._thread = threading.Thread(target=self._loop, name="lakesync-lake", daemon=True)
        self._thread.start()
        return self

    def stop(self, timeout_s: float = 600.0) -> None:
        """Stop triggering; waits for a run in progress to finish."""
        self._stop.set()
        if self._thread is not None:
            self._thread.join(timeout_s)
            self._thread = None

    def pending_requests(self) -> int:
        """Flush requests recorded and not yet served, over the stack's gateways."""
        from lakesync.aws.config_store import DynamoDBConfigStore
        from lakesync.aws.tables import TableNames
        from lakesync.local.runner import TABLE_PREFIX

        store = DynamoDBConfigStore(self.stack.dynamodb_client(), TableNames.with_prefix(TABLE_PREFIX))
        return sum(len(store.list_flush_requests(gateway)) for gateway in self.stack.gateway_ids)

    def _work_to_do(self) -> bool:
        if self.has_work is None:
            return True
        try:
            return self.has_work()
        except Exception:  # doubt runs the pipeline
            logger.warning("could not tell whether the lake has work; running the pipeline", exc_info=True)
            return True

    def _loop(self) -> None:
        next_due = self.clock() + self.interval_s
        not_before = 0.0
        while not self._stop.wait(self.poll_s):
            if self.clock() < not_before:
                continue
            try:
                requested = self.pending_requests()
            except Exception:  # the local AWS may be stopping; try again at the next poll
                logger.warning("could not read flush requests", exc_info=True)
                continue
            if not requested and self.clock() < next_due:
                continue
            if not requested and not self._work_to_do():
                self.idle += 1
                next_due = self.clock() + self.interval_s
                continue
            reason = f"{requested} flush request(s)" if requested else "schedule"
            self.say(f"lake: running flush → compact → checkpoint ({reason})")
            try:
                self.run()
            except Exception as exc:  # keep serving: the next trigger retries, and the jobs repair half-done runs
                self.failures += 1
                logger.exception("lake pipeline failed")
                self.say(f"lake: the run failed ({type(exc).__name__}: {exc}); retrying at the next trigger")
                not_before = self.clock() + self.retry_s
            else:
                self.runs += 1
            next_due = self.clock() + self.interval_s
