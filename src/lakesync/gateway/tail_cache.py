"""Ranges of shards' logs read, kept for the next page of the same read
(:func:`lakesync.gateway.log_tail.read_tail`)."""

from __future__ import annotations

import threading
from collections import OrderedDict

from lakesync.core.log import LogEntry

__all__ = ["TAIL_CACHE_BYTES", "TailCache", "TailRange"]

TailRange = tuple[str, str, int, int, int]
"""``(gateway, shard key, after, up to, commit HLC of the entry at "up to")``."""
TAIL_CACHE_BYTES = 32 * 1024 * 1024
"""The stored bytes of log entries a :class:`TailCache` keeps by default."""


class TailCache:
    """Shards' log ranges read, by gateway, shard, start, end and the commit HLC of the entry at the end (so a range
    of a log rebuilt under the same names is not mistaken for another), least recently used dropped first past
    ``max_bytes``; thread-safe. A committed range never changes: a release deletes it, and a reader of a released
    range starts over from a checkpoint, with other positions."""

    def __init__(self, max_bytes: int = TAIL_CACHE_BYTES) -> None:
        self.max_bytes = max_bytes
        self._ranges: OrderedDict[TailRange, tuple[list[LogEntry], int]] = OrderedDict()
        self._bytes = 0
        self._lock = threading.Lock()

    def get(self, key: TailRange) -> list[LogEntry] | None:
        """The entries of a range read before, or ``None``."""
        with self._lock:
            kept = self._ranges.get(key)
            if kept is None:
                return None
            self._ranges.move_to_end(key)
            return kept[0]

    def put(self, key: TailRange, entries: list[LogEntry]) -> None:
        """Keep a range's entries (a range larger than the whole cache is not kept)."""
        size = sum(e.size for e in entries)
        if size > self.max_bytes:
            return
        with self._lock:
            old = self._ranges.pop(key, None)
            self._bytes -= old[1] if old is not None else 0
            self._ranges[key] = (entries, size)
            self._bytes += size
            while self._bytes > self.max_bytes:
                _, (_, dropped) = self._ranges.popitem(last=False)
                self._bytes -= dropped
