"""The flush lag: what the buffer holds that the lake does not yet, which is what a restore from the lake would lose.

A shard's unflushed entries are ``flushed_seq + 1 .. seq`` of its head (:class:`~lakesync.core.log.ShardHead`, the
rule the flush's work uses: ``seq > flushed_seq``): their count and bytes are the head's ``unflushed_deltas`` and
``unflushed_bytes``. Commit HLCs grow with a shard's sequence, so the oldest of them is entry ``flushed_seq + 1``;
:func:`oldest_unflushed` names that position of each shard and the caller reads its commit HLC (one log read per
lagging shard, none for a flushed one). :func:`measure` then sums the shards and takes the oldest of their oldest;
its wall time is the HLC's (``hlc >> 16``), its age counted from the measuring clock.

An entry the log did not give back (a commit still being applied, or one past its TTL: then already lost) leaves its
shard's oldest commit unknown (``None``); the total is the oldest of those known.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from dataclasses import dataclass, field
from datetime import UTC, datetime
from typing import Any

from lakesync.core.hlc import decode, format_hlc
from lakesync.core.log import ShardHead, ShardId

__all__ = ["FlushLag", "LagNotices", "ShardLag", "measure", "oldest_unflushed"]


def oldest_unflushed(heads: Iterable[ShardHead]) -> dict[ShardId, int]:
    """The log position of each lagging shard's oldest unflushed entry (``flushed_seq + 1``); flushed shards are
    left out."""
    return {head.shard: head.flushed_seq + 1 for head in heads if head.seq > head.flushed_seq}


@dataclass(frozen=True, slots=True)
class ShardLag:
    """One shard's unflushed entries.

    Attributes:
        shard: The shard.
        deltas: Entries committed and not flushed.
        bytes: Their stored bytes.
        oldest_commit_hlc: The commit HLC of the oldest of them (``None``: the log did not give it back).
    """

    shard: ShardId
    deltas: int
    bytes: int
    oldest_commit_hlc: int | None


@dataclass(frozen=True, slots=True)
class FlushLag:
    """The unflushed entries of a set of shards (a gateway's, or the tick's gateways'), measured at ``now_ms``.

    Attributes:
        shards: The lagging shards, sorted (empty: everything committed is in the lake).
        now_ms: When it was measured (epoch ms), which the ages count from.
    """

    shards: tuple[ShardLag, ...]
    now_ms: int

    @property
    def deltas(self) -> int:
        """Entries committed and not flushed, over the shards."""
        return sum(s.deltas for s in self.shards)

    @property
    def bytes(self) -> int:
        """Their stored bytes."""
        return sum(s.bytes for s in self.shards)

    @property
    def oldest_commit_hlc(self) -> int | None:
        """The commit HLC of the oldest unflushed entry whose shard's log gave it back (``None``: none did)."""
        return min((s.oldest_commit_hlc for s in self.shards if s.oldest_commit_hlc is not None), default=None)

    @property
    def age_s(self) -> int | None:
        """Whole seconds since the oldest unflushed commit (``None`` when :attr:`oldest_commit_hlc` is)."""
        return _age_s(self.oldest_commit_hlc, self.now_ms)

    def to_json(self) -> dict[str, Any]:
        """The admin figure (``flushLag`` of ``GET /v1/admin/metrics/{gw}``): the totals and each lagging shard's."""
        return {
            "unflushedDeltas": self.deltas,
            "unflushedBytes": self.bytes,
            **_oldest_json(self.oldest_commit_hlc, self.now_ms),
            "shards": [
                {
                    "shard": s.shard.key,
                    "table": s.shard.table,
                    "sub": s.shard.sub,
                    "unflushedDeltas": s.deltas,
                    "unflushedBytes": s.bytes,
                    **_oldest_json(s.oldest_commit_hlc, self.now_ms),
                }
                for s in self.shards
            ],
        }

    def status(self) -> str:
        """One line for people: ``data at risk: 12 deltas (3,456 bytes) not in the lake yet, the oldest committed
        40 s ago``, or ``data at risk: none``."""
        if not self.shards:
            return "data at risk: none (every commit is in the lake)"
        age = self.age_s
        oldest = "the oldest's time unknown" if age is None else f"the oldest committed {_duration(age)} ago"
        deltas = f"{self.deltas:,} delta{'' if self.deltas == 1 else 's'}"
        return f"data at risk: {deltas} ({self.bytes:,} bytes) not in the lake yet, {oldest}"


def measure(heads: Iterable[ShardHead], oldest: Mapping[ShardId, int | None], now_ms: int) -> FlushLag:
    """The flush lag of ``heads``.

    Args:
        heads: The shards' heads.
        oldest: The commit HLC of each lagging shard's entry at :func:`oldest_unflushed` (``None`` or absent: the log
            did not give it back).
        now_ms: The measuring clock (epoch ms).
    """
    lagging = sorted((h for h in heads if h.seq > h.flushed_seq), key=lambda h: h.shard)
    return FlushLag(
        tuple(ShardLag(h.shard, h.unflushed_deltas, h.unflushed_bytes, oldest.get(h.shard)) for h in lagging),
        now_ms,
    )


@dataclass(slots=True)
class LagNotices:
    """When ``lakesync local`` prints a gateway's :meth:`FlushLag.status`: on its first measure, as soon as data
    becomes at risk or none is any more, when what is at risk changed (a commit, a flush) and ``quiet_ms`` passed
    since the last line, and every ``repeat_ms`` while data is at risk (its age grows)."""

    quiet_ms: int = 10_000
    repeat_ms: int = 60_000
    _said: dict[str, tuple[tuple[int, int | None], int]] = field(default_factory=dict)

    def line(self, gateway: str, lag: FlushLag) -> str | None:
        """The line to print for ``gateway`` now, or ``None``."""
        state = (lag.deltas, lag.oldest_commit_hlc)
        said = self._said.get(gateway)
        if said is not None and not self._due(*said, state, lag.now_ms):
            return None
        self._said[gateway] = (state, lag.now_ms)
        return f"gateway {gateway!r}: {lag.status()}"

    def _due(self, said: tuple[int, int | None], said_ms: int, state: tuple[int, int | None], now_ms: int) -> bool:
        since = now_ms - said_ms
        if (said[0] == 0) != (state[0] == 0):
            return True
        if state != said and since >= self.quiet_ms:
            return True
        return state[0] > 0 and since >= self.repeat_ms


def _age_s(hlc: int | None, now_ms: int) -> int | None:
    return None if hlc is None else max(0, now_ms - decode(hlc)[0]) // 1000


def _oldest_json(hlc: int | None, now_ms: int) -> dict[str, Any]:
    if hlc is None:
        return {"oldestCommitHlc": None, "oldestCommitAt": None, "oldestCommitAgeSeconds": None}
    wall_ms = decode(hlc)[0]
    at = datetime.fromtimestamp(wall_ms // 1000, UTC).replace(microsecond=wall_ms % 1000 * 1000)
    return {
        "oldestCommitHlc": format_hlc(hlc),
        "oldestCommitAt": at.isoformat(timespec="milliseconds").replace("+00:00", "Z"),
        "oldestCommitAgeSeconds": _age_s(hlc, now_ms),
    }


def _duration(seconds: int) -> str:
    if seconds < 120:
        return f"{seconds} s"
    if seconds < 7200:
        return f"{seconds // 60} min"
    return f"{seconds // 3600} h {seconds % 3600 // 60} min"
