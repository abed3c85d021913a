"""The pull: pages of remote deltas merged into the row states, each page applied with its cursor in one transaction
(a crash re-pulls at most that page, and merging it again changes nothing).

Remote deltas are merged with :func:`lakesync.core.merge.merge`, the one merge; a real-time broadcast's deltas go the
same way without moving the cursor. One delta is not merged: a ``DELETE`` at HLC 0 under this client's own id is how
a pull says that a row left the client's scope (a subscription ended, docs/streams.md "The pull follows the scope"):
the row is dropped, its state made empty (not a tombstone), so that if it enters again its real versions apply.
"""

from __future__ import annotations

import contextlib
import logging
from collections.abc import Callable, Iterable, Sequence
from typing import Any

from lakesync.client.answers import pull_page, receive_hlc, unreadable_answer
from lakesync.client.http import ApiError, SyncClient
from lakesync.client.model import SyncReport, SyncStateError
from lakesync.client.storage import Storage
from lakesync.core.delta import DeltaOp, RowDelta
from lakesync.core.errors import ClockDriftError
from lakesync.core.merge import RowState, merge

logger = logging.getLogger(__name__)

PULL_LIMIT = 1000
MAX_PULL_PAGES = 10_000
"""A bound on the pages of one sync cycle (10 million deltas), so a misbehaving gateway cannot loop it forever."""


class Puller:
    """Pulls from the cursor to the end, and merges remote deltas (see the module docstring)."""

    def __init__(self, storage: Storage, http: SyncClient) -> None:
        self._db, self._states, self._clock = storage.db, storage.states, storage.clock
        self._http = http

    def cursor(self) -> str | None:
        """The pull cursor (``None`` before the first sync)."""
        with self._db.lock:
            self._db.check_open()
            return self._db.meta("cursor")

    def pull(self, report: SyncReport, *, limit: int, on_expired: Callable[[SyncReport], None]) -> None:
        """Pull pages of at most ``limit`` deltas until the gateway has no more; a cursor the gateway no longer
        serves (410) calls ``on_expired`` (which reloads the checkpoint) once, then pulls on from its cursor."""
        expired_once = False
        for _ in range(MAX_PULL_PAGES):
            cursor = self.cursor()
            try:
                with unreadable_answer("pull"):
                    answer = self._http.pull(cursor=cursor or "", limit=limit)
            except ApiError as exc:
                if exc.status != 410 or expired_once:
                    raise
                expired_once = True
                logger.warning("pull cursor expired (%s); reloading the checkpoint", exc)
                on_expired(report)
                continue
            page = pull_page(answer)
            self._apply_page(page.deltas, page.cursor, page.server_hlc, report)
            if not page.has_more:
                return
        raise SyncStateError(f"The pull did not end after {MAX_PULL_PAGES} pages")

    def _apply_page(self, deltas: Sequence[RowDelta], cursor: str | None, server_hlc: Any, report: SyncReport) -> None:
        """Merge one page and move the cursor, in one transaction."""
        if cursor is None:
            raise SyncStateError("The gateway's pull answer has no cursor")
        receive_hlc(self._clock, server_hlc)
        with self._db.tx():
            changed = self.merge_remote(deltas)
            self._db.set_meta("cursor", cursor)
            self._db.save_clock(self._clock)
        report.pulled += len(deltas)
        for table, rows in changed.items():
            report.changed.setdefault(table, set()).update(rows)
        if isinstance(server_hlc, str) and server_hlc.isdigit():
            report.server_hlc = int(server_hlc)

    def merge_remote(self, deltas: Iterable[RowDelta]) -> dict[str, set[str]]:
        """Merge remote deltas into the states and user rows (inside a transaction); the rows that changed."""
        states: dict[tuple[str, str], RowState | None] = {}
        dirty: dict[tuple[str, str], RowState] = {}
        newest = 0
        for delta in deltas:
            key = (delta.table, delta.row_id)
            state = states[key] if key in states else self._states.get(*key)
            if self._drops(delta):
                if state is not None and state != RowState(*key):
                    states[key] = dirty[key] = RowState(*key)
                continue
            result = merge(state, delta)
            states[key] = result.state
            if result.changed:
                dirty[key] = result.state
            newest = max(newest, delta.hlc)
        for state in dirty.values():
            self._states.put(state)
        if newest:
            # Local writes must order after everything seen here (a remote clock far ahead is not followed).
            with contextlib.suppress(ClockDriftError):
                self._clock.recv(newest)
        changed: dict[str, set[str]] = {}
        for table, row_id in dirty:
            changed.setdefault(table, set()).add(row_id)
        return changed

    def _drops(self, delta: RowDelta) -> bool:
        """Whether ``delta`` says the row left this client's scope (see the module docstring)."""
        return delta.hlc == 0 and delta.op is DeltaOp.DELETE and delta.client_id == self._http.client_id

    def apply_broadcast(self, deltas: Sequence[RowDelta]) -> dict[str, set[str]]:
        """Merge deltas a real-time broadcast carried, in one transaction (the cursor stays: the next pull delivers
        them again, and merging them again changes nothing); the rows that changed."""
        with self._db.tx():
            changed = self.merge_remote(deltas)
            self._db.save_clock(self._clock)
        return changed
