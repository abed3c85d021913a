"""The flush function: one flush run into the delta log, on pyiceberg (:mod:`lakesync.aws.flush_function`).

Queued by the lake tick or the flush trigger (asynchronous ``Invoke`` with ``{"run": <run id>}``), or invoked by hand
with ``{}``. Reads :class:`~lakesync.aws.settings.lake.FlushFunctionSettings` and makes its clients on the first
invocation. Returns (and logs) what the run did; a failed run is recorded, then fails the invocation.
"""

from __future__ import annotations

import functools
import os
import re
from collections.abc import Mapping
from typing import Any

from aws_lambda_powertools.metrics import MetricUnit
from aws_lambda_powertools.utilities.typing import LambdaContext

from functions._runtime import logger, metrics, one_at_a_time, tracer
from lakesync.aws.flush_function import FlushFunction
from lakesync.aws.settings.lake import FlushFunctionSettings
from lakesync.core.errors import ValidationError

_RUN_ID = re.compile(r"\d{13}-[0-9a-f]{12}")


def run_of(event: Mapping[str, Any]) -> str | None:
    """The run a queued event names, or ``None`` for an invocation by hand.

    Raises:
        ValidationError: the event is not ``{}`` or ``{"run": <run id>}``.
    """
    if not isinstance(event, Mapping) or set(event) - {"run"}:
        raise ValidationError(f'A flush event is {{}} or {{"run": <run id>}}, got {event!r}')
    run = event.get("run")
    if run is None:
        return None
    if not isinstance(run, str) or not _RUN_ID.fullmatch(run):
        raise ValidationError(f"A flush run id is 13 digits, '-' and 12 hex digits, got {run!r}")
    return run


@functools.lru_cache(maxsize=1)
def get_flush() -> FlushFunction:
    """The flush service, built on first use from the environment."""
    return FlushFunction(FlushFunctionSettings.from_env(os.environ))


@one_at_a_time
@logger.inject_lambda_context(clear_state=True)
@tracer.capture_lambda_handler(capture_response=False)
@metrics.log_metrics(capture_cold_start_metric=True)
def lambda_handler(event: dict[str, Any], context: LambdaContext) -> dict[str, Any]:
    """The Lambda entry point: the run's report."""
    run = run_of(event)
    metrics.add_metric(name="FlushRuns", unit=MetricUnit.Count, value=1)
    report = get_flush().flush(run, context.get_remaining_time_in_millis)
    metrics.add_metric(name="FlushedDeltas", unit=MetricUnit.Count, value=report["deltas"])
    logger.info("Flush run done", extra=report)
    return report
