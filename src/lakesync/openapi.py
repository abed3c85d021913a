"""The OpenAPI 3.1 document of the HTTP API, built from the route table (:data:`lakesync.api_routes.ROUTES`).

The routes come from ``ROUTES`` alone; this module adds what a route table does not know, as data: per route an
:class:`Operation` (summary, who may call it, query parameters, request bodies, success responses and the error
statuses it can answer) in :data:`OPERATIONS`, keyed by the route key, plus the shared component schemas.
:func:`build_document` refuses a route without an operation and an operation without a route, so the document
cannot fall behind the routes (a unit test builds it).

Invariants of the document:

* Every error response is ``{"error", "code"}`` with one of :data:`lakesync.core.errors.API_ERROR_CODES`; a 500
  also carries ``requestId``. The statuses are those of :mod:`lakesync.core.errors` and :mod:`lakesync.edge`.
* Every response carries ``API-Version: v1`` and ``X-Request-Id`` (the router adds them to every answer).
* Request schemas are never stricter than the server: a value the schema refuses is refused by the server too
  (with a 4xx). Where the server accepts more than the canonical form (the original's lenient number parsing), the
  schema describes the canonical form in its ``description`` and stays permissive.
* The document is a pure function of the code: :func:`document_json` is byte-stable (``docs/api.md`` is compared
  against it in a test).
"""

from __future__ import annotations

import json
from collections.abc import Mapping
from dataclasses import dataclass, field
from functools import cache
from typing import Any, Final, Literal

from lakesync.api_routes import ROUTES, Route
from lakesync.core.errors import API_ERROR_CODES

__all__ = ["OPENAPI_PATH", "OPERATIONS", "Operation", "build_document", "document_json"]

OPENAPI_PATH: Final = "/v1/openapi.json"
"""Where the document is served (without auth, as in the original)."""

JSON: Final = "application/json"
PROTOBUF: Final = "application/x-protobuf"
CHECKPOINT_STREAM: Final = "application/x-lakesync-checkpoint-stream"
CHECKPOINT_COLUMNS: Final = "application/x-lakesync-checkpoint-columns+json"

Auth = Literal["none", "client", "admin"]
Schema = dict[str, Any]


def _ref(name: str) -> Schema:
    return {"$ref": f"#/components/schemas/{name}"}


def _json(schema: Schema, description: str) -> dict[str, Any]:
    return {"description": description, "content": {JSON: {"schema": schema}}}


@dataclass(frozen=True, slots=True)
class Operation:
    """What the document says about one route beyond its method and path.

    Attributes:
        operation_id: Unique camelCase id.
        summary: One line.
        description: Longer text (Markdown).
        tag: The group the operation is listed under.
        auth: ``none``; ``client`` (any valid token for the path's gateway); ``admin`` (role ``admin``).
        query: Query parameters: name → (required, schema, description).
        query_examples: Example values of query parameters.
        body: Request body media types → schema; ``None`` for no body.
        body_example: An example JSON request body (used by docs and by the fuzzer's example phase).
        responses: Success responses: status → OpenAPI response object.
        errors: The error statuses the route can answer (each a shared component response).
    """

    operation_id: str
    summary: str
    description: str
    tag: str
    auth: Auth
    query: Mapping[str, tuple[bool, Schema, str]] = field(default_factory=dict)
    query_examples: Mapping[str, str] = field(default_factory=dict)
    body: Mapping[str, Schema] | None = None
    body_example: Any = None
    responses: Mapping[str, Any] = field(default_factory=dict)
    errors: tuple[int, ...] = ()


# -- shared schemas -------------------------------------------------------------------------------------------------

_IDENTIFIER = {
    "type": "string",
    "pattern": "^[A-Za-z_][A-Za-z0-9_]{0,63}$",
    "description": "An identifier: a letter or underscore, then letters, digits or underscores; at most 64.",
}
_NON_EMPTY = {"type": "string", "minLength": 1}

SCHEMAS: Final[dict[str, Schema]] = {
    "Error": {
        "type": "object",
        "description": "Every error answer. A 500 adds the request id and never any detail of the failure.",
        "required": ["error", "code"],
        "properties": {
            "error": {"type": "string", "description": "Human-readable message."},
            "code": {"type": "string", "enum": list(API_ERROR_CODES)},
            "requestId": {"type": "string"},
        },
    },
    "GatewayError": {
        "type": "object",
        "description": "API Gateway's own refusal of a route that needs a token, before any function runs: "
        '`{"message": "Unauthorized"}` (401, no `Authorization` header) or `{"message": "Forbidden"}` (403, the '
        "authorizer refused the token: malformed, badly signed, over the lifetime limit or for a gateway not served).",
        "required": ["message"],
        "properties": {"message": {"type": "string"}},
    },
    "Hlc": {
        "type": "string",
        "pattern": "^[0-9]{1,20}$",
        "description": "A hybrid logical clock value (48-bit wall ms << 16 | 16-bit counter) as a decimal string.",
        "examples": ["115343360000000000"],
    },
    "HlcInput": {
        "type": "string",
        "description": "An HLC as a decimal string of an unsigned 64-bit integer (surrounding whitespace is ignored).",
    },
    "ColumnDelta": {
        "type": "object",
        "required": ["column", "value"],
        "properties": {
            "column": {**_NON_EMPTY, "description": "Column name."},
            "value": {"description": "Any JSON value (null included)."},
        },
    },
    "RowDelta": {
        "type": "object",
        "description": "A change to one row, stamped with the writer's HLC. Extra fields are ignored.",
        "required": ["op", "table", "rowId", "clientId", "hlc", "deltaId"],
        "properties": {
            "op": {"type": "string", "enum": ["INSERT", "UPDATE", "DELETE"]},
            "table": {
                **_NON_EMPTY,
                "description": "The table; must be an identifier (`^[A-Za-z_][A-Za-z0-9_]{0,63}$`, else 422).",
            },
            "rowId": _NON_EMPTY,
            "clientId": {**_NON_EMPTY, "description": "The writer; must be the token's `sub` (admins: anyone)."},
            "columns": {"type": "array", "items": _ref("ColumnDelta"), "description": "Absent means none."},
            "hlc": _ref("HlcInput"),
            "deltaId": {**_NON_EMPTY, "description": "SHA-256 of the canonical delta; an opaque idempotency key."},
        },
    },
    "StoredRowDelta": {
        "type": "object",
        "description": "A delta as the server returns it.",
        "required": ["op", "table", "rowId", "clientId", "columns", "hlc", "deltaId"],
        "properties": {
            "op": {"type": "string", "enum": ["INSERT", "UPDATE", "DELETE"]},
            "table": _IDENTIFIER,
            "rowId": {"type": "string"},
            "clientId": {"type": "string"},
            "columns": {"type": "array", "items": _ref("ColumnDelta")},
            "hlc": _ref("Hlc"),
            "deltaId": {"type": "string"},
        },
    },
    "SyncPush": {
        "type": "object",
        "required": ["clientId", "deltas"],
        "properties": {
            "clientId": {**_NON_EMPTY, "description": "Must be the token's `sub` (else 403)."},
            "deltas": {"type": "array", "items": _ref("RowDelta"), "maxItems": 10000},
            "lastSeenHlc": _ref("HlcInput"),
        },
    },
    "ColumnReceipt": {
        "type": "object",
        "required": ["column", "applied", "winnerHlc", "winnerClientId"],
        "properties": {
            "column": {"type": "string"},
            "applied": {"type": "boolean"},
            "winnerHlc": _ref("Hlc"),
            "winnerClientId": {"type": "string"},
        },
    },
    "DeltaReceipt": {
        "type": "object",
        "required": ["deltaId", "duplicate", "columns"],
        "properties": {
            "deltaId": {"type": "string"},
            "duplicate": {"type": "boolean", "description": "The deltaId was already applied: nothing merged."},
            "deleted": {"type": "boolean", "const": True},
            "columns": {"type": "array", "items": _ref("ColumnReceipt")},
            "rejected": {
                "type": "boolean",
                "const": True,
                "description": "The write rules forbid this delta for the caller: nothing was written (the rest of"
                " the push was). A re-sent rejected delta is judged again, never answered as a duplicate.",
            },
            "code": {
                "type": "string",
                "enum": [
                    "OUT_OF_SCOPE",
                    "OPERATION_NOT_ALLOWED",
                    "COLUMN_NOT_WRITABLE",
                    "ADMIN_ONLY_TABLE",
                    "RESERVED_TABLE",
                ],
                "description": "Why the delta was rejected (with `rejected`).",
            },
            "reason": {"type": "string", "description": "The rejection, for people (with `rejected`)."},
            "row": {
                "type": ["object", "null"],
                "description": "With `rejected`: the row's per-column state as stored (`{c: {column: [value, hlc,"
                " clientId]}, t, w}`) when the caller may read it, to roll its write back to; null when the row is"
                " gone or not the caller's to see.",
            },
        },
    },
    "PushResponse": {
        "type": "object",
        "required": ["serverHlc", "accepted", "deltas", "receipts"],
        "properties": {
            "serverHlc": _ref("Hlc"),
            "accepted": {"type": "integer", "minimum": 0},
            "deltas": {
                "type": "array",
                "items": _ref("StoredRowDelta"),
                "description": "The effective deltas: the columns that won.",
            },
            "receipts": {"type": "array", "items": _ref("DeltaReceipt"), "description": "One per pushed delta."},
        },
    },
    "PullResponse": {
        "type": "object",
        "required": ["deltas", "serverHlc", "hasMore"],
        "properties": {
            "deltas": {"type": "array", "items": _ref("StoredRowDelta")},
            "serverHlc": _ref("Hlc"),
            "hasMore": {"type": "boolean"},
            "cursor": {"type": "string", "description": "Pull from it next for exactly-once delivery."},
        },
    },
    "Action": {
        "type": "object",
        "required": ["actionId", "clientId", "hlc", "connector", "actionType", "params"],
        "properties": {
            "actionId": _NON_EMPTY,
            "clientId": _NON_EMPTY,
            "hlc": _ref("HlcInput"),
            "connector": _NON_EMPTY,
            "actionType": _NON_EMPTY,
            "params": {"type": "object"},
            "idempotencyKey": {"type": "string"},
        },
    },
    "ActionPush": {
        "type": "object",
        "required": ["clientId", "actions"],
        "properties": {
            "clientId": {**_NON_EMPTY, "description": "Must be the token's `sub` (else 403)."},
            "actions": {"type": "array", "items": _ref("Action")},
        },
    },
    "ActionResult": {
        "type": "object",
        "required": ["actionId", "data", "serverHlc"],
        "properties": {"actionId": {"type": "string"}, "data": {"type": "object"}, "serverHlc": _ref("Hlc")},
    },
    "ActionErrorResult": {
        "type": "object",
        "required": ["actionId", "code", "message", "retryable"],
        "properties": {
            "actionId": {"type": "string"},
            "code": {
                "type": "string",
                "description": "`ACTION_NOT_SUPPORTED`, `ACTION_FORBIDDEN` (the connector's `actions` policy does "
                "not let this caller run it: not run, not stored), `ACTION_EXECUTION_ERROR` or a handler's own code; "
                "retryable `ACTION_IN_PROGRESS` (another request is running it) and `ACTION_DEFERRED` (not started: "
                "the request ran out of time; send it again).",
            },
            "message": {"type": "string"},
            "retryable": {"type": "boolean", "description": "Send the action again later; the result is not stored."},
        },
    },
    "ActionResponse": {
        "type": "object",
        "required": ["results", "serverHlc"],
        "properties": {
            "results": {"type": "array", "items": {"anyOf": [_ref("ActionResult"), _ref("ActionErrorResult")]}},
            "serverHlc": _ref("Hlc"),
        },
    },
    "ConnectorActionPolicy": {
        "type": "object",
        "description": "Which clients may run the connector's actions (without it: none; admins always may). A "
        "client may run an action when its token has the required role and/or claim, the action's type is in "
        "`allow` and, for an entry with `objects`, the action targets one of them (Salesforce's `sobject`, compared "
        "ignoring ASCII case). See docs/connectors.md.",
        "required": ["allow"],
        "additionalProperties": False,
        "properties": {
            "allow": {
                "type": "array",
                "minItems": 1,
                "items": {
                    "type": "object",
                    "required": ["type"],
                    "additionalProperties": False,
                    "properties": {
                        "type": {**_NON_EMPTY, "description": "An action type of the connector (once each)."},
                        "objects": {
                            "type": "array",
                            "minItems": 1,
                            "items": _NON_EMPTY,
                            "description": "Only these objects (Salesforce sObjects); absent: any.",
                        },
                    },
                },
            },
            "requireRole": {
                "anyOf": [_NON_EMPTY, {"type": "array", "minItems": 1, "items": _NON_EMPTY}],
                "description": "The token's `role` must be this (or one of these).",
            },
            "requireClaim": {
                "type": "object",
                "required": ["name", "values"],
                "additionalProperties": False,
                "properties": {
                    "name": {**_NON_EMPTY, "description": "A custom claim (or `sub`), not a reserved one."},
                    "values": {"type": "array", "minItems": 1, "items": _NON_EMPTY},
                },
                "description": "The token's claim `name` must be (an array claim: contain) one of `values`.",
            },
        },
        "anyOf": [{"required": ["requireRole"]}, {"required": ["requireClaim"]}],
    },
    "ActionDiscovery": {
        "type": "object",
        "required": ["connectors"],
        "properties": {
            "connectors": {
                "type": "object",
                "additionalProperties": {
                    "type": "array",
                    "items": {
                        "type": "object",
                        "required": ["actionType", "description"],
                        "properties": {
                            "actionType": {"type": "string"},
                            "description": {"type": "string"},
                            "paramsSchema": {"type": "object"},
                        },
                    },
                },
            }
        },
    },
    "WritePolicy": {
        "type": "object",
        "description": "What a client may do to the rows of a bucket or table (absent: everything its buckets allow).",
        "additionalProperties": False,
        "properties": {
            "ops": {
                "type": "array",
                "items": {"type": "string", "enum": ["insert", "update", "delete"]},
                "description": "Kinds of write allowed, judged on the stored row (absent: all; `[]`: read-only).",
            },
            "readOnlyColumns": {
                "type": "array",
                "items": _NON_EMPTY,
                "maxItems": 256,
                "description": "Columns a client may never set (sending the stored value again is not setting it).",
            },
            "immutableColumns": {
                "type": "array",
                "items": _NON_EMPTY,
                "maxItems": 256,
                "description": "Columns a client may set when it creates the row, never change afterwards.",
            },
        },
    },
    "SyncRules": {
        "type": "object",
        "description": "Which rows each client may see, and write: a client writes a row only if a bucket holds it"
        " before the write and one holds it after, each allowing the write. No buckets means no filtering. Admin"
        " tokens and connectors are not confined; `_lakesync_*` tables are never written by clients. Extra fields"
        " are ignored.",
        "required": ["version", "buckets"],
        "properties": {
            "version": {"type": "integer", "minimum": 1},
            "tables": {
                "type": "object",
                "maxProperties": 256,
                "description": "Per-table policies, on top of the buckets'.",
                "additionalProperties": {
                    "type": "object",
                    "additionalProperties": False,
                    "properties": {
                        "adminOnly": {
                            "type": "boolean",
                            "description": "Only admins and connectors read and write the table.",
                        },
                        "write": _ref("WritePolicy"),
                    },
                },
            },
            "buckets": {
                "type": "array",
                "description": "Bucket names must be unique.",
                "items": {
                    "type": "object",
                    "required": ["name", "tables", "filters"],
                    "properties": {
                        "name": _NON_EMPTY,
                        "tables": {"type": "array", "items": _NON_EMPTY, "description": "Empty means every table."},
                        "filters": {
                            "type": "array",
                            "items": {
                                "type": "object",
                                "required": ["column", "op", "value"],
                                "properties": {
                                    "column": _NON_EMPTY,
                                    "op": {"type": "string", "enum": ["eq", "in", "neq", "gt", "lt", "gte", "lte"]},
                                    "value": {**_NON_EMPTY, "description": "A literal, or `jwt:<claim>`."},
                                },
                            },
                        },
                        "write": _ref("WritePolicy"),
                    },
                },
            },
        },
    },
    "TableSchema": {
        "type": "object",
        "description": "A table's columns. Evolution may only add columns (removing or retyping one is 400).",
        "required": ["table", "columns"],
        "properties": {
            "table": _IDENTIFIER,
            "sourceTable": {
                **_IDENTIFIER,
                "type": ["string", "null"],
                "description": "The delta table it describes, when not `table` (null: absent).",
            },
            "columns": {
                "type": "array",
                "items": {
                    "type": "object",
                    "required": ["name", "type"],
                    "properties": {
                        "name": _IDENTIFIER,
                        "type": {"type": "string", "enum": ["string", "number", "boolean", "json", "null"]},
                        "references": {
                            "type": ["object", "null"],
                            "description": "null: absent.",
                            "required": ["table", "column", "cardinality"],
                            "properties": {
                                "table": _IDENTIFIER,
                                "column": _IDENTIFIER,
                                "cardinality": {"type": "string"},
                            },
                        },
                    },
                },
            },
            "primaryKey": {"type": "array", "items": {"type": "string"}, "minItems": 1},
            "softDelete": {"type": "boolean"},
            "externalIdColumn": _NON_EMPTY,
        },
    },
    "Destination": {
        "type": "object",
        "description": "A materialisation destination. Credentials only as a Secrets Manager ARN; unknown fields "
        "are refused. See docs/materialise-config.md.",
        "required": ["name", "type"],
        "additionalProperties": False,
        "properties": {
            "name": {"type": "string", "pattern": "^[A-Za-z0-9][A-Za-z0-9_-]{0,63}$"},
            "type": {"type": "string", "enum": ["postgres", "mysql", "sqlite", "bigquery"]},
            "secretArn": {"type": "string", "maxLength": 2048},
            "url": {"type": "string", "maxLength": 2048, "description": "A password-free locator."},
            "tables": {"type": "array", "items": _IDENTIFIER, "minItems": 1, "maxItems": 1000},
        },
    },
}

_DESTINATION_EXAMPLE: Final = {"name": "local", "type": "sqlite", "url": "sqlite:///tmp/lakesync-example.db"}
_PUSH_EXAMPLE: Final = {
    "clientId": "client-a",
    "deltas": [
        {
            "op": "INSERT",
            "table": "todos",
            "rowId": "t1",
            "clientId": "client-a",
            "columns": [{"column": "title", "value": "Buy milk"}, {"column": "done", "value": False}],
            "hlc": "115343360000000000",
            "deltaId": "7c1f0a4e5b7f4bb1a8a3c1f0e1d2c3b4a5968778695a4b3c2d1e0f9a8b7c6d5e",
        }
    ],
}

_ERROR_TEXT: Final = {
    400: "Invalid request: malformed JSON, base64 or protobuf, missing or mistyped fields, bad parameters "
    "(`VALIDATION_ERROR`; `SCHEMA_ERROR` for an invalid table schema).",
    401: "Missing, malformed, expired or badly signed Bearer token (`AUTH_ERROR`). Without an `Authorization` "
    'header API Gateway answers itself, `{"message": "Unauthorized"}`; an expired token is always the function\'s '
    "`AUTH_ERROR` (`JWT has expired`): fetch a new token.",
    403: "The token does not grant this: another gateway, not admin, or a body `clientId` that is not the "
    "token's `sub` (`FORBIDDEN`); or API Gateway's authorizer refused the token (malformed, badly signed, over the "
    'lifetime limit, a gateway not served): `{"message": "Forbidden"}`.',
    404: "The gateway is not served here, or the named resource does not exist (`NOT_FOUND`).",
    409: "Conflict: an HLC too far ahead of the server clock (`CLOCK_DRIFT`) or a name already taken.",
    410: "The cursor or `since` is behind the released part of the log: reload the checkpoint (`CURSOR_EXPIRED`).",
    413: "Body larger than the limit (`VALIDATION_ERROR`).",
    422: "A delta breaks its table's identifier rules or schema (`SCHEMA_ERROR`).",
    429: "The caller (this token's `sub` on this gateway) is over its rate limit for the route family "
    "(`RATE_LIMITED`): retry after `Retry-After` seconds, when its window ends.",
    500: "Unexpected failure (`INTERNAL_ERROR`, with `requestId`; details only in the log).",
    502: "An external system failed (`ADAPTER_ERROR`).",
    503: "Backpressure (buffer full until a flush: `BACKPRESSURE_ERROR`), a commit lost to concurrent writers "
    "(`INTERNAL_ERROR`), or storage busy: throttled, or a pull whose log read does not show a commit yet "
    "(`STORAGE_BUSY`): retry later.",
}

_AUTH_ERRORS: Final = (401, 403, 404)

# -- operations ------------------------------------------------------------------------------------------------------

OPERATIONS: Final[Mapping[str, Operation]] = {
    "GET /health": Operation(
        "health",
        "Liveness",
        "Answers without auth and without calling AWS.",
        "meta",
        "none",
        responses={
            "200": _json(
                {"type": "object", "required": ["status"], "properties": {"status": {"const": "ok"}}}, "Alive."
            )
        },
    ),
    f"GET {OPENAPI_PATH}": Operation(
        "openapi",
        "This OpenAPI document",
        "Without auth, as the original serves it.",
        "meta",
        "none",
        responses={
            "200": _json(
                {"type": "object", "required": ["openapi", "paths"], "properties": {"openapi": {"type": "string"}}},
                "The OpenAPI 3.1 document.",
            )
        },
    ),
    "POST /v1/sync/{gw}/push": Operation(
        "push",
        "Push deltas",
        "Merges a batch with per-column last-write-wins. The whole batch is validated before anything is written. "
        "A JSON body or a protobuf `SyncPush` (`Content-Type: application/x-protobuf`). The answer is JSON, or a "
        "protobuf `SyncResponse` of the effective deltas when `Accept` prefers protobuf (or the body was protobuf "
        "and `Accept` names neither).",
        "sync",
        "client",
        body={JSON: _ref("SyncPush"), PROTOBUF: {"type": "string", "format": "binary"}},
        body_example=_PUSH_EXAMPLE,
        responses={
            "200": {
                "description": "Merged: receipts per delta and the effective deltas.",
                "content": {
                    JSON: {"schema": _ref("PushResponse")},
                    PROTOBUF: {"schema": {"type": "string", "format": "binary"}},
                },
            }
        },
        errors=(400, *_AUTH_ERRORS, 409, 413, 422, 429, 500, 503),
    ),
    "GET /v1/sync/{gw}/pull": Operation(
        "pull",
        "Pull deltas",
        "One page of the deltas the token's claims may see. With `cursor`: exactly once; with `since` (the "
        "original client): at least once. A protobuf `SyncResponse` when `Accept` prefers protobuf, with the "
        "cursor in `X-LakeSync-Cursor`.",
        "sync",
        "client",
        query={
            "clientId": (True, _NON_EMPTY, "The puller (not checked against the token, as in the original)."),
            "since": (
                False,
                {"type": "string"},
                "HLC to pull after, a decimal integer (ECMAScript `BigInt` syntax is accepted): at-least-once "
                "delivery, as the original client pulls.",
            ),
            "cursor": (
                False,
                {"type": "string"},
                "The `cursor` of an earlier answer: exactly-once delivery; empty starts from the beginning.",
            ),
            "limit": (
                False,
                {"type": "string"},
                "Page size, a positive integer (JavaScript `parseInt`); default 100, at most 10,000.",
            ),
            "source": (False, {"type": "string"}, "Pull from a registered source adapter instead of the log."),
        },
        query_examples={"clientId": "client-a", "since": "0", "limit": "100"},
        responses={
            "200": {
                "description": "A page of deltas.",
                "content": {
                    JSON: {"schema": _ref("PullResponse")},
                    PROTOBUF: {"schema": {"type": "string", "format": "binary"}},
                },
            }
        },
        errors=(400, *_AUTH_ERRORS, 410, 429, 500, 502, 503),
    ),
    "GET /v1/sync/{gw}/checkpoint": Operation(
        "checkpoint",
        "Download the latest checkpoint",
        "The framed stream (`uint32` big-endian length + `SyncResponse`, repeated) filtered by the token's "
        "claims; with `format=columns`, the same rows as one columnar JSON document (runs of rows that are one write "
        "each as a value array per column, other rows as wire deltas: `lakesync.wire.checkpoint_columns`), which "
        "bulk loaders read about twice as fast. 404 without a checkpoint; 413 when too large to send whole (fetch "
        "it by `chunk`; the columnar document's whole-checkpoint limit is a third of the stream's).",
        "sync",
        "client",
        query={
            "chunk": (False, {"type": "string", "pattern": "^[0-9]{1,9}$"}, "One chunk by index."),
            "checkpoint": (False, {"type": "string"}, "Pin a checkpoint id (`X-Checkpoint-Id`)."),
            "format": (
                False,
                {"type": "string", "enum": ["stream", "columns"]},
                "`stream` (the default, the original's) or `columns`.",
            ),
        },
        responses={
            "200": {
                "description": "The checkpoint (or one chunk).",
                "headers": {
                    name: {"schema": {"type": "string"}}
                    for name in ("X-Checkpoint-Id", "X-Checkpoint-Cursor", "X-Checkpoint-Hlc", "X-Checkpoint-Chunks")
                },
                "content": {
                    CHECKPOINT_STREAM: {"schema": {"type": "string", "format": "binary"}},
                    CHECKPOINT_COLUMNS: {"schema": {"type": "object", "required": ["serverHlc", "runs"]}},
                },
            }
        },
        errors=(400, *_AUTH_ERRORS, 413, 429, 500, 503),
    ),
    "POST /v1/sync/{gw}/action": Operation(
        "action",
        "Run actions",
        "Validates the whole batch, then runs each action on its connector; failures are results, not HTTP "
        "errors. A client may run only what the connector's `actions` policy allows it (`ACTION_FORBIDDEN` "
        "otherwise; an admin runs anything); results are stored per client. JSON or protobuf `ActionPush`.",
        "actions",
        "client",
        body={JSON: _ref("ActionPush"), PROTOBUF: {"type": "string", "format": "binary"}},
        body_example={
            "clientId": "client-a",
            "actions": [
                {
                    "actionId": "0f3c6d2e9b8a7f6e5d4c3b2a1f0e9d8c7b6a5f4e3d2c1b0a9f8e7d6c5b4a3f2e",
                    "clientId": "client-a",
                    "hlc": "115343360000000000",
                    "connector": "jira",
                    "actionType": "create_issue",
                    "params": {"summary": "Sync is slow"},
                }
            ],
        },
        responses={
            "200": {
                "description": "One result per action.",
                "content": {
                    JSON: {"schema": _ref("ActionResponse")},
                    PROTOBUF: {"schema": {"type": "string", "format": "binary"}},
                },
            }
        },
        errors=(400, *_AUTH_ERRORS, 413, 429, 500, 503),
    ),
    "GET /v1/sync/{gw}/actions": Operation(
        "discoverActions",
        "List connectors and their action types",
        "The actions the caller may run, by connector: its connectors' `actions` policies decide (an entry limited "
        "to `objects` narrows the target parameter's schema to them); an admin sees every action.",
        "actions",
        "client",
        responses={"200": _json(_ref("ActionDiscovery"), "The discovery document.")},
        errors=(*_AUTH_ERRORS, 429, 500, 503),
    ),
    "POST /v1/admin/sync-rules/{gw}": Operation(
        "saveSyncRules",
        "Store the sync rules",
        "",
        "admin",
        "admin",
        body={JSON: _ref("SyncRules")},
        body_example={"version": 1, "buckets": [{"name": "all", "tables": [], "filters": []}]},
        responses={
            "200": _json({"type": "object", "required": ["saved"], "properties": {"saved": {"const": True}}}, "Stored.")
        },
        errors=(400, *_AUTH_ERRORS, 413, 500, 503),
    ),
    "GET /v1/admin/sync-rules/{gw}": Operation(
        "getSyncRules",
        "The stored sync rules",
        "An empty rule set when none is stored.",
        "admin",
        "admin",
        responses={"200": _json(_ref("SyncRules"), "The rules.")},
        errors=(*_AUTH_ERRORS, 500, 503),
    ),
    "POST /v1/admin/schema/{gw}": Operation(
        "saveSchema",
        "Store a table schema",
        "Stored as the next version; an unchanged schema keeps its version.",
        "admin",
        "admin",
        body={JSON: _ref("TableSchema")},
        body_example={"table": "todos", "columns": [{"name": "title", "type": "string"}]},
        responses={
            "200": _json(
                {
                    "type": "object",
                    "required": ["saved", "table", "version"],
                    "properties": {
                        "saved": {"const": True},
                        "table": {"type": "string"},
                        "version": {"type": "integer", "minimum": 1},
                    },
                },
                "Stored.",
            )
        },
        errors=(400, *_AUTH_ERRORS, 413, 500, 503),
    ),
    "GET /v1/admin/schema/{gw}": Operation(
        "listSchemas",
        "Every table schema with its version",
        "",
        "admin",
        "admin",
        responses={
            "200": _json(
                {
                    "type": "object",
                    "required": ["schemas"],
                    "properties": {
                        "schemas": {
                            "type": "array",
                            "items": {
                                "type": "object",
                                "required": ["version", "schema"],
                                "properties": {
                                    "version": {"type": "integer", "minimum": 1},
                                    "schema": _ref("TableSchema"),
                                },
                            },
                        }
                    },
                },
                "The schemas, by table.",
            )
        },
        errors=(*_AUTH_ERRORS, 500, 503),
    ),
    "POST /v1/admin/flush/{gw}": Operation(
        "requestFlush",
        "Request a flush",
        "Recorded for the flush job's next run (the original flushed synchronously).",
        "admin",
        "admin",
        responses={
            "200": _json(
                {
                    "type": "object",
                    "required": ["flushed", "requestId"],
                    "properties": {"flushed": {"const": True}, "requestId": {"type": "string"}},
                },
                "Recorded.",
            )
        },
        errors=(*_AUTH_ERRORS, 500, 503),
    ),
    "GET /v1/admin/metrics/{gw}": Operation(
        "bufferMetrics",
        "Buffer figures",
        "In total and per table.",
        "admin",
        "admin",
        responses={
            "200": _json(
                {
                    "type": "object",
                    "required": [
                        "logSize",
                        "byteSize",
                        "committed",
                        "tables",
                        "pendingFlushRequests",
                        "backpressureLimitBytes",
                        "flushThresholdBytes",
                    ],
                    "properties": {
                        **{
                            name: {"type": "integer", "minimum": 0}
                            for name in (
                                "logSize",
                                "byteSize",
                                "committed",
                                "pendingFlushRequests",
                                "backpressureLimitBytes",
                                "flushThresholdBytes",
                            )
                        },
                        "tables": {
                            "type": "array",
                            "items": {
                                "type": "object",
                                "required": [
                                    "table",
                                    "shards",
                                    "committed",
                                    "unflushedDeltas",
                                    "unflushedBytes",
                                    "flushedDeltas",
                                ],
                                "properties": {
                                    "table": {"type": "string"},
                                    **{
                                        name: {"type": "integer", "minimum": 0}
                                        for name in (
                                            "shards",
                                            "committed",
                                            "unflushedDeltas",
                                            "unflushedBytes",
                                            "flushedDeltas",
                                        )
                                    },
                                },
                            },
                        },
                    },
                },
                "The figures.",
            )
        },
        errors=(*_AUTH_ERRORS, 500, 503),
    ),
    "GET /v1/admin/materialise/{gw}": Operation(
        "listDestinations",
        "The materialisation destinations",
        "",
        "admin",
        "admin",
        responses={
            "200": _json(
                {
                    "type": "object",
                    "required": ["destinations"],
                    "properties": {"destinations": {"type": "array", "items": _ref("Destination")}},
                },
                "The destinations, by name.",
            )
        },
        errors=(*_AUTH_ERRORS, 500, 503),
    ),
    "POST /v1/admin/materialise/{gw}": Operation(
        "registerDestination",
        "Register a materialisation destination",
        "409 when the name is taken. 400 when the url carries a parameter that could redirect the connection "
        "(`host`, `hostaddr`, `port`, `service`, `passfile`, `sslrootcert`, `options`, `unix_socket`, ...: only "
        "options such as `sslmode` or `connect_timeout` are allowed) or the `secretArn` names a secret outside the "
        "gateway's `<destination secret prefix><gw>/`. A host the deployment's network policy refuses (loopback, "
        "private, link-local, metadata) fails when the destination is opened.",
        "admin",
        "admin",
        body={JSON: _ref("Destination")},
        body_example=_DESTINATION_EXAMPLE,
        responses={
            "200": _json(
                {
                    "type": "object",
                    "required": ["registered", "name"],
                    "properties": {"registered": {"const": True}, "name": {"type": "string"}},
                },
                "Registered.",
            )
        },
        errors=(400, *_AUTH_ERRORS, 409, 413, 500, 503),
    ),
    "DELETE /v1/admin/materialise/{gw}/{name}": Operation(
        "unregisterDestination",
        "Remove a materialisation destination",
        "404 when the gateway has no destination of that name.",
        "admin",
        "admin",
        responses={
            "200": _json(
                {
                    "type": "object",
                    "required": ["unregistered", "name"],
                    "properties": {"unregistered": {"const": True}, "name": {"type": "string"}},
                },
                "Removed.",
            )
        },
        errors=(*_AUTH_ERRORS, 500, 503),
    ),
    "POST /v1/admin/connectors/{gw}": Operation(
        "registerConnector",
        "Register a connector",
        "Validates the config (reference §14.2), moves plaintext credentials into Secrets Manager (the config keeps "
        "`secret://` references), checks the source (502 when unreachable), stores the config and schedules its "
        'poller. 409 `Connector "{name}" already exists` when the name is taken. 400 when a `secret://` reference '
        "names a secret outside `<connector secret prefix>/{gw}/` (never read), the connection string carries a "
        "parameter that could redirect it, an ingest query holds more than one statement, an API connector's URL is "
        "not https, or a host resolves to an address the deployment's network policy refuses (loopback, private, "
        "link-local, metadata). Error bodies never carry a credential. An `actions` policy (which "
        "clients may run its actions) is checked against the connector's action types (400 naming the bad field). "
        "See docs/connectors.md.",
        "admin",
        "admin",
        body={
            JSON: {
                "type": "object",
                "required": ["name", "type"],
                "properties": {"actions": _ref("ConnectorActionPolicy")},
            }
        },
        body_example={
            "name": "crm",
            "type": "postgres",
            "postgres": {
                "connectionString": "secret://arn:aws:secretsmanager:eu-west-1:123456789012:secret:"
                "lakesync/prod/connectors/default/crm-AbCdEf"
            },
            "ingest": {
                "intervalMs": 60000,
                "tables": [
                    {
                        "table": "customers",
                        "query": "SELECT id, name, updated_at FROM customers",
                        "strategy": {"type": "cursor", "cursorColumn": "updated_at"},
                    }
                ],
            },
        },
        responses={
            "200": _json(
                {
                    "type": "object",
                    "required": ["registered", "name"],
                    "properties": {"registered": {"const": True}, "name": {"type": "string"}},
                },
                "Registered.",
            )
        },
        errors=(400, *_AUTH_ERRORS, 409, 413, 500, 502, 503),
    ),
    "GET /v1/admin/connectors/{gw}": Operation(
        "listConnectors",
        "The registered connectors",
        "Names and types only: no config, no credentials.",
        "admin",
        "admin",
        responses={
            "200": _json(
                {
                    "type": "array",
                    "items": {
                        "type": "object",
                        "required": ["name", "type", "hasIngest", "isPolling"],
                        "properties": {
                            "name": {"type": "string"},
                            "type": {"type": "string"},
                            "hasIngest": {"type": "boolean"},
                            "isPolling": {"type": "boolean"},
                        },
                    },
                },
                "The connectors, by name.",
            )
        },
        errors=(*_AUTH_ERRORS, 500, 503),
    ),
    "DELETE /v1/admin/connectors/{gw}/{name}": Operation(
        "unregisterConnector",
        "Remove a connector",
        "Removes its schedule, its position and the secrets its registration created. 404 when unknown.",
        "admin",
        "admin",
        responses={
            "200": _json(
                {
                    "type": "object",
                    "required": ["unregistered", "name"],
                    "properties": {"unregistered": {"const": True}, "name": {"type": "string"}},
                },
                "Removed.",
            )
        },
        errors=(*_AUTH_ERRORS, 500, 503),
    ),
    "GET /v1/connectors/types": Operation(
        "connectorTypes",
        "The connector types",
        "Descriptors (config and ingest JSON schemas, credential fields), sorted by type. No auth.",
        "meta",
        "none",
        responses={"200": _json({"type": "array", "items": {"type": "object"}}, "The types.")},
    ),
}

_PATH_PARAMETERS: Final = {
    "gw": "The gateway id; the token's `gw` claim must name it.",
    "name": "The destination's or connector's name.",
}

_RESPONSE_HEADERS: Final = {
    "API-Version": {"$ref": "#/components/headers/API-Version"},
    "X-Request-Id": {"$ref": "#/components/headers/X-Request-Id"},
}


def _parameters(route: Route, operation: Operation) -> list[dict[str, Any]]:
    params: list[dict[str, Any]] = [
        {"name": name, "in": "path", "required": True, "description": _PATH_PARAMETERS[name], "schema": _NON_EMPTY}
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
                    "schema": {"anyOf": [_ref("Error"), _ref("GatewayError")]}
                    if status in _GATEWAY_REFUSALS
                    else _ref("Error")
                }
            },
        }
        for status, text in _ERROR_TEXT.items()
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

BEGIN_MARKER: Final = "<!-- BEGIN GENERATED: python -m lakesync.openapi docs/api.md -->"
END_MARKER: Final = "<!-- END GENERATED -->"


def _schema_text(schema: Mapping[str, Any]) -> str:
    """A one-line rendering of a schema: a component name, a type with its constraints, or a union."""
    if "$ref" in schema:
        name = str(schema["$ref"]).rsplit("/", 1)[-1]
        return f"[{name}](#{name.lower()})"
    if "anyOf" in schema:
        return " or ".join(_schema_text(s) for s in schema["anyOf"])
    if "const" in schema:
        return f"`{json.dumps(schema['const'])}`"
    if "enum" in schema:
        return " \\| ".join(f"`{v}`" for v in schema["enum"])
    kind = schema.get("type", "any")
    text = " or ".join(kind) if isinstance(kind, list) else str(kind)
    if kind == "array" and "items" in schema:
        text = f"array of {_schema_text(schema['items'])}"
    elif schema.get("format") == "binary":
        text = "bytes"
    limits = [
        f"{key} {schema[key]}"
        for key in ("minLength", "maxLength", "minItems", "maxItems", "minimum")
        if key in schema and not (key == "minLength" and schema[key] == 1)
    ]
    if schema.get("minLength") == 1:
        text = "non-empty " + text
    if "pattern" in schema:
        limits.append(f"`{schema['pattern']}`")
    return text + (f" ({', '.join(limits)})" if limits else "")


def _cell(text: str) -> str:
    return " ".join(text.replace("|", "\\|").split())


def render_markdown(doc: Mapping[str, Any] | None = None) -> str:
    """The reference part of ``docs/api.md``: every operation, then every component schema."""
    doc = doc if doc is not None else build_document()
    components = doc["components"]
    out: list[str] = [BEGIN_MARKER, "", "## Routes", ""]
    out += ["| Method | Path | Auth | Summary |", "|---|---|---|---|"]
    for path, methods in doc["paths"].items():
        for method, op in methods.items():
            auth = _auth_of(op)
            anchor = f"{method}-{path}".lower().replace("/", "").replace("{", "").replace("}", "").replace(".", "")
            out.append(f"| {method.upper()} | `{path}` | {auth} | [{op['summary']}](#{anchor}) |")
    for path, methods in doc["paths"].items():
        for method, op in methods.items():
            out += ["", f"### {method.upper()} {path}", "", f"**{op['summary']}.** Auth: {_auth_of(op)}."]
            if "description" in op:
                out += ["", op["description"]]
            params = op.get("parameters", [])
            if params:
                out += ["", "| Parameter | In | Required | Schema | Description |", "|---|---|---|---|---|"]
                for p in params:
                    out.append(
                        f"| `{p['name']}` | {p['in']} | {'yes' if p['required'] else 'no'} | "
                        f"{_cell(_schema_text(p['schema']))} | {_cell(p.get('description', ''))} |"
                    )
            body = op.get("requestBody")
            if body:
                out += ["", "Request body:"]
                for media, content in body["content"].items():
                    out.append(f"- `{media}`: {_schema_text(content['schema'])}")
                    if "example" in content:
                        out += ["", "  ```json", "  " + json.dumps(content["example"]), "  ```"]
            out += ["", "| Status | Meaning | Body |", "|---|---|---|"]
            for status, response in op["responses"].items():
                if "$ref" in response:
                    response = components["responses"][str(response["$ref"]).rsplit("/", 1)[-1]]
                bodies = ", ".join(
                    f"`{media}` {_schema_text(content['schema'])}" for media, content in response["content"].items()
                )
                out.append(f"| {status} | {_cell(response['description'])} | {_cell(bodies)} |")
    out += ["", "## Schemas"]
    for name, schema in components["schemas"].items():
        out += ["", f"### {name}", ""]
        if "description" in schema:
            out += [schema["description"], ""]
        props = schema.get("properties")
        if not props:
            out.append(f"{_schema_text(schema)}.")
            continue
        required = set(schema.get("required", ()))
        out += ["| Field | Required | Schema | Description |", "|---|---|---|---|"]
        for prop, sub in props.items():
            out.append(
                f"| `{prop}` | {'yes' if prop in required else 'no'} | {_cell(_schema_text(sub))} | "
                f"{_cell(sub.get('description', ''))} |"
            )
    out += ["", END_MARKER]
    return "\n".join(out) + "\n"


def _auth_of(op: Mapping[str, Any]) -> str:
    if not op["security"]:
        return "none"
    return "admin token" if "role `admin`" in op.get("description", "") else "client token"


def update_markdown(text: str) -> str:
    """``text`` with its generated section (between the markers) replaced by :func:`render_markdown`."""
    start, end = text.index(BEGIN_MARKER), text.index(END_MARKER) + len(END_MARKER) + 1
    return text[:start] + render_markdown() + text[end:]


def main(argv: list[str] | None = None) -> None:
    """``python -m lakesync.openapi``: print the document; ``python -m lakesync.openapi FILE``: regenerate FILE's
    generated section."""
    import sys
    from pathlib import Path

    args = sys.argv[1:] if argv is None else argv
    if not args:
        print(json.dumps(build_document(), indent=2, ensure_ascii=False))
        return
    path = Path(args[0])
    path.write_text(update_markdown(path.read_text(encoding="utf-8")), encoding="utf-8")


if __name__ == "__main__":
    main()
