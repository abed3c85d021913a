"""HTTP at the edge: the one place errors become responses, and the request checks bound to this runtime.

Error bodies are ``{"error": message, "code": API code}`` with the error's status. An unexpected exception, or a
``LakeSyncError`` with status 500 and code ``INTERNAL_ERROR`` (storage failures), is answered 500 ``Internal error``
with the request id and logged with its traceback; its details never leave the function. The checks themselves, their
order and the response headers are :mod:`lakesync.edge`; routing is :mod:`lakesync.router`.
"""

from __future__ import annotations

from typing import Final

from aws_lambda_powertools.metrics import MetricUnit

from functions._runtime import get_settings, jwt_secrets, logger, metrics
from lakesync import edge
from lakesync.api_routes import ROUTES
from lakesync.auth import AuthClaims
from lakesync.core.canonical import JsonValue, js_stringify
from lakesync.core.errors import LakeSyncError
from lakesync.router import Response, RouteNotFound, Router

INTERNAL_ERROR: Final = "Internal error"


def _count(status: int) -> None:
    metrics.add_metric(name="Requests", unit=MetricUnit.Count, value=1)
    if status >= 400:
        metrics.add_metric(name="ServerErrors" if status >= 500 else "ClientErrors", unit=MetricUnit.Count, value=1)


def new_app() -> Router:
    """A router with LakeSync's headers, metrics and error mapping."""
    app = Router(
        js_stringify, headers=edge.SECURITY_HEADERS, no_store_prefixes=edge.NO_STORE_PREFIXES, on_response=_count
    )

    def _lakesync_error(exc: LakeSyncError) -> Response:
        if exc.status == 500 and exc.api_code == "INTERNAL_ERROR":
            return _internal_error(app, exc)
        if exc.status == 503:  # backpressure or lost commit races: expected under load, retried by clients
            logger.warning("request deferred", extra={"status": exc.status, "code": exc.api_code, "error": exc.message})
        elif exc.status >= 500:
            logger.exception("request failed: %s %s", exc.api_code, exc.message)
        else:
            logger.info("request rejected", extra={"status": exc.status, "code": exc.api_code, "error": exc.message})
        return json_response(exc.to_body(), exc.status)

    def _not_found(_exc: RouteNotFound) -> Response:
        request = app.current_event
        allowed = sorted({r.method for r in ROUTES if r.match(r.method, request.path) is not None})
        if allowed and request.method not in allowed:
            body = {"error": "Method not allowed", "code": "VALIDATION_ERROR"}
            return Response(405, edge.JSON, body, headers={"Allow": ", ".join(allowed)})
        return json_response({"error": "Not found", "code": "NOT_FOUND"}, 404)

    def _unexpected(exc: Exception) -> Response:
        return _internal_error(app, exc)

    app.exception_handler(LakeSyncError)(_lakesync_error)
    app.exception_handler(RouteNotFound)(_not_found)
    app.exception_handler(Exception)(_unexpected)
    return app


def _internal_error(app: Router, exc: Exception) -> Response:
    logger.exception("unhandled error: %s", type(exc).__name__)
    request_id = app.current_event.request_id
    return json_response({"error": INTERNAL_ERROR, "code": "INTERNAL_ERROR", "requestId": request_id}, 500)


def json_response(body: JsonValue, status: int = 200) -> Response:
    """A JSON response."""
    return Response(status, edge.JSON, body)


def protobuf_response(data: bytes, headers: dict[str, str] | None = None) -> Response:
    """A protobuf response (the router base64-encodes ``bytes``)."""
    return Response(200, edge.PROTOBUF, data, headers=headers or {})


def authorize(app: Router, gateway: str, *, admin: bool = False) -> AuthClaims:
    """:func:`lakesync.edge.authorize` with this function's secrets and gateways; tags the log with the caller."""
    claims = edge.authorize(app.current_event, gateway, jwt_secrets(), get_settings().gateway_ids, admin=admin)
    logger.append_keys(gateway=gateway, client_id=claims.client_id)
    return claims


def read_body(app: Router) -> bytes:
    """The request body within ``LAKESYNC_MAX_BODY_BYTES`` (:func:`lakesync.edge.read_body`)."""
    return edge.read_body(app.current_event, get_settings().max_body_bytes)
