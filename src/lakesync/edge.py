"""The HTTP edge of the API functions, without the Lambda runtime: the order of the request checks, bodies and
content negotiation (``functions/_http.py`` wires these to the router, the settings and the error responses).

Pipeline of every API route (the worker's order, reference §12.4): route match (unknown path 404 ``Not found``,
known path with another method 405 ``Method not allowed``) → Bearer token (401 ``AUTH_ERROR``) → admin role on
``/v1/admin`` routes (403 ``FORBIDDEN`` ``Admin role required``) → token ``gw`` equals the route's gateway (403
``FORBIDDEN`` ``Gateway ID mismatch: ...``) → the gateway is served here (404 ``NOT_FOUND`` ``Gateway not found``;
checked after the token so that callers cannot probe which gateways exist) → the caller's rate limit on sync routes
(429 ``RATE_LIMITED`` with ``Retry-After``: :func:`rate_family`, :mod:`lakesync.gateway.limits`) → body size (413)
→ decode → service.

Bodies: base64-decoded when ``isBase64Encoded``; larger than the limit by ``Content-Length`` or by actual length →
413 ``VALIDATION_ERROR``; JSON parsed strictly (``Invalid JSON body``); ``Content-Type: application/x-protobuf``
selects the protobuf decoder. Responses are protobuf when the request's ``Accept`` prefers
``application/x-protobuf`` (else the route's default), JSON otherwise.
"""

from __future__ import annotations

import base64
import binascii
from collections.abc import Collection, Sequence
from typing import Final

from lakesync.api_routes import ROUTES
from lakesync.auth import AuthClaims, parse_bearer, verify_token
from lakesync.core.canonical import JsonValue
from lakesync.core.errors import (
    AuthError,
    CallerRateLimitedError,
    ForbiddenError,
    LakeSyncError,
    NotFoundError,
    PayloadTooLargeError,
    ValidationError,
)
from lakesync.core.redact import redact
from lakesync.gateway.deps import MIB
from lakesync.router import Request, Response
from lakesync.wire.jsonapi import loads

JSON: Final = "application/json"
PROTOBUF: Final = "application/x-protobuf"
SECURITY_HEADERS: Final = {
    "X-Content-Type-Options": "nosniff",
    "X-Frame-Options": "DENY",
    "Strict-Transport-Security": "max-age=31536000; includeSubDomains",
    "API-Version": "v1",
}
"""Headers on every response."""
NO_STORE_PREFIXES: Final = ("/v1/sync/", "/v1/admin/")
"""Responses under these paths are never cached."""
INTERNAL_ERROR: Final = "Internal error"
"""The message of every 500: an unexpected failure's details never leave the function."""
RATE_FAMILIES: Final = {
    "push": "push",
    "pull": "pull",
    "checkpoint": "checkpoint",
    "action": "actions",
    "actions": "actions",
    "subscriptions": "subscriptions",
}
"""The fourth segment of a ``/v1/sync/{gw}/...`` route -> its rate limit family."""


def json_response(body: JsonValue, status: int = 200) -> Response:
    """A JSON response."""
    return Response(status, JSON, body)


def protobuf_response(data: bytes, headers: dict[str, str] | None = None) -> Response:
    """A protobuf response (the router base64-encodes ``bytes``)."""
    return Response(200, PROTOBUF, data, headers=headers or {})


AUTHORIZED_PREFIXES: Final = ("/v1/sync/", "/v1/admin/")
"""Routes under these paths need a token: API Gateway's authorizer (:func:`authorizer_admits`) runs before their
functions. Health, the API document and the connector types are public."""
EXPIRED_TOKEN: Final = "JWT has expired"
""":func:`lakesync.auth.verify_token`'s message for a well-signed token past its ``exp``."""


def authorizer_admits(authorization: str | None, secrets: Sequence[str]) -> bool:
    """Whether the API's authorizer lets a request with this ``Authorization`` header reach a function.

    Admitted: a token :func:`lakesync.auth.verify_token` accepts, and a well-signed token that has expired -- its
    function answers 401 ``AUTH_ERROR`` ``JWT has expired``, the answer on which clients fetch a new token (API
    Gateway can refuse only with 403, which clients take as final). Refused: everything else (no bearer token,
    malformed, badly signed -- forged, or signed with a key no longer held --, over the lifetime limit). Whether the
    token's gateway, role and ``sub`` fit the route stays the function's to answer (403, or 404 for a gateway not
    served): the authorizer's answer is cached per token, for every route. The function verifies every token again,
    so an answer cached past a token's expiry or a key's rotation grants nothing.
    """
    try:
        verify_token(parse_bearer(authorization), secrets)
    except AuthError as exc:
        return exc.message == EXPIRED_TOKEN
    return True


def error_response(exc: LakeSyncError) -> Response:
    """``{"error", "code"}`` with the error's status (the message passed through
    :func:`lakesync.core.redact.redact`); a caller over its rate limit is told ``Retry-After`` too."""
    headers = {"Retry-After": str(exc.retry_after_s)} if isinstance(exc, CallerRateLimitedError) else {}
    body = exc.to_body()
    # Messages are built without credentials where they arise; this is the last line of defence for the body.
    body["error"] = redact(str(body["error"]))
    return Response(exc.status, JSON, body, headers=headers)


def rate_family(path: str) -> str | None:
    """The rate limit family of a request path: ``push``, ``pull``, ``checkpoint``, ``actions`` or ``subscriptions``
    for the sync routes; ``None`` (not limited per caller) for the admin routes, health and the API document."""
    parts = path.split("/")
    if len(parts) == 6 and parts[4] == "subscriptions":  # DELETE /v1/sync/{gw}/subscriptions/{id}
        parts = parts[:5]
    if len(parts) == 5 and parts[1] == "v1" and parts[2] == "sync":
        return RATE_FAMILIES.get(parts[4])
    return None


def is_internal(exc: LakeSyncError) -> bool:
    """Whether the error is answered as an unexpected one (500 ``INTERNAL_ERROR``: storage failures)."""
    return exc.status == 500 and exc.api_code == "INTERNAL_ERROR"


def internal_error_response(request_id: str) -> Response:
    """500 ``{"error": "Internal error", "code": "INTERNAL_ERROR", "requestId"}``."""
    return json_response({"error": INTERNAL_ERROR, "code": "INTERNAL_ERROR", "requestId": request_id}, 500)


def unmatched_route_response(request: Request) -> Response:
    """404 ``Not found`` for an unknown path; 405 ``Method not allowed`` (with ``Allow``) for a known path asked with
    another method."""
    allowed = sorted({r.method for r in ROUTES if r.match(r.method, request.path) is not None})
    if allowed and request.method not in allowed:
        body = {"error": "Method not allowed", "code": "VALIDATION_ERROR"}
        return Response(405, JSON, body, headers={"Allow": ", ".join(allowed)})
    return json_response({"error": "Not found", "code": "NOT_FOUND"}, 404)


def authorize(
    request: Request, gateway: str, secrets: Sequence[str], served: Collection[str], *, admin: bool = False
) -> AuthClaims:
    """The caller's claims for ``gateway``, checked in the pipeline's order.

    Raises:
        AuthError: 401. ForbiddenError: 403. NotFoundError: 404 for a gateway not in ``served``.
    """
    claims = verify_token(parse_bearer(request.headers.get("authorization")), secrets)
    if admin and claims.role != "admin":
        raise ForbiddenError("Admin role required")
    if claims.gateway_id != gateway:
        raise ForbiddenError("Gateway ID mismatch: JWT authorises a different gateway")
    if gateway not in served:
        raise NotFoundError("Gateway not found")
    return claims


def read_body(request: Request, limit: int) -> bytes:
    """The raw request body, within ``limit`` bytes.

    Raises:
        PayloadTooLargeError: 413, by ``Content-Length`` or actual size. ValidationError: malformed base64.
    """
    declared = (request.headers.get("content-length") or "").strip()
    if declared.isascii() and declared.isdigit() and int(declared) > limit:
        raise _too_large(limit)
    raw = request.body or ""
    if request.is_base64_encoded:
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


def has_protobuf_body(request: Request) -> bool:
    """Whether the request body is protobuf (``Content-Type: application/x-protobuf``)."""
    return _media_type(request.headers.get("content-type")) == PROTOBUF


def wants_protobuf(request: Request, *, default: bool = False) -> bool:
    """Whether to answer in protobuf: ``Accept`` ranks it above JSON; ``default`` when it ranks neither."""
    quality: dict[str, float] = {}
    for part in (request.headers.get("accept") or "").split(","):
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
