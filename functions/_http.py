"""HTTP at the edge: the one place errors become responses, and the request checks bound to this runtime.

Error bodies are ``{"error": message, "code": API code}`` with the error's status. An unexpected exception, or a
``LakeSyncError`` with status 500 and code ``INTERNAL_ERROR`` (storage failures), is answered 500 ``Internal error``
with the request id and logged with its traceback; its details never leave the function. The checks, their order, the
headers and the bodies are :mod:`lakesync.edge`'s; routing is :mod:`lakesync.router`'s.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import cast

from aws_lambda_powertools.metrics import MetricUnit

from functions._runtime import get_deps, get_settings, jwt_secrets, logger, metrics
from lakesync import edge
from lakesync.auth import AuthClaims
from lakesync.core.canonical import js_stringify
from lakesync.core.errors import CallerRateLimitedError, LakeSyncError
from lakesync.core.redact import redact
from lakesync.gateway import limits
from lakesync.router import Response, RouteNotFound, Router

json_response = edge.json_response
protobuf_response = edge.protobuf_response


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
        if edge.is_internal(exc):
            return _unexpected(exc)
        message = redact(exc.message)  # the last line of defence
        if exc.status == 503:  # backpressure or lost commit races: expected under load, retried by clients
            logger.warning("request deferred", extra={"status": exc.status, "code": exc.api_code, "error": message})
        elif exc.status >= 500:
            logger.error("request failed: %s %s", exc.api_code, message)
        else:
            logger.info("request rejected", extra={"status": exc.status, "code": exc.api_code, "error": message})
        if isinstance(exc, CallerRateLimitedError):
            metrics.add_metric(name="RateLimited", unit=MetricUnit.Count, value=1)
        return edge.error_response(exc)

    def _unexpected(exc: Exception) -> Response:
        logger.exception("unhandled error: %s", type(exc).__name__)
        return edge.internal_error_response(app.current_event.request_id)

    app.exception_handler(LakeSyncError)(_lakesync_error)
    app.exception_handler(RouteNotFound)(lambda _exc: edge.unmatched_route_response(app.current_event))
    app.exception_handler(Exception)(_unexpected)
    return app


def authorize(app: Router, gateway: str, *, admin: bool = False) -> AuthClaims:
    """:func:`lakesync.edge.authorize` with this function's keys and gateways, the log tagged with the caller; a sync
    route's request then counts against the caller's rate limit (429 over it)."""
    claims = edge.authorize(app.current_event, gateway, jwt_secrets(), get_settings().gateway_ids, admin=admin)
    logger.append_keys(gateway=gateway, client_id=claims.client_id)
    family = edge.rate_family(app.current_event.path)
    if family is not None:
        limits.check(get_deps().limiter, gateway, claims.client_id, family)
    return claims


def read_body(app: Router) -> bytes:
    """The request body within ``LAKESYNC_MAX_BODY_BYTES`` (:func:`lakesync.edge.read_body`)."""
    return edge.read_body(app.current_event, get_settings().max_body_bytes)


def time_left_ms(app: Router) -> Callable[[], int] | None:
    """The invocation's remaining time in milliseconds (its Lambda context's), when it was given a context."""
    remaining = getattr(app.lambda_context, "get_remaining_time_in_millis", None)
    return cast("Callable[[], int]", remaining) if callable(remaining) else None
