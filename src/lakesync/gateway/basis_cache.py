"""A pull's sync rules and shard registry, kept for a moment between the pulls one process serves.

Every pull reads the gateway's rules and shard registry before the log: one consistent ``Query`` on DynamoDB, one
read unit, as much as the log read of an idle poll. Both change rarely (an admin saving rules, the first commit to a
new table or sub-shard), so a process serving many pulls a second can read them once a ``ttl_s`` instead.

What staleness costs, and why it loses nothing: a cursor pull served with rules up to ``ttl_s`` old is served as if
the rules had changed that much later; a shard missing from a registry read before its first commit is read from its
first entry by the pulls after the next read (a cursor keeps the positions of every shard it names, served or not).
Writes this process makes itself are seen at once (:meth:`CachedPullBasis.invalidate`). ``since`` pulls read fresh
(:attr:`CachedPullBasis.reader`): the original client's session records positions per shard, read from the heads.
"""

from __future__ import annotations

import threading
import time
from collections.abc import Callable

from lakesync.core.log import PullBasis
from lakesync.ports import PullBasisReader


class CachedPullBasis:
    """A :class:`~lakesync.ports.PullBasisReader` that answers from its last read of a gateway for ``ttl_s``."""

    def __init__(self, reader: PullBasisReader, ttl_s: float, *, clock: Callable[[], float] = time.monotonic) -> None:
        """Wrap ``reader``; ``clock`` is monotonic seconds."""
        if ttl_s <= 0:
            raise ValueError("ttl_s must be positive")
        self.reader = reader
        """The reader underneath, for reads that must be fresh."""
        self._ttl_s = ttl_s
        self._clock = clock
        self._kept: dict[str, tuple[float, PullBasis]] = {}
        self._generation = 0
        self._lock = threading.Lock()

    def read_pull_basis(self, gateway: str) -> PullBasis:
        """The gateway's rules and registry as read at most ``ttl_s`` ago."""
        now = self._clock()
        with self._lock:
            kept = self._kept.get(gateway)
            generation = self._generation
        if kept is not None and now - kept[0] < self._ttl_s:
            return kept[1]
        basis = self.reader.read_pull_basis(gateway)
        with self._lock:
            # A read that an invalidation overtook may predate the change: it serves this pull only.
            if self._generation == generation:
                self._kept[gateway] = (now, basis)
        return basis

    def kept(self, gateway: str) -> PullBasis | None:
        """The gateway's rules and registry if read less than ``ttl_s`` ago, else ``None`` (nothing is read)."""
        now = self._clock()
        with self._lock:
            kept = self._kept.get(gateway)
        return kept[1] if kept is not None and now - kept[0] < self._ttl_s else None

    def invalidate(self, gateway: str) -> None:
        """Forget what was read of ``gateway`` (this process changed its rules or registry)."""
        with self._lock:
            self._kept.pop(gateway, None)
            self._generation += 1


def kept_basis(reader: PullBasisReader, gateway: str) -> PullBasis | None:
    """What :meth:`~lakesync.ports.PullBasisReader.read_pull_basis` would answer without a read, when ``reader`` is
    a :class:`CachedPullBasis` that keeps it; else ``None``."""
    return reader.kept(gateway) if isinstance(reader, CachedPullBasis) else None


def fresh_reader(reader: PullBasisReader) -> PullBasisReader:
    """The reader under a :class:`CachedPullBasis`, or ``reader`` itself."""
    return reader.reader if isinstance(reader, CachedPullBasis) else reader


def forget_basis(reader: PullBasisReader | None, gateway: str) -> None:
    """Invalidate ``gateway`` in ``reader`` when it is a :class:`CachedPullBasis`."""
    if isinstance(reader, CachedPullBasis):
        reader.invalidate(gateway)
