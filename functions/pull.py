"""GET /v1/sync/{gw}/pull?clientId=&since=&cursor=&limit=&source=: auth → query params → pull service; and the
caller's stream subscriptions (:mod:`functions._subscriptions`)."""

from __future__ import annotations

from typing import Any

from aws_lambda_powertools.logging import correlation_paths
from aws_lambda_powertools.metrics import MetricUnit
from aws_lambda_powertools.utilities.typing import LambdaContext

from functions import _http as http
from functions import _subscriptions
from functions._query import parse_pull_params
from functions._runtime import get_deps, logger, metrics, one_at_a_time, tracer
from lakesync import edge
from lakesync.core.messages import SyncResponse
from lakesync.gateway import pull as service
from lakesync.router import Response
from lakesync.wire import encode_sync_response

CURSOR_HEADER = "X-LakeSync-Cursor"
"""Carries the cursor of a protobuf response (``SyncResponse`` has no field for it)."""

app = http.new_app()
_subscriptions.serve(app)


@app.get("/v1/sync/{gw}/pull")
def pull(gw: str) -> Response:
    """One page of deltas; 200 ``{deltas, serverHlc, hasMore, cursor?}``, filtered by the token's claims.

    A JSON page holds at most :func:`~lakesync.gateway.pull.json_page_bytes` stored bytes, so the response stays
    within Lambda's limit however the runtime escapes it; a protobuf page the settings' ``max_page_bytes``."""
    claims = http.authorize(app, gw)
    params = parse_pull_params(app.current_event.query_string_parameters)
    protobuf = edge.wants_protobuf(app.current_event)
    deps = get_deps()
    if not protobuf:
        deps = service.with_page_bytes(deps, service.json_page_bytes(deps.settings))
    result = service.pull(
        deps,
        gw,
        limit=params.limit,
        claims=claims.custom_claims,
        cursor=params.cursor,
        since=params.since,
        source=params.source,
        # A `since` session belongs to the client that pulls as itself (as a push must push as itself).
        client_id=params.client_id if params.client_id == claims.client_id else None,
        subscriber=claims.client_id,
    )
    metrics.add_metric(name="PulledDeltas", unit=MetricUnit.Count, value=len(result.items))
    if protobuf:
        data = encode_sync_response(SyncResponse(result.deltas, result.server_hlc, result.has_more))
        return http.protobuf_response(data, {CURSOR_HEADER: result.cursor} if result.cursor else None)
    return http.json_response(result.to_json())


@one_at_a_time
@logger.inject_lambda_context(correlation_id_path=correlation_paths.API_GATEWAY_HTTP, clear_state=True)
@tracer.capture_lambda_handler(capture_response=False)
@metrics.log_metrics(capture_cold_start_metric=True)
def lambda_handler(event: dict[str, Any], context: LambdaContext) -> dict[str, Any]:
    """The Lambda entry point."""
    return app.resolve(event, context)
