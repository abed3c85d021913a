"""The local store's SQLite file: one connection under one re-entrant lock, its transactions, the meta table, the
persisted clock, and the layout of the store's own tables (see :mod:`lakesync.client.store` for what each holds).

A file of layout version 1 is upgraded when opened (version 2 added ``_lakesync_base``); a newer one is refused.
``_lakesync_subscriptions`` is created in a file that lacks it without a new version: an older SDK ignores it.
"""

from __future__ import annotations

import contextlib
import sqlite3
import threading
from collections.abc import Callable, Iterator
from pathlib import Path

from lakesync.client.model import SyncStateError
from lakesync.core.hlc import HLC, Clock, decode

SCHEMA_VERSION = 2
"""The file layout's version: 2 added ``_lakesync_base`` (a file of version 1 is upgraded when opened; a newer one is
refused)."""

_LAYOUT = (
    "CREATE TABLE IF NOT EXISTS _lakesync_meta (key TEXT PRIMARY KEY, value TEXT NOT NULL)",
    "CREATE TABLE IF NOT EXISTS _lakesync_state (tbl TEXT NOT NULL, row_id TEXT NOT NULL, "
    "state TEXT NOT NULL, PRIMARY KEY (tbl, row_id)) WITHOUT ROWID",
    "CREATE TABLE IF NOT EXISTS _lakesync_base (tbl TEXT NOT NULL, first_id TEXT NOT NULL, "
    "last_id TEXT NOT NULL, shape TEXT NOT NULL, ids TEXT NOT NULL, hlcs TEXT NOT NULL, "
    "clients TEXT NOT NULL, PRIMARY KEY (tbl, first_id)) WITHOUT ROWID",
    "CREATE TABLE IF NOT EXISTS _lakesync_outbox (seq INTEGER PRIMARY KEY AUTOINCREMENT, "
    "deltas TEXT NOT NULL, sent INTEGER NOT NULL DEFAULT 0)",
    "CREATE TABLE IF NOT EXISTS _lakesync_rejected (seq INTEGER PRIMARY KEY AUTOINCREMENT, "
    "delta_id TEXT NOT NULL, delta TEXT NOT NULL, status INTEGER NOT NULL, error TEXT NOT NULL, "
    "at_ms INTEGER NOT NULL)",
    "CREATE TABLE IF NOT EXISTS _lakesync_subscriptions (key TEXT PRIMARY KEY, stream TEXT NOT NULL, "
    "params TEXT NOT NULL, ttl INTEGER, state TEXT NOT NULL, server_id TEXT, expires_at INTEGER, renew_at INTEGER, "
    "refusal TEXT, reason TEXT, attempted INTEGER NOT NULL DEFAULT 0) WITHOUT ROWID",
)


class Database:
    """The SQLite connection (autocommit: transactions are explicit), its lock, and the meta table."""

    def __init__(self, path: str | Path) -> None:
        self.lock = threading.RLock()
        """Held around every use of the connection (re-entrant: a transaction calls helpers that take it too)."""
        self.conn = sqlite3.connect(str(path), check_same_thread=False, isolation_level=None, timeout=30.0)
        self.closed = False
        self.on_rollback: Callable[[], None] = lambda: None
        """Called after a rollback, to drop what was cached from the rolled-back writes."""

    def open(self, client_id: str, gateway: str, migrate: Callable[[], None]) -> None:
        """Set WAL mode, create or upgrade the layout, check that the file is this client's and gateway's, and run
        ``migrate`` (the user tables), all in one transaction.

        Raises:
            SyncStateError: the file belongs to another client or gateway, or a newer SDK wrote it.
        """
        db = self.conn
        db.execute("PRAGMA journal_mode=WAL")
        db.execute("PRAGMA synchronous=NORMAL")  # WAL + NORMAL: durable across app crashes, atomic across power cuts
        with self.tx():
            for statement in _LAYOUT:
                db.execute(statement)
            for key, value in (("clientId", client_id), ("gateway", gateway)):
                stored = self.meta(key)
                if stored is None:
                    self.set_meta(key, value)
                elif stored != value:
                    raise SyncStateError(f"This file belongs to {key} {stored!r}, not {value!r}")
            version = self.meta("version")
            if version is not None and (not version.isdigit() or int(version) > SCHEMA_VERSION):
                raise SyncStateError(f"This file has layout version {version}: a newer SDK wrote it")
            if version != str(SCHEMA_VERSION):
                self.set_meta("version", str(SCHEMA_VERSION))
            migrate()

    @contextlib.contextmanager
    def tx(self) -> Iterator[sqlite3.Connection]:
        """One SQLite transaction (``BEGIN IMMEDIATE``) under the lock; rolled back on any exception."""
        with self.lock:
            self.check_open()
            self.conn.execute("BEGIN IMMEDIATE")
            try:
                yield self.conn
            except BaseException:
                self.conn.execute("ROLLBACK")
                self.on_rollback()
                raise
            self.conn.execute("COMMIT")

    def check_open(self) -> None:
        """Raise :class:`SyncStateError` once the store is closed."""
        if self.closed:
            raise SyncStateError("The store is closed")

    def close(self) -> None:
        """Close the connection. Idempotent."""
        with self.lock:
            if self.closed:
                return
            self.closed = True
            self.conn.close()

    def meta(self, key: str) -> str | None:
        """A ``_lakesync_meta`` value (the caller holds the lock)."""
        row = self.conn.execute("SELECT value FROM _lakesync_meta WHERE key = ?", (key,)).fetchone()
        return None if row is None else str(row[0])

    def set_meta(self, key: str, value: str) -> None:
        """Set a ``_lakesync_meta`` value (inside a transaction)."""
        self.conn.execute("INSERT OR REPLACE INTO _lakesync_meta (key, value) VALUES (?, ?)", (key, value))

    def load_clock(self, clock: Clock) -> HLC:
        """The HLC as last saved (the clock never goes backwards across restarts)."""
        wall, counter = decode(int(self.meta("hlc") or "0"))
        return HLC(clock, wall=wall, counter=counter)

    def save_clock(self, hlc: HLC) -> None:
        """Save the HLC's last value (inside a transaction)."""
        wall, counter = hlc.state
        self.set_meta("hlc", str((wall << 16) | counter))
