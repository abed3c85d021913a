"""functions.lake_tick.lambda_handler on the moto server: an idle deployment starts no Glue run; unflushed deltas, a
recorded flush request, unpublished ranges and a release the checkpoints and the retention allow start the flush
job (once: an unfinished run that began after the work serves it); compaction and the checkpoint follow a newer
upstream run while the lake lags the checkpoints; a release successful runs left undone is logged, not retried.

The buffer and the checkpoints are DynamoDB and S3 on the moto server. The Glue jobs are moto's where its job runs
suffice (runs kept ``STARTING`` by its state manager, so a started job stays busy), and a scripted stand-in for the
job port where a test needs run histories moto cannot make (finished runs at chosen times, failures, queued runs).
"""

from __future__ import annotations

import copy
import json
import math
import time
import uuid
from collections.abc import Iterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import boto3
import pytest

import functions.lake_tick as lake_tick
import functions.push as push_fn
from lakesync.aws.config_store import DynamoDBConfigStore
from lakesync.aws.flush_store import FlushStore
from lakesync.aws.jobs import glue_client
from lakesync.aws.objects import S3ObjectStore, create_bucket
from lakesync.aws.settings.env import SettingsError
from lakesync.aws.settings.variables import JOB_NAME_VARS
from lakesync.core.checkpoint import checkpoint_id
from lakesync.core.delta import make_delta
from lakesync.core.errors import ValidationError
from lakesync.core.hlc import encode
from lakesync.core.lake_work import DEFAULT_RETENTION_MS, JOB_KINDS, JobRun
from lakesync.core.log import ShardHead
from lakesync.core.merge import fold
from lakesync.gateway.checkpoint import encode_row, write_checkpoint
from lakesync.local.front import LambdaContext
from tests.factories import T0
from tests.moto_api import moto_state_manager

EVENTS = Path(__file__).resolve().parent.parent.parent / "events"
SAMPLES = {"flush": "lake_tick_flush", "compact": "lake_tick_compact", "checkpoint": "lake_tick_checkpoint"}
GW = "default"
DAY_MS = 24 * 3600 * 1000
_JOB_RUN_MODEL = "glue::job_run"


def _now_ms() -> int:
    return time.time_ns() // 1_000_000


@dataclass
class FakeJob:
    """The job port with a scripted history: records what the tick asks."""

    job_name: str
    history: list[JobRun] = field(default_factory=list)
    answer: tuple[str | None, str] = ("jr_started", "")
    reads: int = 0
    starts: int = 0

    def runs(self, *, enough: Any = None, pages: int = 4) -> list[JobRun]:
        self.reads += 1
        return list(self.history)

    def try_start(self) -> tuple[str | None, str]:
        self.starts += 1
        return self.answer


class Lake:
    """The tick's world: the buffer, the checkpoint bucket, the jobs; pushes, simulated job effects, invocations."""

    def __init__(self, api: Any, client: Any, bucket: str, objects: S3ObjectStore, job_names: dict[str, str]) -> None:
        self.api = api
        self.store = FlushStore(client, api.tables)
        self.config = DynamoDBConfigStore(client, api.tables)
        self.bucket = bucket
        self.objects = objects
        self.job_names = job_names

    def push(self, row_id: str = "row-1") -> None:
        event = self.api.event("push_json")
        body = json.loads(event["body"])
        body["deltas"] = [
            make_delta(
                "INSERT", table="todos", row_id=row_id, client_id="client-a", hlc=encode(1_600_000_000_000, 0),
                columns={"title": row_id},
            ).to_json()
        ]  # fmt: skip
        reply = self.api.call(push_fn, self.api.event("push_json", body=body))
        assert reply.status == 200, reply.body

    def heads(self) -> dict[str, ShardHead]:
        _, heads = self.store.shards([GW])
        return {shard.key: head for shard, head in heads.items()}

    def flushed(self, *, publish: bool = True) -> None:
        """What a flush run leaves: every head flushed (and published) to its end."""
        for head in self.heads().values():
            self.store.advance_flushed(head.shard, head.flushed_seq, head.seq, 0, head.seq - head.flushed_seq)
            if publish:
                self.store.advance_published(head.shard, head.seq)

    def checkpoint(self, positions: dict[str, int], server_hlc: int) -> None:
        """A checkpoint of the gateway covering ``positions`` up to ``server_hlc``."""
        state = fold([make_delta("INSERT", table="todos", row_id="r", client_id="c", hlc=encode(1, 0), columns={})])
        assert state is not None
        write_checkpoint(
            self.objects,
            gateway=GW,
            checkpoint_id=checkpoint_id(_now_ms(), uuid.uuid4().hex[:8]),
            created_at_ms=_now_ms(),
            positions=positions,
            server_hlc=server_hlc,
            tables=["todos"],
            rows=[encode_row(state)],
        )

    def fake_jobs(self) -> dict[str, FakeJob]:
        """Replace the tick's Glue jobs by scripted ones."""
        jobs = {kind: FakeJob(self.job_names[kind]) for kind in JOB_KINDS}
        lake_tick.get_tick().runners = jobs  # type: ignore[assignment]
        return jobs

    def invoke(self, job: str) -> dict[str, Any]:
        event = json.loads((EVENTS / f"{SAMPLES[job]}.json").read_text(encoding="utf-8"))
        context = LambdaContext(
            function_name="lakesync-lake-tick",
            aws_request_id=str(uuid.uuid4()),
            invoked_function_arn="arn:aws:lambda:us-east-1:123456789012:function:lakesync-lake-tick",
            memory_limit_in_mb=256,
            deadline_monotonic=math.inf,
        )
        result: dict[str, Any] = lake_tick.lambda_handler(copy.deepcopy(event), context)
        return result


@pytest.fixture
def lake(api: Any, monkeypatch: pytest.MonkeyPatch, moto_endpoint: str, dynamodb_client: Any) -> Iterator[Lake]:
    """The tick configured on fresh tables (gateways ``default`` and ``other``), a checkpoint bucket and job names."""
    s3 = boto3.client("s3", endpoint_url=moto_endpoint, region_name="us-east-1")
    bucket = f"ckpt-{uuid.uuid4().hex[:12]}"
    create_bucket(s3, bucket)
    names = {kind: f"lakesync-{kind}-{uuid.uuid4().hex[:8]}" for kind in JOB_KINDS}
    monkeypatch.setenv("LAKESYNC_CHECKPOINT_BUCKET", bucket)
    monkeypatch.setenv("LAKESYNC_FLUSH_PUBLISHES", "true")
    for kind, name in names.items():
        monkeypatch.setenv(JOB_NAME_VARS[kind], name)
    lake_tick.get_tick.cache_clear()
    yield Lake(api, dynamodb_client, bucket, S3ObjectStore(bucket, s3), names)
    lake_tick.get_tick.cache_clear()


@pytest.fixture
def glue(lake: Lake, moto_endpoint: str) -> Iterator[Any]:
    """The three jobs on moto, one run at a time each; their runs stay unfinished."""
    client = glue_client()
    for name in lake.job_names.values():
        client.create_job(
            Name=name,
            Role="arn:aws:iam::123456789012:role/lakesync-job",
            Command={"Name": "glueetl", "ScriptLocation": "s3://artifacts/job.py", "PythonVersion": "3"},
            GlueVersion="5.0",
            ExecutionProperty={"MaxConcurrentRuns": 1},
        )
    moto_state_manager(
        moto_endpoint,
        "set-transition",
        {"model_name": _JOB_RUN_MODEL, "transition": {"progression": "manual", "times": 10**9}},
    )
    yield client
    moto_state_manager(moto_endpoint, "unset-transition", {"model_name": _JOB_RUN_MODEL})


def _runs(glue: Any, lake: Lake, kind: str) -> list[dict[str, Any]]:
    runs: list[dict[str, Any]] = glue.get_job_runs(JobName=lake.job_names[kind])["JobRuns"]
    return runs


def _run(state: str, started: int, completed: int | None = None, run_id: str = "jr") -> JobRun:
    return JobRun(run_id, state, started, completed)


def test_lake_tick_sample_events_name_each_job():
    for kind, sample in SAMPLES.items():
        event = json.loads((EVENTS / f"{sample}.json").read_text(encoding="utf-8"))
        assert lake_tick.job_of(event) == kind


# -- on moto's Glue ---------------------------------------------------------------------------------------------------


def test_lake_tick_idle_deployment_starts_no_glue_run(lake, glue, capsys):
    # Given a deployment with an empty buffer, no request and no checkpoint
    # When every schedule ticks
    outcomes = {kind: lake.invoke(kind) for kind in JOB_KINDS}
    # Then no job has work, no run was started and no metric was written (EMF)
    assert {kind: (o["outcome"], o["due"]) for kind, o in outcomes.items()} == dict.fromkeys(JOB_KINDS, ("idle", False))
    assert all(_runs(glue, lake, kind) == [] for kind in JOB_KINDS)
    assert '"_aws"' not in capsys.readouterr().out


def test_lake_tick_starts_the_flush_for_unflushed_deltas_and_not_twice(lake, glue, capsys):
    # Given a delta committed (at a pinned, earlier time) and not flushed
    lake.api.fix_clock(T0)
    lake.push()
    capsys.readouterr()  # the push's own metrics
    # When the flush schedule ticks
    before_ms = _now_ms()
    first = lake.invoke("flush")
    # Then the flush job was started, for the unflushed shard
    assert (first["outcome"], first["reasons"]) == ("started", {"unflushed": 1})
    (run,) = _runs(glue, lake, "flush")
    assert first["run_id"] == run["Id"]
    # And the only custom metrics are the flush lag's (billed by the hour, so only while something waits): the one
    # delta, committed at the pinned time, as the log line says
    metrics = _emf_metrics(capsys.readouterr().out)
    assert set(metrics) == {"FlushLagSeconds", "UnflushedDeltas"}
    assert metrics["UnflushedDeltas"] == [(1, {"service": "lake_tick"})]
    ((age, dims),) = metrics["FlushLagSeconds"]
    assert dims == {"service": "lake_tick"} and age == first["flush_lag"]["oldest_commit_age_s"]
    assert (before_ms - T0) // 1000 <= age <= (_now_ms() - T0) // 1000
    assert (first["flush_lag"]["unflushed_deltas"], first["flush_lag"]["shards"]) == (1, 1)
    # And the next tick, while that run (begun after the commit) is unfinished, starts nothing
    second = lake.invoke("flush")
    assert (second["outcome"], second["run_id"]) == ("covered", run["Id"])
    assert len(_runs(glue, lake, "flush")) == 1
    # And the other jobs still have nothing to do (nothing is flushed yet)
    assert lake.invoke("compact")["outcome"] == lake.invoke("checkpoint")["outcome"] == "idle"


def test_lake_tick_meeting_a_busy_flush_job_leaves_the_work_to_the_next_tick(lake, glue):
    # Given a flush run that began before the delta was committed, still running
    glue.start_job_run(JobName=lake.job_names["flush"])
    lake.api.fix_clock(_now_ms() + 3_600_000)
    lake.push()
    # When the flush schedule ticks
    result = lake.invoke("flush")
    # Then the job is busy: nothing started, the work waits for the next tick
    assert (result["outcome"], result["reason"]) == ("deferred", "busy")
    assert len(_runs(glue, lake, "flush")) == 1


# -- with a scripted job history --------------------------------------------------------------------------------------


def test_lake_tick_backs_up_the_flush_trigger_for_a_recorded_request(lake):
    # Given nothing unflushed but a flush request the trigger did not serve
    jobs = lake.fake_jobs()
    lake.config.request_flush(GW, {"id": "req-1", "reason": "admin", "atMs": _now_ms()})
    # When the flush schedule ticks
    result = lake.invoke("flush")
    # Then the flush job is started for it
    assert (result["outcome"], result["reasons"]) == ("started", {"requests": 1})
    assert jobs["flush"].starts == 1


def test_lake_tick_flush_is_idle_once_everything_is_flushed_and_published(lake):
    # Given a delta flushed and published by a run
    jobs = lake.fake_jobs()
    lake.push()
    lake.flushed()
    # When the flush schedule ticks
    result = lake.invoke("flush")
    # Then there is nothing to do, and Glue was not even asked
    assert result["outcome"] == "idle"
    assert (jobs["flush"].reads, jobs["flush"].starts) == (0, 0)


def test_lake_tick_starts_the_flush_to_publish_what_a_run_left_unpublished(lake):
    jobs = lake.fake_jobs()
    lake.push()
    lake.flushed(publish=False)
    result = lake.invoke("flush")
    assert (result["outcome"], result["reasons"]) == ("started", {"unpublished": 1})
    assert jobs["flush"].starts == 1


def test_lake_tick_unfinished_run_queued_after_the_work_serves_it(lake):
    # Given unflushed deltas and a queued flush run
    jobs = lake.fake_jobs()
    lake.push()
    jobs["flush"].history = [JobRun("jr_queued", "WAITING")]
    # When the flush schedule ticks
    result = lake.invoke("flush")
    # Then the queued run serves the work: nothing started
    assert (result["outcome"], result["run_id"]) == ("covered", "jr_queued")
    assert jobs["flush"].starts == 0


def test_lake_tick_compaction_and_checkpoint_follow_a_newer_upstream_run(lake):
    # Given a delta flushed by a flush run that finished at T, never compacted nor checkpointed
    jobs = lake.fake_jobs()
    lake.push()
    lake.flushed()
    t = _now_ms()
    jobs["flush"].history = [_run("SUCCEEDED", t - 60_000, t)]
    # When the compaction schedule ticks
    compact = lake.invoke("compact")
    # Then compaction is started, because the lake lags the (missing) checkpoint after that flush
    assert (compact["outcome"], compact["reasons"]) == ("started", {"flushed": 1})
    # And the checkpoint has nothing newer than its last run to cut (no compaction finished since)
    jobs["checkpoint"].history = [_run("SUCCEEDED", t - 3_600_000, t - 3_500_000)]
    assert lake.invoke("checkpoint")["outcome"] == "idle"
    # When that compaction finished, the next compaction tick is idle and the checkpoint tick starts the checkpoint
    jobs["compact"].history = [_run("SUCCEEDED", t + 1_000, t + 90_000)]
    assert lake.invoke("compact")["outcome"] == "idle"
    checkpoint = lake.invoke("checkpoint")
    assert (checkpoint["outcome"], checkpoint["reasons"]) == ("started", {"compacted": 1})
    assert (jobs["compact"].starts, jobs["checkpoint"].starts) == (1, 1)
    # And once a checkpoint covers every flushed entry, neither has work, without a Glue call
    lake.checkpoint({key: head.flushed_seq for key, head in lake.heads().items()}, encode(_now_ms(), 0))
    reads = {kind: job.reads for kind, job in jobs.items()}
    assert lake.invoke("compact")["outcome"] == lake.invoke("checkpoint")["outcome"] == "idle"
    assert {kind: job.reads for kind, job in jobs.items()} == reads


def test_lake_tick_compaction_waits_for_enough_flush_runs_or_for_the_first_to_age(lake, monkeypatch):
    # Given a lake compacted once before, then flushed by one run that finished just now, with the deployed policy
    # narrowed to 3 flush runs or 30 minutes
    monkeypatch.setenv("LAKESYNC_COMPACT_MIN_FLUSH_RUNS", "3")
    monkeypatch.setenv("LAKESYNC_COMPACT_MAX_WAIT_MINUTES", "30")
    lake_tick.get_tick.cache_clear()
    jobs = lake.fake_jobs()
    lake.push()
    lake.flushed()
    t = _now_ms()
    jobs["compact"].history = [_run("SUCCEEDED", t - 7_200_000, t - 7_100_000)]
    jobs["flush"].history = [_run("SUCCEEDED", t - 60_000, t - 1_000)]
    # When the compaction schedule ticks, it waits: one small file is not worth a run
    assert lake.invoke("compact")["outcome"] == "idle"
    # Nor are two, one of them a failed run (a flush may fail after its commit: it counts)
    jobs["flush"].history.insert(0, _run("FAILED", t - 30_000, t - 500))
    assert lake.invoke("compact")["outcome"] == "idle"
    # Nor runs that finished before the last compaction began
    jobs["flush"].history.append(_run("SUCCEEDED", t - 9_000_000, t - 8_000_000))
    assert lake.invoke("compact")["outcome"] == "idle"
    assert jobs["compact"].starts == 0
    # A third run since that compaction makes it due
    jobs["flush"].history.insert(0, _run("SUCCEEDED", t - 10_000, t - 100))
    result = lake.invoke("compact")
    assert (result["outcome"], result["reasons"]) == ("started", {"flushed": 1})
    # And one run that finished 30 minutes ago is enough on its own
    jobs["flush"].history = [_run("SUCCEEDED", t - 1_900_000, t - 1_800_000)]
    assert lake.invoke("compact")["outcome"] == "started"
    assert jobs["compact"].starts == 2


def test_lake_tick_starts_the_flush_once_a_release_is_due_and_not_after(lake):
    # Given two deltas flushed, published and covered by a checkpoint (positions and serverHlc)
    jobs = lake.fake_jobs()
    lake.push("row-1")
    lake.push("row-2")
    lake.flushed()
    ((key, head),) = lake.heads().items()
    lake.checkpoint({key: head.seq}, encode(_now_ms() + DAY_MS, 0))
    # When the flush schedule ticks within the retention
    # Then there is nothing to do yet
    assert lake.invoke("flush")["outcome"] == "idle"
    # When it ticks after the retention
    tick = lake_tick.get_tick()
    tick.now_ms = lambda: _now_ms() + DEFAULT_RETENTION_MS + 60_000
    result = lake.invoke("flush")
    # Then the flush is started to release the two entries
    assert (result["outcome"], result["reasons"]) == ("started", {"release": 1})
    # And once a run marked them released, the tick is idle again
    target = lake.store.release_target(head.shard, head.seq, encode(_now_ms() + DAY_MS, 0))
    assert target is not None and target[0] == head.seq
    lake.store.mark_released(head.shard, *target)
    assert lake.invoke("flush")["outcome"] == "idle"
    assert jobs["flush"].starts == 1


def test_lake_tick_release_left_undone_by_successful_runs_is_logged_not_retried(lake, caplog):
    # Given a release due (checkpoint, retention passed) that two successful flush runs begun since did not perform
    jobs = lake.fake_jobs()
    lake.push()
    lake.flushed()
    ((key, head),) = lake.heads().items()
    lake.checkpoint({key: head.seq}, encode(_now_ms() + DAY_MS, 0))
    later = _now_ms() + DEFAULT_RETENTION_MS + 3_600_000
    lake_tick.get_tick().now_ms = lambda: later
    jobs["flush"].history = [_run("SUCCEEDED", later - 60_000 * i, later - 60_000 * i + 30_000) for i in (1, 2)]
    # When the flush schedule ticks
    result = lake.invoke("flush")
    # Then nothing is started and the stale release is reported, as a warning
    assert (result["outcome"], result["stale"]) == ("idle", {"release": 1})
    assert jobs["flush"].starts == 0
    (record,) = [r for r in caplog.records if r.getMessage() == "Lake tick flush: idle"]
    assert record.levelname == "WARNING" and record.stale == {"release": 1}


def test_lake_tick_rejects_an_event_naming_no_job(lake):
    jobs = lake.fake_jobs()
    for event in ({"job": "vacuum"}, {}, {"detail-type": "Scheduled Event"}):
        with pytest.raises(ValidationError, match="lake tick event"):
            lake_tick.lambda_handler(
                event,
                LambdaContext(
                    function_name="t", aws_request_id="r", invoked_function_arn="arn:aws:lambda:us-east-1:1:function:t"
                ),
            )
    assert all(job.reads == job.starts == 0 for job in jobs.values())


@pytest.mark.parametrize("missing", [*sorted(JOB_NAME_VARS.values()), "LAKESYNC_FLUSH_PUBLISHES"])
def test_lake_tick_without_its_settings_fails_before_any_call(lake, monkeypatch, missing):
    monkeypatch.delenv(missing)
    lake_tick.get_tick.cache_clear()
    with pytest.raises(SettingsError, match=missing):
        lake.invoke("flush")


def _emf_metrics(out: str) -> dict[str, list[tuple[float, dict[str, Any]]]]:
    """The EMF records in ``out`` by metric name: (value, dimensions) each."""
    found: dict[str, list[tuple[float, dict[str, Any]]]] = {}
    for line in out.splitlines():
        if '"_aws"' not in line:
            continue
        record = json.loads(line)
        (directive,) = record["_aws"]["CloudWatchMetrics"]
        assert directive["Namespace"] == "LakeSync" and directive["Dimensions"] == [["service"]]
        for metric in directive["Metrics"]:
            (value,) = record[metric["Name"]]
            found.setdefault(metric["Name"], []).append((value, {"service": record["service"]}))
    return found


def _checkpoint_age_metrics(out: str) -> list[tuple[float, dict[str, Any]]]:
    """The ``CheckpointAgeSeconds`` EMF records in ``out``: (value, dimensions)."""
    return _emf_metrics(out).get("CheckpointAgeSeconds", [])


def test_lake_tick_checkpoint_tick_reports_how_far_the_checkpoints_lag(lake, capsys):
    # Given flushed deltas covered by a checkpoint
    lake.fake_jobs()
    lake.push("row-1")
    lake.flushed()
    ((key, head),) = lake.heads().items()
    lake.checkpoint({key: head.flushed_seq}, encode(_now_ms(), 0))
    capsys.readouterr()
    # When the checkpoint schedule ticks: nothing lags, the age is 0 and no metric is written (no data is OK)
    assert lake.invoke("checkpoint")["checkpoint_age_s"] == 0
    assert _checkpoint_age_metrics(capsys.readouterr().out) == []
    # When a newer delta is flushed and the checkpoint is not cut for a day and a half
    lake.push("row-2")
    lake.flushed()
    lake_tick.get_tick().now_ms = lambda: _now_ms() + 36 * 3600 * 1000
    result = lake.invoke("checkpoint")
    # Then the tick reports the age of the lagging gateway's checkpoint, above the alarm's 24 hours
    ((age, dims),) = _checkpoint_age_metrics(capsys.readouterr().out)
    assert result["checkpoint_age_s"] == age and 36 * 3600 - 60 <= age <= 36 * 3600 + 60
    assert dims == {"service": "lake_tick"}
    # And the other ticks write no metric
    lake.invoke("compact")
    assert _checkpoint_age_metrics(capsys.readouterr().out) == []
