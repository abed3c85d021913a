"""The config table's DynamoDB stream -> the flush: one run started per batch of flush requests.

The event source mapping reports batch item failures (``ReportBatchItemFailures``); the rule for a busy job, the
waiting and what is reported for a retry are in :mod:`lakesync.aws.flush_trigger`. The flush is the flush function
when ``LAKESYNC_FLUSH_FUNCTION_NAME`` is set (a run queued by ``lambda:Invoke`` and recorded in the config table:
:mod:`lakesync.aws.flush_runs`), else the Glue job ``LAKESYNC_FLUSH_JOB_NAME`` (``glue:StartJobRun``). Both are read
on first use, and the clients made then.
"""

from __future__ import annotations

import functools
import os
import re
from collections.abc import Mapping
from typing import TYPE_CHECKING, Any

from aws_lambda_powertools.metrics import MetricUnit
from aws_lambda_powertools.utilities.typing import LambdaContext

from functions._runtime import logger, metrics, one_at_a_time, tracer
from lakesync.aws.flush_trigger import trigger_flush, wait_budget_s
from lakesync.aws.function_settings import FLUSH_JOB_NAME, SettingsError, flush_function_ref

if TYPE_CHECKING:
    from lakesync.aws.jobs import RunStarter

_JOB_NAME = re.compile(r"[\u0020-\uD7FF\uE000-\uFFFD\U00010000-\U0010FFFF\t]{1,255}")


def flush_job_name(environ: Mapping[str, str]) -> str:
    """The Glue flush job's name from the environment.

    Raises:
        SettingsError: the variable is unset, empty or not a Glue job name.
    """
    name = environ.get(FLUSH_JOB_NAME, "").strip()
    if not name:
        raise SettingsError(f"Invalid LakeSync configuration: missing {FLUSH_JOB_NAME}")
    if not _JOB_NAME.fullmatch(name):
        raise SettingsError(f"Invalid LakeSync configuration: {FLUSH_JOB_NAME} {name!r} is not a Glue job name")
    return name


@functools.lru_cache(maxsize=1)
def get_starter() -> RunStarter:
    """The flush's starter, built on first use (boto3 honours ``AWS_ENDPOINT_URL``): the flush function's, or the
    Glue job's, whose runs are then ``STANDARD`` whatever the job's class: a shard over its flush threshold is on its
    way to backpressure, so its flush must not wait for Flex capacity."""
    function = flush_function_ref(os.environ)
    if function is not None:
        from lakesync.aws.wiring import flush_function_starter

        return flush_function_starter(*function)
    from lakesync.aws.jobs import GlueJobStarter, glue_client

    return GlueJobStarter(glue_client(), flush_job_name(os.environ), execution_class="STANDARD")


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
