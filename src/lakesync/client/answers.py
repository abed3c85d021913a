"""The gateway's answers as the store reads them: each checked before anything is applied, and the gateway's clock.

An answer that does not decode, or is not the answer to what was sent, raises :class:`SyncStateError`: then nothing
is applied, acknowledged or moved.
"""

from __future__ import annotations

import contextlib
import json
import zlib
from collections.abc import Iterator, Sequence
from dataclasses import dataclass
from typing import Any

from lakesync.client.model import SyncStateError
from lakesync.core.delta import RowDelta
from lakesync.core.errors import ClockDriftError, ValidationError
from lakesync.core.hlc import HLC


@contextlib.contextmanager
def unreadable_answer(route: str) -> Iterator[None]:
    """Raise :class:`SyncStateError` for an answer that does not decode (not JSON, bad gzip, a bad checkpoint
    frame or header)."""
    try:
        yield
    except (ValueError, zlib.error, ValidationError) as exc:  # json's errors are ValueErrors
        raise SyncStateError(f"The gateway's {route} answer does not decode: {exc}") from exc


@dataclass(frozen=True, slots=True)
class PullPage:
    """A pull answer, checked."""

    deltas: list[RowDelta]
    cursor: str
    has_more: bool
    server_hlc: Any


def pull_page(answer: Any) -> PullPage:
    """A pull answer as a page: ``deltas`` (each a valid wire delta), ``cursor`` (a string), ``hasMore`` (a boolean).

    Raises:
        SyncStateError: anything else; then nothing is applied and the cursor stays.
    """
    if not isinstance(answer, dict):
        raise SyncStateError(f"The gateway's pull answer is not an object: {answer!s:.200}")
    raw, cursor, has_more = answer.get("deltas"), answer.get("cursor"), answer.get("hasMore")
    if not isinstance(raw, list) or not isinstance(cursor, str) or not isinstance(has_more, bool):
        raise SyncStateError(f"The gateway's pull answer lacks deltas, cursor or hasMore: {answer!s:.200}")
    try:
        deltas = [RowDelta.from_json(d, where=f"deltas[{i}]") for i, d in enumerate(raw)]
    except ValidationError as exc:
        raise SyncStateError(f"The gateway's pull answer has a malformed delta: {exc}") from exc
    return PullPage(deltas, cursor, has_more, answer.get("serverHlc"))


def push_answer(answer: Any, wires: Sequence[str]) -> tuple[int, list[dict[str, Any]]]:
    """A push answer's ``accepted`` and receipts, checked to be the gateway's answer to the deltas ``wires``: one
    receipt per delta, in order, with its deltaId (what every push is answered with).

    Raises:
        SyncStateError: anything else (an error body sent with 200, an answer to another request): then nothing may be
            acknowledged.
    """
    receipts = answer.get("receipts") if isinstance(answer, dict) else None
    accepted = answer.get("accepted") if isinstance(answer, dict) else None
    if not isinstance(receipts, list) or len(receipts) != len(wires) or type(accepted) is not int or accepted < 0:
        raise SyncStateError(f"The gateway's push answer is not one receipt per delta sent: {answer!s:.200}")
    for receipt, wire in zip(receipts, wires, strict=True):
        if not isinstance(receipt, dict) or receipt.get("deltaId") != wire_delta_id(wire):
            raise SyncStateError(f"The gateway's push answer has a receipt for another delta: {receipt!s:.200}")
        columns = receipt.get("columns", [])
        if not isinstance(columns, list) or not all(map(is_column_receipt, columns)):
            raise SyncStateError(f"The gateway's push answer has a malformed receipt: {receipt!s:.200}")
    return accepted, receipts


def is_column_receipt(receipt: Any) -> bool:
    """A ``{column, applied, winnerHlc, winnerClientId}`` the conflict report can read."""
    if not isinstance(receipt, dict) or not isinstance(receipt.get("column"), str):
        return False
    hlc, winner = receipt.get("winnerHlc"), receipt.get("winnerClientId")
    return receipt.get("applied") is True or (
        isinstance(hlc, str) and hlc.isascii() and hlc.isdigit() and isinstance(winner, str)
    )


def wire_delta_id(wire: str) -> str:
    """A wire delta's deltaId: its last key as this store renders it, else read from the JSON."""
    at = wire.rfind('"deltaId":"')
    tail = wire[at + 11 : -2] if at >= 0 and wire.endswith('"}') else ""
    if tail.isalnum():
        return tail
    found = json.loads(wire).get("deltaId")
    return found if isinstance(found, str) else ""


def receive_hlc(clock: HLC, server_hlc: Any) -> None:
    """Let ``clock`` follow the gateway's ``serverHlc`` (a clock far ahead is not followed)."""
    if isinstance(server_hlc, str) and server_hlc.isdigit():
        with contextlib.suppress(ClockDriftError):
            clock.recv(int(server_hlc))
