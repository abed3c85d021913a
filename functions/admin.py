"""Admin routes (role ``admin``): sync rules, table schemas, flush requests, buffer metrics, materialisation
destinations and connectors per gateway; and the public connector type catalogue."""

from __future__ import annotations

from typing import Any

from aws_lambda_powertools.logging import correlation_paths
from aws_lambda_powertools.utilities.typing import LambdaContext

from functions import _http as http
from functions._runtime import get_deps, logger, metrics, one_at_a_time, tracer
from lakesync import edge
from lakesync.gateway import admin as service
from lakesync.gateway import connectors
from lakesync.gateway.deps import GatewayDeps
from lakesync.router import Response

app = http.new_app()


def _admin(gw: str) -> GatewayDeps:
    """The services' dependencies, once the caller is known to be the gateway's admin (401/403 otherwise)."""
    http.authorize(app, gw, admin=True)
    return get_deps()


def _document() -> object:
    """The request's JSON document (400 when it is not JSON, 413 over the size limit)."""
    return edge.parse_json(http.read_body(app))


@app.post("/v1/admin/sync-rules/{gw}")
def save_sync_rules(gw: str) -> Response:
    """Validate and store the sync rules; 200 ``{"saved": true}``."""
    return http.json_response(service.save_sync_rules(_admin(gw), gw, _document()))


@app.get("/v1/admin/sync-rules/{gw}")
def get_sync_rules(gw: str) -> Response:
    """The stored sync rules (an empty rule set when none)."""
    return http.json_response(service.get_sync_rules(_admin(gw), gw))


@app.post("/v1/admin/schema/{gw}")
def save_schema(gw: str) -> Response:
    """Store a table schema (safe evolution only); 200 ``{"saved": true, "table", "version"}``."""
    return http.json_response(service.save_schema(_admin(gw), gw, _document()))


@app.get("/v1/admin/schema/{gw}")
def list_schemas(gw: str) -> Response:
    """Every table schema with its version."""
    return http.json_response(service.list_schemas(_admin(gw), gw))


@app.post("/v1/admin/flush/{gw}")
def flush(gw: str) -> Response:
    """Record a flush request for the flush job; 200 ``{"flushed": true, "requestId"}``."""
    claims = http.authorize(app, gw, admin=True)
    return http.json_response(service.request_flush(get_deps(), gw, requested_by=claims.client_id))


@app.get("/v1/admin/metrics/{gw}")
def buffer_metrics(gw: str) -> Response:
    """Buffer figures, in total and per table."""
    return http.json_response(service.metrics(_admin(gw), gw))


@app.get("/v1/admin/materialise/{gw}")
def list_destinations(gw: str) -> Response:
    """The materialisation destinations, by name: 200 ``{"destinations": [...]}``."""
    return http.json_response(service.list_destinations(_admin(gw), gw))


@app.post("/v1/admin/materialise/{gw}")
def register_destination(gw: str) -> Response:
    """Validate and register a destination; 200 ``{"registered": true, "name"}``, 400 invalid, 409 name taken."""
    return http.json_response(service.register_destination(_admin(gw), gw, _document()))


@app.delete("/v1/admin/materialise/{gw}/{name}")
def unregister_destination(gw: str, name: str) -> Response:
    """Remove a destination; 200 ``{"unregistered": true, "name"}``, 404 unknown."""
    return http.json_response(service.unregister_destination(_admin(gw), gw, name))


@app.post("/v1/admin/connectors/{gw}")
def register_connector(gw: str) -> Response:
    """Validate, check and register a connector; 200 ``{"registered": true, "name"}``, 400 invalid, 409 name taken,
    502 source unreachable."""
    return http.json_response(connectors.register_connector(_admin(gw), gw, _document()))


@app.get("/v1/admin/connectors/{gw}")
def list_connectors(gw: str) -> Response:
    """200 ``[{name, type, hasIngest, isPolling}]``."""
    return http.json_response(connectors.list_connectors(_admin(gw), gw))


@app.delete("/v1/admin/connectors/{gw}/{name}")
def unregister_connector(gw: str, name: str) -> Response:
    """Remove a connector; 200 ``{"unregistered": true, "name"}``, 404 unknown."""
    return http.json_response(connectors.unregister_connector(_admin(gw), gw, name))


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
