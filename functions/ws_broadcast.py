"""The deltas table's DynamoDB stream -> every other open WebSocket session of each gateway.

A batch's new log chunks are grouped by gateway (:mod:`lakesync.aws.log_stream`) and each gateway's entries go out
in one :func:`lakesync.gateway.realtime.broadcast` (per recipient: its sync rules, with the membership tables they
read, its own changes left out, messages within API Gateway's frame size, a pull-now notice for what does not fit or
for a membership change that moves its scope). A session the management API reports gone (410) is forgotten; an
expired one is closed and forgotten.

Partial batch failures (Powertools' batch utility, ``ReportBatchItemFailures``): the records of a gateway whose
broadcast failed (the sessions, sync rules or membership tables could not be read, API Gateway kept throttling) and a
record that does not decode are reported failed; the other gateways' records are not. Lambda retries a stream batch
from the lowest failed sequence number, so records of other gateways *after* it are delivered again: a broadcast
delta is applied idempotently by clients (per-column LWW), so a repeat costs a message, never a wrong row. The event
source mapping bounds the retries and the record age and sends what still fails to its on-failure queue; broadcasts
are an optimisation (clients pull), so nothing is lost for good.
"""

from __future__ import annotations

from typing import Any

from aws_lambda_powertools.metrics import MetricUnit
from aws_lambda_powertools.utilities.batch import BatchProcessor, EventType, process_partial_response
from aws_lambda_powertools.utilities.data_classes.dynamo_db_stream_event import DynamoDBRecord
from aws_lambda_powertools.utilities.typing import LambdaContext

from functions._runtime import get_broadcast_deps, logger, metrics, one_at_a_time, tracer
from lakesync.aws.log_stream import StreamBroadcast, broadcast_records

processor = BatchProcessor(event_type=EventType.DynamoDBStreams, raise_on_entire_batch_failure=False)


class BroadcastFailedError(Exception):
    """A record whose chunk could not be decoded or whose gateway's broadcast failed."""


def _observe(result: StreamBroadcast) -> None:
    for sequence, why in result.undecodable.items():
        logger.error("log chunk does not decode", extra={"sequence": sequence, "error": why})
    for gateway, exc in result.errors.items():
        logger.warning("broadcast failed", extra={"gateway": gateway, "code": exc.api_code, "error": exc.message})
    for gateway, report in result.gateways.items():
        logger.info("broadcast", extra={"gateway": gateway, "messages": report.messages, "gone": report.gone})
    metrics.add_metric(name="BroadcastFailures", unit=MetricUnit.Count, value=len(result.errors))
    metrics.add_metric(name="BroadcastMessages", unit=MetricUnit.Count, value=result.total.messages)
    metrics.add_metric(name="BroadcastRecipients", unit=MetricUnit.Count, value=result.total.recipients)
    metrics.add_metric(name="GoneConnections", unit=MetricUnit.Count, value=result.total.gone)
    metrics.add_metric(name="PullNotices", unit=MetricUnit.Count, value=result.total.pull_notices)


@one_at_a_time
@logger.inject_lambda_context(clear_state=True)
@tracer.capture_lambda_handler(capture_response=False)
@metrics.log_metrics(capture_cold_start_metric=True)
def lambda_handler(event: dict[str, Any], context: LambdaContext) -> dict[str, Any]:
    """The Lambda entry point: ``{"batchItemFailures": [{"itemIdentifier": <SequenceNumber>}, ...]}``."""
    metrics.add_metric(name="BroadcastBatches", unit=MetricUnit.Count, value=1)
    result = broadcast_records(get_broadcast_deps, event.get("Records") or [])
    _observe(result)
    failed = result.failed

    def record_handler(record: DynamoDBRecord) -> None:
        why = failed.get(str(record.dynamodb.sequence_number if record.dynamodb else None))
        if why is not None:
            raise BroadcastFailedError(why)

    response = process_partial_response(
        event=event, record_handler=record_handler, processor=processor, context=context
    )
    return dict(response)
