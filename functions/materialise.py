"""The materialisation consumer: SQS claim-check jobs -> every destination of the job's gateway and table.

The event source mapping reports partial batch failures (``ReportBatchItemFailures``, Powertools' batch utility):
a job that fails is retried alone, and after the queue's ``maxReceiveCount`` receives it goes to the dead-letter
queue while the rest of its batch succeeds. A malformed message or a missing or corrupt payload fails with a clear
log line and writes nothing; a destination that fails does not stop the others (the job comes back for it).
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from aws_lambda_powertools.metrics import MetricUnit
from aws_lambda_powertools.utilities.batch import BatchProcessor, EventType, process_partial_response
from aws_lambda_powertools.utilities.data_classes.sqs_event import SQSRecord
from aws_lambda_powertools.utilities.typing import LambdaContext

from functions._runtime import get_materialise_deps, logger, metrics, one_at_a_time, tracer
from lakesync.core.materialise import PayloadError
from lakesync.gateway.materialise import DestinationOutcome, MaterialiseFailed, materialise_job

# Every record failing is reported like any partial failure (not raised): the same retries, a clear response.
processor = BatchProcessor(event_type=EventType.SQS, raise_on_entire_batch_failure=False)


def record_handler(record: SQSRecord) -> None:
    """Apply one job; raise to report it failed."""
    try:
        outcome = materialise_job(get_materialise_deps(), record.body)
    except PayloadError as exc:
        metrics.add_metric(name="MaterialisePayloadErrors", unit=MetricUnit.Count, value=1)
        logger.error("Materialise job refused", extra={"message_id": record.message_id, "error": exc.message})
        raise
    except MaterialiseFailed as exc:
        metrics.add_metric(name="MaterialiseDestinationFailures", unit=MetricUnit.Count, value=len(exc.failures))
        _record(exc.outcome.applied)
        logger.error(
            "Materialise job failed for some destinations",
            extra={
                "message_id": record.message_id,
                "range": exc.outcome.job.range_id,
                "failures": {name: error.message for name, error in exc.failures.items()},
                "applied": sorted(exc.outcome.applied),
                "receive_count": record.attributes.approximate_receive_count,
            },
        )
        raise
    job = outcome.job
    if outcome.skipped is not None:
        metrics.add_metric(name="MaterialiseJobsSkipped", unit=MetricUnit.Count, value=1)
        logger.info("Materialise job skipped", extra={"range": job.range_id, "reason": outcome.skipped})
        return
    _record(outcome.applied)
    metrics.add_metric(name="MaterialiseJobs", unit=MetricUnit.Count, value=1)
    metrics.add_metric(name="MaterialisedDeltas", unit=MetricUnit.Count, value=job.deltas)
    logger.info(
        "Materialise job applied",
        extra={
            "range": job.range_id,
            "run": job.run_id,
            "deltas": job.deltas,
            "destinations": {
                name: {"upserted": o.stats.upserted, "deleted": o.stats.deleted, "ms": round(o.seconds * 1000)}
                for name, o in outcome.applied.items()
            },
        },
    )


def _record(applied: Mapping[str, DestinationOutcome]) -> None:
    for result in applied.values():
        metrics.add_metric(name="MaterialisedRowsUpserted", unit=MetricUnit.Count, value=result.stats.upserted)
        metrics.add_metric(name="MaterialisedRowsDeleted", unit=MetricUnit.Count, value=result.stats.deleted)


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
