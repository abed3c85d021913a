"""The flush, whatever writes the delta log: buffer -> Iceberg delta log, exactly once (docs/lake.md).

One run:

1. takes the flush lease (refuses to run while another run holds it);
2. ensures the delta-log table, reads the committed watermarks (walking back from the current snapshot through the
   ancestors carrying ``lakesync.flush.watermarks``, greatest per shard) and the shard heads;
3. plans, per shard, the entries ``(max(watermark, flushedSeq), head.seq]`` (capped by ``max_deltas_per_run``);
4. has the engine (:class:`DeltaLog`) read those ranges and append them in ONE Iceberg commit whose snapshot carries
   the watermarks of every shard (unchanged shards carried forward) and the run id;
5. then advances the heads' flushed counters, publishes materialisation jobs for every committed range not yet
   published (:mod:`lakesync.aws.publish`; a failure there never fails the run), clears the flush requests recorded
   before the run started, and releases buffer items (flushed, published, covered by the latest checkpoints'
   positions and ``serverHlc``, and older than the retention).

Two engines implement :class:`DeltaLog`: Spark (:mod:`lakesync.spark.flush`, the Glue job: reads on the executors,
one Spark job) and pyiceberg (:mod:`lakesync.lake.iceberg_flush`: one process, no JVM). The invariants are this
module's and hold for both; an engine's part is to commit all of a plan's entries or none, to carry the snapshot
properties, and to stop before its commit once the lease is lost.

Invariants: the delta log holds each buffer entry at most once, because a run only appends entries above the
watermarks of the snapshot it read, and only one run appends at a time (the lease, renewed right before the write
and during it -- a write whose lease could not be renewed is not committed -- plus a check that no other flush
snapshot landed in between: :func:`our_snapshot`). A commit holds every planned entry: the ranges cover the plan
(checked before the write) and each range is read whole (:func:`range_figures`). The log holds every flushed entry at
least once, because the heads (and with them release) only advance after the append committed. A crash anywhere is
repaired by the next run: before the commit nothing was written; after it, the snapshot's watermarks are ahead of
the heads and the next run advances the heads without re-appending. No new entries -> no snapshot.
"""

from __future__ import annotations

import json
import logging
import time
import uuid
from collections.abc import Callable, Iterable, Iterator, Mapping, Sequence
from dataclasses import dataclass, field
from itertools import pairwise
from typing import NamedTuple, Protocol

import pyarrow as pa  # type: ignore[import-untyped]

from lakesync.aws.flush_store import STOPPED_WRITER_MS, DynamoConfig, FlushStore, LogRecord, ShardRange
from lakesync.aws.publish import ClaimCheckSink, JobSink, PublishConfig, PublishReport, publish_flushed
from lakesync.core.errors import FlushBusyError, FlushError
from lakesync.core.hlc import system_clock
from lakesync.core.log import ShardHead, ShardId
from lakesync.lake.tables import DELTA_LOG, FLUSH_WATERMARKS, NAMESPACE

log = logging.getLogger(__name__)

__all__ = [
    "DAY_MS",
    "FAIL_POINTS",
    "FLUSH_RUN",
    "LEASE_POLL_S",
    "RECORD_ARROW_SCHEMA",
    "DeltaLog",
    "FlushConfig",
    "FlushPlan",
    "FlushReport",
    "InjectedFailure",
    "LeaseGuard",
    "RangeFigures",
    "RangeReader",
    "ShardPlan",
    "SnapshotInfo",
    "check_ranges",
    "flush_when_free",
    "fold_watermarks",
    "our_snapshot",
    "plan_flush",
    "range_figures",
    "record_batches",
    "run_flush",
    "watermarks_property",
]

FLUSH_RUN = "lakesync.flush.run"
"""Snapshot summary property naming the flush run that wrote the snapshot."""
LEASE_POLL_S = 10.0
"""Seconds between attempts of a run waiting for another run's lease (:func:`flush_when_free`)."""

FAIL_POINTS = ("before_append", "after_append", "after_heads", "during_publish", "during_release")
"""Where ``run_flush(fail_at=...)`` can simulate a crash."""

DAY_MS = 24 * 3600 * 1000
_ARROW_BATCH = 5000

_STRING = pa.string()
RECORD_ARROW_SCHEMA = pa.schema(
    [
        *(pa.field(name, _STRING, nullable=False) for name in ("gateway", "tbl", "row_id", "op", "client_id")),
        pa.field("hlc", pa.int64(), nullable=False),
        pa.field("delta_id", _STRING, nullable=False),
        pa.field(
            "columns",
            pa.list_(pa.struct([pa.field("name", _STRING), pa.field("value", _STRING)])),
            nullable=False,
        ),
        pa.field("shard", _STRING, nullable=False),
        *(pa.field(name, pa.int64(), nullable=False) for name in ("seq", "commit_hlc", "commit_ms", "size")),
    ]
)
"""Buffer records (:data:`lakesync.aws.flush_store.LogRecord`) in Arrow: what the read side hands to the engine."""


class InjectedFailure(RuntimeError):
    """A crash simulated by ``run_flush(fail_at=...)``."""


@dataclass(frozen=True, slots=True)
class FlushConfig:
    """What one flush run does.

    Attributes:
        dynamodb: How to reach the buffer (picklable; executors build their own clients from it).
        catalog: The Spark catalog holding the lake.
        namespace: The namespace of the delta log (``lakesync``; tests use their own).
        gateways: Flush only these gateways; None means every gateway.
        retention_ms: Flushed items younger than this stay in the buffer (cursors and ``since`` pulls keep working).
        max_deltas_per_run: Cap on the entries one run appends (spread evenly over the shards); None = no cap.
        lease_ttl_ms: How long the lease outlives its last renewal (must exceed the longest write: read + append).
        range_size: Most entries in one range (one read, one Arrow batch); a task reads several neighbouring ranges.
        rebase_shards: Shards whose buffer regressed behind the lake, to append again from their release mark
            (:func:`plan_flush`; docs/lake.md, "A buffer behind the lake").
        publish: Where to publish materialisation jobs after the commit (:mod:`lakesync.aws.publish`); None
            publishes nothing.
        publish_range_size: Most entries in one materialisation job.
    """

    dynamodb: DynamoConfig
    catalog: str = "lake"
    namespace: str = NAMESPACE
    gateways: tuple[str, ...] | None = None
    retention_ms: int = DAY_MS
    max_deltas_per_run: int | None = None
    lease_ttl_ms: int = 30 * 60 * 1000
    range_size: int = 5000
    rebase_shards: tuple[str, ...] = ()
    publish: PublishConfig | None = None
    publish_range_size: int = 5000

    @property
    def table(self) -> str:
        """The delta log's qualified name."""
        return f"{self.catalog}.{self.namespace}.{DELTA_LOG}"


@dataclass(frozen=True, slots=True)
class FlushReport:
    """What a run did.

    Attributes:
        run_id: The run's id (lease owner, snapshot property ``lakesync.flush.run``).
        snapshot_id: The appended snapshot, or None when there was nothing to append.
        deltas: Entries appended.
        bytes: Their stored size in the buffer.
        shards: Shards with entries appended.
        heads_advanced: Heads whose flushed counters moved (including repairs of a crashed run).
        requests_cleared: Flush requests deleted.
        released: Log entries newly marked released (pulls behind them get 410; the items expire by TTL).
        watermarks: The committed watermarks after the run.
        published_jobs: Materialisation jobs published (ranges of this run and any left by earlier runs).
        publish_failures: Ranges that could not be published (left for the next run; alarmed).
        durations_ms: Milliseconds per step (lease, plan, write: read + append + commit, heads, requests, release,
            total).
    """

    run_id: str
    snapshot_id: int | None
    deltas: int
    bytes: int
    shards: int
    heads_advanced: int
    requests_cleared: int
    released: int
    watermarks: Mapping[str, int]
    published_jobs: int = 0
    publish_failures: int = 0
    durations_ms: Mapping[str, int] = field(default_factory=dict)


@dataclass(frozen=True, slots=True)
class ShardPlan:
    """One shard's part of a run: entries ``(start, end]`` are appended; the head moves from ``head.flushed_seq``
    to ``end``."""

    head: ShardHead
    start: int
    end: int

    @property
    def shard(self) -> ShardId:
        """The shard."""
        return self.head.shard

    @property
    def deltas(self) -> int:
        """Entries to append."""
        return self.end - self.start


@dataclass(frozen=True, slots=True)
class FlushPlan:
    """What a run appends and the watermarks its snapshot will carry."""

    shards: tuple[ShardPlan, ...]
    watermarks: Mapping[str, int]

    @property
    def deltas(self) -> int:
        """Entries to append."""
        return sum(p.deltas for p in self.shards)

    def ranges(self, range_size: int) -> list[ShardRange]:
        """The appended entries cut into ranges of at most ``range_size`` (one executor task each)."""
        out = []
        for plan in self.shards:
            for lo in range(plan.start, plan.end, range_size):
                out.append(ShardRange(plan.shard.key, lo, min(lo + range_size, plan.end)))
        return out


def plan_flush(
    watermarks: Mapping[str, int],
    heads: Mapping[ShardId, ShardHead],
    max_deltas: int | None = None,
    rebase: Iterable[str] = (),
) -> FlushPlan:
    """Plan a run from the last committed watermarks and the shard heads (pure).

    Each shard is read from ``max(watermark, flushedSeq)`` to its head. With ``max_deltas`` the entries are shared
    out evenly (a shard with fewer pending entries leaves its share to the others), so no shard starves. A shard in
    ``rebase`` (the repair of a buffer that regressed behind the lake) is read from its release mark instead: all the
    buffer holds is appended again, and the watermark moves to its head.

    Raises:
        FlushError: a watermark is ahead of its head (a rebased shard's head must first pass it).
    """
    rebased = set(rebase)
    for shard, head in heads.items():
        if watermarks.get(shard.key, 0) > head.seq:
            raise FlushError(
                f"the delta log holds shard {shard.key!r} up to {watermarks[shard.key]} but its head is at {head.seq}:"
                " was the buffer recreated under a lake that already holds its shards? (docs/lake.md, 'A buffer"
                " behind the lake')"
            )
    starts = {
        s: h.released_seq if s.key in rebased else max(watermarks.get(s.key, 0), h.flushed_seq)
        for s, h in heads.items()
    }
    pending = {s: max(0, heads[s].seq - start) for s, start in starts.items()}
    take = dict(pending)
    if max_deltas is not None and sum(pending.values()) > max_deltas:
        remaining = max(0, max_deltas)
        ordered = sorted(pending, key=lambda s: (pending[s], s))
        for i, shard in enumerate(ordered):
            take[shard] = min(pending[shard], remaining // (len(ordered) - i))
            remaining -= take[shard]
    plans = tuple(ShardPlan(heads[s], starts[s], starts[s] + take[s]) for s in sorted(heads))
    new_marks = dict(watermarks)
    for plan in plans:
        if plan.end > 0:
            new_marks[plan.shard.key] = max(new_marks.get(plan.shard.key, 0), plan.end)
    return FlushPlan(plans, dict(sorted(new_marks.items())))


class RangeFigures(NamedTuple):
    """What one read of a range held: its entries, their stored bytes, and the first and last sequence."""

    entries: int
    bytes: int
    first_seq: int
    last_seq: int


def range_figures(shard_range: ShardRange, records: Sequence[LogRecord]) -> RangeFigures:
    """The figures of a range read whole (pure).

    Raises:
        FlushError: the records are not exactly the range's entries ``lo+1 .. hi`` of its shard, in order.
    """
    seqs = [r["seq"] for r in records]
    if seqs != list(range(shard_range.lo + 1, shard_range.hi + 1)) or any(
        r["shard"] != shard_range.shard for r in records
    ):
        got = f"{len(seqs)} entries, seq {seqs[0]}..{seqs[-1]}" if seqs else "no entries"
        raise FlushError(f"the read of {shard_range.shard!r} ({shard_range.lo}, {shard_range.hi}] is not whole: {got}")
    return RangeFigures(len(seqs), sum(r["size"] for r in records), shard_range.lo + 1, shard_range.hi)


def record_batches(records: Sequence[LogRecord], batch_size: int = _ARROW_BATCH) -> Iterator[pa.RecordBatch]:
    """Records as Arrow batches of :data:`RECORD_ARROW_SCHEMA`, at most ``batch_size`` rows each (pure)."""
    for start in range(0, len(records), batch_size):
        yield pa.RecordBatch.from_pylist(records[start : start + batch_size], schema=RECORD_ARROW_SCHEMA)


RangeReader = Callable[[ShardRange], Sequence[LogRecord]]
"""Reads one range whole, in sequence order (e.g. :meth:`FlushStore.read_records`)."""


def _parse_watermarks(text: str) -> dict[str, int]:
    data = json.loads(text)
    if not isinstance(data, dict) or not all(isinstance(k, str) and type(v) is int for k, v in data.items()):
        raise FlushError(f"malformed {FLUSH_WATERMARKS} snapshot property: {text[:200]!r}")
    return data


def watermarks_property(watermarks: Mapping[str, int]) -> str:
    """The ``lakesync.flush.watermarks`` snapshot property's value."""
    return json.dumps(dict(watermarks), separators=(",", ":"))


@dataclass(frozen=True, slots=True)
class SnapshotInfo:
    """What the flush needs of a delta-log snapshot: its parent, operation and the two lakesync properties."""

    parent: int | None
    operation: str
    watermarks: str | None
    run_id: str | None


def _ancestry(snapshots: Mapping[int, SnapshotInfo], start: int | None) -> Iterator[tuple[int, SnapshotInfo]]:
    while start is not None and start in snapshots:
        yield start, snapshots[start]
        start = snapshots[start].parent


def fold_watermarks(snapshots: Mapping[int, SnapshotInfo], current: int | None) -> dict[str, int]:
    """The committed watermarks seen from ``current`` (pure).

    Walks back from the current snapshot through its ancestors that carry ``lakesync.flush.watermarks`` and takes
    each shard's greatest value: normally the nearest such snapshot has them all (flush appends carry every shard,
    maintenance rewrites carry them forward), and a rewrite that carried a copy older than a flush that committed
    meanwhile cannot pull a watermark back.
    """
    marks: dict[str, int] = {}
    for _, snapshot in _ancestry(snapshots, current):
        if snapshot.watermarks is not None:
            for shard, seq in _parse_watermarks(snapshot.watermarks).items():
                marks[shard] = max(marks.get(shard, 0), seq)
    return dict(sorted(marks.items()))


def our_snapshot(snapshots: Mapping[int, SnapshotInfo], table: str, run_id: str, base_snapshot: int | None) -> int:
    """The id of run ``run_id``'s snapshot (pure).

    Raises:
        FlushError: it is not in the history, or another flush appended between ``base_snapshot`` (the one the plan
            was made from) and it.
    """
    ours = next((sid for sid, snap in snapshots.items() if snap.run_id == run_id), None)
    if ours is None:
        raise FlushError(f"the flush snapshot of run {run_id} is not in the history of {table}")
    for sid, snap in _ancestry(snapshots, snapshots[ours].parent):
        if sid == base_snapshot:
            break
        # Maintenance rewrites ("replace") carry watermarks too; only another append is another flush.
        if snap.operation == "append" and snap.watermarks is not None:
            raise FlushError(
                f"another flush (snapshot {sid}) committed to {table} during run {run_id}; "
                "the delta log may hold entries twice: check the flush lease and concurrency settings"
            )
    return ours


def check_ranges(plan: FlushPlan, ranges: Sequence[ShardRange]) -> None:
    """The ranges cover exactly the planned entries: per shard, contiguous from its start to its end.

    Raises:
        FlushError: they do not.
    """
    by_shard: dict[str, list[ShardRange]] = {}
    for shard_range in sorted(ranges):
        by_shard.setdefault(shard_range.shard, []).append(shard_range)
    want = {p.shard.key: (p.start, p.end) for p in plan.shards if p.deltas}
    got: dict[str, tuple[int, int] | None] = {}
    for shard, parts in by_shard.items():
        whole = all(r.lo < r.hi for r in parts) and all(a.hi == b.lo for a, b in pairwise(parts))
        got[shard] = (parts[0].lo, parts[-1].hi) if whole else None
    if got != want:
        raise FlushError(f"the ranges to read {got} do not cover the plan {want}")


@dataclass(frozen=True, slots=True)
class LeaseGuard:
    """How an engine keeps the flush lease over its write.

    Attributes:
        before_append: Call once the ranges were checked, right before the write; raises if the lease is lost
            (nothing was written).
        renew: Renew the lease; ``False`` once it is lost (expired or taken).
        every_s: How often a long write must renew it.
    """

    before_append: Callable[[], None]
    renew: Callable[[], bool]
    every_s: float


class DeltaLog(Protocol):
    """The engine that writes the delta log: a table in an Iceberg catalog."""

    def ensure_table(self) -> None:
        """Create the namespace and the delta-log table unless they exist."""
        ...

    def read_watermarks(self) -> tuple[dict[str, int], int | None]:
        """The committed watermarks (:func:`fold_watermarks`) and the current snapshot id (None: no snapshot)."""
        ...

    def commit_hlcs(self, positions: Mapping[str, int]) -> dict[str, int]:
        """``{shard: commit_hlc}`` of the delta-log entries at ``{shard: seq}`` that the table holds."""
        ...

    def append(
        self, plan: FlushPlan, ranges: Sequence[ShardRange], run_id: str, base_snapshot: int | None, lease: LeaseGuard
    ) -> tuple[int, dict[str, tuple[int, int]]]:
        """Read the ranges (each whole) and append them in ONE commit carrying ``plan.watermarks`` and ``run_id``,
        after ``lease.before_append()``; a write whose lease is lost is not committed.

        Returns:
            The new snapshot id (checked by :func:`our_snapshot`) and, per shard, ``(entries, bytes)`` appended.

        Raises:
            FlushError: a range could not be read whole (nothing was committed), the lease was lost, or another flush
                committed since ``base_snapshot``.
        """
        ...


class _Steps:
    """Step timings and the crash hook."""

    def __init__(self, fail_at: str | None) -> None:
        if fail_at is not None and fail_at not in FAIL_POINTS:
            raise ValueError(f"fail_at must be one of {FAIL_POINTS}, got {fail_at!r}")
        self.fail_at = fail_at
        self.started = time.perf_counter()
        self.last = self.started
        self.durations: dict[str, int] = {}

    def done(self, step: str) -> None:
        now = time.perf_counter()
        self.durations[step] = self.durations.get(step, 0) + round((now - self.last) * 1000)
        self.last = now

    def point(self, name: str) -> None:
        if self.fail_at == name:
            raise InjectedFailure(f"simulated crash {name}")

    def total(self) -> dict[str, int]:
        return {**self.durations, "total": round((time.perf_counter() - self.started) * 1000)}


def run_flush(
    delta_log: DeltaLog,
    config: FlushConfig,
    *,
    checkpoint_positions: Mapping[str, int] | None = None,
    checkpoint_hlcs: Mapping[str, int] | None = None,
    now_ms: Callable[[], int] = system_clock,
    fail_at: str | None = None,
    store: FlushStore | None = None,
    sink: JobSink | None = None,
) -> FlushReport:
    """Flush the buffer into the delta log once, with ``delta_log`` as the engine.

    Args:
        delta_log: The engine writing the delta log of ``config``.
        config: What to flush and how.
        checkpoint_positions: ``{shard: seq}`` covered by the latest checkpoints; only entries at or below them are
            released. None releases nothing.
        checkpoint_hlcs: ``{shard: serverHlc}`` of those checkpoints; only entries committed at or below it are
            released, so a client resuming ``since`` a checkpoint's ``serverHlc`` is never behind the release
            (:meth:`~lakesync.core.checkpoint.Manifest.releasable`). None: no such bound (callers with positions
            only); :class:`~lakesync.aws.checkpoints.ReleaseBounds` has both.
        now_ms: The wall clock (epoch ms), for the lease, the flush requests and the retention.
        fail_at: Simulate a crash at one of :data:`FAIL_POINTS` (tests).
        store: The driver's store (defaults to one built from ``config.dynamodb``).
        sink: Where materialisation jobs go (defaults to S3 + SQS from ``config.publish``).

    Returns:
        What the run did.

    Raises:
        FlushError: another run holds the lease, the lease was lost, the log has a gap, or the heads moved.
        InjectedFailure: at ``fail_at``.
    """
    steps = _Steps(fail_at)
    store = store or FlushStore.from_config(config.dynamodb)
    run_id = uuid.uuid4().hex
    started_ms = now_ms()
    if not store.acquire_lease(run_id, started_ms, config.lease_ttl_ms):
        lease = store.lease()
        until = f" until {lease.until_ms}" if lease else ""
        raise FlushBusyError(f"Flush already in progress (lease held by {lease.owner if lease else '?'}{until})")
    steps.done("lease")
    try:
        delta_log.ensure_table()
        watermarks, base_snapshot = delta_log.read_watermarks()
        gateways, heads = store.shards(config.gateways, settle_before_ms=started_ms - STOPPED_WRITER_MS)
        plan = plan_flush(watermarks, heads, config.max_deltas_per_run, config.rebase_shards)
        _check_not_regressed(delta_log, store, plan, watermarks, config.rebase_shards)
        steps.done("plan")

        snapshot_id: int | None = None
        appended: dict[str, tuple[int, int]] = {}
        if plan.deltas:

            def before_append() -> None:
                steps.point("before_append")
                if not store.renew_lease(run_id, now_ms(), config.lease_ttl_ms):
                    raise FlushError(f"flush run {run_id} lost its lease before the append; nothing was written")

            guard = LeaseGuard(
                before_append,
                lambda: store.renew_lease(run_id, now_ms(), config.lease_ttl_ms),
                config.lease_ttl_ms / 3000,
            )
            ranges = plan.ranges(config.range_size)
            snapshot_id, appended = delta_log.append(plan, ranges, run_id, base_snapshot, guard)
            steps.done("write")
            steps.point("after_append")

        advanced = _advance_heads(store, plan, appended)
        steps.done("heads")
        steps.point("after_heads")

        committed = plan.watermarks if snapshot_id is not None else watermarks
        publish_report, published = _publish(config, store, sink, heads, committed, run_id, steps)
        steps.done("publish")

        cleared = store.clear_flush_requests(gateways, started_ms)
        steps.done("requests")

        released = _release(
            store, config, plan, checkpoint_positions or {}, checkpoint_hlcs, published, now_ms(), steps
        )
        steps.done("release")
        return FlushReport(
            run_id=run_id,
            snapshot_id=snapshot_id,
            deltas=plan.deltas,
            bytes=sum(b for _, b in appended.values()),
            shards=len(appended),
            heads_advanced=advanced,
            requests_cleared=cleared,
            released=released,
            watermarks=committed,
            published_jobs=publish_report.jobs,
            publish_failures=publish_report.failed,
            durations_ms=steps.total(),
        )
    finally:
        store.release_lease(run_id)


def _publish(
    config: FlushConfig,
    store: FlushStore,
    sink: JobSink | None,
    heads: Mapping[ShardId, ShardHead],
    committed: Mapping[str, int],
    run_id: str,
    steps: _Steps,
) -> tuple[PublishReport, Mapping[str, int] | None]:
    """Publish what the delta log holds and was not yet published; never fails the flush (but a simulated crash).

    Returns:
        The report and the published positions that bound the release (None: publishing is off, no bound).
    """
    if config.publish is None:
        return PublishReport(), None
    before = {s.key: h.published_seq if h.published_seq is not None else h.released_seq for s, h in heads.items()}
    try:
        sink = sink or ClaimCheckSink(config.publish)
        report = publish_flushed(
            store,
            sink,
            heads,
            committed,
            run_id=run_id,
            bucket=config.publish.bucket,
            publish_all=config.publish.publish_all,
            range_size=config.publish_range_size,
            attempts=config.publish.attempts,
            threads=config.publish.threads,
            after_first_send=lambda: steps.point("during_publish"),
        )
    except InjectedFailure:
        raise
    except Exception:
        log.exception("publishing materialisation jobs failed; the next flush publishes what is missing")
        if sink is not None:
            sink.report_failures(1)
        return PublishReport(failed=1, published=before), before
    return report, {**before, **report.published}


def _check_not_regressed(
    delta_log: DeltaLog,
    store: FlushStore,
    plan: FlushPlan,
    watermarks: Mapping[str, int],
    rebased: Sequence[str] = (),
) -> None:
    """Refuse to append when a shard's log is not the log the lake left: the entry at its committed watermark, still
    in the buffer, has another commit HLC than the lake's (the buffer was restored or recreated behind the lake and
    re-used those sequence numbers). Appending above the watermark would skip the re-used ones for ever.

    Raises:
        FlushError: naming the shard, with what to do.
    """
    checks = {
        p.shard.key: watermarks[p.shard.key]
        for p in plan.shards
        if p.deltas
        and p.shard.key not in rebased
        and p.head.released_seq < watermarks.get(p.shard.key, 0) <= p.head.seq
    }
    if not checks:
        return
    lake = delta_log.commit_hlcs(checks)
    for key, seq in checks.items():
        buffered = store.commit_hlc_at(ShardId.parse(key), seq)
        if key in lake and buffered is not None and buffered != lake[key]:
            raise FlushError(
                f"the buffer of shard {key!r} does not match the delta log at its watermark {seq} (commit HLC"
                f" {buffered} in the buffer, {lake[key]} in the lake): the buffer was restored or recreated behind the"
                " lake, and its new entries re-use sequence numbers the lake already holds. Nothing was appended."
                " Repair: see docs/lake.md, 'A buffer behind the lake'"
            )


def _advance_heads(store: FlushStore, plan: FlushPlan, appended: Mapping[str, tuple[int, int]]) -> int:
    """Move each head's flushed counters to what the delta log now holds."""
    advanced = 0
    for shard_plan in plan.shards:
        head = shard_plan.head
        if shard_plan.end <= head.flushed_seq:
            continue
        deltas, size = appended.get(head.shard.key, (0, 0))
        if shard_plan.start > head.flushed_seq:
            # A crashed run appended (flushedSeq, start] but did not advance the head: count those too.
            size += store.range_bytes(ShardRange(head.shard.key, head.flushed_seq, shard_plan.start))
            deltas += shard_plan.start - head.flushed_seq
        if store.advance_flushed(head.shard, head.flushed_seq, shard_plan.end, size, deltas):
            advanced += 1
    return advanced


def _release(
    store: FlushStore,
    config: FlushConfig,
    plan: FlushPlan,
    positions: Mapping[str, int],
    hlcs: Mapping[str, int] | None,
    published: Mapping[str, int] | None,
    now: int,
    steps: _Steps,
) -> int:
    """Mark the entries released that are flushed, covered by the checkpoint (position and HLC), older than the
    retention and, when publishing is on, published (so a range can always be read again to publish it); returns
    how many entries were newly marked. The items themselves are deleted by their TTL (free, unlike a delete)."""
    retention_hlc = ((now - config.retention_ms) << 16) | 0xFFFF
    marked = 0
    for shard_plan in plan.shards:
        head = shard_plan.head
        released = head.released_seq
        limit = min(max(head.flushed_seq, shard_plan.end), positions.get(head.shard.key, 0))
        if published is not None:
            limit = min(limit, published.get(head.shard.key, 0))
        cutoff_hlc = retention_hlc if hlcs is None else min(retention_hlc, hlcs.get(head.shard.key, 0))
        if limit > released:
            target = store.release_target(head.shard, limit, cutoff_hlc)
            if target is not None and target[0] > released:
                store.mark_released(head.shard, *target)
                marked += target[0] - released
                steps.point("during_release")
    return marked


def flush_when_free(
    flush: Callable[[], FlushReport],
    *,
    may_wait: Callable[[float], bool],
    sleep: Callable[[float], None] = time.sleep,
    poll_s: float = LEASE_POLL_S,
) -> FlushReport:
    """Run ``flush``; while another run holds the lease, wait ``poll_s`` and try again as long as ``may_wait(poll_s)``.

    The two engines take turns on one lease: a run of one that starts while the other's holds it waits for it rather
    than failing (which would be a failed run, alarmed, for a flush that was merely queued behind another).

    Raises:
        FlushBusyError: the lease was still held when ``may_wait`` said no more.
        FlushError: the flush failed otherwise.
    """
    while True:
        try:
            return flush()
        except FlushBusyError:
            if not may_wait(poll_s):
                raise
        sleep(poll_s)
