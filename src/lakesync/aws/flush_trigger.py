"""The flush trigger: flush requests arriving on the config table's DynamoDB stream start the flush job.

One batch of stream records makes at most one flush run: the newest request of the batch decides, because a run
that serves it serves every older one too (:mod:`lakesync.core.flush_requests`).

Our rule when the job is busy (``ConcurrentRunsExceededException``, the flush job allows one run at a time):

* If the unfinished run began after the newest request (or is still queued), it serves the batch: success.
* Otherwise it may miss the batch's deltas and will not delete its requests, so a *new* run has to begin after it.
  The trigger waits for that, polling every 10 s within a budget (:func:`wait_budget_s`: the invocation's remaining
  time less :data:`SAFETY_S`, at most :data:`MAX_WAIT_S`), and starts the run as soon as the job is free. If the
  budget runs out first, the requests the busy run does not cover are reported as batch item failures: Lambda
  invokes again with them, and that invocation waits again. Throttling and transient Glue errors are waited out
  the same way. So retries come at most once per poll interval, never in a hot loop.

Why a recorded request is always flushed: it stays in the config table until a run that began after it deletes
it, and every flush run -- triggered or started by the lake tick -- flushes every shard. The trigger starts such a
run at most one poll interval after the job becomes free, for as long as the event source mapping keeps retrying (its
``MaximumRecordAgeInSeconds`` / ``MaximumRetryAttempts``); should it stop retrying, or should the run it started
fail, the lake tick (:mod:`lakesync.aws.lake_tick`) starts the flush at its next flush tick while the request is
recorded, and that run serves it. With flush runs shorter than the flush interval that is within one interval.

Only ``INSERT`` records whose sort key is a flush request are acted on; everything else on the stream (the job
deleting requests, the flush lease, schemas, sync rules) is ignored, whatever the mapping's filter lets through --
in particular the job's own deletions can never trigger another run.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any, Final

from lakesync.core.errors import ValidationError
from lakesync.core.flush_requests import ActiveRun, FlushRequest, parse_flush_request_key

if TYPE_CHECKING:
    from lakesync.aws.jobs import RunStarter, TriggerResult

__all__ = [
    "MAX_WAIT_S",
    "SAFETY_S",
    "FlushTriggerReport",
    "StreamFlushRequest",
    "StreamRecords",
    "flush_requests_in",
    "trigger_flush",
    "wait_budget_s",
]

MAX_WAIT_S: Final = 240.0
"""Longest one invocation waits for a busy flush job."""

SAFETY_S: Final = 15.0
"""Time kept back from the invocation's remaining time to report the batch before Lambda's timeout."""


@dataclass(frozen=True, slots=True)
class StreamFlushRequest:
    """A flush request as it arrived on the stream.

    Attributes:
        sequence_number: The stream record's ``SequenceNumber`` (a batch item failure's ``itemIdentifier``).
        request: The request.
    """

    sequence_number: str
    request: FlushRequest


@dataclass(frozen=True, slots=True)
class StreamRecords:
    """A stream batch sorted out.

    Attributes:
        requests: The new flush requests, in stream order.
        ignored: How many other records the batch held.
    """

    requests: tuple[StreamFlushRequest, ...]
    ignored: int

    @property
    def newest_ms(self) -> int | None:
        """The time of the newest request, or ``None`` without requests."""
        return max((r.request.at_ms for r in self.requests), default=None)


@dataclass(frozen=True, slots=True)
class FlushTriggerReport:
    """What one invocation did with its batch.

    Attributes:
        records: The batch sorted out.
        result: What the starter did (``None`` when the batch held no request).
        retry: Sequence numbers to report as batch item failures.
    """

    records: StreamRecords
    result: TriggerResult | None = None
    retry: tuple[str, ...] = field(default=())

    def response(self) -> dict[str, list[dict[str, str]]]:
        """The Lambda response for ``ReportBatchItemFailures``."""
        return {"batchItemFailures": [{"itemIdentifier": seq} for seq in self.retry]}


def flush_requests_in(event: Mapping[str, Any]) -> StreamRecords:
    """The flush requests a DynamoDB stream event inserted (NEW_IMAGE or KEYS_ONLY view; other records ignored).

    Raises:
        ValidationError: the event has no ``Records`` list.
    """
    records = event.get("Records")
    if not isinstance(records, list):
        raise ValidationError("Not a DynamoDB stream event: 'Records' must be a list")
    found: list[StreamFlushRequest] = []
    for record in records:
        parsed = _flush_request(record)
        if parsed is not None:
            found.append(parsed)
    return StreamRecords(tuple(found), len(records) - len(found))


def trigger_flush(event: Mapping[str, Any], starter: RunStarter, *, wait_s: float) -> FlushTriggerReport:
    """Serve the batch's flush requests with one flush run (see the module docstring for the rule).

    Raises:
        ValidationError: the event is not a stream event.
        StorageError: Glue refused for a reason waiting cannot fix (the whole batch is then retried by Lambda).
    """
    records = flush_requests_in(event)
    newest = records.newest_ms
    if newest is None:
        return FlushTriggerReport(records)
    result = starter.ensure_run_after(newest, wait_s=wait_s)
    if result.outcome != "deferred":
        return FlushTriggerReport(records, result)
    return FlushTriggerReport(records, result, _uncovered(records, result.blocking))


def wait_budget_s(remaining_ms: int) -> float:
    """How long an invocation with ``remaining_ms`` left may wait for the job."""
    return max(0.0, min(MAX_WAIT_S, remaining_ms / 1000 - SAFETY_S))


def _uncovered(records: StreamRecords, blocking: ActiveRun | None) -> tuple[str, ...]:
    return tuple(
        r.sequence_number for r in records.requests if blocking is None or not blocking.covers(r.request.at_ms)
    )


def _flush_request(record: Any) -> StreamFlushRequest | None:
    if not isinstance(record, dict) or record.get("eventName") != "INSERT":
        return None
    if record.get("eventSource", "aws:dynamodb") != "aws:dynamodb":
        return None
    change = record.get("dynamodb")
    if not isinstance(change, dict):
        return None
    sequence_number = change.get("SequenceNumber")
    image = change.get("NewImage") or change.get("Keys")
    if not isinstance(sequence_number, str) or not sequence_number or not isinstance(image, dict):
        return None
    gateway, sk = _string(image, "gw"), _string(image, "sk")
    if gateway is None or sk is None:
        return None
    request = parse_flush_request_key(gateway, sk)
    return StreamFlushRequest(sequence_number, request) if request is not None else None


def _string(image: Mapping[str, Any], name: str) -> str | None:
    attribute = image.get(name)
    value = attribute.get("S") if isinstance(attribute, dict) else None
    return value if isinstance(value, str) else None
