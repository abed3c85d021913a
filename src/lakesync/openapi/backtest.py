"""What the document says of the rules backtest route (:mod:`lakesync.gateway.backtest`), merged into
:data:`~lakesync.openapi.operations.OPERATIONS`."""

from __future__ import annotations

from collections.abc import Mapping
from typing import Final

from lakesync.core.backtest import MAX_CLAIM_SETS, MAX_SAMPLE
from lakesync.openapi.model import JSON, Operation, json_response, ref

_CLAIM_SET: Final = {
    "type": "object",
    "required": ["claims"],
    "properties": {
        "claims": {
            "type": "object",
            "additionalProperties": {"anyOf": [{"type": "string"}, {"type": "array", "items": {"type": "string"}}]},
        },
        "client": {"type": "string", "minLength": 1, "description": "The client id (default: the `sub` claim)."},
        "subscriptions": {
            "type": "array",
            "description": "The client's subscriptions (default: those the gateway keeps for it).",
            "items": {
                "type": "object",
                "required": ["stream"],
                "properties": {
                    "stream": {"type": "string", "minLength": 1},
                    "params": {"type": "object", "additionalProperties": {"type": "string"}},
                },
            },
        },
    },
}

BACKTEST_OPERATIONS: Final[Mapping[str, Operation]] = {
    "POST /v1/admin/sync-rules/{gw}/test": Operation(
        "testSyncRules",
        "Backtest candidate sync rules",
        "Read-only. Validates the candidate as saving it would (400 with the same messages), then judges every "
        "current row of the gateway under the rules in force and under the candidate for each claim set (given, "
        "or those of the gateway's WebSocket sessions where the deployment gives them; 400 when there is none): "
        "rows entering and leaving the client's scope by table with samples, the bytes of the difference it would "
        "be sent, and the candidate's filters that hold for no row or for every row of their tables. The report "
        "names the rules version it compared against and where the rows were read. See docs/streams.md.",
        "admin",
        "admin",
        body={
            JSON: {
                "type": "object",
                "required": ["rules"],
                "additionalProperties": False,
                "properties": {
                    "rules": ref("SyncRules"),
                    "claimSets": {"type": "array", "maxItems": MAX_CLAIM_SETS, "items": _CLAIM_SET},
                    "sample": {"type": "integer", "minimum": 0, "maximum": MAX_SAMPLE},
                },
            }
        },
        body_example={
            "rules": {"version": 2, "buckets": [{"name": "all", "tables": [], "filters": []}]},
            "claimSets": [{"claims": {"sub": "client-a"}}],
            "sample": 3,
        },
        responses={
            "200": json_response(
                {
                    "type": "object",
                    "required": ["against", "candidate", "claimSets", "tables", "filters", "readOnly"],
                    "properties": {
                        "against": {"type": "object", "description": "The rules compared with; the source"},
                        "candidate": {"type": "object"},
                        "rowsRead": {"type": "object", "additionalProperties": {"type": "integer"}},
                        "claimSets": {"type": "array", "items": {"type": "object"}},
                        "tables": {"type": "object"},
                        "filters": {"type": "array", "items": {"type": "object"}},
                        "readOnly": {"const": True},
                    },
                },
                "The report.",
            )
        },
        errors=(400, 401, 403, 404, 413, 500, 503),
    ),
}
