"""FanOut: one primary written synchronously, secondaries best effort.

:meth:`FanOutDestination.apply` applies to the primary first; its failure fails the call and no secondary is
written. Then each secondary gets the batch. A secondary that fails never fails the call: the batch is kept in
that secondary's **pending queue** (in memory), the failure is logged (``WARNING``, naming the destination only) and
counted, and the queue is **retried** before the secondary's next batch (in order; the first failure stops the
retry, so a secondary that is down costs one attempt per call) or on :meth:`FanOutDestination.retry_pending`.
Re-applying a batch is harmless (every destination folds with per-column LWW), so retries need no bookkeeping of
what succeeded.

What is observable: :meth:`FanOutDestination.status` (per secondary: pending batches and deltas, failures, the last
error, whether deltas were dropped) and the logs. The queue is bounded (``max_pending_deltas`` per secondary):
beyond it the oldest batches are dropped, the secondary is marked ``diverged`` (logged at ``ERROR``), and it must be
repaired by copying the primary's states to it: :meth:`FanOutDestination.resync` (or ``lakesync migrate`` from the
primary to the secondary), which is idempotent. The queue does not survive the process either (a Lambda instance
ends): after a restart, a secondary that was failing may lack some batches — run a resync when in doubt.

Reads (``rows``, ``states``) come from the primary.
"""

from __future__ import annotations

import logging
import threading
from collections import deque
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any, Final

from lakesync.adapters.state import StatePage, StateReader, deltas_of
from lakesync.core.delta import RowDelta
from lakesync.core.errors import DestinationError
from lakesync.core.merge import RowState
from lakesync.core.schema import TableSchema
from lakesync.ports import ApplyStats, Destination

__all__ = ["FanOutDestination", "SecondaryStatus"]

logger = logging.getLogger(__name__)

DEFAULT_MAX_PENDING_DELTAS: Final = 100_000


@dataclass(frozen=True, slots=True)
class SecondaryStatus:
    """How a secondary of a fan-out is doing.

    Attributes:
        name: The secondary's name.
        pending_batches: Batches waiting to be retried.
        pending_deltas: Deltas in them.
        failures: Failed attempts so far (first tries and retries).
        last_error: The last failure's message, ``None`` once the secondary caught up.
        dropped_deltas: Deltas dropped because the queue was full.
        diverged: Some deltas were dropped: the secondary needs a resync from the primary.
    """

    name: str
    pending_batches: int = 0
    pending_deltas: int = 0
    failures: int = 0
    last_error: str | None = None
    dropped_deltas: int = 0
    diverged: bool = False

    @property
    def in_sync(self) -> bool:
        """Nothing pending and nothing dropped."""
        return self.pending_batches == 0 and not self.diverged


class _Secondary:
    def __init__(self, destination: Destination) -> None:
        self.destination = destination
        self.pending: deque[tuple[TableSchema, tuple[RowDelta, ...]]] = deque()
        self.pending_deltas = 0
        self.failures = 0
        self.last_error: str | None = None
        self.dropped = 0

    def status(self) -> SecondaryStatus:
        return SecondaryStatus(
            self.destination.name,
            len(self.pending),
            self.pending_deltas,
            self.failures,
            self.last_error,
            self.dropped,
            self.dropped > 0,
        )


class FanOutDestination:
    """Writes the primary synchronously and the secondaries best effort.

    Args:
        name: The fan-out's name.
        primary: Written first; its failure fails ``apply``; reads come from it.
        secondaries: Written after the primary; failures are queued and retried (see the module docstring).
        max_pending_deltas: Most deltas queued per secondary before the oldest batches are dropped.
    """

    def __init__(
        self,
        name: str,
        primary: Destination,
        secondaries: Sequence[Destination],
        *,
        max_pending_deltas: int = DEFAULT_MAX_PENDING_DELTAS,
    ) -> None:
        self.name = name
        self.primary = primary
        self._secondaries = [_Secondary(s) for s in secondaries]
        self._max_pending = max_pending_deltas
        self._lock = threading.Lock()

    def __repr__(self) -> str:
        names = [s.destination.name for s in self._secondaries]
        return f"FanOutDestination({self.name!r}, primary={self.primary.name!r}, secondaries={names})"

    @property
    def secondaries(self) -> list[Destination]:
        """The secondaries, in order."""
        return [s.destination for s in self._secondaries]

    def apply(self, schema: TableSchema, deltas: Sequence[RowDelta]) -> ApplyStats:
        """Apply to the primary (its stats are returned), then to every secondary, best effort.

        Raises:
            DestinationError: (or whatever the primary raised) the primary failed; no secondary was written.
        """
        batch = tuple(deltas)
        with self._lock:
            stats = self.primary.apply(schema, batch)
            for secondary in self._secondaries:
                self._send(secondary, schema, batch)
            return stats

    def rows(self, schema: TableSchema) -> dict[str, dict[str, Any]]:
        """The primary's rows."""
        return self.primary.rows(schema)

    def close(self) -> None:
        """Close the primary and every secondary."""
        for dest in [self.primary, *self.secondaries]:
            dest.close()

    def status(self) -> list[SecondaryStatus]:
        """Every secondary's status, in order."""
        with self._lock:
            return [s.status() for s in self._secondaries]

    def retry_pending(self) -> list[SecondaryStatus]:
        """Retry every secondary's queued batches now; returns the statuses after."""
        with self._lock:
            for secondary in self._secondaries:
                if self._drain(secondary):
                    secondary.last_error = None
            return [s.status() for s in self._secondaries]

    def resync(self, schemas: Sequence[TableSchema], *, only_diverged: bool = True) -> list[SecondaryStatus]:
        """Copy the primary's row states of ``schemas`` to the secondaries (the diverged ones, or all), then forget
        their queues and dropped counts: the copy holds everything the queue did.

        Raises:
            DestinationError: the primary's states cannot be read (it is not a StateReader), or a copy failed (the
                secondary keeps its status; the copy may be re-run).
        """
        primary = self.primary
        if not isinstance(primary, StateReader):
            raise DestinationError(f"destination {self.name}: the primary's row states cannot be read", retryable=False)
        with self._lock:
            for secondary in self._secondaries:
                if only_diverged and secondary.dropped == 0:
                    continue
                for schema in schemas:
                    after: str | None = None
                    while True:
                        page = primary.states(schema, after=after, limit=500)
                        if page.states:
                            secondary.destination.apply(schema, deltas_of(page.states))
                        if page.next is None:
                            break
                        after = page.next
                secondary.pending.clear()
                secondary.pending_deltas = secondary.dropped = 0
                secondary.last_error = None
                logger.info("fan-out %s: secondary %s resynced from the primary", self.name, secondary.destination.name)
            return [s.status() for s in self._secondaries]

    def states(self, schema: TableSchema, *, after: str | None = None, limit: int = 500) -> StatePage:
        """The primary's states (it must be a :class:`StateReader`)."""
        return self._reader().states(schema, after=after, limit=limit)

    def states_of(self, schema: TableSchema, row_ids: Sequence[str]) -> dict[str, RowState]:
        """The primary's states of ``row_ids``."""
        return self._reader().states_of(schema, row_ids)

    def _reader(self) -> StateReader:
        if not isinstance(self.primary, StateReader):
            raise DestinationError(f"destination {self.primary.name}: its row states cannot be read", retryable=False)
        return self.primary

    # -- secondaries ---------------------------------------------------------------------------------------------

    def _send(self, secondary: _Secondary, schema: TableSchema, batch: tuple[RowDelta, ...]) -> None:
        if self._drain(secondary) and self._try(secondary, schema, batch):
            secondary.last_error = None  # caught up
            return
        self._enqueue(secondary, schema, batch)

    def _drain(self, secondary: _Secondary) -> bool:
        """Retry the queue in order; ``True`` when it is empty after."""
        while secondary.pending:
            schema, batch = secondary.pending[0]
            if not self._try(secondary, schema, batch):
                return False
            secondary.pending.popleft()
            secondary.pending_deltas -= len(batch)
        return True

    def _try(self, secondary: _Secondary, schema: TableSchema, batch: tuple[RowDelta, ...]) -> bool:
        name = secondary.destination.name
        try:
            secondary.destination.apply(schema, batch)
        except Exception as exc:  # best effort: any failure of a secondary is isolated from the call
            secondary.failures += 1
            message = exc.message if isinstance(exc, DestinationError) else type(exc).__name__
            secondary.last_error = message
            logger.warning(
                "fan-out %s: secondary %s failed %s (%d deltas queued for retry): %s",
                self.name,
                name,
                schema.table,
                len(batch),
                message,
            )
            return False
        return True

    def _enqueue(self, secondary: _Secondary, schema: TableSchema, batch: tuple[RowDelta, ...]) -> None:
        secondary.pending.append((schema, batch))
        secondary.pending_deltas += len(batch)
        while secondary.pending_deltas > self._max_pending and len(secondary.pending) > 1:
            _, dropped = secondary.pending.popleft()
            secondary.pending_deltas -= len(dropped)
            secondary.dropped += len(dropped)
            logger.error(
                "fan-out %s: secondary %s dropped %d queued deltas (queue full): it needs a resync from the primary",
                self.name,
                secondary.destination.name,
                len(dropped),
            )
