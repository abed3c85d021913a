"""lakesync.aws.flush_trigger without AWS: which stream records are flush requests, one start per batch decided by
the newest request, which records a deferred batch reports for a retry, and the wait budget.
"""

from __future__ import annotations

import copy
import json
from pathlib import Path
from typing import Any

import pytest

from lakesync.aws.flush_trigger import (
    MAX_WAIT_S,
    SAFETY_S,
    flush_requests_in,
    trigger_flush,
    wait_budget_s,
)
from lakesync.aws.jobs import TriggerResult
from lakesync.core.errors import ValidationError
from lakesync.core.flush_requests import CLOCK_SKEW_MS, ActiveRun, FlushRequest

EVENTS = Path(__file__).parent.parent.parent / "events"


def _sample() -> dict[str, Any]:
    event: dict[str, Any] = json.loads((EVENTS / "flush_trigger_stream.json").read_text(encoding="utf-8"))
    return event


def _record(event_name: str, sk: str, seq: str = "9", *, gw: str = "default", image: bool = True) -> dict[str, Any]:
    record = copy.deepcopy(_sample()["Records"][0])
    record["eventName"] = event_name
    record["dynamodb"]["SequenceNumber"] = seq
    record["dynamodb"]["Keys"] = {"gw": {"S": gw}, "sk": {"S": sk}}
    if image:
        record["dynamodb"]["NewImage"] = {"gw": {"S": gw}, "sk": {"S": sk}}
    else:
        record["dynamodb"].pop("NewImage")
    return record


class StubStarter:
    def __init__(self, result: TriggerResult) -> None:
        self.result = result
        self.calls: list[tuple[int, float]] = []

    def ensure_run_after(self, at_ms: int, *, wait_s: float) -> TriggerResult:
        self.calls.append((at_ms, wait_s))
        return self.result


def test_flush_requests_in_reads_the_sample_batch():
    records = flush_requests_in(_sample())
    assert [r.sequence_number for r in records.requests] == ["4100000000000000000000001", "4100000000000000000000002"]
    assert records.requests[0].request == FlushRequest("default", 1_700_000_000_000, "0f1e2d3c4b5a69788796a5b4c3d2e1f0")
    assert records.ignored == 0 and records.newest_ms == 1_700_000_000_250


@pytest.mark.parametrize(
    "record",
    [
        _record("REMOVE", "flush#001700000000000#abc"),
        _record("MODIFY", "flush#001700000000000#abc"),
        _record("INSERT", "flushlease", gw="~lease"),
        _record("INSERT", "schema#todos"),
        _record("INSERT", "flush#17#abc"),
        {**_record("INSERT", "flush#001700000000000#abc"), "eventSource": "aws:kinesis"},
        {"eventName": "INSERT"},
        "not a record",
    ],
    ids=["remove", "modify", "lease", "schema", "malformed-key", "other-source", "no-change", "not-a-dict"],
)
def test_flush_requests_in_ignores_everything_but_inserted_requests(record):
    # Given the sample batch with one more record that is not a new flush request
    event = _sample()
    event["Records"].append(record)
    # Then only the sample's two requests count, and the other record is counted as ignored
    records = flush_requests_in(event)
    assert len(records.requests) == 2 and records.ignored == 1


def test_flush_requests_in_reads_keys_only_records():
    records = flush_requests_in({"Records": [_record("INSERT", "flush#001700000000005#k", seq="7", image=False)]})
    assert [(r.sequence_number, r.request.at_ms) for r in records.requests] == [("7", 1_700_000_000_005)]


@pytest.mark.parametrize("event", [{}, {"Records": None}, {"Records": {"a": 1}}], ids=["missing", "null", "object"])
def test_flush_requests_in_rejects_a_non_stream_event(event):
    with pytest.raises(ValidationError, match="Records"):
        flush_requests_in(event)


def test_trigger_flush_without_requests_starts_nothing():
    starter = StubStarter(TriggerResult("started", "jr_x"))
    report = trigger_flush({"Records": [_record("REMOVE", "flush#001700000000000#abc")]}, starter, wait_s=30)  # type: ignore[arg-type]
    assert starter.calls == [] and report.result is None
    assert report.response() == {"batchItemFailures": []}


@pytest.mark.parametrize("outcome", ["started", "covered"])
def test_trigger_flush_asks_once_for_the_newest_request(outcome):
    starter = StubStarter(TriggerResult(outcome, "jr_x"))
    report = trigger_flush(_sample(), starter, wait_s=30)  # type: ignore[arg-type]
    assert starter.calls == [(1_700_000_000_250, 30)]
    assert report.response() == {"batchItemFailures": []}


def test_trigger_flush_deferred_reports_only_requests_the_busy_run_does_not_cover():
    # Given a busy run that started after the first request but not provably after the second
    event = _sample()
    blocking = ActiveRun("jr_busy", started_ms=1_700_000_000_000 + CLOCK_SKEW_MS)
    starter = StubStarter(TriggerResult("deferred", "jr_busy", blocking, attempts=3, reason="busy"))
    # When the batch is handled
    report = trigger_flush(event, starter, wait_s=30)  # type: ignore[arg-type]
    # Then only the second request is reported for a retry
    assert report.response() == {"batchItemFailures": [{"itemIdentifier": "4100000000000000000000002"}]}


def test_trigger_flush_deferred_without_a_known_run_reports_every_request():
    starter = StubStarter(TriggerResult("deferred", reason="ThrottlingException"))
    report = trigger_flush(_sample(), starter, wait_s=30)  # type: ignore[arg-type]
    assert [f["itemIdentifier"] for f in report.response()["batchItemFailures"]] == [
        "4100000000000000000000001",
        "4100000000000000000000002",
    ]


@pytest.mark.parametrize(
    ("remaining_ms", "expected"),
    [(0, 0.0), (int(SAFETY_S * 1000) - 1, 0.0), (int(SAFETY_S * 1000) + 5_000, 5.0), (900_000, MAX_WAIT_S)],
    ids=["none-left", "inside-safety", "some", "capped"],
)
def test_wait_budget_keeps_the_safety_margin_and_the_cap(remaining_ms, expected):
    assert wait_budget_s(remaining_ms) == pytest.approx(expected)
