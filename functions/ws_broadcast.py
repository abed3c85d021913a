"""The deltas table's DynamoDB stream -> the open WebSocket sessions of each gateway: one broadcast per gateway
(:func:`lakesync.aws.log_stream.broadcast_records`), its failed records reported to Lambda (``ReportBatchItemFailures``;
what fails and why, and the retries: docs/realtime.md)."""

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
    for name, value in result.counts().items():
        metrics.add_metric(name=name, unit=MetricUnit.Count, value=value)


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
