"""Per route key, what the document says of the route beyond its method and path (:class:`Operation`), as data."""

from __future__ import annotations

from collections.abc import Mapping
from typing import Final

from lakesync.openapi.backtest import BACKTEST_OPERATIONS
from lakesync.openapi.explain import EXPLAIN_OPERATIONS
from lakesync.openapi.flush_lag import FLUSH_LAG_SCHEMA
from lakesync.openapi.model import (
    CHECKPOINT_COLUMNS,
    CHECKPOINT_STREAM,
    JSON,
    NON_EMPTY,
    OPENAPI_PATH,
    PROTOBUF,
    Operation,
    json_response,
    ref,
)
from lakesync.openapi.subscriptions import SUBSCRIPTION_OPERATIONS

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

_AUTH_ERRORS: Final = (401, 403, 404)

_UNREGISTERED: Final = {
    "200": json_response(
        {
            "type": "object",
            "required": ["unregistered", "name"],
            "properties": {"unregistered": {"const": True}, "name": {"type": "string"}},
        },
        "Removed.",
    )
}

# -- operations ------------------------------------------------------------------------------------------------------

OPERATIONS: Final[Mapping[str, Operation]] = {
    "GET /health": Operation(
        "health",
        "Liveness",
        "Answers without auth and without calling AWS.",
        "meta",
        "none",
        responses={
            "200": json_response(
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
            "200": json_response(
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
        body={JSON: ref("SyncPush"), PROTOBUF: {"type": "string", "format": "binary"}},
        body_example=_PUSH_EXAMPLE,
        responses={
            "200": {
                "description": "Merged: receipts per delta and the effective deltas.",
                "content": {
                    JSON: {"schema": ref("PushResponse")},
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
            "clientId": (True, NON_EMPTY, "The puller (not checked against the token, as in the original)."),
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
                    JSON: {"schema": ref("PullResponse")},
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
        body={JSON: ref("ActionPush"), PROTOBUF: {"type": "string", "format": "binary"}},
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
                    JSON: {"schema": ref("ActionResponse")},
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
        responses={"200": json_response(ref("ActionDiscovery"), "The discovery document.")},
        errors=(*_AUTH_ERRORS, 429, 500, 503),
    ),
    "POST /v1/admin/sync-rules/{gw}": Operation(
        "saveSyncRules",
        "Store the sync rules",
        "",
        "admin",
        "admin",
        body={JSON: ref("SyncRules")},
        body_example={"version": 1, "buckets": [{"name": "all", "tables": [], "filters": []}]},
        responses={
            "200": json_response(
                {"type": "object", "required": ["saved"], "properties": {"saved": {"const": True}}}, "Stored."
            )
        },
        errors=(400, *_AUTH_ERRORS, 413, 500, 503),
    ),
    "GET /v1/admin/sync-rules/{gw}": Operation(
        "getSyncRules",
        "The stored sync rules",
        "An empty rule set when none is stored.",
        "admin",
        "admin",
        responses={"200": json_response(ref("SyncRules"), "The rules.")},
        errors=(*_AUTH_ERRORS, 500, 503),
    ),
    "POST /v1/admin/schema/{gw}": Operation(
        "saveSchema",
        "Store a table schema",
        "Stored as the next version; an unchanged schema keeps its version.",
        "admin",
        "admin",
        body={JSON: ref("TableSchema")},
        body_example={"table": "todos", "columns": [{"name": "title", "type": "string"}]},
        responses={
            "200": json_response(
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
            "200": json_response(
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
                                    "schema": ref("TableSchema"),
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
            "200": json_response(
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
        "In total and per table, and the flush lag (`flushLag`): what is committed and not yet in the lake, which a "
        "restore from the lake would lose.",
        "admin",
        "admin",
        responses={
            "200": json_response(
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
                        "flushLag",
                    ],
                    "properties": {
                        "flushLag": FLUSH_LAG_SCHEMA,
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
            "200": json_response(
                {
                    "type": "object",
                    "required": ["destinations"],
                    "properties": {"destinations": {"type": "array", "items": ref("Destination")}},
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
        body={JSON: ref("Destination")},
        body_example=_DESTINATION_EXAMPLE,
        responses={
            "200": json_response(
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
        responses=_UNREGISTERED,
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
                "properties": {"actions": ref("ConnectorActionPolicy")},
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
            "200": json_response(
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
            "200": json_response(
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
        responses=_UNREGISTERED,
        errors=(*_AUTH_ERRORS, 500, 503),
    ),
    "GET /v1/connectors/types": Operation(
        "connectorTypes",
        "The connector types",
        "Descriptors (config and ingest JSON schemas, credential fields), sorted by type. No auth.",
        "meta",
        "none",
        responses={"200": json_response({"type": "array", "items": {"type": "object"}}, "The types.")},
    ),
    **SUBSCRIPTION_OPERATIONS,
    **EXPLAIN_OPERATIONS,
    **BACKTEST_OPERATIONS,
}
