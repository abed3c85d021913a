"""The local-first store: a SQLite file the app reads and writes at once, synced with a gateway in the background.

:class:`LocalStore` is a facade over parts, each a module doing one thing:

* :mod:`~lakesync.client.database`: the SQLite connection, its lock and transactions, the meta table (clientId,
  gateway, the HLC's last value, the pull cursor and the checkpoint it came from) and the layout's version;
* :mod:`~lakesync.client.states`: ``_lakesync_state``, per row the per-column LWW state
  (:func:`lakesync.core.merge.state_to_json`, or a compact state whose values are the user row's), the source of
  truth the user row (one table per schema, :mod:`lakesync.client.tables`) is materialised from; a deleted row keeps
  its tombstone, so an older write never resurrects it;
* :mod:`~lakesync.client.base`: ``_lakesync_base``, the compact states of rows loaded from a checkpoint into an empty
  store, many rows a record;
* :mod:`~lakesync.client.writes`: local writes; :mod:`~lakesync.client.outbox`: ``_lakesync_outbox``, the local
  deltas not yet acknowledged, and ``_lakesync_rejected``, those the gateway refused for good;
* :mod:`~lakesync.client.push`, :mod:`~lakesync.client.pull`, :mod:`~lakesync.client.bootstrap` (checkpoints): the
  three steps of a sync cycle, over the gateway's answers as :mod:`~lakesync.client.answers` checks them;
* :mod:`~lakesync.client.subscriptions`: ``_lakesync_subscriptions``, the stream subscriptions the app keeps, sent
  (and renewed before they run out) by the sync cycle;
* :mod:`~lakesync.client.background`: the sync thread and the real-time listener.

Invariants:

* A local write is one SQLite transaction: user row + state + outbox + clock. Bad input raises before it starts.
* Remote deltas are merged with :func:`lakesync.core.merge.merge`, the one merge; a pulled page is applied and the
  cursor moved in one transaction, so a crash re-pulls at most that page (merging it again changes nothing).
* An outbox entry is removed (or its ``sent`` advanced) only after the gateway acknowledged the push that carried it;
  a crash in between re-sends it, and the gateway deduplicates by clientId + deltaId. Nothing is lost, nothing
  applied twice.
* The first sync loads the latest checkpoint (into an empty store: rows written in bulk without a merge; into a store
  with data: merged) and follows its cursor; a cursor the gateway no longer serves (410 ``CURSOR_EXPIRED``) reloads
  the checkpoint the same way, merging it into local state and keeping pending local writes.

Threads: one re-entrant lock around the SQLite connection; one sync cycle at a time. ``start()`` runs a sync thread
(push after local writes, pull on an interval or when the real-time channel says so, backoff while offline) and a
real-time listener (:mod:`lakesync.client.realtime`). Callbacks run on the thread that made the change, outside the
lock.
"""

from __future__ import annotations

import base64
import contextlib
import http.client
import json
import logging
import sqlite3
import threading
import urllib.error
from collections.abc import Callable, Iterable, Iterator, Mapping, Sequence
from pathlib import Path
from typing import Any, Self

from lakesync.client.background import BackgroundSync
from lakesync.client.backoff import Backoff
from lakesync.client.base import BaseRecords
from lakesync.client.bootstrap import Bootstrap
from lakesync.client.database import Database
from lakesync.client.http import ApiError, SyncClient
from lakesync.client.model import Change, Conflict, OfflineError, Origin, Rejected, StreamSubscription, SyncReport
from lakesync.client.outbox import PUSH_BATCH, Outbox
from lakesync.client.pull import PULL_LIMIT, Puller
from lakesync.client.push import Pusher
from lakesync.client.states import RowStates
from lakesync.client.storage import Storage
from lakesync.client.subscriptions import Subscriptions
from lakesync.client.tables import load_tables, quote
from lakesync.client.writes import LocalWrites, WriteOp
from lakesync.core.canonical import JsonValue
from lakesync.core.delta import DeltaOp, RowDelta, is_valid_client_id
from lakesync.core.hlc import Clock, system_clock
from lakesync.core.merge import RowState
from lakesync.core.schema import TableSchema

logger = logging.getLogger(__name__)

__all__ = ["Batch", "LocalStore", "connect", "token_subject"]


def token_subject(token: str) -> str:
    """The ``sub`` claim of a JWT, read without verifying it (the gateway verifies).

    Raises:
        ValueError: the token is not a JWT with a string ``sub``.
    """
    try:
        payload = token.split(".")[1]
        claims = json.loads(base64.urlsafe_b64decode(payload + "=" * (-len(payload) % 4)))
    except (IndexError, ValueError) as exc:
        raise ValueError("the token is not a JWT") from exc
    sub = claims.get("sub") if isinstance(claims, dict) else None
    if not isinstance(sub, str) or not sub:
        raise ValueError("the token has no 'sub' claim")
    return sub


_TRANSIENT_STATUS = frozenset({408, 409, 425, 429, 500, 502, 503, 504})
"""Answers worth retrying later: timeouts, clock drift (our clock ahead of the gateway's; it catches up),
throttling, backpressure, server faults."""


def _is_offline(exc: BaseException) -> bool:
    if isinstance(exc, ApiError):
        return exc.status in _TRANSIENT_STATUS
    return isinstance(exc, urllib.error.URLError | ConnectionError | TimeoutError | http.client.HTTPException | OSError)


class LocalStore:
    """A local SQLite database kept in sync with a LakeSync gateway. Build it with :func:`connect`.

    Thread-safe. Use as a context manager, or call :meth:`close`.
    """

    def __init__(
        self,
        path: str | Path,
        *,
        url: str,
        gateway: str,
        schemas: Iterable[TableSchema | Mapping[str, Any]],
        token: str | None = None,
        get_token: Callable[[], str] | None = None,
        client_id: str | None = None,
        ws_url: str | None = None,
        realtime: bool = True,
        poll_interval: float = 5.0,
        connected_poll_interval: float = 60.0,
        debounce: float = 0.05,
        backoff: Backoff | None = None,
        on_conflict: Callable[[Conflict], None] | None = None,
        on_rejected: Callable[[Rejected], None] | None = None,
        clock: Clock = system_clock,
        timeout: float = 30.0,
        pull_limit: int = PULL_LIMIT,
        push_batch: int = PUSH_BATCH,
    ) -> None:
        if token is None and get_token is None:
            raise ValueError("connect() needs token= or get_token=")
        if token is None:
            assert get_token is not None
            token = get_token()
        self.client_id = client_id or token_subject(token)
        if not is_valid_client_id(self.client_id):
            raise ValueError(
                f"clientId {self.client_id[:40]!r} is not one the gateway accepts (non-empty valid text, at most "
                "256 bytes): every write would be refused"
            )
        self.gateway = gateway
        self.url = url.rstrip("/")
        self.ws_url = ws_url
        self.tables = load_tables(schemas)
        self.http = SyncClient(self.url, gateway, token, self.client_id, timeout=timeout, get_token=get_token)
        self.on_conflict = on_conflict
        self.on_rejected = on_rejected
        self.poll_interval = poll_interval
        self.connected_poll_interval = connected_poll_interval
        self.debounce = debounce
        self.backoff = backoff or Backoff()
        self.pull_limit = pull_limit
        self.push_batch = push_batch
        self.realtime = realtime
        self.online = False
        """Whether the last exchange with the gateway succeeded."""
        self.last_error: BaseException | None = None

        self._subscribers: dict[str, list[Callable[[Change], None]]] = {}
        self._sync_lock = threading.Lock()
        self._db = Database(path)
        try:
            self._base = BaseRecords(self._db.conn)
            self._states = RowStates(self._db.conn, self.tables, self._base)
            self._db.on_rollback = self._base.reset
            self._db.open(self.client_id, self.gateway, self._states.ensure_tables)
            self._base.reset()
            self._clock = self._db.load_clock(clock)
        except BaseException:
            self._db.conn.close()
            raise
        self._outbox = Outbox(self._db.conn, self.client_id)
        storage = Storage(self._db, self._states, self._base, self._outbox, self._clock, self.tables)
        self._writes = LocalWrites(storage, client_id=self.client_id, gateway=gateway, on_written=self._written)
        self._push = Pusher(storage, self.http)
        self._pull = Puller(storage, self.http)
        self._bootstrap = Bootstrap(storage, self._pull, self.http)
        self._streams = Subscriptions(self._db, self.http, clock)
        self._background = BackgroundSync(self, self._db, renewal_in=self._streams.renewal_in)

    # -- reads -----------------------------------------------------------------------------------------------------
    def rows(self, table: str) -> dict[str, dict[str, JsonValue]]:
        """Every live row of a user table: ``{row_id: {column: value}}`` (typed back from SQLite).

        Raises:
            LocalWriteError: an unknown table.
        """
        local = self._writes.table(table)
        with self._db.lock:
            self._db.check_open()
            result = self._db.conn.execute(local.select_sql()).fetchall()
        return {row[0]: local.from_row(row) for row in result}

    def get(self, table: str, row_id: str) -> dict[str, JsonValue] | None:
        """One live row's values, or ``None``."""
        local = self._writes.table(table)
        with self._db.lock:
            self._db.check_open()
            row = self._db.conn.execute(local.select_sql() + f" WHERE {quote('_rowId')} = ?", (row_id,)).fetchone()
        return None if row is None else local.from_row(row)

    def query(self, sql: str, params: Sequence[Any] | Mapping[str, Any] = ()) -> list[tuple[Any, ...]]:
        """Run a read-only SQL statement on the file (writes go through :meth:`insert`, :meth:`update`,
        :meth:`delete`, so they are synced). Rows as tuples.

        Raises:
            sqlite3.DatabaseError: bad SQL, or a statement that would write (``not authorized``).
        """
        with self._db.lock:
            self._db.check_open()
            self._db.conn.set_authorizer(_read_only)
            try:
                return [tuple(row) for row in self._db.conn.execute(sql, params).fetchall()]
            finally:
                self._db.conn.set_authorizer(None)

    def state(self, table: str, row_id: str) -> RowState | None:
        """The row's per-column LWW state (``None``: never seen)."""
        with self._db.lock:
            self._db.check_open()
            return self._states.get(table, row_id)

    def pending(self) -> int:
        """Local deltas not yet acknowledged by the gateway."""
        with self._db.lock:
            self._db.check_open()
            return self._outbox.pending_count()

    @property
    def cursor(self) -> str | None:
        """The pull cursor (``None`` before the first sync)."""
        return self._pull.cursor()

    # -- writes ----------------------------------------------------------------------------------------------------
    def insert(self, table: str, row_id: str, values: Mapping[str, JsonValue]) -> None:
        """Create a row (or bring back a deleted one) with these columns.

        Raises:
            LocalWriteError: bad input; RowExistsError: the row is live. Nothing is written then.
        """
        self._writes.write([(DeltaOp.INSERT, table, row_id, values)])

    def update(self, table: str, row_id: str, values: Mapping[str, JsonValue]) -> None:
        """Set columns of a live row (only the columns whose value changes are synced).

        Raises:
            LocalWriteError: bad input; RowNotFoundError: the row is not live. Nothing is written then.
        """
        self._writes.write([(DeltaOp.UPDATE, table, row_id, values)])

    def delete(self, table: str, row_id: str) -> None:
        """Delete a live row (its tombstone stays in the state, so older writes cannot bring it back).

        Raises:
            LocalWriteError: bad input; RowNotFoundError: the row is not live.
        """
        self._writes.write([(DeltaOp.DELETE, table, row_id, None)])

    def insert_many(self, table: str, rows: Mapping[str, Mapping[str, JsonValue]]) -> None:
        """Insert many rows (``{row_id: values}``) in one transaction: all or nothing.

        Raises:
            LocalWriteError: bad input; RowExistsError: a row is live. Nothing is written then.
        """
        self._writes.insert_many(table, rows)

    @contextlib.contextmanager
    def batch(self) -> Iterator[Batch]:
        """Collect writes and apply them in one transaction when the block ends without an exception::

        with store.batch() as b:
            b.insert("todos", "t1", {"title": "a"})
            b.update("todos", "t0", {"done": True})
        """
        collected = Batch()
        yield collected
        self.apply(collected)

    def apply(self, batch: Batch) -> None:
        """Apply a :class:`Batch`'s writes in one transaction: all or nothing (what :meth:`batch` does at its end).

        Raises:
            LocalWriteError, RowExistsError, RowNotFoundError: as the single writes; nothing is written then.
        """
        if batch.ops:
            self._writes.write(batch.ops)

    # -- subscriptions ---------------------------------------------------------------------------------------------
    def subscribe(self, table: str, callback: Callable[[Change], None]) -> Callable[[], None]:
        """Call ``callback(Change)`` whenever rows of ``table`` change (local writes, pulls, broadcasts); returns a
        function that unsubscribes. Callbacks run outside the store's lock; an exception in one is logged."""
        with self._db.lock:
            self._subscribers.setdefault(table, []).append(callback)

        def unsubscribe() -> None:
            with self._db.lock, contextlib.suppress(ValueError):
                self._subscribers.get(table, []).remove(callback)

        return unsubscribe

    def subscribe_stream(
        self, name: str, params: Mapping[str, str] | None = None, *, ttl: int | None = None
    ) -> StreamSubscription:
        """Subscribe to the stream ``name`` of the sync rules with ``params``, for ``ttl`` seconds (``None``: the
        stream's default) renewed while the store keeps it. Recorded at once, offline or not, and sent by the next
        sync (the background thread is woken); rows of the stream's scope then arrive through the pull. A refusal
        turns the subscription ``refused`` (:meth:`subscriptions`, ``SyncReport.refused_subscriptions``). Subscribing
        again with the same stream and parameters changes its ttl.

        Raises:
            ValueError: an empty name, a parameter that is not a non-empty string, a ttl not from 1 to 2**31-1.
        """
        held = self._streams.add(name, params, ttl)
        self._background.wake()
        return held

    def unsubscribe(self, name: str | StreamSubscription, params: Mapping[str, str] | None = None) -> bool:
        """Unsubscribe from the stream ``name`` with ``params`` (or a :class:`StreamSubscription`); the gateway is
        told at the next sync, and the rows no other subscription covers leave through the pull. False when the store
        holds no such subscription."""
        if isinstance(name, StreamSubscription):
            removed = self._streams.remove(name.stream, name.params)
        else:
            removed = self._streams.remove(name, params)
        self._background.wake()
        return removed

    def subscriptions(self) -> list[StreamSubscription]:
        """The stream subscriptions the store holds, each with its state (pending, active, refused, removing), by
        stream and parameters."""
        return self._streams.held()

    def _notify(self, changed: Mapping[str, set[str]], origin: Origin) -> None:
        for table, row_ids in changed.items():
            if not row_ids:
                continue
            with self._db.lock:
                callbacks = list(self._subscribers.get(table, ()))
            change = Change(table, frozenset(row_ids), origin)
            for callback in callbacks:
                try:
                    callback(change)
                except Exception:
                    logger.exception("subscriber of %s failed", table)

    def _written(self, changed: dict[str, set[str]]) -> None:
        """After a local write: tell subscribers, and have the background thread push it."""
        self._notify(changed, "local")
        self._background.wake()

    # -- sync ------------------------------------------------------------------------------------------------------
    def sync(self) -> SyncReport:
        """One cycle: load the checkpoint if this store never synced, push the outbox, pull to the end.

        Raises:
            OfflineError: the gateway is unreachable or unavailable (``online`` turns False); nothing is lost.
            ApiError: the gateway refused something this store cannot fix (401 after a token refresh, 403).
        """
        report = SyncReport()
        with self._sync_lock:
            try:
                if self.cursor is None:
                    self._bootstrap.load(report, again=False)
                self._push.push(report, batch=self.push_batch)
                report.refused_subscriptions = self._streams.sync()
                self._pull.pull(report, limit=self.pull_limit, on_expired=self._reload_checkpoint)
            except BaseException as exc:
                self.last_error = exc
                if _is_offline(exc):
                    self.online = False
                    raise OfflineError(f"The gateway is unavailable: {exc}") from exc
                raise
            self.online = True
            self.last_error = None
            report.cursor = self.cursor
        self._push.resolve_conflicts(report)
        self._notify(report.changed, "remote")
        _call_each(self.on_conflict, report.conflicts, "on_conflict")
        _call_each(self.on_rejected, report.rejected, "on_rejected")
        return report

    def _reload_checkpoint(self, report: SyncReport) -> None:
        self._bootstrap.load(report, again=True)

    def apply_broadcast(self, deltas: Sequence[RowDelta]) -> dict[str, set[str]]:
        """Merge deltas a real-time broadcast carried (the cursor stays: the next pull delivers them again, and merging
        them again changes nothing), notify subscribers, and return the rows that changed."""
        changed = self._pull.apply_broadcast(deltas)
        self._notify(changed, "remote")
        return changed

    # -- background ------------------------------------------------------------------------------------------------
    def start(self) -> None:
        """Sync in the background: after local writes, on an interval (or when the real-time channel says so), with
        backoff while offline. Idempotent."""
        self._background.start()

    def stop(self) -> None:
        """Stop background sync and the real-time listener, and wait for them (unless called from one of them, as a
        subscriber may: that thread ends when its callback returns)."""
        self._background.stop()

    def request_sync(self) -> None:
        """Ask the background thread for a sync cycle soon (no effect without :meth:`start`)."""
        self._background.wake()

    @property
    def realtime_connected(self) -> bool:
        """Whether the real-time channel is connected (then pulls follow broadcasts instead of the poll interval)."""
        return self._background.realtime_connected

    # -- lifecycle -------------------------------------------------------------------------------------------------
    def close(self) -> None:
        """Stop background sync and close the file. Idempotent."""
        self.stop()
        self._db.close()

    def __enter__(self) -> Self:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()


class Batch:
    """Writes collected by :meth:`LocalStore.batch`, applied together."""

    def __init__(self) -> None:
        self.ops: list[WriteOp] = []

    def insert(self, table: str, row_id: str, values: Mapping[str, JsonValue]) -> None:
        """Queue an insert."""
        self.ops.append((DeltaOp.INSERT, table, row_id, values))

    def update(self, table: str, row_id: str, values: Mapping[str, JsonValue]) -> None:
        """Queue an update."""
        self.ops.append((DeltaOp.UPDATE, table, row_id, values))

    def delete(self, table: str, row_id: str) -> None:
        """Queue a delete."""
        self.ops.append((DeltaOp.DELETE, table, row_id, None))


_READ_ACTIONS = frozenset(
    {sqlite3.SQLITE_SELECT, sqlite3.SQLITE_READ, sqlite3.SQLITE_FUNCTION, sqlite3.SQLITE_RECURSIVE}
)


def _read_only(action: int, *_args: Any) -> int:
    return sqlite3.SQLITE_OK if action in _READ_ACTIONS else sqlite3.SQLITE_DENY


def _call_each(callback: Callable[[Any], None] | None, items: Iterable[Any], name: str) -> None:
    """Hand each item to the application's ``callback``; one that fails is logged, never raised into the sync."""
    if callback is None:
        return
    for item in items:
        try:
            callback(item)
        except Exception:
            logger.exception("%s callback failed", name)


def connect(
    path: str | Path,
    *,
    url: str,
    gateway: str,
    schemas: Iterable[TableSchema | Mapping[str, Any]],
    token: str | None = None,
    get_token: Callable[[], str] | None = None,
    client_id: str | None = None,
    ws_url: str | None = None,
    **options: Any,
) -> LocalStore:
    """Open (or create) the local database at ``path`` synced with ``gateway`` at ``url``.

    Args:
        path: The SQLite file.
        url: The gateway's HTTP base URL, e.g. ``http://127.0.0.1:8787``.
        gateway: The gateway id.
        schemas: The tables to keep, as :class:`~lakesync.core.schema.TableSchema` or their JSON documents.
        token: A JWT for this client; or ``get_token``, called for the first token and again on a 401.
        get_token: See ``token``.
        client_id: Defaults to the token's ``sub``.
        ws_url: The real-time WebSocket URL; default: ``url`` with ``ws``/``wss`` + ``/v1/sync/{gateway}/ws``.
        options: More :class:`LocalStore` options (``poll_interval``, ``realtime``, ``on_conflict``, ``backoff``...).

    Raises:
        ValueError: neither ``token`` nor ``get_token``, a token without ``sub``, or a clientId the gateway refuses
            (over 256 bytes, or not valid text).
        SyncStateError: the file belongs to another client or gateway.
        ValidationError: a schema the local store cannot use.
    """
    return LocalStore(
        path,
        url=url,
        gateway=gateway,
        schemas=schemas,
        token=token,
        get_token=get_token,
        client_id=client_id,
        ws_url=ws_url,
        **options,
    )
