"""Background sync: a thread that runs the store's sync cycle after local writes, on an interval (or when the
real-time channel says so), with backoff while offline; and the real-time listener (:mod:`lakesync.client.realtime`).

The intervals, the debounce and the backoff are read from the store at each turn, so changing them on a running store
takes effect at the next one.
"""

from __future__ import annotations

import logging
import threading
import time
from collections.abc import Callable
from typing import Protocol

from lakesync.client.backoff import Backoff
from lakesync.client.database import Database
from lakesync.client.model import OfflineError
from lakesync.client.realtime import RealtimeListener, RealtimeStore

logger = logging.getLogger(__name__)


class SyncedStore(RealtimeStore, Protocol):
    """What the background thread needs of the store (:class:`~lakesync.client.store.LocalStore` is one)."""

    poll_interval: float
    connected_poll_interval: float
    debounce: float
    backoff: Backoff
    realtime: bool

    def sync(self) -> object:
        """One sync cycle; :class:`~lakesync.client.model.OfflineError` while the gateway is unavailable."""
        ...


class BackgroundSync:
    """The sync thread and the real-time listener of one store (see the module docstring)."""

    def __init__(
        self, store: SyncedStore, db: Database, *, renewal_in: Callable[[], float | None] = lambda: None
    ) -> None:
        self._store = store
        self._db = db
        self._renewal_in = renewal_in
        """Seconds until a stream subscription is due for renewal (a cycle then runs however long the interval)."""
        self._wake = threading.Event()
        self._stop = threading.Event()
        self._thread: threading.Thread | None = None
        self.listener: RealtimeListener | None = None

    def start(self) -> None:
        """Start the thread, and the listener if the store is ``realtime``. Idempotent."""
        store = self._store
        with self._db.lock:
            self._db.check_open()
            if self._thread is not None:
                return
            self._stop.clear()
            self._thread = threading.Thread(target=self._run, name=f"lakesync-sync-{store.client_id}", daemon=True)
            self._thread.start()
            if store.realtime:
                self.listener = RealtimeListener(store)
                self.listener.start()
        self._wake.set()

    def stop(self) -> None:
        """Stop the thread and the listener, and wait for them (unless called from one of them, as a subscriber may:
        that thread ends when its callback returns)."""
        with self._db.lock:
            thread, listener = self._thread, self.listener
            self._thread = self.listener = None
        self._stop.set()
        self._wake.set()
        if listener is not None:
            listener.stop()
        if thread is not None and thread is not threading.current_thread():
            thread.join()

    def wake(self) -> None:
        """Ask for a sync cycle soon (no effect while the thread is not running)."""
        self._wake.set()

    @property
    def realtime_connected(self) -> bool:
        """Whether the real-time channel is connected."""
        listener = self.listener
        return bool(listener is not None and listener.connected)

    def _run(self) -> None:
        store = self._store
        retry_at = 0.0
        while not self._stop.is_set():
            interval = store.connected_poll_interval if self.realtime_connected else store.poll_interval
            renewal = self._renewal_in()
            if renewal is not None:
                interval = min(interval, renewal)
            now = time.monotonic()
            if retry_at > now:
                # Offline: local writes do not cut the backoff short, only stop does.
                self._stop.wait(retry_at - now)
            else:
                self._wake.wait(interval)
            if self._stop.is_set():
                return
            self._stop.wait(store.debounce)  # coalesce a burst of writes or broadcasts into one cycle
            self._wake.clear()
            if self._stop.is_set():
                return
            try:
                store.sync()
            except OfflineError as exc:
                delay = store.backoff.next_delay()
                retry_at = time.monotonic() + delay
                logger.info("offline (%s); retrying in %.1fs", exc, delay)
                continue
            except Exception:
                delay = store.backoff.next_delay()
                retry_at = time.monotonic() + delay
                logger.exception("background sync failed; retrying in %.1fs", delay)
                continue
            store.backoff.reset()
            retry_at = 0.0
