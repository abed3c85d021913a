"""POST /v1/sync/{gw}/action (JSON or protobuf ActionPush) and GET /v1/sync/{gw}/actions (discovery)."""

from __future__ import annotations

from typing import Any

from aws_lambda_powertools.logging import correlation_paths
from aws_lambda_powertools.utilities.typing import LambdaContext

from functions import _http as http
from functions._runtime import get_deps, logger, metrics, one_at_a_time, tracer
from lakesync import edge
from lakesync.core.actions import parse_action_push
from lakesync.gateway import actions as service
from lakesync.router import Response
from lakesync.wire import decode, encode

app = http.new_app()


@app.post("/v1/sync/{gw}/action")
def action(gw: str) -> Response:
    """Run a batch of actions; 200 ``{results, serverHlc}`` (failures are results, not HTTP errors)."""
    claims = http.authorize(app, gw)
    body = http.read_body(app)
    protobuf = edge.has_protobuf_body(app.current_event)
    doc = decode("ActionPush", body) if protobuf else edge.parse_json(body)
    fields = (doc.get("clientId"), doc.get("actions")) if isinstance(doc, dict) else (None, None)
    edge.check_batch(claims, *fields, kind="action", field="actions")
    batch = parse_action_push(doc)
    response = service.dispatch(
        get_deps(),
        gw,
        batch.actions,
        client_id=claims.client_id,
        claims=claims.custom_claims,
        role=claims.role,
        time_left_ms=http.time_left_ms(app),
    )
    if edge.wants_protobuf(app.current_event, default=protobuf):
        return http.protobuf_response(encode("ActionResponse", response.to_json()))
    return http.json_response(response.to_json())


@app.get("/v1/sync/{gw}/actions")
def discover(gw: str) -> Response:
    """200 ``{connectors: {name: [ActionDescriptor]}}``: what the caller may run (an admin: everything)."""
    claims = http.authorize(app, gw)
    return http.json_response(service.describe(get_deps(), gw, role=claims.role, claims=claims.custom_claims))


@one_at_a_time
@logger.inject_lambda_context(correlation_id_path=correlation_paths.API_GATEWAY_HTTP, clear_state=True)
@tracer.capture_lambda_handler(capture_response=False)
@metrics.log_metrics(capture_cold_start_metric=True)
def lambda_handler(event: dict[str, Any], context: LambdaContext) -> dict[str, Any]:
    """The Lambda entry point."""
    return app.resolve(event, context)
