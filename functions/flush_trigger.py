"""The config table's DynamoDB stream -> the flush: one run started per batch of flush requests.

The event source mapping reports batch item failures (``ReportBatchItemFailures``); the rule for a busy job, the
waiting and what is reported for a retry are in :mod:`lakesync.aws.flush_trigger`. The flush's engines are the
deployed ones, as the lake tick's (:class:`lakesync.aws.jobs.FlushEngines`): the flush function when
``LAKESYNC_FLUSH_FUNCTION_NAME`` is set (a run queued by ``lambda:Invoke`` and recorded in the config table:
:mod:`lakesync.aws.flush_runs`), the Glue job when ``LAKESYNC_FLUSH_JOB_NAME`` is (``glue:StartJobRun``); with
both, a run goes to the one chosen for the backlog. They are read on first use, and the clients made then.
"""

from __future__ import annotations

import functools
import os
from typing import TYPE_CHECKING, Any

from aws_lambda_powertools.metrics import MetricUnit
from aws_lambda_powertools.utilities.typing import LambdaContext

from functions._runtime import logger, metrics, one_at_a_time, tracer
from lakesync.aws.flush_trigger import trigger_flush, wait_budget_s
from lakesync.aws.settings.lake import FlushTriggerSettings

if TYPE_CHECKING:
    from lakesync.aws.jobs import RunStarter


@functools.lru_cache(maxsize=1)
def get_starter() -> RunStarter:
    """The flush's starter, built on first use (boto3 honours ``AWS_ENDPOINT_URL``):
    :func:`lakesync.aws.wiring.flush_trigger_starter`."""
    from lakesync.aws.wiring import flush_trigger_starter

    return flush_trigger_starter(FlushTriggerSettings.from_env(os.environ))


@one_at_a_time
@logger.inject_lambda_context(clear_state=True)
@tracer.capture_lambda_handler(capture_response=False)
@metrics.log_metrics(capture_cold_start_metric=True)
def lambda_handler(event: dict[str, Any], context: LambdaContext) -> dict[str, Any]:
    """The Lambda entry point: ``{"batchItemFailures": [{"itemIdentifier": <SequenceNumber>}, ...]}``."""
    metrics.add_metric(name="FlushTriggerBatches", unit=MetricUnit.Count, value=1)
    report = trigger_flush(event, get_starter(), wait_s=wait_budget_s(context.get_remaining_time_in_millis()))
    result = report.result
    metrics.add_metric(name="FlushRequests", unit=MetricUnit.Count, value=len(report.records.requests))
    if result is None:
        logger.info("No flush request in the batch", extra={"ignored": report.records.ignored})
        return report.response()
    metrics.add_metric(name=f"FlushRuns{result.outcome.title()}", unit=MetricUnit.Count, value=1)
    log = logger.warning if result.outcome == "deferred" else logger.info
    log(
        f"Flush {result.outcome}",
        extra={
            "run_id": result.run_id,
            "requests": len(report.records.requests),
            "ignored": report.records.ignored,
            "newest_request_ms": report.records.newest_ms,
            "start_attempts": result.attempts,
            "reason": result.reason,
            "retry": len(report.retry),
        },
    )
    return report.response()
