"""The materialisation consumer: SQS claim-check jobs -> every destination of the job's gateway and table.

The event source mapping reports partial batch failures (``ReportBatchItemFailures``, Powertools' batch utility):
a job that fails is retried alone, and after the queue's ``maxReceiveCount`` receives it goes to the dead-letter
queue while the rest of its batch succeeds. The batch is applied by
:func:`lakesync.gateway.materialise.materialise_batch` (jobs of one gateway and table together); each record then
reports its own result.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

from aws_lambda_powertools.metrics import MetricUnit
from aws_lambda_powertools.utilities.batch import BatchProcessor, EventType, process_partial_response
from aws_lambda_powertools.utilities.data_classes.sqs_event import SQSRecord
from aws_lambda_powertools.utilities.typing import LambdaContext

from functions._runtime import get_materialise_deps, logger, metrics, one_at_a_time, tracer
from lakesync.core.errors import LakeSyncError
from lakesync.gateway.materialise import (
    JobOutcome,
    JobReport,
    materialise_batch,
    report_failure,
    report_outcome,
)

# Every record failing is reported like any partial failure (not raised): the same retries, a clear response.
processor = BatchProcessor(event_type=EventType.SQS, raise_on_entire_batch_failure=False)


def _record_handler(results: dict[str, JobOutcome | LakeSyncError]) -> Callable[[SQSRecord], None]:
    def record_handler(record: SQSRecord) -> None:
        """Report one record's result; raise to report it failed."""
        result = results[record.message_id]
        if isinstance(result, LakeSyncError):
            receives = record.raw_event.get("attributes", {}).get("ApproximateReceiveCount")
            _emit(report_failure(result, record.message_id, receives))
            raise result
        _emit(report_outcome(result))

    return record_handler


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
    records = [SQSRecord(r) for r in event.get("Records", [])]
    results = dict(
        zip(
            (r.message_id for r in records),
            materialise_batch(get_materialise_deps(), [r.body for r in records]),
            strict=True,
        )
    )
    response = process_partial_response(
        event=event, record_handler=_record_handler(results), processor=processor, context=context
    )
    return dict(response)
