"""A gateway's flush lag read from its buffer (:mod:`lakesync.core.flush_lag`): the admin metrics route's figure and
``lakesync local``'s status line, one code path.

The heads give the unflushed counts; each lagging shard's oldest unflushed commit is one log read of one entry
without its row images (:meth:`~lakesync.ports.BufferStore.read_log` after ``flushed_seq``: on DynamoDB the chunk
holding it, usually the one that opens right after the flushed position), the shards' reads sent together on the
storage pool. A flushed shard costs nothing beyond its head.
"""

from __future__ import annotations

from collections.abc import Callable, Iterable, Sequence
from dataclasses import dataclass, field

from lakesync.core.flush_lag import FlushLag, LagNotices, measure, oldest_unflushed
from lakesync.core.log import ShardHead
from lakesync.io_pool import results_of, submit
from lakesync.ports import BufferStore, commit_hlc_at

__all__ = ["FlushLagWatch", "flush_lag", "flush_lag_of"]


def flush_lag(buffer: BufferStore, gateway: str, now_ms: int) -> FlushLag:
    """The gateway's flush lag: its shards' heads, then :func:`flush_lag_of`.

    Raises:
        StorageError: a read failed.
    """
    return flush_lag_of(buffer, buffer.get_heads(buffer.list_shards(gateway)).values(), now_ms)


def flush_lag_of(buffer: BufferStore, heads: Iterable[ShardHead], now_ms: int) -> FlushLag:
    """The flush lag of shards whose heads the caller has read (the admin metrics read them anyway).

    Raises:
        StorageError: a read failed.
    """
    heads = list(heads)
    positions = oldest_unflushed(heads)
    reads = [submit(commit_hlc_at, buffer, shard, seq) for shard, seq in positions.items()]
    return measure(heads, dict(zip(positions, results_of(reads), strict=True)), now_ms)


@dataclass(slots=True)
class FlushLagWatch:
    """``lakesync local``'s status lines on the data at risk: its gateways' flush lag, read every ``every_ms`` and
    said as :class:`~lakesync.core.flush_lag.LagNotices` decides.

    Attributes:
        buffer: The local gateway's buffer.
        gateways: The gateways served.
        wall_ms: The wall clock (epoch ms).
        every_ms: How often the buffer is read.
    """

    buffer: BufferStore
    gateways: Sequence[str]
    wall_ms: Callable[[], int]
    every_ms: int = 5_000
    notices: LagNotices = field(default_factory=LagNotices)
    _next_ms: int = 0

    def lines(self) -> list[str]:
        """The lines due now (none between reads).

        Raises:
            StorageError: a read failed (the next call reads again).
        """
        now = self.wall_ms()
        if now < self._next_ms:
            return []
        self._next_ms = now + self.every_ms
        said = (self.notices.line(gateway, flush_lag(self.buffer, gateway, now)) for gateway in self.gateways)
        return [line for line in said if line is not None]
