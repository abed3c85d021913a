"""Lifecycle: a hot and a cold tier, rows moving from hot to cold by age.

**Age** is a function of the row's LWW state, not of the clock of whoever wrote it down: a row's last change is the
HLC of its greatest write or delete (:func:`~lakesync.adapters.state.last_change`), and a row is *old* when that HLC
is below ``hlc.encode(now_ms - max_age_ms, 0)``. The same rows are old on every run with the same ``now``.

**Invariant.** Every row's fold is held by its hot state when the hot tier has one (the hot state *dominates*: it
already contains whatever cold holds for the row), else by its cold state. Hence reads: ``rows`` = hot's live rows,
plus cold's rows whose id has no state in hot (a row deleted in hot stays deleted even though cold still holds an
older live copy: "hot first"). How the invariant is kept:

* :meth:`LifecycleDestination.apply` writes to hot. For rows of the batch that cold holds, it first reads their cold
  states and applies them to hot (the row is *promoted*: hot now holds its whole fold; a promotion alone always
  keeps the invariant, so it is its own call and the batch stays one atomic hot transaction with its own stats).
  After the batch it reads those cold states once more and promotes any that changed meanwhile (a sweep in another
  process moved the row between the reads), so a concurrent sweep cannot leave a partial row in hot.
* :meth:`LifecycleDestination.sweep` pages through hot's states; for old rows it **copies** their states to cold
  (``cold.apply`` of :func:`~lakesync.adapters.state.state_deltas`: a join, so repeating it changes nothing), then
  **deletes** them from hot with a compare-and-delete (:meth:`~lakesync.adapters.state.StatefulDestination.purge`):
  a row written since it was read stays in hot. A crash between the copy and the delete leaves the row in both tiers,
  hot dominating, which is a valid state; the next sweep copies again (no effect) and deletes. Re-running a sweep is
  idempotent.

The cold tier's stale copy of a promoted row is left in place (it is dominated, and the next sweep of the row
overwrites it with the join). Unique constraints (``externalIdColumn``) hold per tier, not across tiers.
"""

from __future__ import annotations

import logging
import threading
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from typing import Any

from lakesync.adapters.state import StatefulDestination, StatePage, deltas_of, last_change
from lakesync.core import hlc as hlc_mod
from lakesync.core.delta import RowDelta
from lakesync.core.merge import RowState, join
from lakesync.core.schema import TableSchema
from lakesync.ports import ApplyStats

__all__ = ["LifecycleDestination", "SweepStats"]

logger = logging.getLogger(__name__)

_HOT, _COLD = "h:", "c:"


@dataclass(frozen=True, slots=True)
class SweepStats:
    """What one :meth:`LifecycleDestination.sweep` did.

    Attributes:
        examined: Hot rows looked at.
        copied: Old rows copied to cold.
        moved: Old rows then removed from hot (fewer than ``copied`` when some were written meanwhile).
        cutoff_hlc: Rows whose last change is below this HLC were old.
    """

    examined: int = 0
    copied: int = 0
    moved: int = 0
    cutoff_hlc: int = 0


class LifecycleDestination:
    """A hot and a cold destination; rows older than ``max_age_ms`` move from hot to cold on :meth:`sweep`.

    Args:
        name: The lifecycle's name.
        hot: Receives every write; must read states and purge rows.
        cold: Receives old rows; must read states.
        max_age_ms: A row whose last change is older than this (by its HLC) is old.
        clock: Wall-clock epoch milliseconds (injectable).
    """

    def __init__(
        self,
        name: str,
        hot: StatefulDestination,
        cold: StatefulDestination,
        *,
        max_age_ms: int,
        clock: Callable[[], int] = hlc_mod.system_clock,
    ) -> None:
        if max_age_ms < 0:
            raise ValueError("max_age_ms must not be negative")
        self.name = name
        self.hot = hot
        self.cold = cold
        self.max_age_ms = max_age_ms
        self._clock = clock
        self._lock = threading.RLock()

    def __repr__(self) -> str:
        return f"LifecycleDestination({self.name!r}, hot={self.hot.name!r}, cold={self.cold.name!r})"

    # -- Destination ---------------------------------------------------------------------------------------------

    def apply(self, schema: TableSchema, deltas: Sequence[RowDelta]) -> ApplyStats:
        """Apply to hot, promoting the batch's rows that cold holds (see the module docstring).

        Returns:
            Hot's stats of the batch (promotion is a call of its own before it: its rows do not count).
        """
        batch = list(deltas)
        ids = sorted({d.row_id for d in batch})
        with self._lock:
            if not ids:  # nothing to write: make sure both tiers have the table and its columns
                self.cold.apply(schema, [])
            before = self.cold.states_of(schema, ids) if ids else {}
            if before:
                self.hot.apply(schema, deltas_of(before.values()))  # promote: hot now holds these rows' whole fold
            stats = self.hot.apply(schema, batch)
            if before or ids:
                after = self.cold.states_of(schema, ids) if ids else {}
                moved = [s for rid, s in after.items() if before.get(rid) != s]
                if moved:  # a sweep elsewhere moved a row between the reads: promote it too
                    self.hot.apply(schema, deltas_of(moved))
        return stats

    def rows(self, schema: TableSchema) -> dict[str, dict[str, Any]]:
        """Hot's live rows, then cold's rows of ids hot has no state for."""
        with self._lock:
            hot_rows = self.hot.rows(schema)
            cold_rows = self.cold.rows(schema)
            candidates = [rid for rid in cold_rows if rid not in hot_rows]
            shadowed = self.hot.states_of(schema, candidates) if candidates else {}
        out = dict(hot_rows)
        for rid in candidates:
            if rid not in shadowed:
                out[rid] = cold_rows[rid]
        return out

    def close(self) -> None:
        """Close both tiers."""
        self.hot.close()
        self.cold.close()

    # -- tiering -------------------------------------------------------------------------------------------------

    def cutoff(self, now_ms: int | None = None) -> int:
        """The HLC below which a row's last change makes it old."""
        now = self._clock() if now_ms is None else now_ms
        return hlc_mod.encode(max(0, now - self.max_age_ms), 0)

    def sweep(self, schema: TableSchema, *, now_ms: int | None = None, batch: int = 500) -> SweepStats:
        """Move the old rows of ``schema.table`` from hot to cold: copy, then compare-and-delete (crash-safe,
        idempotent).

        Raises:
            DestinationError: a tier failed; what was copied stays copied, the rest stays hot (re-run it).
        """
        cutoff = self.cutoff(now_ms)
        examined = copied = moved = 0
        after: str | None = None
        with self._lock:
            while True:
                page = self.hot.states(schema, after=after, limit=batch)
                examined += len(page.states)
                old = [s for s in page.states if last_change(s) < cutoff]
                if old:
                    self.cold.apply(schema, deltas_of(old))
                    copied += len(old)
                    moved += self.hot.purge(schema, old)
                if page.next is None:
                    break
                after = page.next
        if copied:
            logger.info("lifecycle %s: moved %d of %d rows of %s to cold", self.name, moved, examined, schema.table)
        return SweepStats(examined, copied, moved, cutoff)

    # -- states (a Lifecycle can be a migrate source) ------------------------------------------------------------

    def states(self, schema: TableSchema, *, after: str | None = None, limit: int = 500) -> StatePage:
        """Hot's states, then cold's (a row in both tiers appears twice; copying both joins them, which is its
        fold). The cursor names the tier."""
        tier, position = (_HOT, None) if after is None else (after[:2], after[2:])
        if tier == _HOT:
            page = self.hot.states(schema, after=position, limit=limit)
            if page.next is not None:
                return StatePage(page.states, _HOT + page.next)
            return StatePage(page.states, _COLD)  # cold next (possibly an empty last page)
        page = self.cold.states(schema, after=position or None, limit=limit)
        return StatePage(page.states, None if page.next is None else _COLD + page.next)

    def states_of(self, schema: TableSchema, row_ids: Sequence[str]) -> dict[str, RowState]:
        """The joined state of each row over both tiers."""
        with self._lock:
            hot = self.hot.states_of(schema, row_ids)
            cold = self.cold.states_of(schema, row_ids)
        out = dict(cold)
        for rid, state in hot.items():
            out[rid] = join(state, cold[rid]) if rid in cold else state
        return out
