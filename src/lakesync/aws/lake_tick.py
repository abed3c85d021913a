"""The lake tick: on each job's schedule, start the Glue job only when it has work (:mod:`lakesync.core.lake_work`).

What one tick reads, all of it small:

* flush -- the heads of the configured gateways' shards (the shard registry in the config table, one ``Query`` per
  gateway, then ``BatchGetItem`` on the heads), their flush requests (one ``Query`` per gateway), the latest
  checkpoint of each gateway (``latest.json`` and the manifest), and for a shard the checkpoint lets release
  something, the entry its release step would mark (the flush store's ``release_target``: a ``Query`` or two on the
  commit index, one on the log) and, when that entry is beyond the release mark, when its checkpoint became visible
  (``HEAD latest.json``). Only when that finds work: the recent runs of the flush's engines (``GetJobRuns``, the
  function's run records), to see whether an unfinished run serves it and whether a release is stale. And the flush
  lag (:mod:`lakesync.core.flush_lag`, the data a restore from the lake would lose): for each shard with unflushed
  entries, its oldest's commit HLC (one ``Query`` of the log; none while everything is flushed).
* compact / checkpoint -- the heads and the checkpoints; only when a shard lags the checkpoints, the recent runs of
  the job and of the job before it (for compaction, enough flush runs for its policy to count).

Then, when the job has work and no unfinished run serves it, one ``StartJobRun`` -- for the flush, on the engine chosen
for the backlog (:class:`lakesync.aws.jobs.FlushEngines`: the flush function up to ``flushFunctionMaxBacklog`` unflushed
entries, the Glue job beyond; an unfinished run of either engine covers, or holds back, the other). A busy job or a Glue
error that waiting may cure is reported (``deferred``) and left to the next tick, as the schedules did when they started
the jobs directly; an idle tick makes no Glue call at all for the flush, and none for the others while the lake is
checkpointed. :meth:`LakeTick.has_work` asks the same questions without run histories, for a pipeline that runs the
three jobs in series (``lakesync local``).
"""

from __future__ import annotations

from collections.abc import Callable, Iterable, Mapping, Sequence
from dataclasses import dataclass, replace
from datetime import datetime
from typing import TYPE_CHECKING, Any, Literal, Protocol

from botocore.exceptions import BotoCoreError, ClientError

from lakesync.aws.checkpoints import ReleaseBounds, release_bounds
from lakesync.aws.jobs import FlushEngines
from lakesync.core.checkpoint import latest_key
from lakesync.core.flush_lag import FlushLag, measure, oldest_unflushed
from lakesync.core.hlc import system_clock
from lakesync.core.lake_work import (
    DEFAULT_COMPACT_POLICY,
    DEFAULT_RETENTION_MS,
    STALE_AFTER_RUNS,
    CompactPolicy,
    JobKind,
    JobRun,
    ReleaseTarget,
    Work,
    checkpoint_work,
    compact_work,
    flush_work,
    lagging_shards,
    release_candidates,
)
from lakesync.core.log import ShardHead, ShardId

if TYPE_CHECKING:
    from lakesync.aws.flush_store import FlushStore
    from lakesync.aws.objects import S3ObjectStore
    from lakesync.ports import ConfigStore

__all__ = ["JobRunner", "LakeReader", "LakeTick", "Outcome", "TickReport"]

Outcome = Literal["idle", "covered", "started", "deferred"]


class JobRunner(Protocol):
    """What the tick needs of a job (:class:`lakesync.aws.jobs.GlueJobStarter` is one)."""

    job_name: str

    def runs(self, *, enough: Callable[[Sequence[JobRun]], bool] | None = None, pages: int = ...) -> list[JobRun]:
        """The job's recent runs, newest first (more pages until ``enough`` holds)."""
        ...

    def try_start(self) -> tuple[str | None, str]:
        """Start a run: its id, or ``None`` and why not (``busy`` or an error code)."""
        ...


class LakeReader:
    """The tick's reads of the buffer (through the flush store and the config store) and of the checkpoints.

    Args:
        store: The flush job's store (shards and heads, release targets).
        config: The config store (flush requests).
        gateways: The gateways the jobs process.
        checkpoints: The checkpoint bucket; ``None``: no checkpoints (nothing is released, every shard lags).
    """

    def __init__(
        self, store: FlushStore, config: ConfigStore, gateways: Sequence[str], checkpoints: S3ObjectStore | None
    ) -> None:
        self.store = store
        self.config = config
        self.gateways = tuple(gateways)
        self.checkpoints = checkpoints

    def heads(self) -> dict[str, ShardHead]:
        """The heads of the gateways' shards, by shard key."""
        _, heads = self.store.shards(self.gateways)
        return {shard.key: head for shard, head in heads.items()}

    def request_times(self, now_ms: int) -> list[int]:
        """When each recorded flush request of the gateways was made (``now_ms`` for one that does not say)."""
        return [_request_ms(doc, now_ms) for g in self.gateways for doc in self.config.list_flush_requests(g)]

    def bounds(self) -> ReleaseBounds:
        """The latest checkpoints' release bounds (empty without a bucket; an unreadable checkpoint adds nothing)."""
        if self.checkpoints is None:
            return ReleaseBounds()
        return release_bounds(self.checkpoints, self.gateways, bucket=self.checkpoints.bucket)

    def release_target(self, shard: str, limit: int, cutoff_hlc: int) -> tuple[int, int] | None:
        """The entry the flush's release step would mark (``(seq, commit HLC)``), if any."""
        return self.store.release_target(ShardId.parse(shard), limit, cutoff_hlc)

    def commit_hlc_at(self, shard: ShardId, seq: int) -> int | None:
        """The commit HLC of the shard's entry ``seq`` (``None``: the log does not hold it)."""
        return self.store.commit_hlc_at(shard, seq)

    def checkpoint_times(self, gateways: Iterable[str]) -> dict[str, int]:
        """When each gateway's latest checkpoint became visible (its ``latest.json``'s last modification, epoch ms);
        a gateway whose pointer cannot be read is left out."""
        out: dict[str, int] = {}
        if self.checkpoints is None:
            return out
        for gateway in sorted(set(gateways)):
            try:
                head = self.checkpoints.client.head_object(Bucket=self.checkpoints.bucket, Key=latest_key(gateway))
            except (ClientError, BotoCoreError):
                continue
            modified = head.get("LastModified")
            if isinstance(modified, datetime):
                out[gateway] = round(modified.timestamp() * 1000)
        return out


@dataclass(frozen=True, slots=True)
class TickReport:
    """What one tick did for one job.

    Attributes:
        work: The job's work as decided.
        outcome: ``idle`` (no work), ``covered`` (an unfinished run serves it), ``started`` or ``deferred`` (the job
            was busy or Glue could not answer; the next tick tries again).
        run_id: The started or covering run.
        reason: For ``deferred``: ``busy`` or Glue's error code.
        engine: For the flush: the engine of the started or covering run (``function`` or ``glue``), when known.
        backlog: For a started flush: the unflushed entries its engine was chosen for.
        checkpoint_age_s: For the checkpoint job: how far the checkpoints lag flushed data, in seconds (the seconds
            since the latest checkpoint of the gateway whose checkpoint is oldest among those with flushed entries it
            does not cover); 0 when none lags, so an idle deployment never reads as late, and a lagging gateway with
            no checkpoint yet counts 0 (its first run is pending).
        flush_lag: For the flush job: the gateways' flush lag as the tick read it (what is committed and not yet in
            the lake).
    """

    work: Work
    outcome: Outcome
    run_id: str | None = None
    reason: str = ""
    checkpoint_age_s: int | None = None
    engine: str | None = None
    backlog: int | None = None
    flush_lag: FlushLag | None = None

    def report(self) -> dict[str, Any]:
        """A JSON-ready account (the handler's log line and return value)."""
        out = {**self.work.report(), "outcome": self.outcome, "run_id": self.run_id, "reason": self.reason}
        if self.engine is not None:
            out["engine"] = self.engine
        if self.backlog is not None:
            out["backlog"] = self.backlog
        if self.checkpoint_age_s is not None:
            out["checkpoint_age_s"] = self.checkpoint_age_s
        lag = self.flush_lag
        if lag is not None and lag.shards:
            out["flush_lag"] = {
                "unflushed_deltas": lag.deltas,
                "unflushed_bytes": lag.bytes,
                "shards": len(lag.shards),
                "oldest_commit_age_s": lag.age_s,
            }
        return out


class LakeTick:
    """Decide and start, for one job per call.

    Args:
        reader: The reads.
        runners: The three jobs.
        publishing: Whether the flush job publishes materialisation jobs (it then releases only published entries).
        retention_ms: The flush job's retention.
        compact_policy: When flushed files are worth a compaction run.
        now_ms: The wall clock (epoch ms); an attribute, so a test can move it.
    """

    def __init__(
        self,
        reader: LakeReader,
        runners: Mapping[JobKind, JobRunner],
        *,
        publishing: bool,
        retention_ms: int = DEFAULT_RETENTION_MS,
        compact_policy: CompactPolicy = DEFAULT_COMPACT_POLICY,
        now_ms: Callable[[], int] = system_clock,
    ) -> None:
        self.reader = reader
        self.runners = runners
        self.publishing = publishing
        self.retention_ms = retention_ms
        self.compact_policy = compact_policy
        self.now_ms = now_ms

    def tick(self, job: JobKind) -> TickReport:
        """Decide ``job``'s work and start it when due and not served by an unfinished run.

        Raises:
            StorageError: a read failed, or Glue refused for a reason waiting cannot fix.
        """
        if job == "flush":
            heads = self.reader.heads()
            report = self._act(job, *self._flush(heads))
            # Measured once the run is started: a read of the lag that fails never holds the flush back.
            return replace(report, flush_lag=self.flush_lag(heads))
        heads, positions = self.reader.heads(), self.reader.bounds().positions
        work, runs = self._downstream(job, heads, positions)
        age = self._checkpoint_age_s(heads, positions) if job == "checkpoint" else None
        return self._act(job, work, runs, age)

    def _act(self, job: JobKind, work: Work, runs: Sequence[JobRun], age: int | None = None) -> TickReport:
        """Start ``job`` for ``work`` when due and not served by an unfinished run among ``runs``."""
        if not work.due:
            return TickReport(work, "idle", checkpoint_age_s=age)
        runner = self.runners[job]
        engines = runner if isinstance(runner, FlushEngines) else None
        covering = work.covering(runs)
        if covering is not None:
            engine = engines.runs_of.get(covering.run_id) if engines else None
            return TickReport(work, "covered", covering.run_id, checkpoint_age_s=age, engine=engine)
        if engines is not None:
            engines.last_choice = None
        run_id, why = runner.try_start()
        choice = engines.last_choice if engines else None
        engine, backlog = choice if choice else (None, None)
        if run_id is None:
            return TickReport(work, "deferred", reason=why, checkpoint_age_s=age, engine=engine, backlog=backlog)
        return TickReport(work, "started", run_id, checkpoint_age_s=age, engine=engine, backlog=backlog)

    def flush_lag(self, heads: Mapping[str, ShardHead]) -> FlushLag:
        """The flush lag of ``heads`` (the gateways' shards): one log read per shard with unflushed entries.

        Raises:
            StorageError: a read failed.
        """
        positions = oldest_unflushed(heads.values())
        oldest = {shard: self.reader.commit_hlc_at(shard, seq) for shard, seq in positions.items()}
        return measure(heads.values(), oldest, self.now_ms())

    def work(self, job: JobKind) -> tuple[Work, list[JobRun]]:
        """``job``'s work and the job's recent runs (read only when there is work)."""
        if job == "flush":
            return self._flush(self.reader.heads())
        return self._downstream(job, self.reader.heads(), self.reader.bounds().positions)

    def _downstream(
        self, job: JobKind, heads: Mapping[str, ShardHead], positions: Mapping[str, int]
    ) -> tuple[Work, list[JobRun]]:
        if not lagging_shards(heads, positions):
            return Work(job), []
        runs = self.runners[job].runs(enough=_any_succeeded)
        if job == "checkpoint":
            upstream = self.runners["compact"].runs(enough=_any_finished)
            return checkpoint_work(heads, positions, upstream, runs), runs
        flushes = self.runners["flush"].runs(enough=_finished(self.compact_policy.min_flush_runs))
        policy, now = self.compact_policy, self.now_ms()
        return compact_work(heads, positions, flushes, runs, policy=policy, now_ms=now), runs

    def _checkpoint_age_s(self, heads: Mapping[str, ShardHead], positions: Mapping[str, int]) -> int:
        lagging = lagging_shards(heads, positions)
        times = self.reader.checkpoint_times(ShardId.parse(key).gateway for key in lagging)
        if not times:
            return 0
        return max(0, (self.now_ms() - min(times.values())) // 1000)

    def has_work(self) -> bool:
        """Whether any job has work as far as the buffer and the checkpoints tell, without run histories: the flush
        has work, or a shard lags the checkpoints. For a pipeline that runs the three jobs in series (the embedded
        default's), where compaction and checkpoint follow every flush.

        Raises:
            StorageError: a read failed.
        """
        heads = self.reader.heads()
        if self._flush_decider(heads)(()).due:
            return True
        return bool(lagging_shards(heads, self.reader.bounds().positions))

    def _flush(self, heads: Mapping[str, ShardHead]) -> tuple[Work, list[JobRun]]:
        decide = self._flush_decider(heads)
        work = decide(())
        if not work.due:
            return work, []
        runs = self.runners["flush"].runs(enough=_successes(STALE_AFTER_RUNS))
        return decide(runs), runs

    def _flush_decider(self, heads: Mapping[str, ShardHead]) -> Callable[[Sequence[JobRun]], Work]:
        """Read what the flush's work depends on besides ``heads``; the decision given the flush job's runs."""
        now = self.now_ms()
        requests = self.reader.request_times(now)
        bounds = self.reader.bounds()
        candidates = release_candidates(
            heads, bounds.positions, bounds.hlcs, publishing=self.publishing, now_ms=now, retention_ms=self.retention_ms
        )
        found = {key: self.reader.release_target(key, *bound) for key, bound in candidates.items()}
        releasing = {key: t for key, t in found.items() if t is not None and t[0] > heads[key].released_seq}
        times = self.reader.checkpoint_times(ShardId.parse(key).gateway for key in releasing)
        targets = {
            key: ReleaseTarget(seq, hlc, times.get(ShardId.parse(key).gateway)) for key, (seq, hlc) in releasing.items()
        }

        def decide(runs: Sequence[JobRun]) -> Work:
            return flush_work(
                heads,
                request_ms=requests,
                targets=targets,
                publishing=self.publishing,
                retention_ms=self.retention_ms,
                runs=runs,
                now_ms=now,
            )

        return decide


def _any_finished(runs: Sequence[JobRun]) -> bool:
    return any(run.finished_ms is not None for run in runs)


def _finished(count: int) -> Callable[[Sequence[JobRun]], bool]:
    return lambda runs: sum(1 for run in runs if run.finished_ms is not None) >= count


def _any_succeeded(runs: Sequence[JobRun]) -> bool:
    return any(run.succeeded for run in runs)


def _successes(count: int) -> Callable[[Sequence[JobRun]], bool]:
    return lambda runs: sum(1 for run in runs if run.succeeded) >= count


def _request_ms(doc: Mapping[str, Any], now_ms: int) -> int:
    value = doc.get("atMs")
    return value if isinstance(value, int) and not isinstance(value, bool) and value > 0 else now_ms
