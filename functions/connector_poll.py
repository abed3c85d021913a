"""The scheduled connector poll: EventBridge Scheduler invokes it with ``{"gateway", "connector"}`` (one schedule per
connector, :mod:`lakesync.aws.connector_scheduler`); the embedded default's poll loop invokes it the same way."""

from __future__ import annotations

from typing import Any

from aws_lambda_powertools.metrics import MetricUnit
from aws_lambda_powertools.utilities.typing import LambdaContext

from functions._runtime import get_deps, logger, metrics, one_at_a_time, tracer
from lakesync.gateway import poller


@one_at_a_time
@logger.inject_lambda_context(clear_state=True)
@tracer.capture_lambda_handler(capture_response=False)
@metrics.log_metrics
def lambda_handler(event: dict[str, Any], context: LambdaContext) -> dict[str, Any]:
    """Poll one connector; returns the :class:`~lakesync.gateway.poller.PollResult` as JSON. A source failure
    raises (the invocation fails and is logged; the next tick polls again from the same position)."""
    gateway, name = str(event["gateway"]), str(event["connector"])
    logger.append_keys(gateway=gateway, connector=name)
    deps = get_deps()
    # The invocation's budget bounds the lease: one left by a timed-out run is expired by the time it is killed
    # (get_remaining_time_in_millis: https://docs.aws.amazon.com/lambda/latest/dg/python-context.html).
    end_ms = deps.wall_ms() + context.get_remaining_time_in_millis()
    result = poller.poll_registered(deps, gateway, name, end_ms=end_ms)
    metrics.add_metric(name="ConnectorRowsPolled", unit=MetricUnit.Count, value=result.rows)
    logger.info("connector polled", extra=result.to_json())
    return result.to_json()
