"""The Glue entry scripts (``glue_jobs/*.py``) run end to end through their ``main()`` (issue 12.9).

Each script gets the command line Glue builds for a run of the stack's job: Glue's own run arguments (``--JOB_ID``,
``--JOB_RUN_ID``, ``--JOB_NAME``), then the job's DefaultArguments exactly as the stack declares them
(``lakesync_infra.jobs.glue_arguments`` and ``script_arguments``, the functions the CDK construct uses), with a
run's Arguments replacing defaults of the same name -- here only what points the job at this machine instead of AWS:
the local catalog and warehouse, the moto endpoints and the test's namespace. The buffer is filled by the real push
service on the moto DynamoDB server; the pipeline then runs flush -> compact -> checkpoint -> flush, as the lake tick
would start them, and each report is checked against the buffer, the lake and the checkpoint bucket.
"""

from __future__ import annotations

import importlib.util
import json
import os
import uuid
from collections.abc import Iterator, Mapping
from pathlib import Path
from types import ModuleType
from typing import TYPE_CHECKING, Any

import pytest

from lakesync.aws.action_store import DynamoDBActionStore
from lakesync.aws.buffer.store import DynamoDBBufferStore
from lakesync.aws.config_store import DynamoDBConfigStore
from lakesync.aws.objects import S3ObjectStore, create_bucket, s3_client
from lakesync.core.checkpoint import load_manifest
from lakesync.core.delta import make_delta
from lakesync.core.hlc import HLC
from lakesync.core.messages import SyncPush
from lakesync.gateway.deps import GatewayDeps, GatewaySettings
from lakesync.gateway.push import push
from lakesync.lake.tables import DELTA_LOG, state_table

if TYPE_CHECKING:
    from pyspark.sql import SparkSession

pytestmark = pytest.mark.spark

ROOT = Path(__file__).resolve().parents[2]
GATEWAY = "gw1"
REGION = "us-east-1"
CREDENTIALS = {"AWS_ACCESS_KEY_ID": "testing", "AWS_SECRET_ACCESS_KEY": "testing", "AWS_DEFAULT_REGION": REGION}


def _script(kind: str) -> ModuleType:
    spec = importlib.util.spec_from_file_location(f"glue_entry_{kind}", ROOT / "glue_jobs" / f"{kind}.py")
    assert spec is not None and spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def _glue_argv(kind: str, defaults: Mapping[str, str], run_arguments: Mapping[str, str]) -> list[str]:
    """The arguments after the script name, as Glue passes them to a run of job ``kind``."""
    merged = {
        "--JOB_ID": f"j_{uuid.uuid4().hex}",
        "--JOB_RUN_ID": f"jr_{uuid.uuid4().hex}",
        "--JOB_NAME": f"LakeSync-test-{kind}",
        **defaults,
        **run_arguments,
    }
    return [token for key, value in merged.items() for token in (key, value)]


@pytest.fixture(scope="module")
def stack_arguments() -> Iterator[Any]:
    """``(kind, tables_json, buckets...) -> DefaultArguments`` of the stack's job ``kind``."""
    os.environ.setdefault("JSII_SILENCE_WARNING_END_OF_LIFE_NODE_VERSION", "20")
    from lakesync_infra.config import LakeSyncConfig
    from lakesync_infra.jobs import glue_arguments, script_arguments

    config = LakeSyncConfig(name="test", gateway_ids=(GATEWAY,), compact_maintain=True)

    def arguments(kind: str, *, tables_json: str, checkpoints: str, claim_check: str, queue_url: str) -> dict[str, str]:
        return {
            **glue_arguments(
                region=REGION,
                modules_uri="s3://artifacts/glue/0123/lakesync-0.1.0.gluewheels.zip",
                log_prefix=f"/aws-glue/{config.stack_name}",
            ),
            "--TempDir": f"s3://artifacts/glue-temp/{kind}/",
            **script_arguments(
                kind,
                config=config,
                warehouse="s3://lake/warehouse",
                namespace=config.database_name,
                tables_json=tables_json,
                region=REGION,
                checkpoint_bucket=checkpoints,
                claim_check_bucket=claim_check,
                materialise_queue_url=queue_url,
            ),
        }

    yield arguments


def _reports(out: str) -> list[dict[str, Any]]:
    return [json.loads(line) for line in out.splitlines() if line.startswith("{")]


def test_entry_scripts_run_the_pipeline_from_the_stack_arguments(
    spark: SparkSession,
    lake_paths: Any,
    lake_namespace: str,
    moto_endpoint: str,
    dynamodb_client: Any,
    dynamodb_tables: Any,
    stack_arguments: Any,
    monkeypatch: pytest.MonkeyPatch,
    capsys: pytest.CaptureFixture[str],
) -> None:
    # Given a buffer on moto filled by the push service, and the buckets and queue the stack would make
    for key, value in CREDENTIALS.items():
        monkeypatch.setenv(key, value)
    deps = GatewayDeps(
        buffer=DynamoDBBufferStore(dynamodb_client, dynamodb_tables),
        config=DynamoDBConfigStore(dynamodb_client, dynamodb_tables),
        actions=DynamoDBActionStore(dynamodb_client, dynamodb_tables),
        settings=GatewaySettings(gateway_ids=frozenset({GATEWAY})),
        clock=HLC(),
    )
    clock = HLC()
    deltas = [
        make_delta("INSERT", table="Todos", row_id=f"r{i}", client_id="c1", hlc=clock.now(), columns={"n": i})
        for i in range(12)
    ]
    deltas.append(make_delta("DELETE", table="Todos", row_id="r3", client_id="c1", hlc=clock.now()))
    push(deps, GATEWAY, SyncPush("c1", tuple(deltas)), client_id="c1")
    s3 = s3_client(endpoint_url=moto_endpoint, region_name=REGION)
    suffix = uuid.uuid4().hex[:10]
    checkpoints, claim_check = f"cps-{suffix}", f"claims-{suffix}"
    for bucket in (checkpoints, claim_check):
        create_bucket(s3, bucket)
    import boto3

    sqs = boto3.client("sqs", endpoint_url=moto_endpoint, region_name=REGION)
    queue_url = sqs.create_queue(QueueName=f"materialise-{suffix}")["QueueUrl"]
    defaults = {
        kind: stack_arguments(
            kind,
            tables_json=json.dumps(dynamodb_tables.as_dict()),
            checkpoints=checkpoints,
            claim_check=claim_check,
            queue_url=queue_url,
        )
        for kind in ("flush", "compact", "checkpoint")
    }
    # The run arguments that point the jobs at this machine: the local catalog, the moto endpoints, a namespace
    local = {
        "--catalog": "local",
        "--catalog_uri": str(lake_paths.catalog_db),
        "--warehouse": str(lake_paths.warehouse),
        "--namespace": lake_namespace,
    }
    endpoints = {"--dynamodb_endpoint": moto_endpoint, "--s3_endpoint": moto_endpoint}
    run_arguments = {
        "flush": {**local, **endpoints},
        "compact": {**local, "--dynamodb_endpoint": moto_endpoint},
        "checkpoint": {**local, "--s3_endpoint": moto_endpoint},
    }
    # (every run argument is an option the script declares, so none of them is silently ignored)
    for kind, extra in run_arguments.items():
        assert {k.removeprefix("--") for k in extra} <= set(_script(kind).JOB_OPTIONS), kind

    def run(kind: str) -> int:
        return int(_script(kind).main(_glue_argv(kind, defaults[kind], run_arguments[kind])))

    # When the flush script runs as Glue runs it
    assert run("flush") == 0
    (flushed,) = _reports(capsys.readouterr().out)
    # Then it appended every committed entry to the delta log of the namespace, and read the release bounds from the
    # stack's checkpoint bucket (no checkpoint yet: nothing released)
    assert flushed["flush"]["deltas"] == len(deltas)
    log_rows = spark.table(f"lake.{lake_namespace}.{DELTA_LOG}").count()
    assert log_rows == len(deltas)
    assert flushed["release"]["bucket"] == checkpoints
    assert flushed["release"]["checkpoints"] == {} and GATEWAY in flushed["release"]["skipped"]

    # When the compaction script runs (with maintenance, as the stack configures it)
    assert run("compact") == 0
    (compacted,) = _reports(capsys.readouterr().out)
    # Then the state table holds one row per row id, the deleted one not existing, and maintenance ran
    rows = {
        r["_row_key"]: r["_exists"]
        for r in spark.table(f"lake.{lake_namespace}.{state_table('Todos')}").select("_row_key", "_exists").collect()
    }
    assert rows == {f"r{i}": i != 3 for i in range(12)}
    assert "maintenance" in compacted

    # When the checkpoint script runs
    assert run("checkpoint") == 0
    (line,) = _reports(capsys.readouterr().out)
    # Then it published the gateway's checkpoint in the stack's checkpoint bucket: the 11 live rows and the deleted
    # one (as its DELETE, kept by default for original clients resynced from the checkpoint)
    manifest = load_manifest(S3ObjectStore(checkpoints, s3).get, GATEWAY)
    assert manifest is not None
    assert (line["gateway"], line["skipped"], line["checkpointId"]) == (GATEWAY, None, manifest.checkpoint_id)
    assert manifest.rows == 12

    # When the flush runs again
    assert run("flush") == 0
    (again,) = _reports(capsys.readouterr().out)
    # Then it found nothing new, and now reads the checkpoint as the release bound (the stack's 24 h retention keeps
    # these fresh entries in the buffer)
    assert again["flush"]["deltas"] == 0
    assert again["release"]["bucket"] == checkpoints
    assert GATEWAY in json.dumps(again["release"]["checkpoints"]) and again["release"]["skipped"] == {}
