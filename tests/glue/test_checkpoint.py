"""The checkpoint job (lakesync.spark.checkpoint) on local Spark + Iceberg and moto S3.

State tables are written directly (rows per the DDL, ``_state`` from the core fold of generated histories, snapshots
carrying compaction watermarks that cover a prefix of each shard's log). Focus: a client that loads the checkpoint
holds exactly the core fold of the covered history; checkpoint + the uncovered tail == replaying everything; positions
are the per-shard union of the tables' watermarks; rows are read as of the watermarked snapshot; serverHlc is the
smallest last-covered commit HLC; chunks; unchanged and never-compacted gateways are skipped.
"""

from __future__ import annotations

import importlib.util
import json
import random
import sys
import uuid
from dataclasses import dataclass
from datetime import UTC, datetime
from pathlib import Path
from typing import TYPE_CHECKING, Any

import pytest

from lakesync.aws.objects import S3ObjectStore, create_bucket
from lakesync.core.canonical import stable_stringify
from lakesync.core.checkpoint import group_rows
from lakesync.core.delta import RowDelta, make_delta
from lakesync.core.hlc import encode
from lakesync.core.log import ShardId
from lakesync.core.merge import RowState, fold, merge, state_to_json
from lakesync.gateway.checkpoint import serve
from lakesync.gateway.cursor import decode_cursor
from lakesync.gateway.deps import GatewayDeps
from lakesync.gateway.memory import InMemoryActionStore, InMemoryBufferStore, InMemoryConfigStore
from lakesync.lake.tables import (
    COMPACT_WATERMARKS,
    STATE_SYSTEM_COLUMNS,
    delta_log_ddl,
    qualified,
    state_table,
    state_table_ddl,
)
from lakesync.spark.checkpoint import CheckpointConfig, run
from lakesync.wire.framing import iter_checkpoint_responses

if TYPE_CHECKING:
    from pyspark.sql import SparkSession

pytestmark = pytest.mark.spark

CATALOG = "lake"
T0 = 1_700_000_000_000
GW, OTHER_GW = "gw1", "gw2"
# "Notes" has capitals: its state table has a Glue-safe hashed name the checkpoint job must map back.
SUB_SHARDS = {"todos": 2, "Notes": 1}

ROW_ID = STATE_SYSTEM_COLUMNS[1]


@dataclass(frozen=True, slots=True)
class Entry:
    """One delta-log entry: where it sits in its shard and the effective delta."""

    shard: str
    seq: int
    commit_hlc: int
    delta: RowDelta


@pytest.fixture
def spark_py(spark: SparkSession) -> SparkSession:
    """The shared session, its Python workers running this interpreter (the venv where lakesync is installed)."""
    spark.sparkContext.pythonExec = sys.executable
    return spark


def _state_ddl(ns: str, table: str) -> str:
    return state_table_ddl(CATALOG, table, None, ns)


@pytest.fixture
def store(moto_endpoint: str) -> S3ObjectStore:
    import boto3

    client = boto3.client(
        "s3", endpoint_url=moto_endpoint, region_name="us-east-1", aws_access_key_id="testing",
        aws_secret_access_key="testing",
    )  # fmt: skip
    bucket = f"ckpt-{uuid.uuid4().hex[:12]}"
    create_bucket(client, bucket)
    return S3ObjectStore(bucket, client)


# -- generated history ---------------------------------------------------------------------------------------------


def _log(rnd: random.Random, n: int) -> list[Entry]:
    """A gateway's effective log: random deltas merged into the row index in commit order, logged only if they
    changed it (as the push service does), on sharded tables of two gateways."""
    states: dict[tuple[str, str, str], RowState] = {}
    seqs: dict[str, int] = {}
    log = []
    for i in range(n):
        gateway = rnd.choice([GW, GW, GW, OTHER_GW])
        table = rnd.choice(list(SUB_SHARDS))
        row = f"r{rnd.randrange(8)}"
        columns = {rnd.choice(["title", "done", "user_id"]): rnd.choice([i, None, "x", True, {"k": [i]}])}
        delta = make_delta(
            rnd.choices(["INSERT", "UPDATE", "DELETE"], weights=[3, 5, 2])[0],
            table=table,
            row_id=row,
            client_id=rnd.choice(["a", "b", "\U0001f600"]),
            hlc=encode(T0 + rnd.randrange(i + 1) * 7, rnd.randrange(2)),
            columns=columns,
        )
        result = merge(states.get((gateway, table, row)), delta)
        if result.effective is None:
            continue
        states[(gateway, table, row)] = result.state
        shard = ShardId.for_row(gateway, table, row, SUB_SHARDS[table]).key
        seqs[shard] = seqs.get(shard, 0) + 1
        log.append(Entry(shard, seqs[shard], encode(T0 + 10_000 + i, 0), result.effective))
    return log


def _cut(rnd: random.Random, log: list[Entry]) -> dict[str, int]:
    """Compaction watermarks: a random non-empty prefix of each shard, leaving most shards a tail."""
    lengths: dict[str, int] = {}
    for entry in log:
        lengths[entry.shard] = entry.seq
    return {shard: rnd.randint(1, max(1, n - 2)) for shard, n in lengths.items()}


def _states(entries: list[Entry]) -> dict[tuple[str, str, str], RowState]:
    rows: dict[tuple[str, str, str], list[RowDelta]] = {}
    for e in entries:
        rows.setdefault((e.shard.rsplit("#", 2)[0], e.delta.table, e.delta.row_id), []).append(e.delta)
    folded = {key: fold(deltas) for key, deltas in rows.items()}
    return {key: state for key, state in folded.items() if state is not None}


# -- the lake as compaction would leave it -----------------------------------------------------------------------


def _write_state_tables(
    spark: SparkSession, ns: str, states: dict[tuple[str, str, str], RowState], watermarks: dict[str, int] | None
) -> None:
    """One append per state table, its snapshot carrying the table's watermarks (none when ``watermarks`` is None)."""
    now = datetime.now(UTC)
    for table in SUB_SHARDS:
        name = qualified(CATALOG, state_table(table), ns)
        spark.sql(_state_ddl(ns, table))
        rows = [
            (
                gateway,
                row_id,
                state.exists,
                json.dumps(state_to_json(state)),
                _max_hlc(state),
                None if state.values() is None else json.dumps(state.values()),
                now,
            )
            for (gateway, tbl, row_id), state in sorted(states.items())
            if tbl == table
        ]
        writer = spark.createDataFrame(rows, spark.table(name).schema).writeTo(name)
        if watermarks is not None:
            own = {s: seq for s, seq in watermarks.items() if ShardId.parse(s).table == table}
            writer = writer.option(f"snapshot-property.{COMPACT_WATERMARKS}", json.dumps(own))
        writer.append()


def _max_hlc(state: RowState) -> int:
    versions = [c.hlc for c in state.columns.values()]
    versions += [v.hlc for v in (state.tombstone, state.written) if v is not None]
    return max(versions)


def _write_delta_log(spark: SparkSession, ns: str, entries: list[Entry]) -> None:
    spark.sql(delta_log_ddl(CATALOG, ns))
    name = qualified(CATALOG, "deltas", ns)
    rows = [
        (
            e.shard.rsplit("#", 2)[0],
            e.delta.table,
            e.delta.row_id,
            e.delta.op.value,
            e.delta.client_id,
            e.delta.hlc,
            e.delta.delta_id,
            [(c.column, stable_stringify(c.value)) for c in e.delta.columns],
            e.shard,
            e.seq,
            e.commit_hlc,
            datetime.fromtimestamp((e.commit_hlc >> 16) / 1000, UTC),
        )
        for e in entries
    ]
    spark.createDataFrame(rows, spark.table(name).schema).writeTo(name).append()


# -- loading like a client -------------------------------------------------------------------------------------------


def _load(store: S3ObjectStore, gateway: str) -> tuple[list[RowDelta], dict[str, str]]:
    deps = GatewayDeps(InMemoryBufferStore(), InMemoryConfigStore(), InMemoryActionStore(), objects=store)
    payload = serve(deps, gateway, {}, max_bytes=1 << 30)
    return [d for r in iter_checkpoint_responses(payload.body) for d in r.deltas], payload.headers


def _client(deltas: list[RowDelta]) -> dict[tuple[str, str], RowState]:
    rows: dict[tuple[str, str], list[RowDelta]] = {}
    for delta in deltas:
        rows.setdefault((delta.table, delta.row_id), []).append(delta)
    folded = {key: fold(ds) for key, ds in rows.items()}
    return {key: state for key, state in folded.items() if state is not None}


def _snap(states: dict[tuple[str, str], RowState]) -> dict[tuple[str, str], str]:
    return {key: stable_stringify(state_to_json(state)) for key, state in states.items()}


def _live(states: dict[tuple[str, str], RowState]) -> dict[tuple[str, str], Any]:
    return {key: stable_stringify(state.values()) for key, state in states.items() if state.exists}


def _of(gateway: str, states: dict[tuple[str, str, str], RowState]) -> dict[tuple[str, str], RowState]:
    return {(t, r): s for (g, t, r), s in states.items() if g == gateway}


# -- tests -----------------------------------------------------------------------------------------------------------


# The recent-deletes case keeps the tombstones of the last 98.5 s before the run (T0 + 99 s): those from T0 + 500 ms.
RECENT_HOURS = 98_500 / 3_600_000
RECENT_SINCE = encode(T0 + 500, 0)


@pytest.mark.parametrize(
    ("include_deleted", "within_hours", "seed"),
    [(False, None, 5), (True, None, 11), (True, RECENT_HOURS, 19)],
    ids=["deleted-omitted", "deleted-kept", "deleted-recent"],
)
def test_checkpoint_job_loads_the_core_fold_and_checkpoint_plus_tail_is_full_replay(
    spark_py: SparkSession,
    lake_namespace: str,
    store: S3ObjectStore,
    include_deleted: bool,
    within_hours: float | None,
    seed: int,
) -> None:
    # Given a sharded history of two gateways, compacted up to a prefix of each shard (delta log and state tables)
    rnd = random.Random(seed)
    log = _log(rnd, 160)
    watermarks = _cut(rnd, log)
    covered = [e for e in log if e.seq <= watermarks[e.shard]]
    tail = [e for e in log if e.seq > watermarks[e.shard]]
    _write_delta_log(spark_py, lake_namespace, covered)
    _write_state_tables(spark_py, lake_namespace, _states(covered), watermarks)
    # and a later snapshot without watermarks that the job must not read
    ghost = fold([make_delta("INSERT", table="todos", row_id="ghost", client_id="z", hlc=1)])
    assert ghost is not None
    _write_state_tables(spark_py, lake_namespace, {(GW, "todos", "ghost"): ghost}, None)

    # When the job cuts a checkpoint of gw1 (small chunks) and a client loads it
    config = CheckpointConfig(
        bucket=store.bucket,
        gateways=(GW,),
        namespace=lake_namespace,
        chunk_bytes=700,
        include_deleted=include_deleted,
        deleted_within_hours=within_hours,
    )
    report = run(spark_py, config, objects=store, now_ms=lambda: T0 + 99_000)
    (outcome,) = report.gateways
    assert outcome.manifest is not None and outcome.skipped is None
    manifest = outcome.manifest
    deltas, headers = _load(store, GW)

    # Then positions are gw1's shards at their watermarks, and the cursor and serverHlc follow from them
    gw_marks = {s: seq for s, seq in watermarks.items() if s.startswith(f"{GW}#")}
    assert manifest.positions == gw_marks and len(gw_marks) == 3
    assert decode_cursor(headers["X-Checkpoint-Cursor"], GW) == gw_marks
    last_covered = {e.shard: e.commit_hlc for e in covered if e.seq == watermarks[e.shard]}
    assert manifest.server_hlc == min(last_covered[s] for s in gw_marks)
    assert manifest.tables == ("Notes", "todos")
    assert len(manifest.chunks) > 1 and all(c.bytes <= 700 for c in manifest.chunks)
    assert len(list(group_rows(deltas))) == manifest.rows == len({(d.table, d.row_id) for d in deltas})

    # And the client holds exactly the core fold of gw1's covered history (deleted rows only when kept: all of them,
    # or those deleted recently enough)
    expected = _of(GW, _states(covered))
    assert any(not state.exists for state in expected.values())  # the history deletes rows
    if not include_deleted:
        expected = {key: state for key, state in expected.items() if state.exists}
    elif within_hours is not None:
        tombs = [s.tombstone.hlc for s in expected.values() if not s.exists and s.tombstone is not None]
        assert min(tombs) < RECENT_SINCE <= max(tombs)  # some deletes are older than the bound, some are not
        expected = {
            key: state
            for key, state in expected.items()
            if state.exists or (state.tombstone is not None and state.tombstone.hlc >= RECENT_SINCE)
        }
    assert _snap(_client(deltas)) == _snap(expected)
    assert ("todos", "ghost") not in _client(deltas)

    # And checkpoint + the tail from the cursor == replaying gw1's whole history
    gw_tail = [e.delta for e in sorted(tail, key=lambda e: e.commit_hlc) if e.shard.startswith(f"{GW}#")]
    assert gw_tail
    full = _of(GW, _states(log))
    resumed = _client([*deltas, *gw_tail])
    assert _live(resumed) == _live(full)
    if include_deleted and within_hours is None:
        assert _snap(resumed) == _snap(full)


def test_checkpoint_job_skips_unchanged_and_never_compacted_gateways(
    spark_py: SparkSession, lake_namespace: str, store: S3ObjectStore
) -> None:
    # Given compacted state for gw1 only and a first checkpoint of it
    rnd = random.Random(3)
    log = [e for e in _log(rnd, 40) if e.shard.startswith(f"{GW}#")]
    watermarks = _cut(rnd, log)
    covered = [e for e in log if e.seq <= watermarks[e.shard]]
    _write_state_tables(spark_py, lake_namespace, _states(covered), watermarks)
    config = CheckpointConfig(bucket=store.bucket, gateways=(GW, OTHER_GW), namespace=lake_namespace)
    first = run(spark_py, config, objects=store, now_ms=lambda: T0)

    # When the job runs again with nothing new compacted
    again = run(spark_py, config, objects=store, now_ms=lambda: T0 + 1)

    # Then gw1 was written once, then skipped as unchanged; gw2 never had anything compacted
    assert [(o.gateway, o.skipped) for o in first.gateways] == [(GW, None), (OTHER_GW, "nothing compacted")]
    assert [(o.gateway, o.skipped) for o in again.gateways] == [(GW, "unchanged"), (OTHER_GW, "nothing compacted")]
    assert first.gateways[0].manifest is not None
    assert _load(store, GW)[1]["X-Checkpoint-Id"] == first.gateways[0].manifest.checkpoint_id
    # without a delta log the since HLC cannot be bounded: 0 (a full since pull)
    assert first.gateways[0].manifest.server_hlc == 0
    assert len(store.list_keys("checkpoints/gw1/")) == 3  # one chunk, the manifest, latest.json


def test_glue_script_runs_the_job_from_job_arguments(
    spark_py: SparkSession,
    lake_namespace: str,
    lake_paths: Any,
    store: S3ObjectStore,
    moto_endpoint: str,
    monkeypatch: pytest.MonkeyPatch,
    capsys: pytest.CaptureFixture[str],
) -> None:
    # Given compacted state and the Glue script, with S3 reached through the environment as on a job
    rnd = random.Random(8)
    log = [e for e in _log(rnd, 30) if e.shard.startswith(f"{GW}#")]
    _write_state_tables(spark_py, lake_namespace, _states(log), {e.shard: e.seq for e in log})
    for key, value in {"AWS_ENDPOINT_URL": moto_endpoint, "AWS_DEFAULT_REGION": "us-east-1"}.items():
        monkeypatch.setenv(key, value)
    monkeypatch.setenv("AWS_ACCESS_KEY_ID", "testing")
    monkeypatch.setenv("AWS_SECRET_ACCESS_KEY", "testing")
    path = Path(__file__).resolve().parents[2] / "glue_jobs" / "checkpoint.py"
    spec = importlib.util.spec_from_file_location("glue_checkpoint_job", path)
    assert spec is not None and spec.loader is not None
    script = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(script)

    # When it runs with Glue-style arguments (plus ones it does not know)
    args = ["--JOB_NAME", "checkpoint", "--bucket", store.bucket, "--gateways", f"{GW},{OTHER_GW}", "--catalog",
            "local", "--warehouse", str(lake_paths.warehouse), "--catalog-uri", str(lake_paths.catalog_db),
            "--namespace", lake_namespace]  # fmt: skip
    assert script.main(args) == 0

    # Then it reported each gateway and published gw1's checkpoint
    lines = [json.loads(line) for line in capsys.readouterr().out.splitlines() if line.startswith("{")]
    assert [(line["gateway"], line["skipped"]) for line in lines] == [(GW, None), (OTHER_GW, "nothing compacted")]
    assert _load(store, GW)[1]["X-Checkpoint-Id"] == lines[0]["checkpointId"]


def test_state_table_ddl_is_readable_by_spark(spark: SparkSession, lake_namespace: str) -> None:
    # Given a state table exactly as lake.tables defines it, with one row
    spark.sql(state_table_ddl(CATALOG, "todos", None, lake_namespace))
    name = qualified(CATALOG, state_table("todos"), lake_namespace)
    spark.sql(f"INSERT INTO {name} VALUES ('gw', 'r', true, '{{}}', 1, NULL, current_timestamp())")

    # When Spark reads it back, Then the row is there
    assert spark.sql(f"SELECT {ROW_ID} FROM {name}").collect()[0][0] == "r"


def test_glue_script_keeps_deleted_rows_unless_told_otherwise() -> None:
    # Given the Glue script's option parser
    path = Path(__file__).resolve().parents[2] / "glue_jobs" / "checkpoint.py"
    spec = importlib.util.spec_from_file_location("glue_checkpoint_options", path)
    assert spec is not None and spec.loader is not None
    script = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(script)
    required = {"bucket": "b", "gateways": GW, "warehouse": "w"}

    def config(**options: str) -> CheckpointConfig:
        parsed: CheckpointConfig = script.parse({**required, **options})[0]
        return parsed

    # Then by default every deleted row is kept (the original clients' resync needs them), and both bounds parse
    assert (config().include_deleted, config().deleted_within_hours) == (True, None)
    assert config(include_deleted="false").include_deleted is False
    assert config(deleted_within_hours="720").deleted_within_hours == 720.0
    for bad in ({"include_deleted": "yes"}, {"deleted_within_hours": "-1"}, {"deleted_within_hours": "x"}):
        with pytest.raises(ValueError, match="--"):
            config(**bad)
