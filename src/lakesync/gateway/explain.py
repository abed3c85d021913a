"""Explain one row to an operator (``GET /v1/admin/explain/{gw}``, ``lakesync explain``): gather what the live buffer
and, when a reader is given, the lake hold of the row and what the gateway knows of the client, and judge them with
:func:`lakesync.core.explain.explain`.

The buffer part reads the row's shard head, its row-index entry and the log after the flush mark (after the release
mark when the lake is not read), keeping the row's entries; the lake part is a
:class:`~lakesync.ports.LakeRowReader` (Spark SQL locally, Athena on AWS; the admin Lambda answers from the buffer
alone when it has none, and says the history may be incomplete). The client's rules, subscriptions, served scopes and
``since`` session come from their stores; its claims and cursor come from the caller, since the server keeps neither.
"""

from __future__ import annotations

import datetime
import json
from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Final

from lakesync.core.claims import Claims
from lakesync.core.errors import ValidationError
from lakesync.core.explain import explain
from lakesync.core.explanation import ClientView, Explanation, Position, RowEvidence
from lakesync.core.log import ShardHead, ShardId
from lakesync.core.row_history import HistoryDelta, LakeRow, combine
from lakesync.core.rules import SyncRules
from lakesync.gateway.cursor import decode_cursor
from lakesync.gateway.deps import GatewayDeps
from lakesync.gateway.log_pages import PAGE_MAX
from lakesync.ports import LakeRowReader

__all__ = [
    "MAX_TAIL_ENTRIES",
    "MAX_TIME_MS",
    "ExplainQuery",
    "explain_request",
    "explain_row",
    "parse_query",
    "parse_time",
]

MAX_TIME_MS: Final = 253_402_300_799_999
"""The last millisecond of year 9999: the latest time ``at`` may name."""
MAX_TAIL_ENTRIES: Final = 100_000
"""Most buffer log entries one explanation reads for the row (the unflushed tail of its shard, in pages)."""


@dataclass(frozen=True, slots=True)
class ExplainQuery:
    """What to explain: the client, the row, and optionally the client's claims (default ``{"sub": client}``), a
    time to judge the row at (epoch ms), the client's cursor, and another rules version to judge it under."""

    client_id: str
    table: str
    row_id: str
    claims: Claims = field(default_factory=dict)
    at_ms: int | None = None
    cursor: str | None = None
    other_rules: SyncRules | None = None


def _required(params: Mapping[str, str], name: str) -> str:
    value = params.get(name, "")
    if not value:
        raise ValidationError(f"Missing '{name}' parameter")
    return value


def _claims(text: str | None) -> dict[str, str | list[str]]:
    if not text:
        return {}
    try:
        doc = json.loads(text)
    except ValueError:
        raise ValidationError("Invalid 'claims' parameter: not JSON") from None
    ok = isinstance(doc, dict) and all(
        isinstance(v, str) or (isinstance(v, list) and all(isinstance(x, str) for x in v)) for v in doc.values()
    )
    if not ok:
        raise ValidationError("Invalid 'claims' parameter: an object of strings or arrays of strings")
    return {str(k): v if isinstance(v, str) else [str(x) for x in v] for k, v in doc.items()}


def parse_query(params: Mapping[str, str]) -> ExplainQuery:
    """The query of the admin route: ``client``, ``table``, ``row`` (required), ``claims`` (a JSON object), ``at``
    (epoch ms or ISO-8601), ``cursor``.

    Raises:
        ValidationError: a parameter is missing or malformed.
    """
    at = params.get("at")
    return ExplainQuery(
        _required(params, "client"),
        _required(params, "table"),
        _required(params, "row"),
        _claims(params.get("claims")),
        None if not at else parse_time(at),
        params.get("cursor") or None,
    )


def parse_time(text: str) -> int:
    """Epoch milliseconds from ``text``: an integer, or an ISO-8601 time (UTC unless it names a zone).

    Raises:
        ValidationError: neither.
    """
    invalid = ValidationError(f"Invalid time {text[:64]!r}: epoch milliseconds or ISO-8601")
    if text.isascii() and text.isdigit():
        if len(text) > len(str(MAX_TIME_MS)) or int(text) > MAX_TIME_MS:
            raise invalid
        return int(text)
    try:
        moment = datetime.datetime.fromisoformat(text.replace("Z", "+00:00"))
    except ValueError:
        raise invalid from None
    if moment.tzinfo is None:
        moment = moment.replace(tzinfo=datetime.UTC)
    ms = int(moment.timestamp() * 1000)
    if not 0 <= ms <= MAX_TIME_MS:
        raise invalid
    return ms


def _tail(deps: GatewayDeps, head: ShardHead, after: int, row_id: str) -> tuple[list[HistoryDelta], str | None]:
    """The row's entries in the shard's log after ``after`` up to the head, and why the read is not whole (or
    ``None``)."""
    out: list[HistoryDelta] = []
    read = 0
    while after < head.seq:
        if read >= MAX_TAIL_ENTRIES:
            return out, f"read {read} buffer log entries of {head.shard.key} and stopped at seq {after}"
        fetched = deps.buffer.read_log(head.shard, after, min(PAGE_MAX, head.seq - after), images=False)
        if not fetched:
            return out, f"the buffer log of {head.shard.key} was released past seq {after} during the read"
        read += len(fetched)
        out.extend(
            HistoryDelta(e.delta, head.shard.key, e.seq, e.commit_hlc) for e in fetched if e.delta.row_id == row_id
        )
        after = fetched[-1].seq
    return out, None


def _position(deps: GatewayDeps, gateway: str, query: ExplainQuery) -> Position | None:
    if query.cursor is not None:
        return Position("cursor", decode_cursor(query.cursor, gateway))
    session = deps.since_sessions.get(gateway, query.client_id) if deps.since_sessions is not None else None
    if session is None:
        return None
    if session.handouts:  # what the latest response sent it; ``confirmed`` only what its next pull acknowledged
        return Position("since-handed-out", session.handouts[-1].positions)
    if session.confirmed is not None:
        return Position("since-confirmed", session.confirmed)
    return None


def _evidence(deps: GatewayDeps, gateway: str, query: ExplainQuery, lake: LakeRowReader | None) -> RowEvidence:
    table, row_id = query.table, query.row_id
    shard = ShardId.for_row(gateway, table, row_id, deps.settings.sub_shards.get(table, 1))
    head = deps.buffer.get_heads([shard]).get(shard, ShardHead(shard))
    stored = deps.buffer.get_rows(gateway, [(table, row_id)]).get((table, row_id))
    lake_row = lake.read_row(gateway, table, row_id) if lake is not None else LakeRow()
    start = head.flushed_seq if lake is not None else head.released_seq
    tail, short = _tail(deps, head, start, row_id)
    notes = [*lake_row.notes, *([short] if short else [])]
    if lake is None:
        notes.append("the lake was not read: the history is what the buffer still holds")
    return RowEvidence(
        table,
        row_id,
        combine(lake_row.deltas, tail),
        complete=short is None and (lake is not None or head.released_seq == 0),
        index=None if stored is None else stored.state,
        lake_state=lake_row.state,
        lake_read=lake is not None,
        flushed_seq=head.flushed_seq,
        released_seq=head.released_seq,
        published_seq=head.published_seq,
        notes=tuple(notes),
    )


def explain_row(deps: GatewayDeps, gateway: str, query: ExplainQuery, lake: LakeRowReader | None = None) -> Explanation:
    """Explain ``query``'s row for its client from the buffer and, when given, the lake.

    Raises:
        ValidationError: the cursor is malformed or of another gateway.
    """
    now_ms = deps.wall_ms()
    stores = deps.subscriptions
    claims = query.claims or {"sub": query.client_id}
    view = ClientView(
        query.client_id,
        claims,
        deps.config.get_sync_rules(gateway),
        stores.get(gateway, query.client_id, now_ms) if stores is not None else (),
        deps.membership_source(gateway),
        query.other_rules,
        stores.get_served(gateway, query.client_id) if stores is not None else {},
        _position(deps, gateway, query),
    )
    evidence = _evidence(deps, gateway, query, lake)
    return explain(gateway, view, evidence, now_ms=now_ms, at_ms=query.at_ms)


def explain_request(deps: GatewayDeps, gateway: str, params: Mapping[str, str]) -> dict[str, object]:
    """The admin route: the explanation of the query's row as JSON (from the buffer; the admin Lambda reads no
    lake)."""
    return explain_row(deps, gateway, parse_query(params)).to_json()
