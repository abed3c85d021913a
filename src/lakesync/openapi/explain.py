"""What the document says of the explain route (:mod:`lakesync.gateway.explain`), merged into
:data:`~lakesync.openapi.operations.OPERATIONS`."""

from __future__ import annotations

from collections.abc import Mapping
from typing import Final

from lakesync.openapi.model import NON_EMPTY, Operation, json_response

_EXPLANATION_KEYS: Final = (
    "gateway",
    "clientId",
    "table",
    "rowId",
    "exists",
    "values",
    "scopes",
    "columns",
    "deletes",
    "tombstone",
    "history",
    "historyComplete",
    "delivery",
    "storage",
    "notes",
)

EXPLAIN_OPERATIONS: Final[Mapping[str, Operation]] = {
    "GET /v1/admin/explain/{gw}": Operation(
        "explainRow",
        "Why a client has (or has not) a row",
        "Read-only, from the live buffer (the CLI's `lakesync explain` adds the lake's history): whether the "
        "client's scope covers the row now (and at `at`), under which rules version, through which bucket or "
        "subscription and the claim values each filter compared with; each column's winning write and the writes "
        "that lost, to which version; the deletes; the latest change in the client's scope against its position "
        "(the `cursor` given, else its `since` session: the server keeps no cursor); what is not flushed yet, and "
        "whether the row index agrees with the fold of the history. The server keeps no claims: give them, else "
        "`{sub: client}` is used. See docs/lake.md.",
        "admin",
        "admin",
        query={
            "client": (True, NON_EMPTY, "The client (its token's `sub`)."),
            "table": (True, NON_EMPTY, "The row's table."),
            "row": (True, NON_EMPTY, "The row id."),
            "claims": (False, {"type": "string"}, "The client's claims, a JSON object (default `{sub: client}`)."),
            "at": (False, {"type": "string"}, "A time to judge the row at: epoch milliseconds or ISO-8601."),
            "cursor": (False, {"type": "string"}, "The client's pull cursor, to say whether the row reached it."),
        },
        query_examples={"client": "client-a", "table": "todos", "row": "t1"},
        responses={
            "200": json_response(
                {
                    "type": "object",
                    "required": list(_EXPLANATION_KEYS),
                    "properties": {
                        "scopes": {"type": "array", "items": {"type": "object"}},
                        "columns": {"type": "array", "items": {"type": "object"}},
                        "history": {"type": "array", "items": {"type": "object"}},
                        "delivery": {"type": "object"},
                        "storage": {"type": "object"},
                    },
                },
                "The explanation.",
            )
        },
        errors=(400, 401, 403, 404, 500, 503),
    ),
}
