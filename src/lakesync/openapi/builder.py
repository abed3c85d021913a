"""The document built from the route table and the data of :mod:`~lakesync.openapi.operations` and
:mod:`~lakesync.openapi.schemas`."""

from __future__ import annotations

import json
from functools import cache
from typing import Any, Final

from lakesync.api_routes import ROUTES, Route
from lakesync.openapi.model import JSON, NON_EMPTY, Operation, ref
from lakesync.openapi.operations import OPERATIONS
from lakesync.openapi.schemas import SCHEMAS

ERROR_TEXT: Final = {
    400: "Invalid request: malformed JSON, base64 or protobuf, missing or mistyped fields, bad parameters "
    "(`VALIDATION_ERROR`; `SCHEMA_ERROR` for an invalid table schema).",
    401: "Missing, malformed, expired or badly signed Bearer token (`AUTH_ERROR`). Without an `Authorization` "
    'header API Gateway answers itself, `{"message": "Unauthorized"}`; an expired token is always the function\'s '
    "`AUTH_ERROR` (`JWT has expired`): fetch a new token.",
    403: "The token does not grant this: another gateway, not admin, or a body `clientId` that is not the "
    "token's `sub` (`FORBIDDEN`); or API Gateway's authorizer refused the token (malformed, badly signed, over the "
    'lifetime limit, a gateway not served): `{"message": "Forbidden"}`.',
    404: "The gateway is not served here, or the named resource does not exist (`NOT_FOUND`).",
    409: "Conflict: an HLC too far ahead of the server clock (`CLOCK_DRIFT`), a name already taken, or a client "
    "holding the most subscriptions it may (`VALIDATION_ERROR`, refusal `TOO_MANY_SUBSCRIPTIONS`).",
    410: "The cursor or `since` is behind the released part of the log: reload the checkpoint (`CURSOR_EXPIRED`).",
    413: "Body larger than the limit (`VALIDATION_ERROR`).",
    422: "A delta breaks its table's identifier rules or schema (`SCHEMA_ERROR`), or a stream reading a membership "
    "table in a deployment built without a membership reader (`VALIDATION_ERROR`, refusal "
    "`MEMBERSHIP_UNSUPPORTED`).",
    429: "The caller (this token's `sub` on this gateway) is over its rate limit for the route family "
    "(`RATE_LIMITED`): retry after `Retry-After` seconds, when its window ends.",
    500: "Unexpected failure (`INTERNAL_ERROR`, with `requestId`; details only in the log).",
    502: "An external system failed (`ADAPTER_ERROR`).",
    503: "Backpressure (buffer full until a flush: `BACKPRESSURE_ERROR`), a commit lost to concurrent writers "
    "(`INTERNAL_ERROR`), or storage busy: throttled, or a pull whose log read does not show a commit yet "
    "(`STORAGE_BUSY`): retry later. Also a membership table holding more rows than the gateway reads to evaluate "
    "membership filters (`INTERNAL_ERROR`, the message names the table): served again once it shrinks.",
}


_PATH_PARAMETERS: Final = {
    "gw": "The gateway id; the token's `gw` claim must name it.",
    "name": "The destination's or connector's name.",
    "id": "The subscription's id.",
}

_RESPONSE_HEADERS: Final = {
    "API-Version": {"$ref": "#/components/headers/API-Version"},
    "X-Request-Id": {"$ref": "#/components/headers/X-Request-Id"},
}


def _parameters(route: Route, operation: Operation) -> list[dict[str, Any]]:
    params: list[dict[str, Any]] = [
        {"name": name, "in": "path", "required": True, "description": _PATH_PARAMETERS[name], "schema": NON_EMPTY}
        for name in route.parameters
    ]
    for name, (required, schema, description) in operation.query.items():
        param = {"name": name, "in": "query", "required": required, "description": description, "schema": schema}
        if name in operation.query_examples:
            param["example"] = operation.query_examples[name]
        params.append(param)
    return params


def _operation(route: Route, operation: Operation) -> dict[str, Any]:
    responses: dict[str, Any] = {}
    for status, response in operation.responses.items():
        responses[status] = {**response, "headers": {**_RESPONSE_HEADERS, **response.get("headers", {})}}
    for code in operation.errors:
        responses[str(code)] = {"$ref": f"#/components/responses/E{code}"}
    doc: dict[str, Any] = {
        "operationId": operation.operation_id,
        "summary": operation.summary,
        "tags": [operation.tag],
        "security": [] if operation.auth == "none" else [{"bearer": []}],
        "responses": responses,
    }
    description = operation.description
    if operation.auth == "admin":
        description = (description + "\n\n" if description else "") + "Needs a token with role `admin`."
    if description:
        doc["description"] = description
    params = _parameters(route, operation)
    if params:
        doc["parameters"] = params
    if operation.body is not None:
        content: dict[str, Any] = {}
        for media, schema in operation.body.items():
            content[media] = {"schema": schema}
            if media == JSON and operation.body_example is not None:
                content[media]["example"] = operation.body_example
        doc["requestBody"] = {"required": True, "content": content}
    return doc


_GATEWAY_REFUSALS: Final = (401, 403)
"""Statuses API Gateway's authorizer answers too, with its own body (:data:`SCHEMAS` ``GatewayError``)."""
_RETRY_AFTER: Final = {
    "required": True,
    "schema": {"type": "string", "pattern": "^[0-9]+$"},
    "description": "Seconds until the caller's window ends and it is served again.",
}


def _components() -> dict[str, Any]:
    error_responses = {
        f"E{status}": {
            "description": text,
            "headers": {**_RESPONSE_HEADERS, **({"Retry-After": _RETRY_AFTER} if status == 429 else {})},
            "content": {
                JSON: {
                    "schema": {"anyOf": [ref("Error"), ref("GatewayError")]}
                    if status in _GATEWAY_REFUSALS
                    else ref("Error")
                }
            },
        }
        for status, text in ERROR_TEXT.items()
    }
    return {
        "schemas": SCHEMAS,
        "responses": error_responses,
        "headers": {
            "API-Version": {"required": True, "schema": {"const": "v1"}, "description": "The API version."},
            "X-Request-Id": {"required": True, "schema": {"type": "string"}, "description": "The request id."},
        },
        "securitySchemes": {
            "bearer": {
                "type": "http",
                "scheme": "bearer",
                "bearerFormat": "JWT",
                "description": "HS256 JWT with `sub` (client id), `gw` (gateway id), `exp`, optional `role` "
                "(`admin` for /v1/admin) and custom claims for sync rules.",
            }
        },
    }


def build_document(routes: tuple[Route, ...] = ROUTES) -> dict[str, Any]:
    """The OpenAPI 3.1 document of ``routes``.

    Raises:
        ValueError: a route has no entry in :data:`OPERATIONS`, or an entry names no route.
    """
    keys = [route.route_key for route in routes]
    missing = [key for key in keys if key not in OPERATIONS]
    if missing:
        raise ValueError(f"routes without an OpenAPI description in lakesync.openapi.OPERATIONS: {missing}")
    extra = sorted(set(OPERATIONS) - set(keys))
    if extra:
        raise ValueError(f"OpenAPI descriptions of routes that do not exist: {extra}")
    paths: dict[str, dict[str, Any]] = {}
    for route in routes:
        paths.setdefault(route.path, {})[route.method.lower()] = _operation(route, OPERATIONS[route.route_key])
    return {
        "openapi": "3.1.0",
        "info": {
            "title": "LakeSync",
            "version": "v1",
            "description": "The LakeSync HTTP API (wire-compatible with the original). HLCs are decimal strings; "
            'errors are `{"error", "code"}`. Generated from `lakesync.api_routes.ROUTES`.',
        },
        "tags": [{"name": name} for name in ("meta", "sync", "actions", "admin")],
        "paths": paths,
        "components": _components(),
    }


@cache
def document_json() -> str:
    """The document as compact, key-stable JSON text (what ``GET /v1/openapi.json`` sends)."""
    return json.dumps(build_document(), separators=(",", ":"), ensure_ascii=False)


# -- docs/api.md ------------------------------------------------------------------------------------------------------
