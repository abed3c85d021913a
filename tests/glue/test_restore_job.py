"""The restore as a Glue job (issue 44, item 1): ``glue_jobs/restore.py`` run through its ``main()`` on local Spark
against the moto server. A gateway's deltas are pushed through the push service and flushed in two runs by the
pyiceberg flush into the test's lake; the job, reading the lake through :class:`SparkLakeReader`, rebuilds the buffer
into fresh tables. The Spark reader gives exactly the pyiceberg reader's entries and watermarks, the restored row
index is the fold of the pushed deltas and the same as a restore through :class:`IcebergLakeReader`, and the job's
refusals fail the run with their message.
"""

from __future__ import annotations

import importlib.util
import json
import uuid
from pathlib import Path
from types import ModuleType
from typing import TYPE_CHECKING, Any

import boto3
import pytest

from lakesync.aws.buffer.store import DynamoDBBufferStore
from lakesync.aws.config_store import DynamoDBConfigStore
from lakesync.aws.flush_store import DynamoConfig, FlushStore
from lakesync.aws.objects import S3ObjectStore, create_bucket
from lakesync.aws.table_setup import create_tables
from lakesync.aws.tables import TableNames
from lakesync.core.checkpoint import load_manifest
from lakesync.core.delta import RowDelta, make_delta
from lakesync.core.hlc import HLC
from lakesync.core.merge import RowState, fold
from lakesync.core.messages import SyncPush
from lakesync.core.restore import RestoreTargetNotEmptyError, UnflushedDataError
from lakesync.gateway.deps import GatewayDeps, GatewaySettings
from lakesync.gateway.memory import InMemoryActionStore
from lakesync.gateway.push import push
from lakesync.lake.flush import FlushConfig, run_flush
from lakesync.lake.iceberg_flush import IcebergDeltaLog
from lakesync.lake.restore_job import restore_buffer
from lakesync.lake.restore_reader import IcebergLakeReader
from lakesync.spark.restore_reader import SparkLakeReader
from tests.conftest import FAKE_AWS
from tests.glue.conftest import CATALOG_NAME

if TYPE_CHECKING:
    from pyiceberg.catalog.sql import SqlCatalog
    from pyspark.sql import SparkSession

pytestmark = pytest.mark.spark

ROOT = Path(__file__).resolve().parents[2]
GW = "gw-restore"
Key = tuple[str, str]


def _script() -> ModuleType:
    spec = importlib.util.spec_from_file_location("glue_entry_restore", ROOT / "glue_jobs" / "restore.py")
    assert spec is not None and spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def _prefix() -> str:
    return f"r{uuid.uuid4().hex[:10]}"


class Lake:
    """A gateway on fresh buffer tables, flushed by pyiceberg into the test's namespace, and a checkpoint bucket."""

    def __init__(self, endpoint: str, catalog: SqlCatalog, namespace: str) -> None:
        self.endpoint = endpoint
        self.client = boto3.client("dynamodb", endpoint_url=endpoint, **FAKE_AWS)
        self.names = TableNames.with_prefix(_prefix())
        create_tables(self.client, self.names)
        self.bucket = f"ckpt-{uuid.uuid4().hex[:10]}"
        create_bucket(boto3.client("s3", endpoint_url=endpoint, **FAKE_AWS), self.bucket)
        self.objects = S3ObjectStore(self.bucket, boto3.client("s3", endpoint_url=endpoint, **FAKE_AWS))
        self.catalog = catalog
        self.namespace = namespace
        self.pushed: list[RowDelta] = []
        self.deps = GatewayDeps(
            buffer=DynamoDBBufferStore(self.client, self.names),
            config=DynamoDBConfigStore(self.client, self.names),
            actions=InMemoryActionStore(),
            settings=GatewaySettings(gateway_ids=frozenset({GW})),
            objects=self.objects,
        )

    def push(self, deltas: list[RowDelta]) -> None:
        push(self.deps, GW, SyncPush("c1", tuple(deltas)), client_id="c1")
        self.pushed.extend(deltas)

    def flush(self) -> None:
        store = FlushStore(self.client, self.names)
        config = FlushConfig(DynamoConfig(self.names), namespace=self.namespace, gateways=(GW,))
        run_flush(IcebergDeltaLog(self.catalog, config, reader=store.read_records), config, store=store)

    def rows(self, names: TableNames) -> dict[Key, Any]:
        keys = sorted({(d.table, d.row_id) for d in self.pushed})
        return DynamoDBBufferStore(self.client, names).get_rows(GW, keys)

    def argv(self, names: TableNames, warehouse: Path, catalog_db: Path, **more: str) -> list[str]:
        """The job's arguments: Glue's own, the stack's kind of options, and this machine's lake and endpoints."""
        options = {
            "--JOB_NAME": "LakeSync-test-restore",
            "--gateways": GW,
            "--tables": json.dumps(names.as_dict()),
            "--catalog": "local",
            "--warehouse": str(warehouse),
            "--catalog-uri": str(catalog_db),
            "--namespace": self.namespace,
            "--checkpoint_bucket": self.bucket,
            "--region": FAKE_AWS["region_name"],
            "--dynamodb_endpoint": self.endpoint,
            "--s3_endpoint": self.endpoint,
            **{f"--{k}": v for k, v in more.items()},
        }
        return [token for item in options.items() for token in item]


@pytest.fixture
def lake(
    spark: SparkSession,
    lake_catalog: SqlCatalog,
    lake_namespace: str,
    moto_endpoint: str,
    monkeypatch: pytest.MonkeyPatch,
) -> Lake:
    for key in ("aws_access_key_id", "aws_secret_access_key"):
        monkeypatch.setenv(key.upper(), FAKE_AWS[key])
    world = Lake(moto_endpoint, lake_catalog, lake_namespace)
    clock = HLC()

    def delta(op: str, row: str, **columns: Any) -> RowDelta:
        return make_delta(op, table="todos", row_id=row, client_id="c1", hlc=clock.now(), columns=columns)

    # Two flushes: inserts, then updates of some columns, a delete and a row inserted again after its delete
    world.push([delta("INSERT", f"t{i}", title=f"task {i}", done=False) for i in range(6)])
    world.push([make_delta("INSERT", table="notes", row_id="n1", client_id="c1", hlc=clock.now(), columns={"x": 1})])
    world.flush()
    world.push([delta("UPDATE", "t1", done=True), delta("DELETE", "t2"), delta("UPDATE", "t3", title="renamed")])
    world.push([delta("DELETE", "t4"), delta("INSERT", "t4", title="again")])
    world.flush()
    return world


def _folded(deltas: list[RowDelta]) -> dict[Key, RowState | None]:
    keys = {(d.table, d.row_id) for d in deltas}
    return {k: fold(d for d in deltas if (d.table, d.row_id) == k) for k in keys}


def test_spark_reader_gives_the_pyiceberg_readers_entries_and_watermarks(
    spark: SparkSession, lake: Lake, lake_namespace: str
) -> None:
    # Given the lake read by both readers
    spark_reader = SparkLakeReader(spark, CATALOG_NAME, lake_namespace)
    iceberg_reader = IcebergLakeReader(lake.catalog, lake_namespace)

    def key(entry: Any) -> tuple[str, int]:
        return entry.shard.key, entry.seq

    # Then they give the same watermarks and the same entries (every delta pushed, in any order)
    assert spark_reader.watermarks() == iceberg_reader.watermarks() != {}
    spark_entries = sorted(spark_reader.entries(GW), key=key)
    assert spark_entries == sorted(iceberg_reader.entries(GW), key=key)
    assert len(spark_entries) == len(lake.pushed)
    # And neither has anything of another gateway, nor of a lake without a delta log
    assert list(spark_reader.entries("no-such-gateway")) == []
    empty = SparkLakeReader(spark, CATALOG_NAME, f"{lake_namespace}_none")
    assert empty.watermarks() == {} and list(empty.entries(GW)) == []


def test_restore_job_rebuilds_the_buffer_as_the_pyiceberg_restore_does(
    lake: Lake, lake_paths: Any, capsys: pytest.CaptureFixture[str]
) -> None:
    # Given fresh tables for the job, and others the restore through pyiceberg writes
    by_job, by_pyiceberg = TableNames.with_prefix(_prefix()), TableNames.with_prefix(_prefix())
    create_tables(lake.client, by_pyiceberg)
    iceberg = IcebergLakeReader(lake.catalog, lake.namespace)
    (expected,) = restore_buffer(lake.client, by_pyiceberg, iceberg, [GW], objects=None, settle_s=0)

    # When the job runs (creating its tables, as only a local run may)
    capsys.readouterr()
    assert _script().main(lake.argv(by_job, lake_paths.warehouse, lake_paths.catalog_db, create_tables="true")) == 0

    # Then it reports the gateway: every row, each shard at the lake's watermark, a checkpoint cut
    (report,) = [json.loads(line) for line in capsys.readouterr().out.splitlines() if line.startswith("{")]
    assert report["gateway"] == GW
    assert report["rows"] == expected.rows == len(_folded(lake.pushed))
    assert report["shards"] == dict(expected.shards) == iceberg.watermarks()
    manifest = load_manifest(lake.objects.get, GW)
    assert manifest is not None and manifest.checkpoint_id == report["checkpointId"]
    # And the restored row index is the fold of the pushed deltas, and what the pyiceberg restore wrote, which is
    # the old buffer's
    restored = lake.rows(by_job)
    assert {k: r.state for k, r in restored.items()} == _folded(lake.pushed)
    assert restored == lake.rows(by_pyiceberg) == lake.rows(lake.names)
    store = DynamoDBBufferStore(lake.client, by_job)
    shards = store.list_shards(GW)
    assert {s.key: h.seq for s, h in store.get_heads(shards).items()} == report["shards"]


def test_restore_job_refusals_fail_the_run_with_their_message(
    lake: Lake, lake_paths: Any, capsys: pytest.CaptureFixture[str]
) -> None:
    # Given the gateway's own tables, holding it and, after one more push, a delta the lake does not hold
    lake.push([make_delta("UPDATE", table="todos", row_id="t0", client_id="c1", hlc=HLC().now(), columns={"x": 9})])
    script = _script()
    capsys.readouterr()

    # When the job restores into them without --replace, then with it
    with pytest.raises(RestoreTargetNotEmptyError, match="already hold") as not_empty:
        script.main(lake.argv(lake.names, lake_paths.warehouse, lake_paths.catalog_db))
    with pytest.raises(UnflushedDataError, match="flush them first") as unflushed:
        script.main(lake.argv(lake.names, lake_paths.warehouse, lake_paths.catalog_db, replace="true"))

    # Then each run failed with the refusal, named first in one JSON line with its message
    lines = [json.loads(line) for line in capsys.readouterr().out.splitlines() if line.startswith("{")]
    assert lines == [
        {"refused": "RestoreTargetNotEmptyError", "message": str(not_empty.value), "gateways": [GW]},
        {"refused": "UnflushedDataError", "message": str(unflushed.value), "gateways": [GW]},
    ]
    # And the tables were left as they were, the gateway served again (no restore mark refuses a push)
    assert lake.rows(lake.names)[("todos", "t0")].state.columns["x"].value == 9
    lake.push([make_delta("UPDATE", table="todos", row_id="t0", client_id="c1", hlc=HLC().now(), columns={"x": 10})])
    assert lake.rows(lake.names)[("todos", "t0")].state.columns["x"].value == 10
