"""The shared component schemas (``#/components/schemas``), as data."""

from __future__ import annotations

from typing import Final

from lakesync.core.errors import API_ERROR_CODES
from lakesync.openapi.model import NON_EMPTY, Schema, ref
from lakesync.openapi.subscriptions import REFUSALS, SUBSCRIPTION_SCHEMAS

_IDENTIFIER = {
    "type": "string",
    "pattern": "^[A-Za-z_][A-Za-z0-9_]{0,63}$",
    "description": "An identifier: a letter or underscore, then letters, digits or underscores; at most 64.",
}

SCHEMAS: Final[dict[str, Schema]] = {
    "Error": {
        "type": "object",
        "description": "Every error answer. A 500 adds the request id and never any detail of the failure.",
        "required": ["error", "code"],
        "properties": {
            "error": {"type": "string", "description": "Human-readable message."},
            "code": {"type": "string", "enum": list(API_ERROR_CODES)},
            "requestId": {"type": "string"},
            "refusal": {
                "type": "string",
                "enum": list(REFUSALS),
                "description": "Why a subscription request was refused (the subscription routes only).",
            },
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
            "column": {**NON_EMPTY, "description": "Column name."},
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
                **NON_EMPTY,
                "description": "The table; must be an identifier (`^[A-Za-z_][A-Za-z0-9_]{0,63}$`, else 422).",
            },
            "rowId": NON_EMPTY,
            "clientId": {**NON_EMPTY, "description": "The writer; must be the token's `sub` (admins: anyone)."},
            "columns": {"type": "array", "items": ref("ColumnDelta"), "description": "Absent means none."},
            "hlc": ref("HlcInput"),
            "deltaId": {**NON_EMPTY, "description": "SHA-256 of the canonical delta; an opaque idempotency key."},
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
            "columns": {"type": "array", "items": ref("ColumnDelta")},
            "hlc": ref("Hlc"),
            "deltaId": {"type": "string"},
        },
    },
    "SyncPush": {
        "type": "object",
        "required": ["clientId", "deltas"],
        "properties": {
            "clientId": {**NON_EMPTY, "description": "Must be the token's `sub` (else 403)."},
            "deltas": {"type": "array", "items": ref("RowDelta"), "maxItems": 10000},
            "lastSeenHlc": ref("HlcInput"),
        },
    },
    "ColumnReceipt": {
        "type": "object",
        "required": ["column", "applied", "winnerHlc", "winnerClientId"],
        "properties": {
            "column": {"type": "string"},
            "applied": {"type": "boolean"},
            "winnerHlc": ref("Hlc"),
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
            "columns": {"type": "array", "items": ref("ColumnReceipt")},
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
            "serverHlc": ref("Hlc"),
            "accepted": {"type": "integer", "minimum": 0},
            "deltas": {
                "type": "array",
                "items": ref("StoredRowDelta"),
                "description": "The effective deltas: the columns that won.",
            },
            "receipts": {"type": "array", "items": ref("DeltaReceipt"), "description": "One per pushed delta."},
        },
    },
    "PullResponse": {
        "type": "object",
        "required": ["deltas", "serverHlc", "hasMore"],
        "properties": {
            "deltas": {"type": "array", "items": ref("StoredRowDelta")},
            "serverHlc": ref("Hlc"),
            "hasMore": {"type": "boolean"},
            "cursor": {"type": "string", "description": "Pull from it next for exactly-once delivery."},
        },
    },
    "Action": {
        "type": "object",
        "required": ["actionId", "clientId", "hlc", "connector", "actionType", "params"],
        "properties": {
            "actionId": NON_EMPTY,
            "clientId": NON_EMPTY,
            "hlc": ref("HlcInput"),
            "connector": NON_EMPTY,
            "actionType": NON_EMPTY,
            "params": {"type": "object"},
            "idempotencyKey": {"type": "string"},
        },
    },
    "ActionPush": {
        "type": "object",
        "required": ["clientId", "actions"],
        "properties": {
            "clientId": {**NON_EMPTY, "description": "Must be the token's `sub` (else 403)."},
            "actions": {"type": "array", "items": ref("Action")},
        },
    },
    "ActionResult": {
        "type": "object",
        "required": ["actionId", "data", "serverHlc"],
        "properties": {"actionId": {"type": "string"}, "data": {"type": "object"}, "serverHlc": ref("Hlc")},
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
            "results": {"type": "array", "items": {"anyOf": [ref("ActionResult"), ref("ActionErrorResult")]}},
            "serverHlc": ref("Hlc"),
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
                        "type": {**NON_EMPTY, "description": "An action type of the connector (once each)."},
                        "objects": {
                            "type": "array",
                            "minItems": 1,
                            "items": NON_EMPTY,
                            "description": "Only these objects (Salesforce sObjects); absent: any.",
                        },
                    },
                },
            },
            "requireRole": {
                "anyOf": [NON_EMPTY, {"type": "array", "minItems": 1, "items": NON_EMPTY}],
                "description": "The token's `role` must be this (or one of these).",
            },
            "requireClaim": {
                "type": "object",
                "required": ["name", "values"],
                "additionalProperties": False,
                "properties": {
                    "name": {**NON_EMPTY, "description": "A custom claim (or `sub`), not a reserved one."},
                    "values": {"type": "array", "minItems": 1, "items": NON_EMPTY},
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
                "items": NON_EMPTY,
                "maxItems": 256,
                "description": "Columns a client may never set (sending the stored value again is not setting it).",
            },
            "immutableColumns": {
                "type": "array",
                "items": NON_EMPTY,
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
                        "write": ref("WritePolicy"),
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
                        "name": NON_EMPTY,
                        "tables": {"type": "array", "items": NON_EMPTY, "description": "Empty means every table."},
                        "filters": {
                            "type": "array",
                            "items": {
                                "type": "object",
                                "required": ["column", "op", "value"],
                                "properties": {
                                    "column": NON_EMPTY,
                                    "op": {"type": "string", "enum": ["eq", "in", "neq", "gt", "lt", "gte", "lte"]},
                                    "value": {**NON_EMPTY, "description": "A literal, or `jwt:<claim>`."},
                                },
                            },
                        },
                        "write": ref("WritePolicy"),
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
            "externalIdColumn": NON_EMPTY,
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
    **SUBSCRIPTION_SCHEMAS,
}
