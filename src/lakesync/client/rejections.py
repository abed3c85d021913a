"""Local writes the gateway's write rules rejected, and the state a rejected row rolls back to.

A push answers each delta with a receipt; a rejected one (``"rejected": true``) names a ``code`` and a ``reason``, and
carries ``row``, the row's state as the gateway stores it when the client may read it (``null``: the row is gone or
not the client's to see). The rejected write never reached the server, so the local row rolls back to that state,
with the client's own later writes of the row merged on top: those the same push got accepted, and those still
waiting in the outbox (they will be pushed, and judged, in turn).
"""

from __future__ import annotations

import json
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass
from typing import Any

from lakesync.core.delta import RowDelta
from lakesync.core.merge import RowState, merge, state_from_json

REJECTED_STATUS = 403
"""The HTTP status a rejected delta is recorded with (as the gateway would refuse it alone)."""


@dataclass(frozen=True, slots=True)
class Rejection:
    """One rejected local delta: its wire JSON and what the gateway said of it."""

    index: int
    """The delta's place in the push."""
    delta_id: str
    table: str
    row_id: str
    wire: str
    code: str
    reason: str
    row: Mapping[str, Any] | None
    """The row's state as stored (``lakesync.core.merge.state_to_json``), or ``None``."""

    @property
    def error(self) -> str:
        """``code: reason``, as stored and reported."""
        return f"{self.code}: {self.reason}"


def rejections(wires: Sequence[str], receipts: Sequence[Mapping[str, Any]]) -> list[Rejection]:
    """The rejected deltas among ``wires`` (their receipts in the same order)."""
    out = []
    for index, (wire, receipt) in enumerate(zip(wires, receipts, strict=True)):
        if receipt.get("rejected") is not True:
            continue
        doc = json.loads(wire)
        row = receipt.get("row")
        out.append(
            Rejection(
                index=index,
                delta_id=str(doc["deltaId"]),
                table=str(doc["table"]),
                row_id=str(doc["rowId"]),
                wire=wire,
                code=str(receipt.get("code", "")),
                reason=str(receipt.get("reason", "")),
                row=row if isinstance(row, dict) else None,
            )
        )
    return out


def last_by_row(found: Iterable[Rejection]) -> dict[tuple[str, str], Rejection]:
    """The last rejection of each row: the state it carries is the newest the gateway answered."""
    return {(r.table, r.row_id): r for r in found}


def accepted_after(
    last: Mapping[tuple[str, str], Rejection], wires: Sequence[str], receipts: Sequence[Mapping[str, Any]]
) -> dict[tuple[str, str], list[RowDelta]]:
    """Per rejected row, the deltas of the same push after its last rejection that the gateway applied."""
    out: dict[tuple[str, str], list[RowDelta]] = {key: [] for key in last}
    for index, (wire, receipt) in enumerate(zip(wires, receipts, strict=True)):
        if receipt.get("rejected") is True or receipt.get("duplicate") is True:
            continue
        delta = RowDelta.from_json(json.loads(wire))
        rejection = last.get((delta.table, delta.row_id))
        if rejection is not None and index > rejection.index:
            out[(delta.table, delta.row_id)].append(delta)
    return out


def rolled_back(table: str, row_id: str, stored: Mapping[str, Any] | None, later: Iterable[RowDelta]) -> RowState:
    """The local state of a rejected row: the gateway's ``stored`` state (nothing, when ``None``) with the row's
    ``later`` local deltas merged on top, in order. An empty state marks a row the client does not hold."""
    state = state_from_json(table, row_id, stored) if stored is not None else RowState(table, row_id)
    for delta in later:
        state = merge(state, delta).state
    return state


__all__ = ["REJECTED_STATUS", "Rejection", "accepted_after", "last_by_row", "rejections", "rolled_back"]
