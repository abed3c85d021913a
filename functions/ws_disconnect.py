"""WebSocket ``$disconnect``: forget the session (API Gateway calls it on a best-effort basis; sessions it misses
expire by the table's TTL, and a broadcast that finds one gone forgets it too)."""

from __future__ import annotations

from typing import Any

from aws_lambda_powertools.logging import correlation_paths
from aws_lambda_powertools.metrics import MetricUnit
from aws_lambda_powertools.utilities.typing import LambdaContext

from functions._runtime import get_realtime, logger, metrics, one_at_a_time, tracer


@one_at_a_time
@logger.inject_lambda_context(correlation_id_path=correlation_paths.API_GATEWAY_REST, clear_state=True)
@tracer.capture_lambda_handler(capture_response=False)
@metrics.log_metrics(capture_cold_start_metric=True)
def lambda_handler(event: dict[str, Any], context: LambdaContext) -> dict[str, Any]:
    """The Lambda entry point: ``{"statusCode": 200}`` (API Gateway ignores it)."""
    context_ = event["requestContext"]
    get_realtime().connections.remove_connection(context_["connectionId"])
    logger.info(
        "session closed",
        extra={
            "connection_id": context_["connectionId"],
            "status": context_.get("disconnectStatusCode"),
            "reason": context_.get("disconnectReason"),
        },
    )
    metrics.add_metric(name="ConnectionsClosed", unit=MetricUnit.Count, value=1)
    return {"statusCode": 200}
