"""A gateway's current rows, read whole: every row at the shards' heads, each with the deltas a scope
difference would send for it (:mod:`lakesync.gateway.scope_change`).

The row index is keyed by row and cannot list a table, so the rows are read as the scope difference and the
membership view (:mod:`lakesync.gateway.membership_view`) read them: while nothing of the shards has been released,
the log from its start; otherwise the covering checkpoint's rows (:func:`~lakesync.gateway.resync.covering_checkpoint`),
each folded with the log after the checkpoint up to the heads (:func:`~lakesync.gateway.log_tail.read_tail`). The
checkpoint is read chunk by chunk; the log after it is held in memory.
"""

from __future__ import annotations

import json
from collections.abc import Iterator, Mapping, Sequence
from dataclasses import dataclass, field
from typing import Final

from lakesync.core.checkpoint import Manifest
from lakesync.core.delta import RowDelta
from lakesync.core.errors import CursorExpiredError, StorageBusyError, StorageError
from lakesync.core.filters import Row
from lakesync.core.log import LogEntry, ShardHead, ShardId
from lakesync.core.merge import fold
from lakesync.gateway.checkpoint import chunk_rows
from lakesync.gateway.deps import GatewayDeps
from lakesync.gateway.log_tail import RowKey, read_tail

__all__ = ["StateRow", "TableState", "item_bytes", "read_state"]

_ATTEMPTS: Final = 3
"""Reads of the log a caller makes while a release keeps overtaking them, before it answers 503."""


@dataclass(frozen=True, slots=True)
class StateRow:
    """One row now: its ``values`` (``None``: deleted) and the ``items`` that carry its state (a checkpoint's
    deltas and the log entries after them, or its log entries)."""

    table: str
    row_id: str
    values: Row | None
    items: tuple[LogEntry | RowDelta, ...]

    @property
    def size(self) -> int:
        """The bytes of :attr:`items` as a pull sends them."""
        return sum(item_bytes(i) for i in self.items)


def item_bytes(item: LogEntry | RowDelta) -> int:
    """The UTF-8 bytes of one pulled item's JSON (a log entry's stored wire JSON as it is)."""
    if isinstance(item, LogEntry) and item.wire_json is not None:
        return len(item.wire_json.encode())
    doc = item.to_json() if isinstance(item, RowDelta) else item.wire_value()
    return len(json.dumps(doc, separators=(",", ":"), ensure_ascii=False).encode())


@dataclass
class TableState:
    """The rows at :attr:`positions` (the heads when read), from :attr:`checkpoint` (``None``: the log from its start)
    and the log after it; :meth:`rows` may be gone through more than once."""

    deps: GatewayDeps
    positions: dict[str, int]
    checkpoint: Manifest | None
    tail: dict[RowKey, list[LogEntry]] = field(default_factory=dict)

    @property
    def source(self) -> str:
        """Where the rows come from, for people: ``log`` or ``checkpoint <id> + log``."""
        return "log" if self.checkpoint is None else f"checkpoint {self.checkpoint.checkpoint_id} + log"

    def rows(self) -> Iterator[StateRow]:
        """Every row, once: the checkpoint's (folded with the log after it), then those only the log
        holds.

        Raises:
            StorageError: a checkpoint chunk is missing or corrupt.
        """
        seen: set[RowKey] = set()
        objects = self.deps.objects
        if self.checkpoint is not None and objects is not None:
            for info in self.checkpoint.chunks:
                for deltas in chunk_rows(objects, info):
                    key = (deltas[0].table, deltas[0].row_id)
                    seen.add(key)
                    later = self.tail.get(key, [])
                    yield _row(key, (*deltas, *later), [*deltas, *(e.delta for e in later)])
        for key in sorted(self.tail):
            if key not in seen:
                entries = self.tail[key]
                yield _row(key, tuple(entries), [e.delta for e in entries])


def _row(key: RowKey, items: tuple[LogEntry | RowDelta, ...], deltas: Sequence[RowDelta]) -> StateRow:
    state = fold(deltas)
    return StateRow(key[0], key[1], None if state is None else state.values(), items)


def read_state(deps: GatewayDeps, gateway: str) -> TableState:
    """The rows of ``gateway`` at its shards' heads (module docstring).

    Raises:
        StorageError: the log was released past every readable checkpoint.
        StorageBusyError: releases kept overtaking the read (503).
    """
    shards = deps.buffer.list_shards(gateway)
    for _ in range(_ATTEMPTS):
        heads = deps.buffer.get_heads(shards) if shards else {}
        positions = {head.shard.key: head.seq for head in heads.values()}
        checkpoint = _base(deps, gateway, heads)
        base = checkpoint.positions if checkpoint is not None else {}
        try:
            tail = read_tail(deps.buffer, gateway, list(heads), base, positions)
        except CursorExpiredError:  # released while read: start over from the checkpoint that allowed it
            continue
        return TableState(deps, positions, checkpoint, tail)
    raise StorageBusyError(f"The log of gateway {gateway!r} kept being released while read; retry")


def _base(deps: GatewayDeps, gateway: str, heads: Mapping[ShardId, ShardHead]) -> Manifest | None:
    """The checkpoint the rows start from: ``None`` while nothing is released, else the covering one."""
    if not any(head.released_seq for head in heads.values()):
        return None
    from lakesync.gateway.resync import covering_checkpoint

    manifest = covering_checkpoint(deps, gateway, heads)
    if manifest is None:
        raise StorageError(f"The log of gateway {gateway!r} was released past every readable checkpoint")
    return manifest
