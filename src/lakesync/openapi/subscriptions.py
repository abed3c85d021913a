"""What the document says of the stream subscription routes (:mod:`lakesync.gateway.subscriptions`): their
operations and schemas, merged into :data:`~lakesync.openapi.operations.OPERATIONS` and
:data:`~lakesync.openapi.schemas.SCHEMAS`."""

from __future__ import annotations

from collections.abc import Mapping
from typing import Final

from lakesync.core.streams import (
    INVALID_PARAM,
    MAX_CLIENT_SUBSCRIPTIONS,
    MAX_PARAM_CHARS,
    MISSING_PARAM,
    NOT_ALLOWED,
    UNEXPECTED_PARAM,
    UNKNOWN_STREAM,
)
from lakesync.gateway.subscriptions import (
    MAX_TTL_REQUEST,
    MEMBERSHIP_UNSUPPORTED,
    TOO_MANY_SUBSCRIPTIONS,
    UNKNOWN_SUBSCRIPTION,
)
from lakesync.openapi.model import JSON, NON_EMPTY, Operation, Schema, json_response, ref

REFUSALS: Final = (
    UNKNOWN_STREAM,
    UNEXPECTED_PARAM,
    INVALID_PARAM,
    MISSING_PARAM,
    NOT_ALLOWED,
    TOO_MANY_SUBSCRIPTIONS,
    MEMBERSHIP_UNSUPPORTED,
    UNKNOWN_SUBSCRIPTION,
)
"""The ``refusal`` codes an error of the subscription routes may carry."""

_ERRORS: Final = (401, 403, 404, 429, 500, 503)

SUBSCRIPTION_SCHEMAS: Final[dict[str, Schema]] = {
    "SubscriptionRequest": {
        "type": "object",
        "description": "A subscription to a stream of the sync rules in force.",
        "required": ["stream"],
        "additionalProperties": False,
        "properties": {
            "stream": {**NON_EMPTY, "description": "The stream's name."},
            "params": {
                "type": "object",
                "description": "The stream's subscription parameters (not those it takes from the token).",
                "additionalProperties": {"type": "string", "minLength": 1, "maxLength": MAX_PARAM_CHARS},
            },
            "ttlSeconds": {
                "type": "integer",
                "minimum": 1,
                "maximum": MAX_TTL_REQUEST,
                "description": "The lifetime asked, cut to the stream's maximum (absent: the stream's default).",
            },
        },
    },
    "Subscription": {
        "type": "object",
        "description": "A subscription of the caller: its id (from its stream and parameters), and when it runs out.",
        "required": ["id", "stream", "params", "expiresAt"],
        "properties": {
            "id": {"type": "string", "pattern": "^[0-9a-f]{32}$"},
            "stream": {"type": "string"},
            "params": {"type": "object", "additionalProperties": {"type": "string"}},
            "expiresAt": {"type": "integer", "description": "Epoch milliseconds."},
        },
    },
}

SUBSCRIPTION_OPERATIONS: Final[Mapping[str, Operation]] = {
    "POST /v1/sync/{gw}/subscriptions": Operation(
        "subscribe",
        "Subscribe to a stream",
        "Subscribes the caller (the token's `sub`) to a stream of the sync rules in force, with its parameters, "
        "checked against the token (and, for a membership parameter, the membership table). Subscribing again with "
        "the same stream and parameters is the same subscription (the same `id`), its expiry refreshed. Refusals "
        "carry a stable `refusal` code: 404 `UNKNOWN_STREAM`; 400 `UNEXPECTED_PARAM`, `INVALID_PARAM`, "
        f"`MISSING_PARAM`; 403 `NOT_ALLOWED`; 409 `{TOO_MANY_SUBSCRIPTIONS}` (at most {MAX_CLIENT_SUBSCRIPTIONS} "
        f"live ones per client); 422 `{MEMBERSHIP_UNSUPPORTED}` (a stream reading a membership table in a "
        "deployment built without a membership reader; every deployed function and `lakesync local` read them). "
        "A membership parameter is allowed when a live row of the membership table gives the value, read as of the "
        "latest commit; 503 when that table holds more rows than the gateway reads. See docs/streams.md.",
        "sync",
        "client",
        body={JSON: ref("SubscriptionRequest")},
        body_example={"stream": "project_tasks", "params": {"project": "42"}, "ttlSeconds": 3600},
        responses={"201": json_response(ref("Subscription"), "Subscribed (or its expiry refreshed).")},
        errors=(400, *_ERRORS[:3], 409, 413, 422, *_ERRORS[3:]),
    ),
    "GET /v1/sync/{gw}/subscriptions": Operation(
        "listSubscriptions",
        "The caller's subscriptions",
        "The caller's live subscriptions (those run out are left out), sorted by stream and parameters.",
        "sync",
        "client",
        responses={
            "200": json_response(
                {
                    "type": "object",
                    "required": ["subscriptions"],
                    "properties": {"subscriptions": {"type": "array", "items": ref("Subscription")}},
                },
                "The subscriptions.",
            )
        },
        errors=_ERRORS,
    ),
    "DELETE /v1/sync/{gw}/subscriptions/{id}": Operation(
        "unsubscribe",
        "Unsubscribe",
        f"Removes the caller's subscription. 404 `{UNKNOWN_SUBSCRIPTION}` when the caller holds no live one of that "
        "id (another client's subscriptions are never seen).",
        "sync",
        "client",
        responses={"204": {"description": "Removed."}},
        errors=_ERRORS,
    ),
}
