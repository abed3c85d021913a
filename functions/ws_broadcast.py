"""The deltas table's DynamoDB stream -> every other open WebSocket session of each gateway.

A batch's new log chunks are grouped by gateway (:mod:`lakesync.aws.log_stream`) and each gateway's entries go out
in one :func:`lakesync.gateway.realtime.broadcast` (per recipient: its sync rules, its own changes left out, messages
within API Gateway's frame size, a pull-now notice for what does not fit). A session the management API reports gone
(410) is forgotten; an expired one is closed and forgotten.

Partial batch failures (Powertools' batch utility, ``ReportBatchItemFailures``): the records of a gateway whose
broadcast failed (the sessions or sync rules could not be read, API Gateway kept throttling) and a record that does
not decode are reported failed; the other gateways' records are not. Lambda retries a stream batch from the lowest
failed sequence number, so records of other gateways *after* it are delivered again: a broadcast delta is applied
idempotently by clients (per-column LWW), so a repeat costs a message, never a wrong row. The event source mapping
bounds the retries and the record age and sends what still fails to its on-failure queue; broadcasts are an
optimisation (clients pull), so nothing is lost for good.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from aws_lambda_powertools.metrics import MetricUnit
from aws_lambda_powertools.utilities.batch import BatchProcessor, EventType, process_partial_response
from aws_lambda_powertools.utilities.data_classes.dynamo_db_stream_event import DynamoDBRecord
from aws_lambda_powertools.utilities.typing import LambdaContext

from functions._runtime import get_broadcast_deps, logger, metrics, one_at_a_time, tracer
from lakesync.aws.log_stream import StreamRecordError, decode_record
from lakesync.core.errors import LakeSyncError
from lakesync.gateway import realtime
from lakesync.gateway.model import LogEntry

processor = BatchProcessor(event_type=EventType.DynamoDBStreams, raise_on_entire_batch_failure=False)


class BroadcastFailedError(Exception):
    """A record whose chunk could not be decoded or whose gateway's broadcast failed."""


def _sequence(record: Mapping[str, Any]) -> str:
    return str((record.get("dynamodb") or {}).get("SequenceNumber"))


def broadcast_batch(records: list[dict[str, Any]]) -> dict[str, str]:
    """Broadcast a batch's new chunks per gateway; returns the failed records (sequence number -> why)."""
    failed: dict[str, str] = {}
    by_gateway: dict[str, list[LogEntry]] = {}
    sequences: dict[str, list[str]] = {}
    for record in records:
        try:
            chunk = decode_record(record)
        except StreamRecordError as exc:
            logger.error("log chunk does not decode", extra={"sequence": _sequence(record), "error": str(exc)})
            failed[_sequence(record)] = str(exc)
            continue
        if chunk is not None:
            by_gateway.setdefault(chunk[0], []).extend(chunk[1])
            sequences.setdefault(chunk[0], []).append(_sequence(record))
    if not by_gateway:
        return failed
    deps = get_broadcast_deps()
    total = realtime.BroadcastReport()
    for gateway, entries in by_gateway.items():
        try:
            report = realtime.broadcast(deps, gateway, entries)
        except LakeSyncError as exc:
            logger.warning("broadcast failed", extra={"gateway": gateway, "code": exc.api_code, "error": exc.message})
            metrics.add_metric(name="BroadcastFailures", unit=MetricUnit.Count, value=1)
            failed.update(dict.fromkeys(sequences[gateway], f"{gateway}: {exc.message}"))
            continue
        total.add(report)
        logger.info(
            "broadcast",
            extra={"gateway": gateway, "entries": len(entries), "messages": report.messages, "gone": report.gone},
        )
    metrics.add_metric(name="BroadcastMessages", unit=MetricUnit.Count, value=total.messages)
    metrics.add_metric(name="BroadcastRecipients", unit=MetricUnit.Count, value=total.recipients)
    metrics.add_metric(name="GoneConnections", unit=MetricUnit.Count, value=total.gone)
    metrics.add_metric(name="PullNotices", unit=MetricUnit.Count, value=total.pull_notices)
    return failed


@one_at_a_time
@logger.inject_lambda_context(clear_state=True)
@tracer.capture_lambda_handler(capture_response=False)
@metrics.log_metrics(capture_cold_start_metric=True)
def lambda_handler(event: dict[str, Any], context: LambdaContext) -> dict[str, Any]:
    """The Lambda entry point: ``{"batchItemFailures": [{"itemIdentifier": <SequenceNumber>}, ...]}``."""
    metrics.add_metric(name="BroadcastBatches", unit=MetricUnit.Count, value=1)
    failed = broadcast_batch(list(event.get("Records") or []))

    def record_handler(record: DynamoDBRecord) -> None:
        why = failed.get(str(record.dynamodb.sequence_number if record.dynamodb else None))
        if why is not None:
            raise BroadcastFailedError(why)

    response = process_partial_response(
        event=event, record_handler=record_handler, processor=processor, context=context
    )
    return dict(response)
