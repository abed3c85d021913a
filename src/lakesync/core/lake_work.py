"""Whether a lake job has work, decided from cheap reads: the rule of the lake tick (docs/lake.md, "When the jobs
run").

A Glue run bills a minimum however little it does, so no job is started on a clock alone. On each job's schedule a
small function (:mod:`lakesync.aws.lake_tick`) reads the shard heads, the flush requests, the latest checkpoints'
bounds and the jobs' run history, and starts the job only when this module finds work for it:

flush
    * ``unflushed``: a head holds entries above its flushed sequence (``seq > fs``);
    * ``requests``: a flush request is recorded (the tick backs the flush trigger up);
    * ``unpublished``: with publishing on, a head's published position (``ps``, or ``rs`` before its first publish)
      is behind ``fs``;
    * ``release``: the flush's release step would mark entries released -- its own rule (:func:`release_limit`,
      :func:`release_cutoff_hlc`; the flush store's ``release_target`` finds the entry), so the marks advance once
      the checkpoints cover the entries and the retention has passed, even when nothing else happens.
compact
    ``flushed``: a shard's ``fs`` is above its position in the latest checkpoint (the lake holds entries no
    checkpoint covers; the checkpoint positions are compaction watermarks, so compaction may lack them too) AND a
    flush run finished after the last successful compaction began AND the :class:`CompactPolicy` finds enough to
    compact: at least ``min_flush_runs`` flush runs finished since (each writes a small file per partition it
    touches), or the first of them finished ``max_wait_ms`` ago. Compacting after every flush would rewrite a few
    small files per run and bill a Glue minimum each time.
checkpoint
    ``compacted``: the same lag AND a compaction run finished after the last successful checkpoint run began.

Invariants:

* A run that succeeds removes the state it was started for, so a job is not started again and again for the same
  work. Compaction and checkpoint also need a newer upstream run, so a lag no run can remove (a shard no compaction
  covers) costs at most one run per upstream run, never one per tick. The release rule is the flush job's own (a
  test compares them); should the two ever disagree, a release that :data:`STALE_AFTER_RUNS` successful flush runs
  started after it became due did not perform is reported *stale* and not acted on again.
* Doubt starts a run: an unreadable checkpoint counts as position 0, a head without a commit time as committed now,
  an empty run history as "never ran". Times of different clocks (the gateway's commit HLCs, the job service's run
  times) are compared with :data:`~lakesync.core.flush_requests.CLOCK_SKEW_MS` of margin.
* An unfinished run serves the work when it provably began after all of it (:meth:`Work.covering`): the tick then
  starts nothing.

Which engine flushes (:func:`choose_flush_engine`): the flush function while the backlog -- the shards' unflushed
entries, ``seq - fs`` of the heads the tick reads anyway (:func:`flush_backlog`) -- is at most the function's limit
(``flushFunctionMaxBacklog``, default :data:`DEFAULT_FUNCTION_MAX_BACKLOG`), the Glue job above it. Either engine's
unfinished run counts for both: it serves the work it covers, and otherwise the other engine is not started beside it
(:class:`lakesync.aws.jobs.FlushEngines`).
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from dataclasses import dataclass
from typing import Final, Literal, Protocol

from lakesync.core.flush_requests import CLOCK_SKEW_MS, ActiveRun

__all__ = [
    "ACTIVE_STATES",
    "DEFAULT_COMPACT_POLICY",
    "DEFAULT_FUNCTION_MAX_BACKLOG",
    "DEFAULT_RETENTION_MS",
    "EVERY_FLUSH",
    "FLUSH_ENGINES",
    "JOB_KINDS",
    "STALE_AFTER_RUNS",
    "CompactPolicy",
    "FlushEngine",
    "Head",
    "JobKind",
    "JobRun",
    "Reason",
    "ReleaseTarget",
    "Work",
    "checkpoint_work",
    "choose_flush_engine",
    "compact_work",
    "flush_backlog",
    "flush_work",
    "lagging_shards",
    "release_candidates",
    "release_cutoff_hlc",
    "release_limit",
]

JobKind = Literal["flush", "compact", "checkpoint"]
JOB_KINDS: Final[tuple[JobKind, ...]] = ("flush", "compact", "checkpoint")

FlushEngine = Literal["function", "glue"]
FLUSH_ENGINES: Final[tuple[FlushEngine, ...]] = ("function", "glue")

DEFAULT_FUNCTION_MAX_BACKLOG: Final = 1_500_000
"""The largest backlog (unflushed entries) the lake tick gives the flush function; the Glue job gets anything larger.
Measured (``make bench-cost``: ``benchmarks/cost/flush_engines.py``, ``benchmarks/results/cost-flush-engines.md``): the
function flushed 3,122 deltas/s of 2 KB rows (6,854/s of 250 B rows) after a 5-second cold start on a loaded 2-CPU
machine (3,471/s in an earlier run), which put half of its 900-second timeout at 1.39 million; a million, rounded
down, took it about 330 s. Measured again after the record fix of the flush's log read: 6,054 deltas/s of 2 KB rows
(10,183/s of 250 B rows), warm, on a loaded machine: half the timeout would be 2.59 million. The default, 1.5
million, takes it about 250 s."""

DEFAULT_RETENTION_MS: Final = 24 * 3600 * 1000
"""How long flushed entries stay in the buffer before they may be released (the flush job's ``--retention_ms``, which
the stack sets to this value)."""

ACTIVE_STATES: Final = frozenset({"WAITING", "STARTING", "RUNNING", "STOPPING"})
"""Job-run states of a run that has not finished (Glue's; ``WAITING`` is a queued run)."""

STALE_AFTER_RUNS: Final = 2
"""Successful flush runs begun after a release became due that leave it undone before the tick stops asking for it
(one may have met a transient failure reading the checkpoints; two in a row mean the rules disagree)."""


@dataclass(frozen=True, slots=True)
class CompactPolicy:
    """When the flushed files are worth a compaction run.

    Attributes:
        min_flush_runs: Flush runs finished since the last successful compaction began that make one due.
        max_wait_ms: Or: how long after the first of them finished one is due anyway, so a quiet lake is compacted
            (and checkpointed, which follows compaction) within this time.
    """

    min_flush_runs: int = 16
    max_wait_ms: int = 6 * 3600 * 1000

    def __post_init__(self) -> None:
        if self.min_flush_runs < 1 or self.max_wait_ms < 0:
            raise ValueError("a compaction policy needs min_flush_runs >= 1 and max_wait_ms >= 0")


DEFAULT_COMPACT_POLICY: Final = CompactPolicy()
"""The deployed policy: 16 flush runs (four hours at the 15-minute flush schedule), or six hours."""

EVERY_FLUSH: Final = CompactPolicy(min_flush_runs=1, max_wait_ms=0)
"""Compact after every flush (the embedded default's pipeline, which runs the jobs in series)."""


class Head(Protocol):
    """What the rule reads of a shard head (:class:`lakesync.core.log.ShardHead` has it)."""

    @property
    def seq(self) -> int: ...

    @property
    def flushed_seq(self) -> int: ...

    @property
    def released_seq(self) -> int: ...

    @property
    def published_seq(self) -> int | None: ...

    @property
    def last_commit_hlc(self) -> int: ...


@dataclass(frozen=True, slots=True)
class JobRun:
    """One run of a job as the job service lists it.

    Attributes:
        run_id: The service's id of the run.
        state: Its state (Glue's ``JobRunState``).
        started_ms: When it started (epoch ms, the service's clock), if known.
        completed_ms: When it finished, if it did and the service says.
    """

    run_id: str
    state: str
    started_ms: int | None = None
    completed_ms: int | None = None

    @property
    def active(self) -> bool:
        """Whether the run has not finished (it still counts against the job's concurrency)."""
        return self.state in ACTIVE_STATES

    @property
    def succeeded(self) -> bool:
        """Whether the run finished successfully."""
        return self.state == "SUCCEEDED"

    @property
    def finished_ms(self) -> int | None:
        """When a finished run ended (its completion, else its start); ``None`` for an unfinished run."""
        if self.active:
            return None
        return self.completed_ms if self.completed_ms is not None else self.started_ms

    def as_active(self) -> ActiveRun:
        """The run as an unfinished run of :mod:`lakesync.core.flush_requests` (its covering rule)."""
        return ActiveRun(self.run_id, self.started_ms, queued=self.state == "WAITING")


@dataclass(frozen=True, slots=True)
class Reason:
    """One reason a job has work.

    Attributes:
        kind: ``unflushed``, ``requests``, ``unpublished``, ``release`` (flush), ``flushed`` (compact) or
            ``compacted`` (checkpoint).
        count: How many shards (or requests) it concerns.
        at_ms: Since when the work exists (epoch ms): a run that began after it serves it.
    """

    kind: str
    count: int
    at_ms: int


@dataclass(frozen=True, slots=True)
class Work:
    """What one job has to do.

    Attributes:
        job: The job.
        reasons: Why it should run; empty when it has nothing to do.
        stale: Release reasons left out because successful runs did not remove them (logged, not acted on).
    """

    job: JobKind
    reasons: tuple[Reason, ...] = ()
    stale: tuple[Reason, ...] = ()

    @property
    def due(self) -> bool:
        """Whether the job should run."""
        return bool(self.reasons)

    @property
    def since_ms(self) -> int | None:
        """The newest of the reasons' times: a run that began after it serves every reason."""
        return max((r.at_ms for r in self.reasons), default=None)

    def covering(self, runs: Iterable[JobRun]) -> JobRun | None:
        """An unfinished run that serves all of the work (queued, or begun after :attr:`since_ms`), if any."""
        since = self.since_ms
        if since is None:
            return None
        return next((run for run in runs if run.active and run.as_active().covers(since)), None)

    def report(self) -> dict[str, object]:
        """A JSON-ready account for logs."""
        return {
            "job": self.job,
            "due": self.due,
            "reasons": {r.kind: r.count for r in self.reasons},
            "since_ms": self.since_ms,
            "stale": {r.kind: r.count for r in self.stale},
        }


@dataclass(frozen=True, slots=True)
class ReleaseTarget:
    """The entry the flush's release step would mark for a shard (from the store's ``release_target``).

    Attributes:
        seq: Its sequence.
        commit_hlc: Its commit HLC.
        checkpoint_ms: When the checkpoint that lets it go became visible (its gateway's ``latest.json``), if known.
    """

    seq: int
    commit_hlc: int
    checkpoint_ms: int | None = None


def release_limit(head: Head, position: int, *, publishing: bool) -> int:
    """The last sequence the flush's release step may mark for a shard with nothing left to flush: flushed, covered
    by the checkpoint's ``position`` and, with publishing on, published (``ps``, or ``rs`` before the first publish).
    """
    limit = min(head.flushed_seq, position)
    if publishing:
        limit = min(limit, head.published_seq if head.published_seq is not None else head.released_seq)
    return limit


def release_cutoff_hlc(now_ms: int, retention_ms: int, checkpoint_hlc: int) -> int:
    """The newest commit HLC the release step may mark: older than the retention and at or below the checkpoint's
    ``serverHlc``."""
    return min(((now_ms - retention_ms) << 16) | 0xFFFF, checkpoint_hlc)


def release_candidates(
    heads: Mapping[str, Head],
    positions: Mapping[str, int],
    hlcs: Mapping[str, int],
    *,
    publishing: bool,
    now_ms: int,
    retention_ms: int,
) -> dict[str, tuple[int, int]]:
    """``{shard: (limit, cutoff_hlc)}`` for the shards whose release step would look for entries to mark (the limit
    is above the release mark); the store's ``release_target(shard, limit, cutoff_hlc)`` names the entry."""
    out: dict[str, tuple[int, int]] = {}
    for key, head in heads.items():
        limit = release_limit(head, positions.get(key, 0), publishing=publishing)
        if limit > head.released_seq:
            out[key] = (limit, release_cutoff_hlc(now_ms, retention_ms, hlcs.get(key, 0)))
    return out


def flush_work(
    heads: Mapping[str, Head],
    *,
    request_ms: Iterable[int] = (),
    targets: Mapping[str, ReleaseTarget | None] | None = None,
    publishing: bool,
    retention_ms: int,
    runs: Iterable[JobRun] = (),
    now_ms: int,
) -> Work:
    """The flush job's work (see the module docstring).

    Args:
        heads: The heads of the shards the job flushes, by shard key.
        request_ms: When each recorded flush request was made.
        targets: For the shards of :func:`release_candidates`, the entry their release step would mark (``None``:
            none).
        publishing: Whether the flush publishes materialisation jobs.
        retention_ms: The flush's retention.
        runs: The flush job's recent runs (to recognise a stale release).
        now_ms: The time of the reads.
    """
    reasons: list[Reason] = []
    unflushed = [h for h in heads.values() if h.seq > h.flushed_seq]
    if unflushed:
        at = max((h.last_commit_hlc >> 16) if h.last_commit_hlc else now_ms for h in unflushed)
        reasons.append(Reason("unflushed", len(unflushed), at))
    requests = list(request_ms)
    if requests:
        reasons.append(Reason("requests", len(requests), max(requests)))
    if publishing:
        behind = [
            h
            for h in heads.values()
            if (h.published_seq if h.published_seq is not None else h.released_seq) < h.flushed_seq
        ]
        if behind:
            reasons.append(Reason("unpublished", len(behind), now_ms))
    stale: list[Reason] = []
    due = [
        _release_due_ms(target, retention_ms, now_ms)
        for key, target in (targets or {}).items()
        if target is not None and key in heads and target.seq > heads[key].released_seq
    ]
    if due:
        release = Reason("release", len(due), max(due))
        starts = [r.started_ms for r in runs if r.succeeded and r.started_ms is not None]
        after = sum(1 for started in starts if started >= release.at_ms + CLOCK_SKEW_MS)
        (stale if after >= STALE_AFTER_RUNS else reasons).append(release)
    return Work("flush", tuple(reasons), tuple(stale))


def _release_due_ms(target: ReleaseTarget, retention_ms: int, now_ms: int) -> int:
    """Since when the entry may go: its retention has passed and its checkpoint is visible (unknown: now)."""
    expiry = (target.commit_hlc >> 16) + retention_ms
    return max(expiry, target.checkpoint_ms if target.checkpoint_ms is not None else now_ms)


def flush_backlog(heads: Iterable[Head]) -> int:
    """The entries the shards hold above their flushed sequence (what the next flush run appends, uncapped)."""
    return sum(max(0, head.seq - head.flushed_seq) for head in heads)


def choose_flush_engine(
    backlog: int, *, max_backlog: int, engines: Iterable[FlushEngine] = FLUSH_ENGINES
) -> FlushEngine:
    """The engine a flush run of ``backlog`` entries goes to, among the deployed ``engines``: the function while the
    backlog is at most ``max_backlog`` (billed by the millisecond, it finishes with margin inside its timeout), the
    Glue job beyond (its workers read and write in parallel, and its run has no 15-minute limit). With one engine
    deployed, that one.

    Raises:
        ValueError: no engine, or a negative ``max_backlog``.
    """
    available = [engine for engine in FLUSH_ENGINES if engine in set(engines)]
    if not available or max_backlog < 0:
        raise ValueError("choosing a flush engine needs one of function, glue and max_backlog >= 0")
    if len(available) == 1:
        return available[0]
    return "function" if backlog <= max_backlog else "glue"


def lagging_shards(heads: Mapping[str, Head], positions: Mapping[str, int]) -> list[str]:
    """The shards whose flushed entries the latest checkpoints do not all cover (``fs`` above the position)."""
    return sorted(key for key, head in heads.items() if head.flushed_seq > positions.get(key, 0))


def compact_work(
    heads: Mapping[str, Head],
    positions: Mapping[str, int],
    flush_runs: Iterable[JobRun],
    compact_runs: Iterable[JobRun],
    *,
    policy: CompactPolicy = EVERY_FLUSH,
    now_ms: int | None = None,
) -> Work:
    """The compaction job's work: the lake lags the checkpoints, a flush finished after the last successful
    compaction began, and ``policy`` finds enough flush runs since (or the first of them long enough ago; ``now_ms``
    is required with any policy but :data:`EVERY_FLUSH`)."""
    if now_ms is None and policy != EVERY_FLUSH:
        raise ValueError("a compaction policy that waits needs the time")
    flush_runs, compact_runs = list(flush_runs), list(compact_runs)
    work = _downstream("compact", "flushed", heads, positions, flush_runs, compact_runs)
    if not work.due or policy == EVERY_FLUSH:
        return work
    began = _last_success_began(compact_runs)
    if began is None:
        return work  # never compacted (as far as the history tells): one run settles the doubt
    since = [ms for r in flush_runs if (ms := r.finished_ms) is not None and ms >= began]
    assert now_ms is not None
    if len(since) >= policy.min_flush_runs or now_ms - min(since) >= policy.max_wait_ms:
        return work
    return Work("compact")


def checkpoint_work(
    heads: Mapping[str, Head],
    positions: Mapping[str, int],
    compact_runs: Iterable[JobRun],
    checkpoint_runs: Iterable[JobRun],
) -> Work:
    """The checkpoint job's work: the lake lags the checkpoints and a compaction finished after the last successful
    checkpoint began."""
    return _downstream("checkpoint", "compacted", heads, positions, compact_runs, checkpoint_runs)


def _last_success_began(runs: Iterable[JobRun]) -> int | None:
    return max((r.started_ms for r in runs if r.succeeded and r.started_ms is not None), default=None)


def _downstream(
    job: JobKind,
    kind: str,
    heads: Mapping[str, Head],
    positions: Mapping[str, int],
    upstream: Iterable[JobRun],
    downstream: Iterable[JobRun],
) -> Work:
    lagging = lagging_shards(heads, positions)
    if not lagging:
        return Work(job)
    finished = max((ms for r in upstream if (ms := r.finished_ms) is not None), default=None)
    began = _last_success_began(downstream)
    if began is not None and (finished is None or finished < began):
        return Work(job)
    # Never ran successfully (or nothing is known upstream): one run settles the doubt.
    return Work(job, (Reason(kind, len(lagging), finished if finished is not None else 0),))
