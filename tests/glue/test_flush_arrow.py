"""The flush's read side: buffer records -> Arrow batches -> Spark (lakesync.spark.flush), and the checks that make a
commit hold every planned entry exactly once.

Focus: the Arrow conversion matches RECORD_SCHEMA and carries every value through Spark unchanged (unicode beyond
the BMP, empty column lists, null values, 64-bit integers, batches split at any size); a range read is accepted only
whole (exact sequences of its shard, in order); the ranges must cover the plan; the tally of the reads merges
idempotently and refuses a missing, conflicting or unplanned range; a reader that fails mid-write leaves no commit,
while a whole write commits each entry once with exact per-shard figures; the lease is renewed during the write, and
a write whose lease cannot be renewed is cancelled before its commit. Synthetic readers stand in for DynamoDB.
"""

from __future__ import annotations

import sys
import time
import uuid
from contextlib import AbstractContextManager
from dataclasses import dataclass
from functools import partial
from typing import TYPE_CHECKING, Any, cast

import pyarrow as pa
import pytest
from pyspark import cloudpickle
from pyspark.sql.pandas.types import to_arrow_schema

from lakesync.aws.flush_store import LogRecord, ShardRange
from lakesync.core.errors import FlushError, StorageError
from lakesync.core.log import ShardHead, ShardId
from lakesync.lake.flush import check_ranges
from lakesync.lake.tables import delta_log_ddl, qualified
from lakesync.spark.flush import (
    RECORD_ARROW_SCHEMA,
    RECORD_SCHEMA,
    RangeFigures,
    RangeFrame,
    _LeaseKeeper,
    _TallyParam,
    append_records,
    keep_lease,
    plan_flush,
    range_figures,
    record_batches,
    records_frame,
)

if TYPE_CHECKING:
    from pyspark.sql import SparkSession

    from lakesync.spark.flush import FlushPlan, RangeReader

# The readers below run in Spark's Python workers, which cannot import this test module: ship them by value.
cloudpickle.register_pickle_by_value(sys.modules[__name__])


def record(shard: str, seq: int, **overrides: Any) -> LogRecord:
    """One buffer record of ``shard`` (``gw#table#n``) at ``seq``; ``size`` grows with ``seq``."""
    gateway, table, _ = shard.split("#")
    base: LogRecord = {
        "gateway": gateway,
        "tbl": table,
        "row_id": f"row-{seq % 7}",
        "op": "INSERT" if seq % 3 else "DELETE",
        "client_id": f"client-{seq % 2}",
        "hlc": (1_767_268_800_000 + seq) << 16,
        "delta_id": f"{seq:064x}",
        "columns": [] if seq % 3 == 0 else [{"name": "title", "value": f'"t{seq}"'}],
        "shard": shard,
        "seq": seq,
        "commit_hlc": ((1_767_268_800_000 + seq) << 16) | 3,
        "commit_ms": 1_767_268_800_000 + seq,
        "size": 100 + seq,
    }
    return {**base, **overrides}


def plan_for(ends: dict[str, int]) -> FlushPlan:
    """The plan of a fresh delta log with each shard's head at ``ends[shard]``."""
    heads = {ShardId.parse(key): ShardHead(ShardId.parse(key), seq=end) for key, end in ends.items()}
    return plan_flush({}, heads)


def synthetic_reader(missing: frozenset[tuple[str, int]] = frozenset()) -> RangeReader:
    """A :data:`~lakesync.spark.flush.ReaderFactory` result: the records of a range, leaving out ``missing``."""

    def read(shard_range: ShardRange) -> list[LogRecord]:
        seqs = range(shard_range.lo + 1, shard_range.hi + 1)
        return [record(shard_range.shard, seq) for seq in seqs if (shard_range.shard, seq) not in missing]

    return read


# -- pure parts ----------------------------------------------------------------------------------------------------


# PySpark 3.5's type translation still compares versions with distutils.
@pytest.mark.filterwarnings("ignore:distutils Version classes are deprecated:DeprecationWarning")
def test_record_arrow_schema_is_record_schema_in_arrow() -> None:
    # Given/When Spark's own translation of the records' schema
    expected = to_arrow_schema(RECORD_SCHEMA)

    # Then the Arrow schema the read tasks produce is the same, nullability included
    assert RECORD_ARROW_SCHEMA == expected
    assert [f.nullable for f in RECORD_ARROW_SCHEMA] == [f.nullable for f in RECORD_SCHEMA.fields]


def test_record_batches_split_records_and_keep_every_value() -> None:
    # Given records with astral-plane unicode, an empty and a null column value, and 64-bit integers
    records = [
        record("gw1#todos#0", 1, row_id="tâche 🚀", columns=[{"name": "é", "value": '"\U0001f600\\u0000"'}]),
        record("gw1#todos#0", 2, columns=[]),
        record("gw1#todos#0", 3, columns=[{"name": "n", "value": None}, {"name": "", "value": ""}]),
        record("gw1#todos#0", 4, hlc=2**63 - 1, commit_hlc=2**62),
        record("gw1#todos#0", 5),
    ]

    # When converted in batches of two
    batches = list(record_batches(records, batch_size=2))

    # Then there are three batches of the records' schema that read back as the records
    assert [b.num_rows for b in batches] == [2, 2, 1]
    assert all(b.schema == RECORD_ARROW_SCHEMA for b in batches)
    assert pa.Table.from_batches(batches).to_pylist() == records
    assert list(record_batches([])) == []


WHOLE = [record("g#a#0", seq) for seq in range(11, 15)]


def test_range_figures_of_a_whole_range() -> None:
    # Given/When the figures of range (10, 14] of shard a read whole
    figures = range_figures(ShardRange("g#a#0", 10, 14), WHOLE)

    # Then they are its count, bytes and first/last sequence
    assert figures == RangeFigures(4, sum(r["size"] for r in WHOLE), 11, 14)


@pytest.mark.parametrize(
    "records",
    [
        pytest.param(WHOLE[:2] + WHOLE[3:], id="missing"),
        pytest.param(WHOLE[:3] + WHOLE[2:3], id="repeated"),
        pytest.param([WHOLE[1], WHOLE[0], *WHOLE[2:]], id="reordered"),
        pytest.param([*WHOLE[:3], record("g#b#0", 14)], id="foreign"),
        pytest.param([*WHOLE, record("g#a#0", 15)], id="extra"),
        pytest.param([], id="empty"),
    ],
)
def test_range_figures_refuse_a_range_not_whole(records: list[LogRecord]) -> None:
    # Given/When/Then a read of (10, 14] that is not exactly its entries is refused
    with pytest.raises(FlushError, match=r"'g#a#0' \(10, 14\] is not whole"):
        range_figures(ShardRange("g#a#0", 10, 14), records)


def test_check_ranges_requires_the_plan_covered_exactly() -> None:
    # Given a plan of two shards and its ranges
    plan = plan_for({"g#a#0": 10, "g#b#0": 3})
    ranges = plan.ranges(4)

    # When/Then its own ranges pass, in any order
    check_ranges(plan, ranges)
    check_ranges(plan, list(reversed(ranges)))
    # And a missing, overlapping, extended or foreign range fails
    for wrong in (
        ranges[1:],
        [*ranges, ShardRange("g#a#0", 3, 5)],
        [*ranges[:-1], ShardRange("g#b#0", 0, 4)],
        [*ranges, ShardRange("g#c#0", 0, 1)],
        [r for r in ranges if r != ShardRange("g#a#0", 4, 8)],
    ):
        with pytest.raises(FlushError, match="do not cover the plan"):
            check_ranges(plan, wrong)


def test_tally_merges_repeated_reads_once_and_keeps_disagreements() -> None:
    # Given the tally of a read of range r, and the same read again (a retried or speculative task)
    param = _TallyParam()
    r, other = ShardRange("g#a#0", 0, 2), ShardRange("g#a#0", 2, 4)
    figures = RangeFigures(2, 50, 1, 2)
    tally = param.addInPlace(param.zero({}), {r: frozenset((figures,))})

    # When merged with the same read, and with another range
    tally = param.addInPlace(tally, {r: frozenset((figures,))})
    tally = param.addInPlace(tally, {other: frozenset((RangeFigures(2, 60, 3, 4),))})

    # Then each range holds one set of figures
    assert tally == {r: frozenset((figures,)), other: frozenset((RangeFigures(2, 60, 3, 4),))}
    # And a read that disagrees stays visible as a second element
    tally = param.addInPlace(tally, {r: frozenset((RangeFigures(2, 51, 1, 2),))})
    assert len(tally[r]) == 2


@dataclass
class FakeAccumulator:
    value: dict[ShardRange, frozenset[RangeFigures]]


def range_frame(ranges: list[ShardRange], tally: dict[ShardRange, frozenset[RangeFigures]]) -> RangeFrame:
    return RangeFrame(cast("Any", None), tuple(ranges), cast("Any", FakeAccumulator(tally)))


def test_range_frame_figures_sum_per_shard_and_refuse_a_wrong_tally() -> None:
    # Given three ranges of two shards, each read once
    ranges = [ShardRange("g#a#0", 0, 2), ShardRange("g#a#0", 2, 3), ShardRange("g#b#0", 5, 6)]
    reads = {
        ranges[0]: frozenset((RangeFigures(2, 30, 1, 2),)),
        ranges[1]: frozenset((RangeFigures(1, 12, 3, 3),)),
        ranges[2]: frozenset((RangeFigures(1, 7, 6, 6),)),
    }

    # When/Then the figures add up per shard
    assert range_frame(ranges, reads).figures() == {"g#a#0": (3, 42), "g#b#0": (1, 7)}
    # And a range never read, read two ways, read with other bounds, or read but not planned is refused
    wrong = [
        {k: v for k, v in reads.items() if k != ranges[1]},
        {**reads, ranges[1]: reads[ranges[1]] | {RangeFigures(1, 13, 3, 3)}},
        {**reads, ranges[2]: frozenset((RangeFigures(1, 7, 5, 5),))},
        {**reads, ShardRange("g#c#0", 0, 1): frozenset((RangeFigures(1, 1, 1, 1),))},
    ]
    for tally in wrong:
        with pytest.raises(FlushError, match="differ from the planned ones"):
            range_frame(ranges, tally).figures()


# -- on Spark ------------------------------------------------------------------------------------------------------


@pytest.fixture
def delta_log(spark: SparkSession, lake_namespace: str) -> str:
    name = f"lake.{lake_namespace}.deltas_{uuid.uuid4().hex[:6]}"
    spark.sql(delta_log_ddl("lake", lake_namespace).replace(qualified("lake", "deltas", lake_namespace), name, 1))
    return name


@pytest.mark.spark
def test_records_frame_carries_every_value_into_spark(spark: SparkSession) -> None:
    # Given ranges whose records hold unicode, empty column lists and 64-bit integers
    ranges = [ShardRange("gw1#todos#0", 0, 4), ShardRange("gw1#todos#0", 4, 7), ShardRange("gw2#n#1", 10, 12)]

    def odd_reader() -> RangeReader:
        def read(shard_range: ShardRange) -> list[LogRecord]:
            seqs = range(shard_range.lo + 1, shard_range.hi + 1)
            return [record(shard_range.shard, s, row_id=f"r\U0001f680{s}", hlc=2**63 - s) for s in seqs]

        return read

    # When they are read through the frame (batches of two rows)
    frame = records_frame(spark, ranges, odd_reader, batch_size=2)
    rows = frame.frame.collect()

    # Then Spark holds exactly the records, in the records' schema
    assert frame.frame.schema == RECORD_SCHEMA
    got = sorted((row.asDict(recursive=True) for row in rows), key=lambda r: (r["shard"], r["seq"]))
    assert got == [rec for r in ranges for rec in odd_reader()(r)]
    # And the tally holds each range once with its figures
    assert frame.figures() == {"gw1#todos#0": (7, sum(100 + s for s in range(1, 8))), "gw2#n#1": (2, 111 + 112)}


@pytest.mark.spark
def test_append_records_commits_each_entry_once_with_exact_figures(spark: SparkSession, delta_log: str) -> None:
    # Given a plan of three shards cut into small ranges (several per read task)
    plan = plan_for({"gw1#todos#0": 23, "gw1#todos#1": 9, "gw2#notes#0": 17})
    ranges = plan.ranges(4)

    # When the records are read and appended
    records = records_frame(spark, ranges, partial(synthetic_reader))
    snapshot, figures = append_records(spark, records, plan, delta_log, "run-1", None)

    # Then the table holds every planned entry once, in one snapshot
    keys = [(r["shard"], r["seq"]) for r in spark.sql(f"SELECT shard, seq FROM {delta_log}").collect()]
    expected = {(p.shard.key, seq) for p in plan.shards for seq in range(p.start + 1, p.end + 1)}
    assert sorted(keys) == sorted(expected)
    assert [r[0] for r in spark.sql(f"SELECT snapshot_id FROM {delta_log}.snapshots").collect()] == [snapshot]
    # And the figures are exact per shard
    assert figures == {p.shard.key: (p.deltas, sum(100 + s for s in range(1, p.end + 1))) for p in plan.shards}


@pytest.mark.spark
def test_append_records_with_a_range_not_whole_commits_nothing(spark: SparkSession, delta_log: str) -> None:
    # Given a plan whose last range comes back short (one entry missing), after other ranges were written
    plan = plan_for({"gw1#todos#0": 40, "gw2#notes#0": 12})
    reader = partial(synthetic_reader, frozenset({("gw2#notes#0", 11)}))
    calls: list[str] = []

    # When the records are appended, it fails naming the range
    with pytest.raises(FlushError, match=r"nothing was committed: .*'gw2#notes#0' \(8, 12\] is not whole"):
        append_records(
            spark,
            records_frame(spark, plan.ranges(4), reader),
            plan,
            delta_log,
            "run-2",
            None,
            before_append=lambda: calls.append("before"),
        )

    # Then the hook ran before the write, and the table has no snapshot and no rows
    assert calls == ["before"]
    assert spark.sql(f"SELECT count(*) FROM {delta_log}.snapshots").collect()[0][0] == 0
    assert spark.sql(f"SELECT count(*) FROM {delta_log}").collect()[0][0] == 0


@pytest.mark.spark
def test_append_records_refuses_ranges_that_do_not_cover_the_plan_before_writing(
    spark: SparkSession, delta_log: str
) -> None:
    # Given a plan and a frame over only part of its ranges
    plan = plan_for({"gw1#todos#0": 12})
    records = records_frame(spark, plan.ranges(4)[:-1], synthetic_reader)
    calls: list[str] = []

    # When/Then the append refuses before its hook and before any write
    with pytest.raises(FlushError, match="do not cover the plan"):
        append_records(spark, records, plan, delta_log, "run-3", None, before_append=lambda: calls.append("x"))
    assert calls == []
    assert spark.sql(f"SELECT count(*) FROM {delta_log}.snapshots").collect()[0][0] == 0


# -- the lease kept during the write -------------------------------------------------------------------------------


def test_lease_keeper_renews_until_a_renewal_fails_then_keeps_cancelling() -> None:
    # Given renewals that succeed, raise once (a transient error), succeed, then fail
    answers: list[bool | Exception] = [True, StorageError("throttled"), True, False, True]
    renewals: list[int] = []
    cancels: list[int] = []

    def renew() -> bool:
        renewals.append(1)
        answer = answers[len(renewals) - 1]
        if isinstance(answer, Exception):
            raise answer
        return answer

    # When the keeper runs until the lease was lost and a few ticks more
    with _LeaseKeeper(renew, 0.01, lambda: cancels.append(1)) as keeper:
        deadline = time.monotonic() + 5
        while len(cancels) < 3 and time.monotonic() < deadline:
            time.sleep(0.01)

    # Then it renewed through the error, stopped renewing at the failed renewal, and cancelled on every tick since
    assert keeper.lost
    assert len(renewals) == 4
    assert len(cancels) >= 3


def test_lease_keeper_stops_when_the_block_ends() -> None:
    # Given a keeper whose renewals always succeed
    calls: list[float] = []
    with _LeaseKeeper(lambda: calls.append(time.monotonic()) is None, 0.01, lambda: None) as keeper:
        time.sleep(0.1)

    # When the block has ended, no renewal follows
    made = len(calls)
    time.sleep(0.05)
    assert made >= 2 and len(calls) == made and not keeper.lost


def slow_reader() -> RangeReader:
    """Records of a range, a second per range (a write that outlives its lease)."""
    inner = synthetic_reader()

    def read(shard_range: ShardRange) -> list[LogRecord]:
        time.sleep(1)
        return list(inner(shard_range))

    return read


@pytest.mark.spark
def test_keep_lease_cancels_a_write_that_lost_its_lease(spark: SparkSession, delta_log: str) -> None:
    # Given a slow write of several ranges and a lease that cannot be renewed
    plan = plan_for({"gw1#todos#0": 40})
    records = records_frame(spark, plan.ranges(4), slow_reader)

    def around() -> AbstractContextManager[None]:
        return keep_lease(spark, "run-lost", lambda: False, 0.3)

    # When it is appended, the write is cancelled and the run told why
    with pytest.raises(FlushError, match="lost its lease during the write"):
        append_records(spark, records, plan, delta_log, "run-lost", None, around_append=around)

    # Then nothing was committed, and later jobs of this thread are in no job group
    assert spark.sql(f"SELECT count(*) FROM {delta_log}.snapshots").collect()[0][0] == 0
    assert spark.sparkContext.getLocalProperty("spark.jobGroup.id") is None


@pytest.mark.spark
def test_keep_lease_fails_a_block_that_ended_after_losing_its_lease(spark: SparkSession) -> None:
    # Given/When a block that outlives its lease without a job to cancel (a write that committed first)
    with (
        pytest.raises(FlushError, match="committed before it could be cancelled"),
        keep_lease(spark, "run-late", lambda: False, 0.01),
    ):
        time.sleep(0.1)

    # Then the run is stopped before the heads, and the thread is in no job group
    assert spark.sparkContext.getLocalProperty("spark.jobGroup.id") is None


@pytest.mark.spark
def test_keep_lease_lets_a_write_with_its_lease_commit(spark: SparkSession, delta_log: str) -> None:
    # Given a write whose lease is renewed on every tick, started where the caller set its own job group
    plan = plan_for({"gw1#todos#0": 8})
    renewals: list[int] = []
    spark.sparkContext.setJobGroup("caller", "the caller's jobs")

    def around() -> AbstractContextManager[None]:
        return keep_lease(spark, "run-kept", lambda: renewals.append(1) is None, 0.05)

    # When it is appended
    snapshot, figures = append_records(
        spark, records_frame(spark, plan.ranges(4), slow_reader), plan, delta_log, "run-kept", None,
        around_append=around,
    )  # fmt: skip

    # Then it committed, the lease was renewed meanwhile, and the caller's job group is back
    assert figures == {"gw1#todos#0": (8, sum(100 + s for s in range(1, 9)))}
    assert renewals and snapshot is not None
    assert spark.sparkContext.getLocalProperty("spark.jobGroup.id") == "caller"
    spark.sparkContext.setLocalProperty("spark.jobGroup.id", None)  # type: ignore[arg-type]
