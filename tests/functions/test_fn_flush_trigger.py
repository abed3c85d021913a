"""functions.flush_trigger.lambda_handler on the moto server: the sample stream batch starts one run of a Glue job
allowed one run at a time; a batch an unfinished run already serves starts nothing; a job busy with a run that began
before the requests is waited out, or the requests are reported for a retry; records that are not new flush requests
(whatever the mapping lets through) and bad configuration start nothing.

moto's Glue keeps job runs ``STARTING`` here (its state manager set to manual progression), so the job stays busy
until a test lets its runs finish.
"""

from __future__ import annotations

import copy
import json
import math
import time
import uuid
from pathlib import Path
from typing import Any

import pytest
from aws_lambda_powertools.utilities.data_classes import DynamoDBStreamEvent
from aws_lambda_powertools.utilities.parser.models import DynamoDBStreamModel

import functions.flush_trigger as flush_trigger
from lakesync.aws.config_store import DynamoDBConfigStore
from lakesync.aws.flush_store import LEASE_GATEWAY, LEASE_SK
from lakesync.aws.flush_trigger import SAFETY_S
from lakesync.aws.jobs import GlueJobStarter, glue_client
from lakesync.aws.settings.env import SettingsError
from lakesync.aws.settings.lake import FlushTriggerSettings
from lakesync.core.errors import StorageError, ValidationError
from lakesync.local.front import LambdaContext
from tests.moto_api import moto_state_manager

EVENTS = Path(__file__).resolve().parent.parent.parent / "events"
SAMPLE = "flush_trigger_stream"
SAMPLE_SEQS = ["4100000000000000000000001", "4100000000000000000000002"]
_JOB_RUN_MODEL = "glue::job_run"


class Glue:
    """The flush job on moto and a way to let its runs finish."""

    def __init__(self, endpoint: str, client: Any, job_name: str) -> None:
        self.endpoint = endpoint
        self.client = client
        self.job_name = job_name

    def runs(self) -> list[dict[str, Any]]:
        runs: list[dict[str, Any]] = self.client.get_job_runs(JobName=self.job_name)["JobRuns"]
        return runs

    def finish_runs(self) -> None:
        moto_state_manager(
            self.endpoint, "set-transition", {"model_name": _JOB_RUN_MODEL, "transition": {"progression": "immediate"}}
        )


@pytest.fixture
def glue(aws_env: None, moto_endpoint: str, monkeypatch: pytest.MonkeyPatch) -> Any:
    """A flush job allowed one run at a time, on the Flex execution class as deployed; its runs stay unfinished until
    ``finish_runs``."""
    client = glue_client()
    name = f"lakesync-flush-{uuid.uuid4().hex[:8]}"
    client.create_job(
        Name=name,
        Role="arn:aws:iam::123456789012:role/lakesync-flush",
        Command={
            "Name": "glueetl",
            "ScriptLocation": "s3://lakesync-artifacts/glue_jobs/flush.py",
            "PythonVersion": "3",
        },
        GlueVersion="5.0",
        WorkerType="G.1X",
        NumberOfWorkers=2,
        ExecutionClass="FLEX",
        ExecutionProperty={"MaxConcurrentRuns": 1},
    )
    monkeypatch.setenv("LAKESYNC_FLUSH_JOB_NAME", name)
    moto_state_manager(
        moto_endpoint,
        "set-transition",
        {"model_name": _JOB_RUN_MODEL, "transition": {"progression": "manual", "times": 10**9}},
    )
    get_starter = flush_trigger.get_starter  # a test may replace it
    get_starter.cache_clear()
    yield Glue(moto_endpoint, client, name)
    get_starter.cache_clear()
    moto_state_manager(moto_endpoint, "unset-transition", {"model_name": _JOB_RUN_MODEL})


def _event(name: str = SAMPLE) -> dict[str, Any]:
    event: dict[str, Any] = json.loads((EVENTS / f"{name}.json").read_text(encoding="utf-8"))
    return event


def _recorded_at(event: dict[str, Any], *at_ms: int) -> dict[str, Any]:
    """The event with its requests recorded at ``at_ms`` (one per record)."""
    event = copy.deepcopy(event)
    for record, at in zip(event["Records"], at_ms, strict=True):
        change = record["dynamodb"]
        request_id = change["Keys"]["sk"]["S"].rsplit("#", 1)[1]
        sk = f"flush#{at:015d}#{request_id}"
        change["Keys"]["sk"]["S"] = change["NewImage"]["sk"]["S"] = sk
    return event


def _invoke(event: dict[str, Any], *, remaining_s: float | None = None) -> dict[str, Any]:
    """Invoke the handler; ``remaining_s`` is the invocation's time left (no limit by default)."""
    context = LambdaContext(
        function_name="lakesync-flush-trigger",
        aws_request_id="c0ffee00-0000-4000-8000-00000000f1a5",
        invoked_function_arn="arn:aws:lambda:eu-west-1:123456789012:function:lakesync-flush-trigger",
        memory_limit_in_mb=256,
        deadline_monotonic=math.inf if remaining_s is None else time.monotonic() + remaining_s,
    )
    result: dict[str, Any] = flush_trigger.lambda_handler(copy.deepcopy(event), context)
    return result


def _now_ms() -> int:
    return time.time_ns() // 1_000_000


def test_flush_trigger_sample_event_is_a_dynamodb_stream_event():
    raw = _event()
    model = DynamoDBStreamModel.model_validate(raw)
    event = DynamoDBStreamEvent(raw)
    records = list(event.records)
    assert len(model.Records) == len(records) == 2
    for record in records:
        assert record.event_name is not None and record.event_name.name == "INSERT"
        assert record.dynamodb is not None and record.dynamodb.stream_view_type is not None
        assert record.dynamodb.stream_view_type.name == "NEW_IMAGE"
        assert record.dynamodb.new_image["sk"].startswith("flush#")
        assert record.dynamodb.keys == {k: record.dynamodb.new_image[k] for k in ("gw", "sk")}
    assert [r.dynamodb.sequence_number for r in records if r.dynamodb] == SAMPLE_SEQS


def test_flush_trigger_starts_one_run_per_batch(glue, capsys):
    # Given the flush job with no run and the sample batch of two requests
    # When the batch arrives
    response = _invoke(_event())
    # Then one run was started for both requests, and nothing is reported for a retry
    assert response == {"batchItemFailures": []}
    runs = glue.runs()
    assert len(runs) == 1 and runs[0]["JobName"] == glue.job_name
    assert '"FlushRunsStarted"' in capsys.readouterr().out


def test_flush_trigger_batch_served_by_the_unfinished_run_starts_nothing(glue):
    # Given a run started by a first batch and still unfinished
    _invoke(_event())
    # When a batch of requests recorded before that run began arrives
    response = _invoke(_recorded_at(_event(), _now_ms() - 60_000, _now_ms() - 30_000), remaining_s=SAFETY_S)
    # Then that run serves them: no second run, no retry
    assert response == {"batchItemFailures": []}
    assert len(glue.runs()) == 1


def test_flush_trigger_busy_with_an_earlier_run_reports_the_requests_for_a_retry(glue):
    # Given a run that began before the requests were recorded, and an invocation with no time to wait
    glue.client.start_job_run(JobName=glue.job_name)
    later = _now_ms() + 60_000
    # When the batch arrives
    response = _invoke(_recorded_at(_event(), later, later + 1), remaining_s=SAFETY_S)
    # Then both requests are reported for a retry and no run was started
    assert response == {"batchItemFailures": [{"itemIdentifier": seq} for seq in SAMPLE_SEQS]}
    assert len(glue.runs()) == 1


def test_flush_trigger_waits_for_an_earlier_run_then_starts_a_new_one(glue, monkeypatch):
    # Given a run that began before the requests, which finishes while the trigger waits
    glue.client.start_job_run(JobName=glue.job_name)
    waits: list[float] = []

    def sleep(seconds: float) -> None:
        waits.append(seconds)
        glue.finish_runs()

    starter = GlueJobStarter(glue_client(), glue.job_name, poll_interval_s=5.0, sleep=sleep)
    monkeypatch.setattr(flush_trigger, "get_starter", lambda: starter)
    later = _now_ms() + 60_000
    # When the batch arrives
    response = _invoke(_recorded_at(_event(), later, later + 1))
    # Then the trigger waited one poll interval and started a second run: nothing to retry
    assert response == {"batchItemFailures": []}
    assert waits == [5.0]
    assert len(glue.runs()) == 2


def test_flush_trigger_serves_a_request_written_by_the_gateway(glue, dynamodb_client, dynamodb_tables):
    # Given a flush request recorded by the gateway's config store, as its stream record would carry it
    DynamoDBConfigStore(dynamodb_client, dynamodb_tables).request_flush(
        "default", {"id": "req-1", "reason": "admin", "requestedBy": "ops", "atMs": _now_ms()}
    )
    items = dynamodb_client.query(
        TableName=dynamodb_tables.config,
        KeyConditionExpression="gw = :g",
        ExpressionAttributeValues={":g": {"S": "default"}},
        ConsistentRead=True,
    )["Items"]
    (item,) = items
    event = _event()
    record = event["Records"][0]
    record["dynamodb"]["NewImage"] = item
    record["dynamodb"]["Keys"] = {k: item[k] for k in ("gw", "sk")}
    event["Records"] = [record]
    # When it arrives
    response = _invoke(event)
    # Then it starts the flush job
    assert response == {"batchItemFailures": []}
    assert len(glue.runs()) == 1


def _other_records() -> list[dict[str, Any]]:
    template = _event()["Records"][0]
    records = []
    for event_name, gw, sk in [
        ("REMOVE", "default", "flush#001700000000000#0f1e2d3c4b5a69788796a5b4c3d2e1f0"),
        ("INSERT", LEASE_GATEWAY, LEASE_SK),
        ("MODIFY", "default", "schema#todos"),
        ("INSERT", "default", "rules"),
    ]:
        record = copy.deepcopy(template)
        record["eventName"] = event_name
        record["dynamodb"]["Keys"] = {"gw": {"S": gw}, "sk": {"S": sk}}
        record["dynamodb"]["NewImage"] = {"gw": {"S": gw}, "sk": {"S": sk}}
        records.append(record)
    return records


def test_flush_trigger_ignores_records_that_are_not_new_requests(glue):
    # Given a batch of the flush job deleting a request, the flush lease and configuration writes
    event = {"Records": _other_records()}
    # When it arrives
    response = _invoke(event)
    # Then no run is started (the job's own deletions can never trigger it) and nothing is retried
    assert response == {"batchItemFailures": []}
    assert glue.runs() == []


def test_flush_trigger_without_the_job_name_fails_before_any_call(glue, monkeypatch):
    monkeypatch.delenv("LAKESYNC_FLUSH_JOB_NAME")
    with pytest.raises(SettingsError, match="missing LAKESYNC_FLUSH_JOB_NAME"):
        _invoke(_event())
    assert glue.runs() == []


def test_flush_trigger_for_a_missing_job_fails_the_batch(glue, monkeypatch):
    monkeypatch.setenv("LAKESYNC_FLUSH_JOB_NAME", "no-such-job")
    with pytest.raises(StorageError, match=r"Glue GetJobRuns \(no-such-job\) failed: EntityNotFoundException"):
        _invoke(_event())
    assert glue.runs() == []


def test_flush_trigger_rejects_an_event_that_is_not_a_stream_batch(glue):
    with pytest.raises(ValidationError, match="Records"):
        _invoke({"detail-type": "Scheduled Event"})
    assert glue.runs() == []


@pytest.mark.parametrize(
    ("value", "fragment"),
    [("", "missing"), ("   ", "missing"), ("a\nb", "not a Glue job name"), ("x" * 256, "not a Glue job name")],
    ids=["empty", "blank", "newline", "too-long"],
)
def test_flush_job_name_is_validated(value, fragment):
    with pytest.raises(SettingsError, match=fragment):
        FlushTriggerSettings.from_env({"LAKESYNC_FLUSH_JOB_NAME": value})


def test_flush_job_name_reads_the_variable():
    settings = FlushTriggerSettings.from_env({"LAKESYNC_FLUSH_JOB_NAME": " lakesync-dev-flush "})
    assert (settings.job_name, settings.flush_function) == ("lakesync-dev-flush", None)


def test_flush_trigger_starts_standard_runs_of_a_flex_job(glue):
    # Given a flush job on the Flex execution class (the deployment default: the tick's runs wait for spare capacity)
    assert glue.client.get_job(JobName=glue.job_name)["Job"]["ExecutionClass"] == "FLEX"
    starts: list[dict[str, Any]] = []
    flush_trigger.get_starter().engines["glue"].client.meta.events.register(  # type: ignore[attr-defined]
        "provide-client-params.glue.StartJobRun", lambda params, **_: starts.append(dict(params))
    )
    # When a request over the threshold arrives
    response = _invoke(_recorded_at(_event(), _now_ms(), _now_ms() + 1))
    # Then the run it starts is a STANDARD one (a shard near backpressure does not wait for Flex capacity)
    assert response == {"batchItemFailures": []}
    assert [(s["JobName"], s.get("ExecutionClass")) for s in starts] == [(glue.job_name, "STANDARD")]
