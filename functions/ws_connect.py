"""WebSocket ``$connect``: authenticate the upgrade and record the session.

API Gateway WebSocket APIs have one URL and no path parameters, so the gateway comes from ``?gateway=`` (the
original's path ``/v1/sync/{gw}/ws`` is accepted too when the event carries it, as the local front's may). The token
is the ``Authorization: Bearer`` header or ``?token=``; ``?encoding=base64`` opens a text-frame session (the only kind
that works through API Gateway, which refuses a client's binary frames with 1003).

A refusal is a non-2xx answer, which API Gateway turns into that HTTP status for the upgrade request (the body does
not reach the client): 401 (no or bad token), 403 (token for another gateway), 404 (unknown gateway), 400 (bad
``encoding``), each with ``{"error", "code"}`` as the HTTP API answers them. Accepted: 200, the session recorded
with its expiry (the token's, at most two hours: API Gateway's own limit).
"""

from __future__ import annotations

from typing import Any

from aws_lambda_powertools.logging import correlation_paths
from aws_lambda_powertools.metrics import MetricUnit
from aws_lambda_powertools.utilities.typing import LambdaContext

from functions._runtime import get_realtime, get_settings, jwt_secrets, logger, metrics, one_at_a_time, tracer
from lakesync.aws import ws_events
from lakesync.core.errors import LakeSyncError
from lakesync.gateway import realtime


@one_at_a_time
@logger.inject_lambda_context(correlation_id_path=correlation_paths.API_GATEWAY_REST, clear_state=True)
@tracer.capture_lambda_handler(capture_response=False)
@metrics.log_metrics(capture_cold_start_metric=True)
def lambda_handler(event: dict[str, Any], context: LambdaContext) -> dict[str, Any]:
    """The Lambda entry point: ``{"statusCode": 200}`` or the refusal."""
    connection_id = event["requestContext"]["connectionId"]
    query = {k: str(v) for k, v in (event.get("queryStringParameters") or {}).items()}
    headers = {k: str(v) for k, v in (event.get("headers") or {}).items()}
    sessions, served = get_realtime().connections, get_settings().gateway_ids
    try:
        session = realtime.connect(
            sessions, connection_id, ws_events.gateway_of(event), headers, query, jwt_secrets(), served
        )
    except LakeSyncError as exc:
        if exc.status >= 500:
            raise
        logger.info("upgrade refused", extra={"status": exc.status, "code": exc.api_code, "error": exc.message})
        metrics.add_metric(name="ConnectionsRefused", unit=MetricUnit.Count, value=1)
        return ws_events.refusal(exc)
    logger.append_keys(gateway=session.gateway, client_id=session.client_id, connection_id=connection_id)
    logger.info("session opened", extra={"encoding": session.encoding.value, "expires_at": session.expires_at})
    metrics.add_metric(name="ConnectionsOpened", unit=MetricUnit.Count, value=1)
    return {"statusCode": 200}
