"""Admin routes (role ``admin``): sync rules, table schemas, flush requests, buffer metrics, materialisation
destinations and connectors per gateway (:mod:`lakesync.gateway.admin_routes`); and the public connector type
catalogue."""

from __future__ import annotations

from typing import Any

from aws_lambda_powertools.logging import correlation_paths
from aws_lambda_powertools.utilities.typing import LambdaContext

from functions import _http as http
from functions._runtime import get_deps, logger, metrics, one_at_a_time, tracer
from lakesync import edge
from lakesync.gateway import connectors
from lakesync.gateway.admin_routes import OPERATIONS, AdminOperation, AdminRequest
from lakesync.router import Response

app = http.new_app()


def _document() -> object:
    """The request's JSON document (400 when it is not JSON, 413 over the size limit)."""
    return edge.parse_json(http.read_body(app))


def _serve(operation: AdminOperation) -> None:
    def handle(gw: str, name: str = "") -> Response:
        claims = http.authorize(app, gw, admin=True)  # 401/403 before the body is read
        query = app.current_event.query_string_parameters or {}
        request = AdminRequest(get_deps(), gw, claims.client_id, name, _document, query)
        return http.json_response(operation.run(request))

    handle.__doc__ = operation.summary
    {"GET": app.get, "POST": app.post, "DELETE": app.delete}[operation.method](operation.path)(handle)


for _operation in OPERATIONS:
    _serve(_operation)


@app.get("/v1/connectors/types")
def connector_types() -> Response:
    """200: the connector type descriptors, sorted by type (no authentication, as the original)."""
    return http.json_response(connectors.connector_types())


@one_at_a_time
@logger.inject_lambda_context(correlation_id_path=correlation_paths.API_GATEWAY_HTTP, clear_state=True)
@tracer.capture_lambda_handler(capture_response=False)
@metrics.log_metrics(capture_cold_start_metric=True)
def lambda_handler(event: dict[str, Any], context: LambdaContext) -> dict[str, Any]:
    """The Lambda entry point."""
    return app.resolve(event, context)
