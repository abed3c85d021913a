"""The materialisation consumer: SQS claim-check jobs -> every destination of the job's gateway and table.

The event source mapping reports partial batch failures (``ReportBatchItemFailures``, Powertools' batch utility):
a job that fails is retried alone, and after the queue's ``maxReceiveCount`` receives it goes to the dead-letter
queue while the rest of its batch succeeds. The job itself is :func:`lakesync.gateway.materialise.materialise_job`.
"""

from __future__ import annotations

from typing import Any

from aws_lambda_powertools.metrics import MetricUnit
from aws_lambda_powertools.utilities.batch import BatchProcessor, EventType, process_partial_response
from aws_lambda_powertools.utilities.data_classes.sqs_event import SQSRecord
from aws_lambda_powertools.utilities.typing import LambdaContext

from functions._runtime import get_materialise_deps, logger, metrics, one_at_a_time, tracer
from lakesync.core.materialise import PayloadError
from lakesync.gateway.materialise import (
    JobReport,
    MaterialiseFailed,
    materialise_job,
    report_failure,
    report_outcome,
)

# Every record failing is reported like any partial failure (not raised): the same retries, a clear response.
processor = BatchProcessor(event_type=EventType.SQS, raise_on_entire_batch_failure=False)


def record_handler(record: SQSRecord) -> None:
    """Apply one job; raise to report it failed."""
    try:
        outcome = materialise_job(get_materialise_deps(), record.body)
    except (PayloadError, MaterialiseFailed) as exc:
        receives = record.raw_event.get("attributes", {}).get("ApproximateReceiveCount")
        _emit(report_failure(exc, record.message_id, receives))
        raise
    _emit(report_outcome(outcome))


def _emit(report: JobReport) -> None:
    for name, value in report.counts.items():
        metrics.add_metric(name=name, unit=MetricUnit.Count, value=value)
    getattr(logger, report.level)(report.message, extra=dict(report.fields))


@one_at_a_time
@logger.inject_lambda_context(clear_state=True)
@tracer.capture_lambda_handler(capture_response=False)
@metrics.log_metrics(capture_cold_start_metric=True)
def lambda_handler(event: dict[str, Any], context: LambdaContext) -> dict[str, Any]:
    """The Lambda entry point: ``{"batchItemFailures": [{"itemIdentifier": <messageId>}, ...]}``."""
    response = process_partial_response(
        event=event, record_handler=record_handler, processor=processor, context=context
    )
    return dict(response)
