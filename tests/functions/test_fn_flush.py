"""functions.flush (the flush as a Lambda function, on pyiceberg) and its starter, on the moto server's DynamoDB with
the local sqlite catalog and a file warehouse: a queued run flushes the buffer into the delta log and is recorded;
one run at a time; a run waits for a held lease within its budget, else fails and says so; a run record left
unfinished past the function's timeout no longer blocks; the lake tick and the flush trigger start the function when
it is configured, and compaction follows a flush run the records show.

Lambda's ``Invoke`` is the one call not sent to moto (moto runs functions in Docker): a recording client stands in,
and the test invokes the handler with the payload it was given, as Lambda's asynchronous queue would.
"""

from __future__ import annotations

import json
import math
import time
import uuid
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

import functions.flush as flush_fn
import functions.flush_trigger as trigger_fn
import functions.lake_tick as lake_tick
import functions.push as push_fn
from lakesync.aws.action_store import DynamoDBActionStore
from lakesync.aws.buffer.store import DynamoDBBufferStore
from lakesync.aws.config_store import DynamoDBConfigStore
from lakesync.aws.flush_function import FlushFunction
from lakesync.aws.flush_runs import FlushRunLog, FunctionJobStarter
from lakesync.aws.flush_store import FlushStore
from lakesync.aws.jobs import FlushEngines, glue_client
from lakesync.aws.settings.env import SettingsError
from lakesync.aws.settings.lake import FlushFunctionSettings, FlushTriggerSettings, LakeTickSettings
from lakesync.core.delta import make_delta
from lakesync.core.errors import FlushError, ValidationError
from lakesync.core.hlc import HLC, encode, system_clock
from lakesync.core.lake_work import DEFAULT_FUNCTION_MAX_BACKLOG, JobRun
from lakesync.core.messages import SyncPush
from lakesync.gateway.deps import GatewayDeps, GatewaySettings
from lakesync.gateway.push import push
from lakesync.lake.catalog import local_catalog
from lakesync.local.front import LambdaContext
from tests.integration.test_commit_by_put import StopsAfterThePut
from tests.moto_api import GLUE_JOB_RUN, create_glue_job, glue_runs_progress, moto_state_manager

GW = "default"
FUNCTION = "lakesync-flush"


class RecordingLambda:
    """The Lambda client's ``Invoke``: records each call (moto would need Docker to run a function)."""

    def __init__(self) -> None:
        self.calls: list[dict[str, Any]] = []

    def invoke(self, **kwargs: Any) -> dict[str, Any]:
        self.calls.append({**kwargs, "Payload": json.loads(kwargs["Payload"])})
        return {"StatusCode": 202}


def context(seconds: float = 900) -> LambdaContext:
    return LambdaContext(
        function_name=FUNCTION,
        aws_request_id=str(uuid.uuid4()),
        invoked_function_arn=f"arn:aws:lambda:us-east-1:123456789012:function:{FUNCTION}",
        memory_limit_in_mb=2048,
        deadline_monotonic=time.monotonic() + seconds if seconds != math.inf else math.inf,
    )


class World:
    """Pushes through the push function, the lake as pyiceberg reads it, the run records and a starter."""

    def __init__(self, api: Any, client: Any, lake_dir: Path) -> None:
        self.api = api
        self.client = client
        self.store = FlushStore(client, api.tables)
        self.lake_dir = lake_dir
        self.lambda_client = RecordingLambda()
        self.records = FlushRunLog(client, api.tables)
        self.starter = FunctionJobStarter(self.lambda_client, FUNCTION, self.records)  # type: ignore[arg-type]
        self.pushed = 0

    def push(self, count: int) -> None:
        deltas = []
        for _ in range(count):
            self.pushed += 1
            deltas.append(
                make_delta(
                    "INSERT",
                    table="todos",
                    row_id=f"r{self.pushed}",
                    client_id="client-a",
                    hlc=encode(1_600_000_000_000 + self.pushed, 0),
                    columns={"title": f"t{self.pushed}"},
                ).to_json()
            )
        event = self.api.event("push_json")
        body = json.loads(event["body"])
        body["deltas"] = deltas
        reply = self.api.call(push_fn, self.api.event("push_json", body=body))
        assert reply.status == 200, reply.body

    def lake_entries(self) -> list[tuple[str, int]]:
        catalog = local_catalog(self.lake_dir / "catalog.db", self.lake_dir / "warehouse")
        if not catalog.table_exists(("lakesync", "deltas")):
            return []
        rows = catalog.load_table(("lakesync", "deltas")).scan(selected_fields=("shard", "seq")).to_arrow()
        return sorted(zip(rows.column("shard").to_pylist(), rows.column("seq").to_pylist(), strict=True))

    def heads(self) -> dict[str, tuple[int, int]]:
        _, heads = self.store.shards([GW])
        return {s.key: (h.seq, h.flushed_seq) for s, h in heads.items()}

    def run_queued(self, seconds: float = 900) -> dict[str, Any]:
        """Hand the newest queued invocation to the handler, as Lambda's queue would."""
        payload = self.lambda_client.calls[-1]["Payload"]
        result: dict[str, Any] = flush_fn.lambda_handler(payload, context(seconds))
        return result


@pytest.fixture
def world(api: Any, dynamodb_client: Any, monkeypatch: pytest.MonkeyPatch, tmp_path: Path) -> Iterator[World]:
    monkeypatch.setenv("LAKESYNC_LAKE_CATALOG", "local")
    monkeypatch.setenv("LAKESYNC_LAKE_CATALOG_URI", str(tmp_path / "catalog.db"))
    monkeypatch.setenv("LAKESYNC_LAKE_WAREHOUSE", str(tmp_path / "warehouse"))
    flush_fn.get_flush.cache_clear()
    yield World(api, dynamodb_client, tmp_path)
    flush_fn.get_flush.cache_clear()


def test_a_queued_run_flushes_the_buffer_into_the_delta_log_and_is_recorded(world: World) -> None:
    # Given deltas in the buffer
    world.push(12)

    # When the starter queues a run
    run_id = world.starter.start()

    # Then the function was invoked asynchronously with the run, recorded as waiting, and the flush is busy
    assert run_id is not None
    (call,) = world.lambda_client.calls
    assert (call["FunctionName"], call["InvocationType"], call["Payload"]) == (FUNCTION, "Event", {"run": run_id})
    (queued,) = world.records.runs()
    assert (queued.run_id, queued.state, queued.active) == (run_id, "WAITING", True)
    assert world.starter.start() is None
    assert world.starter.try_start() == (None, "busy")

    # When the function runs it
    report = world.run_queued()

    # Then every entry is in the delta log once, the heads say so, and the run is recorded as succeeded
    assert (report["run"], report["deltas"]) == (run_id, 12)
    heads = world.heads()
    assert world.lake_entries() == sorted(
        (shard, seq) for shard, (last, _) in heads.items() for seq in range(1, last + 1)
    )
    assert all(flushed == seq for seq, flushed in heads.values())
    (done,) = world.records.runs()
    assert done.state == "SUCCEEDED" and done.completed_ms is not None and not done.active
    # And the next start queues a new run, which finds nothing new
    assert world.starter.start() not in (None, run_id)
    assert world.run_queued()["deltas"] == 0
    assert len(world.lake_entries()) == 12


def test_a_run_meeting_a_held_lease_waits_for_it_within_its_budget(world: World) -> None:
    # Given deltas and a lease held by another run
    world.push(5)
    assert world.store.acquire_lease("other-run", int(time.time() * 1000), 600_000)
    settings = FlushFunctionSettings.from_env(
        {
            "LAKESYNC_TABLE_PREFIX": world.api.tables.deltas.removesuffix("-deltas"),
            "LAKESYNC_LAKE_CATALOG": "local",
            "LAKESYNC_LAKE_CATALOG_URI": str(world.lake_dir / "catalog.db"),
            "LAKESYNC_LAKE_WAREHOUSE": str(world.lake_dir / "warehouse"),
        }
    )
    waits: list[float] = []

    def sleep(seconds: float) -> None:  # the other run ends while this one waits
        waits.append(seconds)
        world.store.release_lease("other-run")

    service = FlushFunction(settings, runs=world.records, store=world.store, sleep=sleep)

    # When a run starts with time to wait, it waits once and then flushes
    report = service.flush(None, lambda: 600_000)
    assert len(waits) == 1 and report["deltas"] == 5
    assert world.records.runs()[0].state == "SUCCEEDED"


def test_a_run_drains_a_backlog_larger_than_one_flush_while_it_has_time(
    world: World, monkeypatch: pytest.MonkeyPatch
) -> None:
    # Given a cap of 5 deltas a flush and 12 deltas in one shard
    monkeypatch.setenv("LAKESYNC_FLUSH_MAX_DELTAS", "5")
    world.push(12)
    world.starter.start()

    # When the queued run runs with time to spare, it flushes again while a flush appended its cap
    report = world.run_queued()

    # Then one invocation flushed everything, in three snapshots, each entry once
    assert (report["flushes"], report["deltas"], len(report["snapshot_ids"])) == (3, 12, 3)
    assert len(world.lake_entries()) == len(set(world.lake_entries())) == 12
    assert all(flushed == seq for seq, flushed in world.heads().values())
    # And with too little time left it stops after one flush; the next run goes on
    world.push(12)
    world.starter.start()
    assert world.run_queued(seconds=100)["deltas"] == 5
    world.starter.start()
    assert world.run_queued()["deltas"] == 7
    assert len(world.lake_entries()) == 24


def test_a_run_flushes_a_chunk_whose_writer_stopped_on_a_quiet_shard_and_settles_its_head(world: World) -> None:
    # Given pushes with first keys two minutes ago, the last by a writer that stopped after its put, and none since
    old_clock = HLC(lambda: system_clock() - 120_000)

    def writer(buffer: DynamoDBBufferStore) -> GatewayDeps:
        tables = world.api.tables
        config, actions = DynamoDBConfigStore(world.client, tables), DynamoDBActionStore(world.client, tables)
        return GatewayDeps(buffer, config, actions, GatewaySettings(), old_clock)

    def deltas(*rows: str) -> SyncPush:
        stamp = encode(system_clock() - 130_000, 0)
        return SyncPush(
            "client-a",
            tuple(
                make_delta("INSERT", table="todos", row_id=r, client_id="client-a", hlc=stamp, columns={"title": r})
                for r in rows
            ),
        )

    push(writer(DynamoDBBufferStore(world.client, world.api.tables)), GW, deltas("a", "b"),
         client_id="client-a")  # fmt: skip
    stopped = StopsAfterThePut(world.client, world.api.tables)
    push(writer(stopped), GW, deltas("c"), client_id="client-a")
    (shard,) = world.heads()
    stored = world.client.get_item(TableName=world.api.tables.heads, Key={"shard": {"S": shard}})["Item"]
    assert (stored["seq"]["N"], stored["ra"]["N"]) == ("2", "2")

    # When a flush runs
    world.starter.start()
    report = world.run_queued()

    # Then the stopped writer's entry is flushed with the rest, and the stored head is over it (its row still to be
    # written by the next writer)
    assert report["deltas"] == 3
    assert world.lake_entries() == [(shard, 1), (shard, 2), (shard, 3)]
    stored = world.client.get_item(TableName=world.api.tables.heads, Key={"shard": {"S": shard}})["Item"]
    assert (stored["seq"]["N"], stored["ra"]["N"], stored["fs"]["N"]) == ("3", "2", "3")


def test_a_run_without_time_to_wait_for_a_held_lease_fails_and_records_why(world: World) -> None:
    # Given deltas and a lease held by another run
    world.push(3)
    assert world.store.acquire_lease("other-run", int(time.time() * 1000), 600_000)
    run_id = world.starter.start()

    # When the function runs with a minute left, it fails at once
    with pytest.raises(FlushError, match="already in progress"):
        world.run_queued(seconds=60)

    # Then the run is recorded as failed, with the reason, and nothing was flushed
    (failed,) = world.records.runs()
    assert (failed.run_id, failed.state) == (run_id, "FAILED")
    assert world.lake_entries() == []
    assert all(flushed == 0 for _, flushed in world.heads().values())


def test_a_run_record_left_unfinished_past_the_timeout_no_longer_blocks(world: World, dynamodb_client: Any) -> None:
    # Given a run queued and taken up, whose invocation then died without recording its end
    now = int(time.time() * 1000)
    clock = {"now": now}
    records = FlushRunLog(dynamodb_client, world.api.tables, timeout_s=900, now_ms=lambda: clock["now"])
    starter = FunctionJobStarter(world.lambda_client, FUNCTION, records, now_ms=lambda: clock["now"])  # type: ignore[arg-type]
    first = starter.start()
    assert first is not None
    records.running(first, now)

    # Then within the function's timeout it counts as running, and no second run starts
    clock["now"] = now + 900_000
    assert starter.start() is None
    # And past the timeout it is listed as timed out, and the next start goes ahead
    clock["now"] = now + 900_000 + 61_000
    assert records.runs()[0].state == "TIMEOUT"
    assert starter.start() is not None


def test_only_the_newest_run_records_are_kept(world: World) -> None:
    # Given more finished runs than are kept
    now = int(time.time() * 1000)
    for i in range(35):
        run_id = f"{now + i:013d}-{uuid.uuid4().hex[:12]}"
        world.records.running(run_id, now + i)
        world.records.finished(run_id, True, now + i)

    # Then the newest are listed, and the table holds no more than the kept number
    listed = world.records.runs()
    assert [r.started_ms for r in listed] == sorted((r.started_ms for r in listed), reverse=True)
    assert listed[0].started_ms == now + 34
    items = world.client.query(
        TableName=world.api.tables.config,
        KeyConditionExpression="gw = :g AND begins_with(sk, :p)",
        ExpressionAttributeValues={":g": {"S": "#lakesync"}, ":p": {"S": "flushrun#"}},
        ConsistentRead=True,
    )["Items"]
    assert len(items) == 30


@pytest.mark.parametrize("event", [{"run": "nope"}, {"run": 5}, {"job": "flush"}, []])
def test_a_flush_event_that_names_no_run_is_refused(event: Any) -> None:
    with pytest.raises(ValidationError):
        flush_fn.run_of(event)


def test_flush_function_settings_report_every_problem_at_once() -> None:
    with pytest.raises(SettingsError) as err:
        FlushFunctionSettings.from_env(
            {
                "LAKESYNC_TABLE_PREFIX": "t",
                "LAKESYNC_LAKE_CATALOG": "local",
                "LAKESYNC_CLAIM_CHECK_BUCKET": "claims",
                "LAKESYNC_FLUSH_MAX_DELTAS": "0",
            }
        )
    text = str(err.value)
    for part in ("missing LAKESYNC_LAKE_WAREHOUSE", "needs LAKESYNC_LAKE_CATALOG_URI", "go together", "MAX_DELTAS"):
        assert part in text
    with pytest.raises(SettingsError, match="must be an s3:// URI"):
        FlushFunctionSettings.from_env({"LAKESYNC_TABLE_PREFIX": "t", "LAKESYNC_LAKE_WAREHOUSE": "/tmp/wh"})
    glue = FlushFunctionSettings.from_env(
        {"LAKESYNC_TABLE_PREFIX": "t", "LAKESYNC_LAKE_WAREHOUSE": "s3://lake/wh", "AWS_REGION": "eu-west-1"}
    )
    assert (glue.catalog, glue.region, glue.max_deltas, glue.claim_check_bucket) == ("glue", "eu-west-1", 200_000, None)


def test_lake_tick_with_the_flush_function_needs_no_flush_job() -> None:
    env = {
        "LAKESYNC_TABLE_PREFIX": "t",
        "LAKESYNC_FLUSH_PUBLISHES": "false",
        "LAKESYNC_COMPACT_JOB_NAME": "compact",
        "LAKESYNC_CHECKPOINT_JOB_NAME": "checkpoint",
        "LAKESYNC_FLUSH_FUNCTION_NAME": FUNCTION,
        "LAKESYNC_FLUSH_FUNCTION_TIMEOUT_S": "600",
    }
    settings = LakeTickSettings.from_env(env)
    assert settings.flush_function is not None
    assert (settings.flush_function.name, settings.flush_function.timeout_s) == (FUNCTION, 600)
    assert "flush" not in settings.job_names
    with pytest.raises(SettingsError, match="LAKESYNC_FLUSH_JOB_NAME"):
        LakeTickSettings.from_env({k: v for k, v in env.items() if "FUNCTION" not in k})
    with pytest.raises(SettingsError, match="not a Lambda function name"):
        LakeTickSettings.from_env({**env, "LAKESYNC_FLUSH_FUNCTION_NAME": "no spaces allowed"})


def test_settings_with_both_engines_read_the_backlog_limit() -> None:
    # Given the tick's and the trigger's variables with both engines (the default stack's)
    env = {
        "LAKESYNC_TABLE_PREFIX": "t",
        "LAKESYNC_GATEWAY_IDS": "b,a",
        "LAKESYNC_FLUSH_PUBLISHES": "true",
        "LAKESYNC_FLUSH_JOB_NAME": "flush",
        "LAKESYNC_COMPACT_JOB_NAME": "compact",
        "LAKESYNC_CHECKPOINT_JOB_NAME": "checkpoint",
        "LAKESYNC_FLUSH_FUNCTION_NAME": FUNCTION,
        "LAKESYNC_FLUSH_FUNCTION_MAX_BACKLOG": "1234",
    }
    # Then both read both engines and the limit, the default limit when it is unset
    tick, trigger = LakeTickSettings.from_env(env), FlushTriggerSettings.from_env(env)
    assert (tick.job_names["flush"], tick.flush_function is not None, tick.flush_function_max_backlog) == (
        "flush",
        True,
        1234,
    )
    assert (trigger.job_name, trigger.flush_function, trigger.flush_function_max_backlog) == (
        "flush",
        tick.flush_function,
        1234,
    )
    assert trigger.gateway_ids == ("a", "b") and trigger.tables is not None
    unset = {k: v for k, v in env.items() if k != "LAKESYNC_FLUSH_FUNCTION_MAX_BACKLOG"}
    assert LakeTickSettings.from_env(unset).flush_function_max_backlog == DEFAULT_FUNCTION_MAX_BACKLOG
    assert FlushTriggerSettings.from_env(unset).flush_function_max_backlog == DEFAULT_FUNCTION_MAX_BACKLOG
    # And a negative limit, or no engine at all, is refused
    for settings in (LakeTickSettings, FlushTriggerSettings):
        with pytest.raises(SettingsError, match="LAKESYNC_FLUSH_FUNCTION_MAX_BACKLOG"):
            settings.from_env({**env, "LAKESYNC_FLUSH_FUNCTION_MAX_BACKLOG": "-1"})
    with pytest.raises(SettingsError, match=r"missing LAKESYNC_FLUSH_JOB_NAME \(or LAKESYNC_FLUSH_FUNCTION_NAME\)"):
        FlushTriggerSettings.from_env({"LAKESYNC_TABLE_PREFIX": "t"})


@pytest.fixture
def ticking(world: World, monkeypatch: pytest.MonkeyPatch) -> Iterator[World]:
    """The lake tick configured with the flush function (and Glue names for the other two jobs)."""
    monkeypatch.setenv("LAKESYNC_FLUSH_FUNCTION_NAME", FUNCTION)
    monkeypatch.setenv("LAKESYNC_FLUSH_PUBLISHES", "false")
    monkeypatch.setenv("LAKESYNC_COMPACT_JOB_NAME", "lakesync-compact")
    monkeypatch.setenv("LAKESYNC_CHECKPOINT_JOB_NAME", "lakesync-checkpoint")
    lake_tick.get_tick.cache_clear()
    starter = lake_tick.get_tick().runners["flush"]
    assert isinstance(starter, FlushEngines) and list(starter.engines) == ["function"]
    function = starter.engines["function"]
    assert isinstance(function, FunctionJobStarter)
    function.client = world.lambda_client  # type: ignore[assignment]
    yield world
    lake_tick.get_tick.cache_clear()


class _Compact:
    """The compaction job's port, never run yet: records starts."""

    job_name = "lakesync-compact"
    starts = 0

    def runs(self, *, enough: Any = None, pages: int = 4) -> list[JobRun]:
        return []

    def try_start(self) -> tuple[str | None, str]:
        self.starts += 1
        return "jr_compact", ""


def _tick(job: str) -> dict[str, Any]:
    result: dict[str, Any] = lake_tick.lambda_handler({"job": job}, context())
    return result


def test_lake_tick_starts_the_flush_function_once_and_compaction_follows_its_run(ticking: World) -> None:
    # Given unflushed deltas
    ticking.push(4)

    # When the flush ticks twice
    first, second = _tick("flush"), _tick("flush")

    # Then the function was queued once: the second tick found the queued run serving the work
    assert first["outcome"] == "started" and second["outcome"] == "covered"
    assert len(ticking.lambda_client.calls) == 1
    # When the queued run runs, the flush tick is idle
    assert ticking.run_queued()["deltas"] == 4
    assert _tick("flush")["outcome"] == "idle"
    # And compaction, which sees the lake ahead of the checkpoints and a flush run that finished, starts
    compact = _Compact()
    lake_tick.get_tick().runners["compact"] = compact
    assert _tick("compact")["outcome"] == "started" and compact.starts == 1


def test_flush_trigger_starts_the_flush_function_when_it_is_configured(
    world: World, monkeypatch: pytest.MonkeyPatch
) -> None:
    # Given the trigger configured with the function, and a flush request on the stream
    monkeypatch.setenv("LAKESYNC_FLUSH_FUNCTION_NAME", FUNCTION)
    trigger_fn.get_starter.cache_clear()
    starter = trigger_fn.get_starter()
    assert isinstance(starter, FlushEngines) and list(starter.engines) == ["function"]
    function = starter.engines["function"]
    assert isinstance(function, FunctionJobStarter)
    function.client = world.lambda_client  # type: ignore[assignment]
    now = int(time.time() * 1000)
    event = {
        "Records": [
            {
                "eventName": "INSERT",
                "dynamodb": {
                    "SequenceNumber": "1",
                    "NewImage": {"gw": {"S": GW}, "sk": {"S": f"flush#{now:015d}#abc"}},
                },
            }
        ]
    }
    try:
        # When the batch arrives
        out = trigger_fn.lambda_handler(event, context())
    finally:
        trigger_fn.get_starter.cache_clear()

    # Then a run of the function was queued and nothing is left for a retry
    assert out == {"batchItemFailures": []}
    assert len(world.lambda_client.calls) == 1
    assert world.records.runs()[0].state == "WAITING"


# -- the switch between the engines ----------------------------------------------------------------------------------


class BothEngines:
    """The lake tick and the flush trigger configured as a default stack configures them (the flush function and the
    Glue flush job, on moto, whose runs stay unfinished until :meth:`finish_glue_runs`), with a backlog limit of
    :attr:`LIMIT` entries."""

    LIMIT = 5

    def __init__(self, world: World, endpoint: str, job_name: str) -> None:
        self.world = world
        self.endpoint = endpoint
        self.job_name = job_name
        self.glue = glue_client()

    def glue_runs(self) -> list[dict[str, Any]]:
        runs: list[dict[str, Any]] = self.glue.get_job_runs(JobName=self.job_name)["JobRuns"]
        return runs

    def finish_glue_runs(self) -> None:
        glue_runs_progress(self.endpoint, "immediate")
        assert all(run["JobRunState"] == "SUCCEEDED" for run in self.glue_runs())

    def engines(self, starter: object) -> FlushEngines:
        """The flush's starter, its function's Invoke recorded by the world."""
        assert isinstance(starter, FlushEngines) and sorted(starter.engines) == ["function", "glue"]
        function = starter.engines["function"]
        assert isinstance(function, FunctionJobStarter)
        function.client = self.world.lambda_client  # type: ignore[assignment]
        return starter


@pytest.fixture
def both(world: World, moto_endpoint: str, monkeypatch: pytest.MonkeyPatch) -> Iterator[BothEngines]:
    name = f"lakesync-flush-{uuid.uuid4().hex[:8]}"
    create_glue_job(glue_client(), name)
    glue_runs_progress(moto_endpoint, "manual")
    for var, value in {
        "LAKESYNC_FLUSH_FUNCTION_NAME": FUNCTION,
        "LAKESYNC_FLUSH_JOB_NAME": name,
        "LAKESYNC_FLUSH_FUNCTION_MAX_BACKLOG": str(BothEngines.LIMIT),
        "LAKESYNC_FLUSH_PUBLISHES": "false",
        "LAKESYNC_COMPACT_JOB_NAME": "lakesync-compact",
        "LAKESYNC_CHECKPOINT_JOB_NAME": "lakesync-checkpoint",
    }.items():
        monkeypatch.setenv(var, value)
    lake_tick.get_tick.cache_clear()
    trigger_fn.get_starter.cache_clear()
    yield BothEngines(world, moto_endpoint, name)
    lake_tick.get_tick.cache_clear()
    trigger_fn.get_starter.cache_clear()
    moto_state_manager(moto_endpoint, "unset-transition", {"model_name": GLUE_JOB_RUN})


def test_lake_tick_gives_a_small_backlog_to_the_function_and_a_large_one_to_the_glue_job(both: BothEngines) -> None:
    world = both.world
    engines = both.engines(lake_tick.get_tick().runners["flush"])
    # Given a backlog within the function's limit (4 entries, limit 5)
    world.push(4)
    # When the flush ticks twice
    first, second = _tick("flush"), _tick("flush")
    # Then the first run went to the function, chosen for that backlog, and the second tick found it serving the work
    assert (first["outcome"], first["engine"], first["backlog"]) == ("started", "function", 4)
    assert (second["outcome"], second["engine"]) == ("covered", "function")
    assert len(world.lambda_client.calls) == 1 and both.glue_runs() == []
    assert world.run_queued()["deltas"] == 4
    assert _tick("flush")["outcome"] == "idle"

    # Given a backlog beyond the limit (6 entries)
    world.push(6)
    # When the flush ticks twice
    first, second = _tick("flush"), _tick("flush")
    # Then the run went to the Glue flush job; the second tick starts nothing beside its unfinished run (begun
    # within the clocks' skew of the work, it is not provably after it: busy, as with the Glue job alone), no Invoke
    assert (first["outcome"], first["engine"], first["backlog"]) == ("started", "glue", 6)
    (run,) = both.glue_runs()
    assert first["run_id"] == run["Id"] and run["JobRunState"] != "SUCCEEDED"
    assert (second["outcome"], second["reason"]) == ("deferred", "busy")
    assert len(world.lambda_client.calls) == 1 and len(both.glue_runs()) == 1

    # Given new work the Glue run (begun before it) does not serve, and a limit the backlog is now within
    engines.max_backlog = 1_000
    world.push(1)
    # When the flush ticks
    busy = _tick("flush")
    # Then nothing starts beside the Glue run: not the function (whose choice it would be), not a second Glue run
    assert (busy["outcome"], busy["reason"]) == ("deferred", "busy")
    assert len(world.lambda_client.calls) == 1 and len(both.glue_runs()) == 1
    # When the Glue run has finished
    both.finish_glue_runs()
    # Then the next tick starts the function for the backlog (the Glue run here flushed nothing: 7 entries)
    after = _tick("flush")
    assert (after["outcome"], after["engine"], after["backlog"]) == ("started", "function", 7)
    assert len(world.lambda_client.calls) == 2 and len(both.glue_runs()) == 1


def test_flush_trigger_chooses_the_engine_as_the_tick_does_and_waits_out_the_other(both: BothEngines) -> None:
    world = both.world
    engines = both.engines(trigger_fn.get_starter())
    engines.poll_interval_s = 0.01
    starts: list[dict[str, Any]] = []
    engines.engines["glue"].client.meta.events.register(  # type: ignore[attr-defined]
        "provide-client-params.glue.StartJobRun", lambda params, **_: starts.append(dict(params))
    )

    def request() -> dict[str, Any]:
        now = int(time.time() * 1000)
        image = {"gw": {"S": GW}, "sk": {"S": f"flush#{now:015d}#{uuid.uuid4().hex[:6]}"}}
        event = {"Records": [{"eventName": "INSERT", "dynamodb": {"SequenceNumber": "1", "NewImage": image}}]}
        time.sleep(0.005)  # the request is later than anything before it
        out: dict[str, Any] = trigger_fn.lambda_handler(event, context(seconds=20))
        return out

    # Given a backlog beyond the limit
    world.push(6)
    # When a flush request arrives
    # Then the trigger starts a STANDARD run of the Glue flush job, and no function run
    assert request() == {"batchItemFailures": []}
    assert len(both.glue_runs()) == 1
    assert [(p["JobName"], p.get("ExecutionClass")) for p in starts] == [(both.job_name, "STANDARD")]
    assert world.lambda_client.calls == []
    assert engines.last_choice == ("glue", 6)
    # When another request arrives while that run (begun before it) is unfinished, with a limit the backlog is within
    engines.max_backlog = 1_000
    out = trigger_fn.lambda_handler(
        {
            "Records": [
                {
                    "eventName": "INSERT",
                    "dynamodb": {
                        "SequenceNumber": "2",
                        "NewImage": {"gw": {"S": GW}, "sk": {"S": f"flush#{int(time.time() * 1000) + 1:015d}#b"}},
                    },
                }
            ]
        },
        context(seconds=15.05),
    )
    # Then it starts neither engine beside the Glue run and asks for a retry
    assert out == {"batchItemFailures": [{"itemIdentifier": "2"}]}
    assert world.lambda_client.calls == [] and len(both.glue_runs()) == 1
    # When the Glue run has finished and the request is retried
    both.finish_glue_runs()
    # Then the function gets the run (the backlog is within the limit now)
    assert request() == {"batchItemFailures": []}
    assert len(world.lambda_client.calls) == 1 and engines.last_choice == ("function", 6)
