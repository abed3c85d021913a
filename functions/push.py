"""POST /v1/sync/{gw}/push: auth → size → JSON or protobuf → required fields → clientId → count → push service.

A protobuf answer (``Accept``, or a protobuf body without one) is a ``SyncResponse`` of the effective deltas;
``accepted`` and the receipts are JSON-only.
"""

from __future__ import annotations

from typing import Any

from aws_lambda_powertools.logging import correlation_paths
from aws_lambda_powertools.metrics import MetricUnit
from aws_lambda_powertools.utilities.typing import LambdaContext

from functions import _http as http
from functions._runtime import get_deps, logger, metrics, one_at_a_time, tracer
from lakesync import edge
from lakesync.core.errors import ValidationError
from lakesync.core.messages import SyncPush, SyncResponse
from lakesync.gateway import push as service
from lakesync.router import Response
from lakesync.wire import decode_sync_push, encode_sync_response

app = http.new_app()


@app.post("/v1/sync/{gw}/push")
def push(gw: str) -> Response:
    """Merge a batch of deltas; 200 ``{serverHlc, accepted, deltas, receipts}``."""
    claims = http.authorize(app, gw)
    body = http.read_body(app)
    protobuf = edge.has_protobuf_body(app.current_event)
    client_id: object
    deltas: object
    if protobuf:
        message = decode_sync_push(body)
        client_id, deltas = message.client_id, message.deltas
    else:
        doc = edge.parse_json(body)
        client_id, deltas = (doc.get("clientId"), doc.get("deltas")) if isinstance(doc, dict) else (None, None)
    count = len(edge.check_batch(claims, client_id, deltas, kind="push", field="deltas"))
    deps = get_deps()
    limit = deps.settings.max_deltas_per_push
    if count > limit:
        raise ValidationError(f"Too many deltas in a single push (max {limit:,})")
    if not protobuf:
        message = SyncPush.from_json(doc)
    result = service.push(
        deps, gw, message, client_id=claims.client_id, trusted=claims.role == "admin", claims=claims.custom_claims
    )
    metrics.add_metric(name="AcceptedDeltas", unit=MetricUnit.Count, value=result.accepted)
    if edge.wants_protobuf(app.current_event, default=protobuf):
        return http.protobuf_response(encode_sync_response(SyncResponse(result.deltas, result.server_hlc)))
    return http.json_response(result.to_json())


@one_at_a_time
@logger.inject_lambda_context(correlation_id_path=correlation_paths.API_GATEWAY_HTTP, clear_state=True)
@tracer.capture_lambda_handler(capture_response=False)
@metrics.log_metrics(capture_cold_start_metric=True)
def lambda_handler(event: dict[str, Any], context: LambdaContext) -> dict[str, Any]:
    """The Lambda entry point."""
    return app.resolve(event, context)
