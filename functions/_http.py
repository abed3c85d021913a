"""HTTP at the edge: the one place errors become responses, plus auth, body and content-negotiation helpers.

Pipeline of every API route (the worker's order, reference §12.4): route match (unknown path 404 ``Not found``,
known path with another method 405 ``Method not allowed``) → Bearer token (401 ``AUTH_ERROR``) → admin role on
``/v1/admin`` routes (403 ``FORBIDDEN`` ``Admin role required``) → token ``gw`` equals the route's gateway (403
``FORBIDDEN`` ``Gateway ID mismatch: ...``) → the gateway is served here (404 ``NOT_FOUND`` ``Gateway not found``;
checked after the token so that callers cannot probe which gateways exist) → body size (413) → decode → service.

Error bodies are ``{"error": message, "code": API code}`` with the error's status. An unexpected exception, or a
``LakeSyncError`` with status 500 and code ``INTERNAL_ERROR`` (storage failures), is answered 500 ``Internal error``
with the request id and logged with its traceback; its details never leave the function. Every response carries
``X-Content-Type-Options: nosniff``, ``X-Frame-Options: DENY``, ``Strict-Transport-Security``, ``API-Version: v1``
and ``X-Request-Id`` (API Gateway's request id), plus ``Cache-Control: no-store`` under ``/v1/sync/`` and
``/v1/admin/``.

Routing is :mod:`functions._router` (light to import). Bodies: base64-decoded when ``isBase64Encoded``; larger than
``LAKESYNC_MAX_BODY_BYTES`` by ``Content-Length`` or by actual length → 413 ``VALIDATION_ERROR``; JSON parsed
strictly (``Invalid JSON body``); ``Content-Type: application/x-protobuf`` selects the protobuf decoder. Responses
are protobuf when the request's ``Accept`` prefers ``application/x-protobuf`` (else the route's default), JSON
otherwise (HLCs as decimal strings, written as ``JSON.stringify`` would).
"""

from __future__ import annotations

import base64
import binascii
from collections.abc import Mapping, Sequence
from typing import Any, Final

from aws_lambda_powertools.metrics import MetricUnit

from functions._router import Response, RouteNotFound, Router
from functions._runtime import get_settings, jwt_secrets, logger, metrics
from lakesync.api_routes import ROUTES
from lakesync.auth import AuthClaims, parse_bearer, verify_token
from lakesync.core.canonical import JsonValue, js_stringify
from lakesync.core.errors import (
    ForbiddenError,
    LakeSyncError,
    NotFoundError,
    PayloadTooLargeError,
    ValidationError,
)
from lakesync.gateway.deps import MIB
from lakesync.wire.jsonapi import loads

JSON: Final = "application/json"
PROTOBUF: Final = "application/x-protobuf"
INTERNAL_ERROR: Final = "Internal error"
_SECURITY_HEADERS: Final = {
    "X-Content-Type-Options": "nosniff",
    "X-Frame-Options": "DENY",
    "Strict-Transport-Security": "max-age=31536000; includeSubDomains",
    "API-Version": "v1",
}
_NO_STORE_PREFIXES: Final = ("/v1/sync/", "/v1/admin/")


class LakeSyncResolver(Router):
    """The router plus our response headers and per-response metrics."""

    def resolve(self, event: Mapping[str, Any], context: object = None) -> dict[str, Any]:
        """Route ``event`` and add the headers every response carries."""
        result = super().resolve(event, context)
        request_context = event.get("requestContext") or {}
        headers: dict[str, str] = result["headers"]
        headers.update(_SECURITY_HEADERS)
        headers["X-Request-Id"] = str(request_context.get("requestId", ""))
        stage = str(request_context.get("stage") or "$default")
        path = str(event.get("rawPath", ""))
        if stage != "$default" and path.startswith(f"/{stage}/"):
            path = path[len(stage) + 1 :]
        if path.startswith(_NO_STORE_PREFIXES):
            headers["Cache-Control"] = "no-store"
        status = int(result["statusCode"])
        metrics.add_metric(name="Requests", unit=MetricUnit.Count, value=1)
        if status >= 400:
            metrics.add_metric(name="ServerErrors" if status >= 500 else "ClientErrors", unit=MetricUnit.Count, value=1)
        return result


def new_app() -> LakeSyncResolver:
    """A router with LakeSync's error mapping registered."""
    app = LakeSyncResolver(serializer=js_stringify)

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
            return Response(405, JSON, body, headers={"Allow": ", ".join(allowed)})
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
    return Response(status, JSON, body)


def protobuf_response(data: bytes, headers: Mapping[str, str] | None = None) -> Response:
    """A protobuf response (the router base64-encodes ``bytes``)."""
    return Response(200, PROTOBUF, data, headers=headers or {})


def authorize(app: Router, gateway: str, *, admin: bool = False) -> AuthClaims:
    """Authenticate the request for ``gateway`` (see the module docstring for the order of checks).

    Raises:
        AuthError: 401. ForbiddenError: 403. NotFoundError: 404 for a gateway not served here.
    """
    token = parse_bearer(app.current_event.headers.get("authorization"))
    claims = verify_token(token, jwt_secrets())
    if admin and claims.role != "admin":
        raise ForbiddenError("Admin role required")
    if claims.gateway_id != gateway:
        raise ForbiddenError("Gateway ID mismatch: JWT authorises a different gateway")
    if gateway not in get_settings().gateway_ids:
        raise NotFoundError("Gateway not found")
    logger.append_keys(gateway=gateway, client_id=claims.client_id)
    return claims


def read_body(app: Router) -> bytes:
    """The raw request body, within the size limit.

    Raises:
        PayloadTooLargeError: 413, by ``Content-Length`` or actual size. ValidationError: malformed base64.
    """
    event = app.current_event
    limit = get_settings().max_body_bytes
    declared = (event.headers.get("content-length") or "").strip()
    if declared.isascii() and declared.isdigit() and int(declared) > limit:
        raise _too_large(limit)
    raw = event.body or ""
    if event.is_base64_encoded:
        if len(raw) // 4 * 3 - 2 > limit:
            raise _too_large(limit)
        try:
            data = base64.b64decode(raw, validate=True)
        except binascii.Error:
            raise ValidationError("Invalid base64 body") from None
    else:
        data = raw.encode("utf-8", "surrogatepass")
    if len(data) > limit:
        raise _too_large(limit)
    return data


def _too_large(limit: int) -> PayloadTooLargeError:
    size = f"{limit // MIB} MiB" if limit % MIB == 0 else f"{limit} bytes"
    return PayloadTooLargeError(f"Payload too large (max {size})")


def parse_json(body: bytes) -> JsonValue:
    """Strict JSON (no reviver: HLC fields are read from their strings by the message parsers).

    Raises:
        CodecError: ``Invalid JSON body``.
    """
    return loads(body, revive_hlcs=False)


def has_protobuf_body(app: Router) -> bool:
    """Whether the request body is protobuf (``Content-Type: application/x-protobuf``)."""
    return _media_type(app.current_event.headers.get("content-type")) == PROTOBUF


def wants_protobuf(app: Router, *, default: bool = False) -> bool:
    """Whether to answer in protobuf: ``Accept`` ranks it above JSON; ``default`` when it ranks neither."""
    quality: dict[str, float] = {}
    for part in (app.current_event.headers.get("accept") or "").split(","):
        media, _, params = part.partition(";")
        q = 1.0
        for param in params.split(";"):
            name, _, value = param.partition("=")
            if name.strip().lower() == "q":
                try:
                    q = float(value)
                except ValueError:
                    q = 0.0
        quality.setdefault(_media_type(media), q)
    pb, js = quality.get(PROTOBUF, -1.0), quality.get(JSON, -1.0)
    if pb == js:
        return default and pb != 0.0
    return pb > js and pb > 0.0


def _media_type(value: str | None) -> str:
    return (value or "").split(";", 1)[0].strip().lower()


def check_batch(claims: AuthClaims, client_id: object, items: object, *, kind: str, field: str) -> Sequence[object]:
    """The original's body checks, in its order: required fields (400), then the body's ``clientId`` (403).

    Returns:
        ``items``, known to be a sequence.

    Raises:
        ValidationError: ``Missing required fields: clientId, {field}``. ForbiddenError: ``clientId`` ≠ token ``sub``.
    """
    if not _js_truthy(client_id) or not isinstance(items, list | tuple):
        raise ValidationError(f"Missing required fields: clientId, {field}")
    if client_id != claims.client_id:
        raise ForbiddenError(f"Client ID mismatch: {kind} clientId does not match authenticated identity")
    return items


def _js_truthy(value: object) -> bool:
    if isinstance(value, float):
        return value == value and value != 0.0
    return value is not None and value is not False and value != 0 and value != ""
