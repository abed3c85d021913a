"""The flush job (lakesync.spark.flush + lakesync.aws.flush_store) on local Spark + Iceberg and the moto DynamoDB
server, with the buffer filled by the real push service.

Focus: the delta log holds every committed buffer entry exactly once -- after a normal run, after a crash at every
step and a rerun, with pushes continuing between runs, with a per-run cap; heads' flushed counters equal the log;
the lease refuses a second run and expires; a run with nothing new makes no snapshot; a flush relieves
backpressure; a range with a missing entry fails the run before any commit; release deletes only flushed,
checkpoint-covered, retention-old items, and a pull from behind them gets CURSOR_EXPIRED; the Glue entry path reads
the release bounds (positions and serverHlc) from the latest checkpoints in the checkpoint bucket on moto S3 and
releases exactly what they cover, and without a bucket releases nothing. Plus the pure parts: planning, the item ->
row conversion and the DataFrame transforms (the read side's Arrow path: tests/glue/test_flush_arrow.py).
"""

from __future__ import annotations

import json
import threading
import uuid
from collections import Counter
from collections.abc import Iterator
from dataclasses import replace
from typing import TYPE_CHECKING, Any

import pytest

from lakesync.aws.action_store import DynamoDBActionStore
from lakesync.aws.buffer.items import chunk_span
from lakesync.aws.buffer.log_chunks import chunk_first, chunk_key, decode_entries, encode_entries
from lakesync.aws.buffer.store import DynamoDBBufferStore
from lakesync.aws.checkpoints import checkpointed_gateways, read_release_bounds, release_bounds
from lakesync.aws.config_store import DynamoDBConfigStore
from lakesync.aws.flush_store import DynamoConfig, FlushStore, ShardRange, log_record
from lakesync.aws.objects import S3ObjectStore, create_bucket, s3_client
from lakesync.aws.tables import TableNames
from lakesync.core.canonical import stable_stringify
from lakesync.core.checkpoint import checkpoint_id, latest_key, load_manifest
from lakesync.core.delta import make_delta
from lakesync.core.errors import BackpressureError, CursorExpiredError, FlushError
from lakesync.core.hlc import HLC, system_clock
from lakesync.core.lake_work import choose_flush_engine, flush_backlog
from lakesync.core.log import LogEntry, ShardHead, ShardId
from lakesync.core.materialise import MaterialiseJob, decode_payload
from lakesync.core.messages import SyncPush
from lakesync.gateway import admin
from lakesync.gateway.checkpoint import write_checkpoint
from lakesync.gateway.cursor import encode_cursor
from lakesync.gateway.deps import GatewayDeps, GatewaySettings
from lakesync.gateway.pull import pull
from lakesync.gateway.push import push
from lakesync.lake.flush import FlushReport, run_flush
from lakesync.lake.iceberg_flush import IcebergDeltaLog
from lakesync.lake.tables import FLUSH_WATERMARKS
from lakesync.spark.flush import (
    DELTA_LOG_SCHEMA,
    FAIL_POINTS,
    JOB_OPTIONS,
    RECORD_SCHEMA,
    FlushConfig,
    FlushJobArgs,
    InjectedFailure,
    delta_log_frame,
    plan_flush,
    read_watermarks,
)
from lakesync.spark.flush import run as spark_run
from lakesync.spark.glue import resolved_options

if TYPE_CHECKING:
    from pyiceberg.catalog import Catalog
    from pyspark.sql import SparkSession

GATEWAYS = ("gw1", "gw2")
CREDENTIALS = {"AWS_ACCESS_KEY_ID": "testing", "AWS_SECRET_ACCESS_KEY": "testing", "AWS_DEFAULT_REGION": "us-east-1"}
HOUR_MS = 3600 * 1000
EntryKey = tuple[str, int]


# -- fixtures ------------------------------------------------------------------------------------------------------


ENGINES = ("spark", "pyiceberg")
"""Every test that runs the flush runs it with each engine (lakesync.spark.flush on the Glue job's Spark, and
lakesync.lake.iceberg_flush in one process); the checks read the lake through Spark either way."""
_engine: dict[str, Any] = {}


def pytest_generate_tests(metafunc: pytest.Metafunc) -> None:
    if (
        "spark" in metafunc.fixturenames
        and metafunc.function.__name__.startswith("test_flush")
        and "foreign" not in metafunc.function.__name__
    ):
        metafunc.parametrize("flush_engine", ENGINES, indirect=True)


@pytest.fixture
def flush_engine(request: pytest.FixtureRequest, lake_catalog: Catalog) -> Iterator[str]:
    _engine.update(name=request.param, catalog=lake_catalog)
    yield request.param
    _engine.clear()


def run(spark: SparkSession, config: FlushConfig, **kwargs: Any) -> FlushReport:
    """The flush with the test's engine (Spark when the test is not parametrized by engine)."""
    if _engine.get("name") == "pyiceberg":
        return run_flush(IcebergDeltaLog(_engine["catalog"], config, threads=3), config, **kwargs)
    return spark_run(spark, config, **kwargs)


@pytest.fixture
def deps(dynamodb_client: Any, dynamodb_tables: Any) -> GatewayDeps:
    return GatewayDeps(
        buffer=DynamoDBBufferStore(dynamodb_client, dynamodb_tables),
        config=DynamoDBConfigStore(dynamodb_client, dynamodb_tables),
        actions=DynamoDBActionStore(dynamodb_client, dynamodb_tables),
        settings=GatewaySettings(gateway_ids=frozenset(GATEWAYS), sub_shards={"todos": 2}),
        clock=HLC(),
    )


@pytest.fixture
def store(dynamodb_client: Any, dynamodb_tables: Any) -> FlushStore:
    return FlushStore(dynamodb_client, dynamodb_tables)


@pytest.fixture
def config(moto_endpoint: str, dynamodb_tables: Any, lake_namespace: str) -> FlushConfig:
    dynamo = DynamoConfig(
        tables=dynamodb_tables,
        endpoint_url=moto_endpoint,
        region="us-east-1",
        access_key_id="testing",
        secret_access_key="testing",
    )
    return FlushConfig(dynamodb=dynamo, namespace=lake_namespace, range_size=40)


# -- helpers -------------------------------------------------------------------------------------------------------


class Writer:
    """Pushes realistic batches (inserts, sparse updates, deletes; several value types) through the push service."""

    def __init__(self, deps: GatewayDeps) -> None:
        self.deps = deps
        self.clock = HLC()
        self.n = 0

    def push(self, gateway: str, count: int, table: str = "todos") -> None:
        deltas = []
        for _ in range(count):
            self.n += 1
            i = self.n
            row = f"r{i % 17}"
            if i % 11 == 0:
                deltas.append(make_delta("DELETE", table=table, row_id=row, client_id="c1", hlc=self.clock.now()))
            else:
                values = {"title": f"tâche {i}", "n": i / 4, "done": i % 2 == 0, "tags": {"b": [i], "a": None}}
                cols = dict(list(values.items())[: 1 + i % 4])
                op = "INSERT" if i % 3 else "UPDATE"
                deltas.append(
                    make_delta(op, table=table, row_id=row, client_id="c1", hlc=self.clock.now(), columns=cols)
                )
        push(self.deps, gateway, SyncPush("c1", tuple(deltas)), client_id="c1")


def buffer_log(deps: GatewayDeps) -> dict[EntryKey, tuple[Any, ...]]:
    """Every log entry still in the buffer, as the delta log should hold it, keyed by (shard, seq)."""
    out = {}
    for gateway in GATEWAYS:
        for shard in deps.buffer.list_shards(gateway):
            for e in deps.buffer.read_log(shard, 0, 1_000_000):
                d = e.delta
                cols = [(c.column, stable_stringify(c.value)) for c in d.columns]
                out[(shard.key, e.seq)] = (
                    d.op.value,
                    d.table,
                    d.row_id,
                    d.client_id,
                    d.hlc,
                    d.delta_id,
                    cols,
                    e.commit_hlc,
                )
    return out


def buffer_keys(deps: GatewayDeps) -> set[EntryKey]:
    """(shard, seq) of every entry the deltas table holds that is not marked released (a scan of the chunk items:
    sees items behind a gap too). Release is a mark on the head; the items themselves expire by TTL."""
    buffer = deps.buffer
    assert isinstance(buffer, DynamoDBBufferStore)
    client, names = buffer._db, buffer._t
    items = client.scan(
        TableName=names.deltas, ProjectionExpression="#sh, seq, n", ExpressionAttributeNames={"#sh": "shard"}
    )["Items"]
    released = {s.key: h.released_seq for s, h in all_heads(deps).items()}
    return {
        (i["shard"]["S"], seq)
        for i in items
        for seq in range(chunk_first(int(i["seq"]["N"])), chunk_first(int(i["seq"]["N"])) + int(i["n"]["N"]))
        if seq > released.get(i["shard"]["S"], 0)
    }


def expire_released(deps: GatewayDeps, shard: ShardId) -> None:
    """Delete the chunk items whose entries are all released, as DynamoDB's TTL eventually does."""
    buffer = deps.buffer
    assert isinstance(buffer, DynamoDBBufferStore)
    released = all_heads(deps)[shard].released_seq
    for item in buffer._db.query(
        TableName=buffer._t.deltas,
        KeyConditionExpression="#sh = :s",
        ExpressionAttributeNames={"#sh": "shard"},
        ExpressionAttributeValues={":s": {"S": shard.key}},
    )["Items"]:
        if chunk_first(int(item["seq"]["N"])) + int(item["n"]["N"]) - 1 <= released:
            buffer._db.delete_item(TableName=buffer._t.deltas, Key={"shard": item["shard"], "seq": item["seq"]})


def drop_entries(client: Any, table: str, shard: ShardId, seqs: range) -> None:
    """Make the entries ``seqs`` of ``shard`` vanish from the log (as a restore or a lost write would), keeping every
    other entry of the chunk items that hold them."""
    items = client.query(
        TableName=table,
        KeyConditionExpression="#sh = :s",
        ExpressionAttributeNames={"#sh": "shard"},
        ExpressionAttributeValues={":s": {"S": shard.key}},
        ConsistentRead=True,
    )["Items"]
    for item in items:
        first, count, first_hlc = chunk_span(item)
        if not any(first <= seq < first + count for seq in seqs):
            continue
        client.delete_item(TableName=table, Key={"shard": item["shard"], "seq": item["seq"]})
        kept = [e for e in decode_entries(shard, first, first_hlc, item["z"]["B"]) if e.seq not in seqs]
        # What remains stays in chunks of consecutive entries, as commits store them.
        runs: list[list[LogEntry]] = []
        for entry in kept:
            if runs and runs[-1][-1].seq + 1 == entry.seq:
                runs[-1].append(entry)
            else:
                runs.append([entry])
        for part in runs:
            client.put_item(
                TableName=table,
                Item={
                    **item,
                    "seq": {"N": str(chunk_key(part[0].seq))},
                    "n": {"N": str(len(part))},
                    "c": {"N": str(part[0].commit_hlc)},
                    "chlc": {"N": str(part[-1].commit_hlc)},
                    "z": {"B": encode_entries(part)},
                    # the commit HLC of the entry before the part (the chunk's own `pv` for its first part)
                    **({"pv": {"N": str(part[0].commit_hlc - 1)}} if part[0].seq > first else {}),
                },
            )


def lake_log(spark: SparkSession, config: FlushConfig) -> Counter[EntryKey]:
    rows = spark.sql(f"SELECT shard, seq FROM {config.table}").collect()
    return Counter((r["shard"], r["seq"]) for r in rows)


def lake_rows(spark: SparkSession, config: FlushConfig) -> dict[EntryKey, tuple[Any, ...]]:
    rows = spark.sql(
        f"SELECT shard, seq, op, tbl, row_id, client_id, hlc, delta_id, columns, commit_hlc FROM {config.table}"
    ).collect()
    return {
        (r["shard"], r["seq"]): (
            r["op"],
            r["tbl"],
            r["row_id"],
            r["client_id"],
            r["hlc"],
            r["delta_id"],
            [(c["name"], c["value"]) for c in r["columns"]],
            r["commit_hlc"],
        )
        for r in rows
    }


def all_heads(deps: GatewayDeps) -> dict[ShardId, ShardHead]:
    shards = [s for gw in GATEWAYS for s in deps.buffer.list_shards(gw)]
    return deps.buffer.get_heads(shards)


def snapshot_count(spark: SparkSession, config: FlushConfig) -> int:
    return int(spark.sql(f"SELECT count(*) FROM {config.table}.snapshots").collect()[0][0])


def assert_exactly_once(spark: SparkSession, config: FlushConfig, deps: GatewayDeps, expected: set[EntryKey]) -> None:
    """The lake holds exactly ``expected`` once each, the heads say everything is flushed, the watermarks agree."""
    log = lake_log(spark, config)
    assert sorted(k for k, n in log.items() if n > 1) == []
    assert set(log) == expected
    heads = all_heads(deps)
    for shard, head in heads.items():
        in_lake = sorted(seq for s, seq in log if s == shard.key)
        assert in_lake[-1] == head.seq == head.flushed_seq
        assert head.flushed_deltas == head.deltas_total == len(in_lake)
        assert head.flushed_bytes == head.bytes_total
    marks, _ = read_watermarks(spark, config.table)
    assert marks == {s.key: h.seq for s, h in heads.items()}


def published_keys(claim_check: Any) -> set[EntryKey]:
    """(shard, seq) of every entry in the materialisation jobs now on the queue (payloads checked), consumed."""
    out = set()
    for message in claim_check.receive_all():
        job = MaterialiseJob.from_message(message["Body"])
        data = claim_check.s3.get_object(Bucket=job.bucket, Key=job.key)["Body"].read()
        assert len(decode_payload(job, data)) == job.hi - job.lo
        out |= {(job.shard, seq) for seq in range(job.lo + 1, job.hi + 1)}
    return out


def later(ms: int) -> Any:
    return lambda: system_clock() + ms


# -- the pure parts ------------------------------------------------------------------------------------------------


def _head(key: str, seq: int, flushed: int = 0) -> ShardHead:
    return ShardHead(ShardId.parse(key), seq=seq, flushed_seq=flushed)


def test_plan_flush_reads_each_shard_from_the_greater_of_watermark_and_flushed_seq() -> None:
    # Given shard a flushed by the heads to 3 but the lake at 5 (a crash after the append), shard b behind the heads
    heads = {h.shard: h for h in (_head("g#a#0", 9, flushed=3), _head("g#b#0", 4, flushed=2))}

    # When planning with watermarks that also name a shard of another gateway
    plan = plan_flush({"g#a#0": 5, "other#t#0": 7}, heads)

    # Then a is read from 5, b from its flushed seq, and every watermark is carried into the new ones
    assert [(p.shard.key, p.start, p.end) for p in plan.shards] == [("g#a#0", 5, 9), ("g#b#0", 2, 4)]
    assert plan.watermarks == {"g#a#0": 9, "g#b#0": 4, "other#t#0": 7}
    assert plan.deltas == 6
    assert plan.ranges(3) == [ShardRange("g#a#0", 5, 8), ShardRange("g#a#0", 8, 9), ShardRange("g#b#0", 2, 4)]


def test_plan_flush_cap_shares_the_budget_so_no_shard_starves() -> None:
    # Given a hot shard (100 pending), a quiet one (2) and a medium one (10)
    heads = {h.shard: h for h in (_head("g#hot#0", 100), _head("g#quiet#0", 2), _head("g#mid#0", 10))}

    # When the run may append 20 entries
    plan = plan_flush({}, heads, max_deltas=20)

    # Then the quiet shard gets all it has and the rest is split between the others
    taken = {p.shard.table: p.deltas for p in plan.shards}
    assert taken == {"quiet": 2, "mid": 9, "hot": 9}
    assert plan.watermarks == {"g#hot#0": 9, "g#quiet#0": 2, "g#mid#0": 9}


def test_plan_flush_refuses_a_watermark_ahead_of_the_head() -> None:
    # Given a lake that holds shard a up to 50 while the buffer's head is at 3 (a recreated buffer)
    heads = {h.shard: h for h in (_head("g#a#0", 3),)}

    # When/Then planning fails loudly instead of skipping the new entries
    with pytest.raises(FlushError, match="recreated"):
        plan_flush({"g#a#0": 50}, heads)


def test_flush_job_args_parse_glue_options_into_a_config() -> None:
    # Given the options a Glue job run passes
    names = TableNames.with_prefix("prod")
    options = {
        "tables": json.dumps(names.as_dict()),
        "warehouse": "s3://lake/warehouse",
        "gateways": "gw1,gw2",
        "retention_ms": "3600000",
        "max_deltas_per_run": "500000",
    }

    # When parsed
    args = FlushJobArgs.parse(options)

    # Then they become the run's config, Glue catalog by default, credentials from the role
    assert (args.warehouse, args.catalog_kind, args.catalog_uri) == ("s3://lake/warehouse", "glue", None)
    assert args.config == FlushConfig(
        dynamodb=DynamoConfig(names), gateways=("gw1", "gw2"), retention_ms=3_600_000, max_deltas_per_run=500_000
    )
    # And a prefix works too, while missing or malformed options are refused
    local = FlushJobArgs.parse({"table_prefix": "prod", "warehouse": "w", "catalog": "local", "catalog_uri": "c.db"})
    assert (local.config.dynamodb.tables, local.catalog_kind, local.config.gateways) == (names, "local", None)
    for bad in ({"warehouse": "w"}, {"table_prefix": "p"}, {"table_prefix": "p", "warehouse": "w", "catalog": "x"}):
        with pytest.raises(ValueError):
            FlushJobArgs.parse(bad)


def test_released_log_in_memory_expires_older_positions_and_survives_commits() -> None:
    from lakesync.gateway.memory import InMemoryActionStore, InMemoryBufferStore, InMemoryConfigStore

    # Given 12 entries in the in-memory buffer and a client that consumed 4
    buffer = InMemoryBufferStore()
    deps = GatewayDeps(
        buffer, InMemoryConfigStore(), InMemoryActionStore(), GatewaySettings(gateway_ids=frozenset(GATEWAYS))
    )
    writer = Writer(deps)
    writer.push("gw1", 12, table="notes")
    shard = ShardId("gw1", "notes")
    early = pull(deps, "gw1", limit=4, claims={})
    at_six = deps.buffer.read_log(shard, 5, 1)[0]

    # When the log is released through seq 6 and more is pushed afterwards
    buffer.release_log(shard, 6)
    writer.push("gw1", 3, table="notes")

    # Then the head keeps the marks across the commit, and positions behind them expire
    head = buffer.get_heads([shard])[shard]
    assert (head.released_seq, head.released_hlc, head.seq) == (6, at_six.commit_hlc, 15)
    for kwargs in ({"cursor": early.cursor}, {}, {"since": at_six.commit_hlc - 1}):
        with pytest.raises(CursorExpiredError):
            pull(deps, "gw1", limit=100, claims={}, **kwargs)
    # And positions at or past them keep working
    # (every row changed after it that a client could hold: a delete of a row that never existed sends nothing)
    after_six = {e.delta.row_id for e in buffer.read_log(shard, 6, 100) if e.before is not None or e.after is not None}
    assert {d.row_id for d in pull(deps, "gw1", limit=100, claims={}, since=at_six.commit_hlc).deltas} == after_six
    cursor = encode_cursor({shard.key: 6})
    assert [d.delta_id for d in pull(deps, "gw1", limit=100, claims={}, cursor=cursor).deltas] == [
        e.delta.delta_id for e in buffer.read_log(shard, 6, 100)
    ]


@pytest.mark.integration
def test_log_record_converts_a_stored_item_to_the_delta_log_columns(
    deps: GatewayDeps, dynamodb_client: Any, dynamodb_tables: Any
) -> None:
    # Given one pushed insert with several value types
    clock = HLC()
    delta = make_delta(
        "INSERT",
        table="notes",
        row_id="n1",
        client_id="c1",
        hlc=clock.now(),
        columns={"b": 1.5, "a": {"z": 1, "y": [True]}},
    )
    push(deps, "gw1", SyncPush("c1", (delta,)), client_id="c1")
    item = dynamodb_client.get_item(
        TableName=dynamodb_tables.deltas, Key={"shard": {"S": "gw1#notes#0"}, "seq": {"N": str(chunk_key(1))}}
    )["Item"]
    (entry,) = decode_entries(ShardId.parse("gw1#notes#0"), 1, int(item["c"]["N"]), item["z"]["B"])

    # When the entry is converted
    record = log_record(entry)

    # Then values are canonical JSON in delta order, commit_ms is the commit HLC's wall time, size is as stored
    chlc = int(item["c"]["N"])  # the chunk's first commit HLC, its only entry's (only marks carry "chlc")
    assert record == {
        "gateway": "gw1", "tbl": "notes", "row_id": "n1", "op": "INSERT", "client_id": "c1", "hlc": delta.hlc,
        "delta_id": delta.delta_id,
        "columns": [{"name": "b", "value": "1.5"}, {"name": "a", "value": '{"y":[true],"z":1}'}],
        "shard": "gw1#notes#0", "seq": 1, "commit_hlc": chlc, "commit_ms": chlc >> 16, "size": entry.size,
    }  # fmt: skip
    assert entry.size == len(entry.wire_json or "")


# -- DataFrame transforms ------------------------------------------------------------------------------------------


@pytest.mark.spark
def test_delta_log_frame_matches_the_table_ddl(spark: SparkSession, config: FlushConfig) -> None:
    from lakesync.spark.flush import _ensure_table

    # Given buffer records of two shards
    ms = 1_735_776_000_123
    records = spark.createDataFrame(
        [
            ("g", "t", "r1", "INSERT", "c", 7, "d1", [("a", "1")], "g#t#0", 1, 70, ms, 30),
            ("g", "t", "r2", "DELETE", "c", 8, "d2", [], "g#t#0", 2, 80, ms, 12),
            ("g", "u", "r1", "UPDATE", "c", 9, "d3", [("b", '"x"')], "g#u#0", 5, 90, ms + 1, 40),
        ],
        RECORD_SCHEMA,
    )

    # When transformed
    frame = delta_log_frame(records)

    # Then the frame has the delta log's columns and types -- the ones the DDL creates -- with commit_ts from the ms
    _ensure_table(spark, config)
    table = spark.table(config.table).schema
    assert [(f.name, f.dataType) for f in frame.schema] == [(f.name, f.dataType) for f in table]
    assert table == DELTA_LOG_SCHEMA
    got = frame.orderBy("hlc").selectExpr("delta_id", "unix_millis(commit_ts)").collect()
    assert [tuple(r) for r in got] == [("d1", ms), ("d2", ms), ("d3", ms + 1)]


# -- the job -------------------------------------------------------------------------------------------------------


@pytest.mark.spark
def test_flush_appends_every_entry_once_in_one_snapshot_with_watermarks(
    flush_engine: str, spark: SparkSession, config: FlushConfig, deps: GatewayDeps, store: FlushStore
) -> None:
    # Given pushes to two gateways, a sub-sharded table and a plain one
    writer = Writer(deps)
    writer.push("gw1", 70)
    writer.push("gw1", 12, table="notes")
    writer.push("gw2", 30)
    expected = buffer_log(deps)

    # When the flush runs
    report = run(spark, config)

    # Then every entry is in the lake exactly once, with the buffer's content, in one snapshot
    assert lake_rows(spark, config) == expected
    assert_exactly_once(spark, config, deps, set(expected))
    assert snapshot_count(spark, config) == 1
    summary = spark.sql(f"SELECT summary FROM {config.table}.snapshots").collect()[0][0]
    assert json.loads(summary[FLUSH_WATERMARKS]) == {s.key: h.seq for s, h in all_heads(deps).items()}
    # And the report adds up
    heads = all_heads(deps)
    assert report.deltas == len(expected) and report.shards == len(heads) == report.heads_advanced
    assert report.bytes == sum(h.bytes_total for h in heads.values())
    assert report.snapshot_id is not None and report.released == 0
    assert {"lease", "plan", "write", "heads", "requests", "release", "total"} <= set(report.durations_ms)
    # And commit_ts is the commit HLC's wall time
    rows = spark.sql(f"SELECT commit_hlc, unix_millis(commit_ts) AS ms FROM {config.table}").collect()
    assert all(r["ms"] == r["commit_hlc"] >> 16 for r in rows)
    # And the lease is gone
    assert store.lease() is None


@pytest.mark.spark
def test_flush_crash_at_every_step_then_rerun_holds_every_entry_exactly_once(
    flush_engine: str, spark: SparkSession, config: FlushConfig, deps: GatewayDeps, store: FlushStore, claim_check: Any
) -> None:
    # Given a first flush, publishing materialisation jobs
    writer = Writer(deps)
    writer.push("gw1", 40)
    writer.push("gw2", 10)
    flush = replace(config, retention_ms=0, range_size=5000, publish=claim_check.publish_config(), publish_range_size=7)
    run(spark, flush)
    expected = buffer_keys(deps)
    published = published_keys(claim_check)
    assert published == expected
    for point in FAIL_POINTS:
        # Given more pushes, a flush request, and a checkpoint covering everything so far
        writer.push("gw1", 20)
        writer.push("gw2", 5, table="notes")
        admin.request_flush(deps, "gw1", requested_by="test")
        expected |= buffer_keys(deps)
        positions = {s.key: h.seq for s, h in all_heads(deps).items()}
        release = {"checkpoint_positions": positions, "now_ms": later(HOUR_MS)}

        # When the flush crashes at the step
        with pytest.raises(InjectedFailure):
            run(spark, flush, fail_at=point, **release)

        # Then the lease was given up, and pushes continue
        assert store.lease() is None, point
        writer.push("gw1", 4)
        expected |= buffer_keys(deps)
        # And a rerun repairs everything: each entry once, heads equal to the log, requests cleared
        report = run(spark, flush, **release)
        assert report.snapshot_id is not None, point  # the 4 entries pushed after the crash
        assert_exactly_once(spark, config, deps, expected)
        assert deps.config.list_flush_requests("gw1") == [], point
        # And the items covered by the checkpoint were released, the rest kept
        assert buffer_keys(deps) == {k for k in expected if k[1] > positions.get(k[0], 0)}, point
        assert {s.key: h.released_seq for s, h in all_heads(deps).items()} == positions, point
        # And every entry was published for materialisation, each in a payload that holds it
        published |= published_keys(claim_check)
        assert published == expected, point
        assert {s.key: h.published_seq for s, h in all_heads(deps).items()} == {
            s.key: h.seq for s, h in all_heads(deps).items()
        }


@pytest.mark.spark
def test_flush_range_with_a_missing_entry_fails_before_any_commit(
    flush_engine: str,
    spark: SparkSession,
    config: FlushConfig,
    deps: GatewayDeps,
    store: FlushStore,
    dynamodb_client: Any,
) -> None:
    # Given entries in three shards, and one entry in the middle of the busiest shard gone from the buffer
    writer = Writer(deps)
    writer.push("gw1", 30)
    writer.push("gw2", 10)
    before = all_heads(deps)
    shard = max(before, key=lambda s: before[s].seq)
    assert before[shard].seq >= 5
    drop_entries(dynamodb_client, config.dynamodb.tables.deltas, shard, range(4, 5))

    # When the flush runs, it fails naming the gap
    with pytest.raises(FlushError, match=rf"nothing was committed: the log of shard '{shard.key}' has a gap"):
        run(spark, config)

    # Then nothing was committed (the other shards' ranges neither), no head moved, and the lease is free
    assert snapshot_count(spark, config) == 0
    assert all_heads(deps) == before
    assert store.lease() is None


@pytest.mark.spark
def test_flush_with_nothing_new_makes_no_snapshot(
    flush_engine: str, spark: SparkSession, config: FlushConfig, deps: GatewayDeps
) -> None:
    # Given a flushed buffer
    Writer(deps).push("gw1", 20)
    run(spark, config)
    before = snapshot_count(spark, config)

    # When the flush runs again with nothing new
    report = run(spark, config)

    # Then no snapshot is made and nothing moves
    assert snapshot_count(spark, config) == before == 1
    assert (report.snapshot_id, report.deltas, report.heads_advanced) == (None, 0, 0)
    heads = {s.key: h.seq for s, h in all_heads(deps).items()}
    assert report.watermarks == read_watermarks(spark, config.table)[0] == heads


@pytest.mark.spark
def test_flush_cap_spreads_a_backlog_over_runs_exactly_once(
    flush_engine: str, spark: SparkSession, config: FlushConfig, deps: GatewayDeps
) -> None:
    # Given 70 entries over three shards
    writer = Writer(deps)
    writer.push("gw1", 50)
    writer.push("gw2", 20)
    expected = set(buffer_log(deps))
    capped = replace(config, max_deltas_per_run=40)

    # When capped runs go until nothing is left
    appended = []
    while (report := run(spark, capped)).deltas:
        appended.append(report.deltas)

    # Then each run stayed under the cap and the lake holds everything once
    assert appended == [40, len(expected) - 40]
    assert_exactly_once(spark, config, deps, expected)


@pytest.mark.spark
def test_flush_lease_refuses_a_second_run_until_it_expires(
    flush_engine: str, spark: SparkSession, config: FlushConfig, deps: GatewayDeps, store: FlushStore
) -> None:
    # Given entries and a lease held by a run that died without giving it up
    Writer(deps).push("gw1", 10)
    now = system_clock()
    assert store.acquire_lease("dead-run", now, 60_000)

    # When another run starts, it is refused and writes nothing
    with pytest.raises(FlushError, match="already in progress"):
        run(spark, config, now_ms=lambda: now + 1000)
    assert store.lease() is not None and store.lease().owner == "dead-run"  # type: ignore[union-attr]
    assert all(h.flushed_seq == 0 for h in all_heads(deps).values())

    # Then once the lease has expired the next run takes it over and flushes
    report = run(spark, config, now_ms=lambda: now + 60_000)
    assert report.deltas == 10
    assert store.lease() is None


def _rewrite(spark: SparkSession, table: str, watermarks: dict[str, int]) -> None:
    """A maintenance-style rewrite ("replace" snapshot) carrying the given flush watermarks."""
    jvm: Any = spark.sparkContext._jvm
    iceberg = jvm.org.apache.iceberg.spark.Spark3Util.loadIcebergTable(spark._jsparkSession, table)
    action = jvm.org.apache.iceberg.spark.actions.SparkActions.get(spark._jsparkSession).rewriteDataFiles(iceberg)
    action.option("rewrite-all", "true").snapshotProperty(FLUSH_WATERMARKS, json.dumps(watermarks)).execute()


@pytest.mark.spark
def test_flush_snapshot_guard_and_watermarks_around_foreign_snapshots(spark: SparkSession, config: FlushConfig) -> None:
    from lakesync.spark.flush import _append, _ensure_table, _our_snapshot

    def current() -> int:
        snapshot = read_watermarks(spark, config.table)[1]
        assert snapshot is not None
        return snapshot

    # Given flush appends, with a maintenance rewrite between two of them
    _ensure_table(spark, config)
    one = spark.createDataFrame([("g", "t", "r", "INSERT", "c", 1, "d", [], "g#t#0", 1, 1, 0, 1)], RECORD_SCHEMA)
    _append(one, config.table, "base-run", {"g#t#0": 1})
    base = current()
    _rewrite(spark, config.table, {"g#t#0": 1})
    _append(one, config.table, "our-run", {"g#t#0": 2, "g#u#0": 7})

    # When/Then a run that planned from the base accepts its snapshot: a rewrite is not another flush
    ours = current()
    assert _our_snapshot(spark, config.table, "our-run", base) == ours

    # When a rewrite then carries older watermarks than the newest flush (it read them before that flush committed)
    _rewrite(spark, config.table, {"g#t#0": 1})

    # Then the watermarks are still the greatest committed per shard
    rewritten = current()
    assert rewritten != ours
    assert read_watermarks(spark, config.table) == ({"g#t#0": 2, "g#u#0": 7}, rewritten)

    # When another flush appends between a run's plan and its own append, the run refuses to go on
    _append(one, config.table, "intruder", {"g#t#0": 3, "g#u#0": 7})
    intruder = current()
    _append(one, config.table, "late-run", {"g#t#0": 4, "g#u#0": 7})
    with pytest.raises(FlushError, match="another flush"):
        _our_snapshot(spark, config.table, "late-run", rewritten)
    assert _our_snapshot(spark, config.table, "late-run", intruder) == current()
    with pytest.raises(FlushError, match="not in the history"):
        _our_snapshot(spark, config.table, "no-such-run", base)


@pytest.mark.spark
def test_flush_relieves_backpressure(
    flush_engine: str, spark: SparkSession, config: FlushConfig, deps: GatewayDeps
) -> None:
    # Given a gateway whose buffer limit is reached
    deps.settings = GatewaySettings(gateway_ids=frozenset(GATEWAYS), flush_threshold_bytes=2000)
    writer = Writer(deps)
    with pytest.raises(BackpressureError):
        for _ in range(20):
            writer.push("gw1", 10, table="notes")
    head = all_heads(deps)[ShardId("gw1", "notes")]
    assert head.unflushed_bytes >= deps.settings.backpressure_limit
    requests = deps.config.list_flush_requests("gw1")
    assert requests  # crossing the threshold asked for a flush

    # When the flush runs
    run(spark, config, now_ms=later(1000))

    # Then the unflushed bytes and the requests are gone, and pushes are accepted again
    assert all_heads(deps)[ShardId("gw1", "notes")].unflushed_bytes == 0
    assert deps.config.list_flush_requests("gw1") == []
    writer.push("gw1", 10, table="notes")


@pytest.mark.spark
def test_release_deletes_only_flushed_checkpointed_old_items_and_old_cursors_expire(
    spark: SparkSession, config: FlushConfig, deps: GatewayDeps
) -> None:
    # Given 30 entries in one shard and a client that consumed 10 of them
    writer = Writer(deps)
    writer.push("gw1", 30, table="notes")
    shard = ShardId("gw1", "notes")
    early = pull(deps, "gw1", limit=10, claims={})
    old_since = deps.buffer.read_log(shard, 0, 1)[0].commit_hlc

    # When flushes run within the retention, and past it without checkpoint positions
    run(spark, config, checkpoint_positions={shard.key: 20})
    run(spark, config, now_ms=later(2 * 24 * HOUR_MS))

    # Then nothing is released
    assert len(buffer_keys(deps)) == 30 and all_heads(deps)[shard].released_seq == 0

    # When 5 more arrive, a client catches up, and a capped flush (2 entries) runs past the retention with a
    # checkpoint covering everything
    writer.push("gw1", 5, table="notes")
    late = pull(deps, "gw1", limit=1000, claims={})
    capped = replace(config, max_deltas_per_run=2)
    report = run(spark, capped, checkpoint_positions={shard.key: 40}, now_ms=later(2 * 24 * HOUR_MS))

    # Then exactly the flushed entries are released (the 3 not yet flushed stay) and the head says so
    assert buffer_keys(deps) == {(shard.key, seq) for seq in (33, 34, 35)}
    head = all_heads(deps)[shard]
    assert (head.released_seq, report.released) == (32, 32)
    assert head.released_hlc == deps.buffer.read_log(shard, 32, 1)[0].commit_hlc - 1
    # And `since` pulls from behind the released part are told to reload the checkpoint at once
    for kwargs in ({"since": old_since}, {"since": 0}):
        with pytest.raises(CursorExpiredError) as caught:
            pull(deps, "gw1", limit=100, claims={}, **kwargs)
        assert (caught.value.status, caught.value.api_code) == (410, "CURSOR_EXPIRED")
    # And a cursor behind it is served the entries the buffer still holds (released items stay until their TTL
    # deletes them), none skipped
    behind = pull(deps, "gw1", limit=100, claims={}, cursor=early.cursor)
    assert [d.delta_id for d in behind.deltas] == [e.delta.delta_id for e in deps.buffer.read_log(shard, 10, 100)]
    # And once TTL has deleted the released items, cursors behind the marks are told to reload the checkpoint
    expire_released(deps, shard)
    for kwargs in ({"cursor": early.cursor}, {}, {"since": old_since}, {"since": 0}):
        with pytest.raises(CursorExpiredError) as caught:
            pull(deps, "gw1", limit=100, claims={}, **kwargs)
        assert (caught.value.status, caught.value.api_code) == (410, "CURSOR_EXPIRED")
        assert "checkpoint" in caught.value.message
    # And the client that had caught up keeps going with its cursor
    writer.push("gw1", 3, table="notes")
    rest = pull(deps, "gw1", limit=100, claims={}, cursor=late.cursor)
    assert [d.delta_id for d in rest.deltas] == [e.delta.delta_id for e in deps.buffer.read_log(shard, 35, 10)]
    assert len(rest.deltas) == 3


@pytest.mark.spark
def test_flush_clears_only_requests_recorded_before_it_started(
    flush_engine: str, spark: SparkSession, config: FlushConfig, deps: GatewayDeps
) -> None:
    # Given a request before the run and one stamped after its start
    Writer(deps).push("gw2", 5)
    now = system_clock()
    deps.config.request_flush("gw2", {"id": "old", "atMs": now - 5})
    deps.config.request_flush("gw2", {"id": "new", "atMs": now + 60_000})

    # When the flush runs
    report = run(spark, config, now_ms=lambda: now)

    # Then only the earlier request is gone
    assert report.requests_cleared == 1
    assert [r["id"] for r in deps.config.list_flush_requests("gw2")] == ["new"]


# -- release bounds from the checkpoint bucket (the Glue entry path) ----------------------------------------------


@pytest.fixture
def checkpoints(moto_endpoint: str) -> S3ObjectStore:
    """A fresh checkpoint bucket on the moto server."""
    client = s3_client(
        endpoint_url=moto_endpoint,
        region_name="us-east-1",
        aws_access_key_id="testing",
        aws_secret_access_key="testing",
    )
    bucket = f"cps-{uuid.uuid4().hex[:12]}"
    create_bucket(client, bucket)
    return S3ObjectStore(bucket, client)


def _publish(objects: S3ObjectStore, gateway: str, created_ms: int, positions: dict[str, int], server_hlc: int) -> str:
    """A checkpoint without rows, as the checkpoint job publishes it (manifest, then latest.json)."""
    cid = checkpoint_id(created_ms, uuid.uuid4().hex[:8])
    write_checkpoint(
        objects,
        gateway=gateway,
        checkpoint_id=cid,
        created_at_ms=created_ms,
        positions=positions,
        server_hlc=server_hlc,
        tables=[],
        rows=[],
    )
    return cid


@pytest.mark.integration
def test_release_bounds_come_from_each_gateways_latest_checkpoint(checkpoints: S3ObjectStore) -> None:
    # Given gw1 with two checkpoints, gw3 with a corrupt pointer, gw2 with none
    _publish(checkpoints, "gw1", 1_000, {"gw1#notes#0": 3}, 30)
    latest = _publish(checkpoints, "gw1", 2_000, {"gw1#notes#0": 9, "gw1#todos#1": 4}, 70)
    checkpoints.put(latest_key("gw3"), b"{not json")

    # When the bounds of the three gateways are read
    bounds = release_bounds(checkpoints, ["gw3", "gw2", "gw1"], bucket=checkpoints.bucket)

    # Then only gw1's latest checkpoint counts: its positions, and its serverHlc for each of its shards
    assert bounds.positions == {"gw1#notes#0": 9, "gw1#todos#1": 4}
    assert bounds.hlcs == {"gw1#notes#0": 70, "gw1#todos#1": 70}
    assert bounds.checkpoints == {"gw1": latest}
    # And the others contribute nothing, with the reason
    assert bounds.skipped["gw2"] == "no checkpoint"
    assert bounds.skipped["gw3"].startswith("unreadable checkpoint")
    assert bounds.report() == {
        "bucket": checkpoints.bucket,
        "checkpoints": {"gw1": latest},
        "skipped": dict(sorted(bounds.skipped.items())),
    }
    # And without a gateway list, the gateways with checkpoint folders are read
    assert checkpointed_gateways(checkpoints) == ["gw1", "gw3"]
    assert read_release_bounds(checkpoints.bucket, None, objects=checkpoints) == replace(
        bounds, skipped={"gw3": bounds.skipped["gw3"]}
    )


def test_flush_job_without_checkpoint_bucket_releases_nothing_and_says_so() -> None:
    # Given flush job options without --checkpoint_bucket
    args = FlushJobArgs.parse(resolved_options(JOB_OPTIONS, ["--table_prefix", "p", "--warehouse", "w"]))

    # When its release bounds are read (no S3 call is made without a bucket)
    bounds = args.release_bounds()

    # Then nothing can be released, and the report says why
    assert (bounds.positions, bounds.hlcs, bounds.bucket) == ({}, {}, None)
    assert "nothing is released" in bounds.report()["note"]


@pytest.mark.spark
def test_glue_flush_path_with_checkpoint_bucket_releases_exactly_the_covered_entries(
    spark: SparkSession,
    config: FlushConfig,
    deps: GatewayDeps,
    checkpoints: S3ObjectStore,
    moto_endpoint: str,
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    # Given pushes interleaved across gw1's tables (so commit HLCs interleave across its shards), and gw2's
    writer = Writer(deps)
    writer.push("gw1", 20)
    writer.push("gw1", 10, table="notes")
    writer.push("gw1", 20)
    writer.push("gw1", 10, table="notes")
    writer.push("gw2", 10)
    log = buffer_log(deps)
    notes = ShardId("gw1", "notes").key
    # And a checkpoint of gw1 covering notes up to 5 and all of todos, with serverHlc as the checkpoint job sets it
    # (the smallest commit HLC among the last covered entries): that of notes' 5th entry
    positions = {s.key: (5 if s.key == notes else h.seq) for s, h in all_heads(deps).items() if s.gateway == "gw1"}
    server_hlc = min(log[(shard, seq)][-1] for shard, seq in positions.items())
    cid = _publish(checkpoints, "gw1", system_clock(), positions, server_hlc)

    # When the flush job's options are parsed and its release bounds read, as glue_jobs/flush.py does
    for key, value in CREDENTIALS.items():
        monkeypatch.setenv(key, value)
    argv = ["--JOB_NAME", "flush", "--tables", json.dumps(config.dynamodb.tables.as_dict()), "--warehouse", "w",
            "--dynamodb_endpoint", moto_endpoint, "--region", "us-east-1", "--checkpoint_bucket", checkpoints.bucket,
            "--s3_endpoint", moto_endpoint]  # fmt: skip
    args = FlushJobArgs.parse(resolved_options(JOB_OPTIONS, argv))
    bounds = args.release_bounds()
    # (the executors' clients get the credentials the job role gives them on Glue; the test lake has its namespace)
    job = replace(args.config, namespace=config.namespace, dynamodb=config.dynamodb)
    report = run(
        spark,
        job,
        checkpoint_positions=bounds.positions,
        checkpoint_hlcs=bounds.hlcs,
        now_ms=later(2 * 24 * HOUR_MS),
    )

    # Then the bounds are the checkpoint's
    assert (bounds.positions, bounds.checkpoints) == (positions, {"gw1": cid})
    assert bounds.report()["bucket"] == checkpoints.bucket
    # And exactly the entries the checkpoint lets go (by position and by serverHlc) left the buffer
    manifest = load_manifest(checkpoints.get, "gw1")
    assert manifest is not None
    releasable = {k for k, entry in log.items() if manifest.releasable(k[0], k[1], entry[-1])}
    assert buffer_keys(deps) == set(log) - releasable
    assert report.released == len(releasable) > 0
    # And the serverHlc bound mattered: some todos entries covered by position stay
    assert any(seq <= positions[shard] for shard, seq in buffer_keys(deps) if shard != notes and shard in positions)
    # And every entry is in the lake once; the heads record the release marks
    assert_exactly_once(spark, config, deps, set(log))
    for shard, head in all_heads(deps).items():
        gone = sorted(seq for s, seq in releasable if s == shard.key)
        assert (head.released_seq, head.released_hlc) == (
            (gone[-1], log[(shard.key, gone[-1])][-1]) if gone else (0, 0)
        )


class _BrokenSink:
    """A sink whose every payload write fails (S3 down)."""

    def __init__(self) -> None:
        self.reported: list[int] = []

    def put_payload(self, key: str, data: bytes) -> None:
        raise OSError("S3 unavailable")

    def send(self, job: MaterialiseJob) -> None:
        raise AssertionError("nothing may be sent without its payload")

    def report_failures(self, count: int) -> None:
        self.reported.append(count)


@pytest.mark.spark
def test_flush_whose_publishing_fails_still_commits_keeps_unpublished_items_and_a_rerun_publishes_them(
    flush_engine: str, spark: SparkSession, config: FlushConfig, deps: GatewayDeps, claim_check: Any
) -> None:
    # Given entries, a checkpoint covering them, and S3 failing for the publisher
    writer = Writer(deps)
    writer.push("gw1", 30)
    expected = buffer_keys(deps)
    positions = {s.key: h.seq for s, h in all_heads(deps).items()}
    flush = replace(config, retention_ms=0, publish=claim_check.publish_config(attempts=2))
    broken = _BrokenSink()

    # When the flush runs
    report = run(spark, flush, checkpoint_positions=positions, now_ms=later(HOUR_MS), sink=broken)

    # Then it committed every entry and reported the publishing failure for the alarm, without raising
    assert set(lake_log(spark, config)) == expected
    assert report.publish_failures > 0 and sum(broken.reported) == report.publish_failures
    assert report.published_jobs == 0 and claim_check.receive_all() == []
    # And nothing unpublished was released, so it can still be published
    assert buffer_keys(deps) == expected and report.released == 0

    # When the next run has a working publisher
    report = run(spark, flush, checkpoint_positions=positions, now_ms=later(HOUR_MS))
    # Then everything is published and then released
    assert published_keys(claim_check) == expected
    assert report.snapshot_id is None and report.published_jobs >= 1
    assert buffer_keys(deps) == set()


@pytest.mark.spark
def test_flush_refuses_a_buffer_that_regressed_behind_the_lake(
    flush_engine: str,
    spark: SparkSession,
    config: FlushConfig,
    deps: GatewayDeps,
    store: FlushStore,
    dynamodb_client: Any,
) -> None:
    # Given ten entries of one shard in the lake
    writer = Writer(deps)
    writer.push("gw1", 10, table="notes")
    run(spark, config)
    before = lake_log(spark, config)
    (shard,) = [s for s in all_heads(deps) if s.table == "notes"]
    names = deps.buffer._t  # type: ignore[attr-defined]
    # When the buffer comes back from an older state (entries 7..10 and the head's count lost) ...
    drop_entries(dynamodb_client, names.deltas, shard, range(7, 11))
    dynamodb_client.update_item(
        TableName=names.heads,
        Key={"shard": {"S": shard.key}},
        UpdateExpression="SET seq = :s, fs = :s",
        ExpressionAttributeValues={":s": {"N": "6"}},
    )
    # ... and takes new commits that re-use sequence numbers 7..10
    writer.push("gw1", 8, table="notes")

    # Then the flush refuses to append (it would skip the re-used numbers for ever), and the lake is unchanged
    with pytest.raises(FlushError, match="does not match the delta log at its watermark 10"):
        run(spark, config)
    assert lake_log(spark, config) == before
    assert store.lease() is None

    # When the operator repairs it by rebasing the shard
    repaired = run(spark, replace(config, rebase_shards=(shard.key,)))
    # Then every entry the buffer holds is in the lake (1..6 again, the re-used 7..14 for the first time), the
    # watermark is the head, and the state the lake folds to is the buffer's rows
    assert repaired.watermarks[shard.key] == 14
    rows = lake_rows(spark, config)
    for entry in deps.buffer.read_log(shard, 0, 100):
        assert (shard.key, entry.seq) in rows
    # And the next run finds nothing to repair
    assert run(spark, config).snapshot_id is None


# -- the pyiceberg engine ------------------------------------------------------------------------------------------


def _shape(table: Any) -> tuple[Any, ...]:
    """A table's columns (name, type, required; nested ones too) and partitioning (name, transform, source name)."""
    schema, spec = table.schema(), table.spec()
    return (
        [(f.name, str(f.field_type), f.required) for f in schema.fields],
        [(p.name, str(p.transform), schema.find_field(p.source_id).name) for p in spec.fields],
        table.properties.get("format-version", str(table.format_version)),
        table.properties.get("write.parquet.compression-codec"),
    )


@pytest.mark.spark
def test_iceberg_engine_creates_the_table_spark_creates(
    spark: SparkSession, config: FlushConfig, lake_catalog: Catalog
) -> None:
    # Given the delta log created by the Spark job in one namespace and by the pyiceberg engine in another
    from lakesync.spark.flush import _ensure_table

    _ensure_table(spark, config)
    other = replace(config, namespace=f"{config.namespace}_py")
    IcebergDeltaLog(lake_catalog, other).ensure_table()

    # Then both have the same columns, types, nullability, partitioning and properties
    by_spark = lake_catalog.load_table((config.namespace, "deltas"))
    by_pyiceberg = lake_catalog.load_table((other.namespace, "deltas"))
    assert _shape(by_pyiceberg) == _shape(by_spark)
    # And Spark reads the pyiceberg one with the DDL's schema
    assert spark.table(other.table).schema == DELTA_LOG_SCHEMA


@pytest.mark.spark
def test_engines_take_turns_on_one_delta_log_exactly_once(
    spark: SparkSession, config: FlushConfig, deps: GatewayDeps, lake_catalog: Catalog
) -> None:
    # Given pushes between runs of alternating engines
    writer = Writer(deps)
    expected: dict[EntryKey, tuple[Any, ...]] = {}
    for engine in ("pyiceberg", "spark", "pyiceberg", "spark"):
        writer.push("gw1", 15)
        writer.push("gw2", 6, table="notes")
        expected |= buffer_log(deps)
        # When each engine flushes what is new
        if engine == "spark":
            report = spark_run(spark, config)
        else:
            report = run_flush(IcebergDeltaLog(lake_catalog, config), config)
        assert report.deltas == 21
    # Then the lake holds every entry once, as the buffer holds it, and each run made one snapshot
    assert lake_rows(spark, config) == expected
    assert_exactly_once(spark, config, deps, set(expected))
    assert snapshot_count(spark, config) == 4


@pytest.mark.spark
def test_engines_chosen_by_the_backlog_take_turns_exactly_once_across_crashes(
    spark: SparkSession,
    config: FlushConfig,
    deps: GatewayDeps,
    store: FlushStore,
    lake_catalog: Catalog,
    claim_check: Any,
) -> None:
    # Given the two engines as the lake tick switches between them (the Glue job's Spark flush above the function's
    # backlog limit, pyiceberg as the flush function at or below it), publishing materialisation jobs
    flush = replace(config, retention_ms=0, range_size=5000, publish=claim_check.publish_config(), publish_range_size=7)
    engines: dict[str, Any] = {
        "function": lambda **kw: run_flush(IcebergDeltaLog(lake_catalog, flush, threads=3), flush, **kw),
        "glue": lambda **kw: spark_run(spark, flush, **kw),
    }
    writer = Writer(deps)
    expected: set[EntryKey] = set()
    published: set[EntryKey] = set()
    ran: list[str] = []

    def backlog() -> int:
        return flush_backlog(all_heads(deps).values())

    def flush_with(limit: int, **kwargs: Any) -> FlushReport:
        engine = choose_flush_engine(backlog(), max_backlog=limit)
        ran.append(engine)
        report: FlushReport = engines[engine](**kwargs)
        return report

    # When a large backlog, then a small one, then a large one are flushed, with pushes between (limit 30 entries)
    for gw1, gw2 in ((25, 15), (6, 4), (30, 9)):
        writer.push("gw1", gw1)
        writer.push("gw2", gw2, table="notes")
        expected |= buffer_keys(deps)
        assert flush_with(30).deltas == gw1 + gw2
    # Then the switch gave them to Glue, the function, Glue
    assert ran == ["glue", "function", "glue"]
    assert_exactly_once(spark, config, deps, expected)
    published |= published_keys(claim_check)
    assert published == expected

    for i, point in enumerate(FAIL_POINTS):
        # Given more pushes, a checkpoint covering everything so far, and a run of one engine that crashes at the step
        # (the function on even steps, Glue on odd ones: the limit puts the backlog on its side)
        writer.push("gw1", 8)
        writer.push("gw2", 3, table="notes")
        expected |= buffer_keys(deps)
        positions = {s.key: h.seq for s, h in all_heads(deps).items()}
        release = {"checkpoint_positions": positions, "now_ms": later(HOUR_MS)}
        crashing = ("function", "glue")[i % 2]
        limit = backlog() if crashing == "function" else backlog() - 1
        with pytest.raises(InjectedFailure):
            flush_with(limit, fail_at=point, **release)
        assert store.lease() is None, point
        # When pushes continue and the other engine's run comes next (the backlog on its side of the limit)
        writer.push("gw1", 4)
        expected |= buffer_keys(deps)
        limit = backlog() if crashing == "glue" else backlog() - 1
        report = flush_with(limit, **release)
        # Then it repairs the crash: every entry once in the lake, heads equal to the log, the covered entries
        # released, every entry published
        assert ran[-2:] == [crashing, "glue" if crashing == "function" else "function"], point
        assert report.snapshot_id is not None, point
        assert_exactly_once(spark, config, deps, expected)
        assert {s.key: h.released_seq for s, h in all_heads(deps).items()} == positions, point
        published |= published_keys(claim_check)
        assert published == expected, point


class _LeaseThief:
    """A reader that, on its first range, hands the flush lease to another owner (as an expiry and a takeover
    would), then reads as the store does. The engine reads ranges on several threads: one of them steals."""

    def __init__(self, store: FlushStore) -> None:
        self.store = store
        self.stolen = False
        self._lock = threading.Lock()

    def __call__(self, shard_range: ShardRange) -> Any:
        with self._lock:
            if not self.stolen:
                lease = self.store.lease()
                assert lease is not None
                self.store.release_lease(lease.owner)
                assert self.store.acquire_lease("thief", system_clock(), 60_000)
                self.stolen = True
        return self.store.read_records(shard_range)


@pytest.mark.spark
def test_iceberg_engine_commits_nothing_once_its_lease_is_lost_during_the_write(
    spark: SparkSession, config: FlushConfig, deps: GatewayDeps, store: FlushStore, lake_catalog: Catalog
) -> None:
    # Given entries, and a run whose lease is taken over while it reads them
    Writer(deps).push("gw1", 30)
    before = all_heads(deps)
    thief = _LeaseThief(store)

    # When it gets to its commit, it stops
    with pytest.raises(FlushError, match="lost its lease during the write; nothing was committed"):
        run_flush(IcebergDeltaLog(lake_catalog, config, reader=thief), config, store=store)

    # Then no snapshot was committed, no head moved, and the thief's lease stands
    assert thief.stolen
    assert snapshot_count(spark, config) == 0
    assert all_heads(deps) == before
    assert store.lease() is not None and store.lease().owner == "thief"  # type: ignore[union-attr]
    # And once the lease is free, a run flushes everything once
    store.release_lease("thief")
    run_flush(IcebergDeltaLog(lake_catalog, config), config)
    assert_exactly_once(spark, config, deps, set(buffer_log(deps)))


class _RewriteBeforeCommit(FlushStore):
    """A store whose lease renewal at the commit (the second renewal of a run) first commits a maintenance rewrite
    to the delta log: a snapshot that lands between the write and the commit."""

    def __init__(self, store: FlushStore, rewrite: Any) -> None:
        super().__init__(store._db, store._t)  # type: ignore[attr-defined]
        self.rewrite = rewrite
        self.renewals = 0

    def renew_lease(self, owner: str, now_ms: int, ttl_ms: int) -> bool:
        self.renewals += 1
        if self.renewals == 2:
            self.rewrite()
        return super().renew_lease(owner, now_ms, ttl_ms)


@pytest.mark.spark
def test_iceberg_engine_commits_on_top_of_a_rewrite_that_landed_during_its_write(
    spark: SparkSession, config: FlushConfig, deps: GatewayDeps, store: FlushStore, lake_catalog: Catalog
) -> None:
    # Given a flushed delta log, more entries, and a maintenance rewrite that commits while the next run writes
    writer = Writer(deps)
    writer.push("gw1", 20)
    run_flush(IcebergDeltaLog(lake_catalog, config), config)
    writer.push("gw1", 10)
    marks, _ = read_watermarks(spark, config.table)
    racing = _RewriteBeforeCommit(store, lambda: _rewrite(spark, config.table, marks))

    # When the run commits, the table has moved since its write loaded it
    report = run_flush(IcebergDeltaLog(lake_catalog, config), config, store=racing)

    # Then its append is committed on top of the rewrite (pyiceberg retries an append over a concurrent change),
    # and the lake holds every entry once
    assert racing.renewals >= 2
    snapshots = {s.snapshot_id: s for s in lake_catalog.load_table((config.namespace, "deltas")).metadata.snapshots}
    parent = snapshots[report.snapshot_id].parent_snapshot_id  # type: ignore[index]
    assert snapshots[parent].summary.operation.value == "replace"  # type: ignore[index, union-attr]
    assert report.deltas == 10
    assert_exactly_once(spark, config, deps, set(buffer_log(deps)))
