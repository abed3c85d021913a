"""The local-first store: a SQLite file the app reads and writes at once, synced with a gateway in the background.

Layout of the file (WAL mode):

* one user table per schema (:mod:`lakesync.client.tables`): ``_rowId`` + typed columns, what other tools read;
* ``_lakesync_state``: per row the per-column LWW state (:func:`lakesync.core.merge.state_to_json`), the source of
  truth the user row is materialised from; a deleted row keeps its tombstone, so an older write never resurrects it.
  A row written by one write delta whose values all read back exactly from their typed columns
  (:func:`lakesync.client.tables.exact_types`: a fresh bulk insert, a checkpoint row) keeps a *compact* state instead,
  ``[hlc, clientId, [columns], kinds]`` (every listed column and ``written`` at that version, no tombstone): the values
  are the user row's, read when the state is (:meth:`LocalStore._decode_state`); the first merge into the row writes
  its full state;
* ``_lakesync_base``: the compact states of rows loaded from a checkpoint into an empty store, :data:`BASE_RECORD_ROWS`
  rows an item (a range of row ids, increasing, ranges of a table apart): a row without a ``_lakesync_state`` row has
  the state its base record gives, if any; a row's own state row, written at its first change, wins. Reloading a
  checkpoint into a store with data first writes the records out as state rows;
* ``_lakesync_outbox``: the local deltas not yet acknowledged, one entry per write call with ``sent``, how many of its
  leading deltas the gateway acknowledged. An entry is a JSON array of wire deltas, or for a bulk insert
  ``{"op", "hlc", "rows": [[table, rowId, values]...]}`` (or its columnar form, see :func:`_entry_rows`), rendered to
  wire deltas at push time: the deltaId is a pure function of the stored rows, HLC and clientId, so a re-send after a
  crash carries the same deltaIds;
* ``_lakesync_meta``: clientId, gateway, the HLC's last value (the clock never goes backwards across restarts), the
  pull cursor and the checkpoint it came from;
* ``_lakesync_rejected``: local deltas the gateway refused for good (400/413/422), kept for the app to inspect.

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
import bisect
import collections
import contextlib
import http.client
import itertools
import json
import logging
import operator
import sqlite3
import threading
import time
import urllib.error
import zlib
from collections.abc import Callable, Iterable, Iterator, Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Literal, Self

from lakesync.client import _fast
from lakesync.client.backoff import Backoff
from lakesync.client.http import ApiError, SyncClient
from lakesync.client.rejections import REJECTED_STATUS, accepted_after, last_by_row, rejections, rolled_back
from lakesync.client.tables import (
    KIND_CODES,
    KINDS_BY_CODE,
    ROW_ID,
    LocalTable,
    LocalWriteError,
    RowExistsError,
    RowNotFoundError,
    bind_column,
    check_row_size,
    from_sql,
    load_tables,
    quote,
)
from lakesync.collector import collector_paused
from lakesync.core.canonical import JsonValue, stable_stringify
from lakesync.core.delta import DeltaOp, RowDelta, is_valid_client_id, make_delta
from lakesync.core.errors import ClockDriftError, LakeSyncError, ValidationError
from lakesync.core.hlc import HLC, Clock, decode, system_clock
from lakesync.core.merge import RowState, merge, state_from_json, state_to_json
from lakesync.core.schema import ColumnType, TableSchema
from lakesync.wire.checkpoint_columns import ColumnsChunk, RowsRun, decode_columns
from lakesync.wire.fast_checkpoint import CheckpointDeltas, RawDelta, decode_checkpoint_deltas, to_row_delta

logger = logging.getLogger(__name__)

SCHEMA_VERSION = 2
"""The file layout's version: 2 added ``_lakesync_base`` (a file of version 1 is upgraded when opened; a newer one is
refused)."""
BASE_RECORD_ROWS = 256
"""Rows per ``_lakesync_base`` record: small enough that reading one row's state decodes little."""
BASE_CACHE_RECORDS = 64
PUSH_BATCH = 1000
"""Most deltas per push request (the gateway takes 10,000; a smaller push keeps requests well under a Lambda's
payload limit)."""
PUSH_BATCH_BYTES = 1_000_000
PULL_LIMIT = 1000
MAX_PULL_PAGES = 10_000
"""A bound on the pages of one sync cycle (10 million deltas), so a misbehaving gateway cannot loop it forever."""

Origin = Literal["local", "remote"]


class OfflineError(LakeSyncError):
    """The gateway could not be reached, or answered that it is unavailable (5xx, 429); sync again later."""

    code = "OFFLINE"


class SyncStateError(LakeSyncError):
    """The file belongs to another client or gateway, or the gateway answered something the store cannot follow."""

    code = "SYNC_STATE"


@dataclass(frozen=True, slots=True)
class Change:
    """Rows of one table that changed, and whether the change came from this store (``local``) or a pull or
    broadcast (``remote``)."""

    table: str
    row_ids: frozenset[str]
    origin: Origin


@dataclass(frozen=True, slots=True)
class Conflict:
    """A local column write that lost at the gateway to another version, and the value that replaced it.

    Attributes:
        table: The table.
        row_id: The row.
        column: The column.
        local_value: What this store wrote.
        local_hlc: The HLC of that write.
        winner_hlc: The winning version's HLC.
        winner_client_id: The winning version's client.
        winner_value: The winning value as the local store now holds it; ``None`` also when the row was deleted or
            the winner is not visible to this client.
        deleted: The write lost to a delete of the row.
    """

    table: str
    row_id: str
    column: str
    local_value: JsonValue
    local_hlc: int
    winner_hlc: int
    winner_client_id: str
    winner_value: JsonValue = None
    deleted: bool = False


@dataclass(frozen=True, slots=True)
class Rejected:
    """A local delta the gateway refused for good (moved out of the outbox into ``_lakesync_rejected``): a push it
    failed (``status`` 400, 413, 422), or a write the gateway's write rules forbid (403, with the rule's ``code``;
    the local row was rolled back to the gateway's state)."""

    delta_id: str
    table: str
    row_id: str
    status: int
    error: str
    code: str = ""


@dataclass
class SyncReport:
    """What one :meth:`LocalStore.sync` did.

    Attributes:
        pushed: Local deltas the gateway acknowledged (accepted, duplicates included).
        duplicates: Of those, deltas it already had (a re-send after a crash).
        pulled: Remote deltas received (checkpoint rows not included), own echoes included.
        changed: Rows whose state changed through the pull, by table.
        checkpoint_rows: Rows loaded from a checkpoint (a first sync or a re-bootstrap).
        rebootstrapped: The cursor had expired and the checkpoint was loaded again.
        conflicts: Local column writes that lost.
        rejected: Local deltas the gateway refused for good.
        cursor: The cursor after the cycle.
        server_hlc: The gateway's clock at the last answer.
    """

    pushed: int = 0
    duplicates: int = 0
    pulled: int = 0
    changed: dict[str, set[str]] = field(default_factory=dict)
    checkpoint_rows: int = 0
    rebootstrapped: bool = False
    conflicts: list[Conflict] = field(default_factory=list)
    rejected: list[Rejected] = field(default_factory=list)
    cursor: str | None = None
    server_hlc: int = 0


# -- the outbox (pure part) -----------------------------------------------------------------------------------------
@dataclass(frozen=True, slots=True)
class OutboxEntry:
    """One outbox row: its sequence, its deltas' wire JSON texts, how many leading ones are acknowledged."""

    seq: int
    deltas: tuple[str, ...]
    sent: int


@dataclass(frozen=True, slots=True)
class PushPlan:
    """The next push: the deltas in outbox order and, per entry touched, its ``sent`` once they are acknowledged
    (``len(entry.deltas)`` means: remove the entry)."""

    deltas: tuple[str, ...]
    acks: tuple[tuple[int, int, bool], ...]
    """``(seq, new sent, entry done)``."""
    counts: tuple[int, ...] = ()
    """Per entry of ``acks``, how many of its deltas the plan takes."""

    def acks_of_first(self, count: int) -> tuple[tuple[int, int, bool], ...]:
        """The ``acks`` once only the plan's first ``count`` deltas are acknowledged."""
        acks = []
        for (seq, sent, done), taken in zip(self.acks, self.counts, strict=True):
            if count <= 0:
                break
            acks.append((seq, sent, done) if count >= taken else (seq, sent - taken + count, False))
            count -= taken
        return tuple(acks)


def plan_push(
    entries: Iterable[OutboxEntry], *, limit: int = PUSH_BATCH, max_bytes: int = PUSH_BATCH_BYTES
) -> PushPlan:
    """Take unacknowledged deltas from the outbox in order (by ``seq``, then position) up to ``limit`` deltas and
    about ``max_bytes`` (at least one delta)."""
    taken: list[str] = []
    acks: list[tuple[int, int, bool]] = []
    counts: list[int] = []
    size = 0
    for entry in sorted(entries, key=lambda e: e.seq):
        at = entry.sent
        while (
            at < len(entry.deltas) and len(taken) < limit and (not taken or size + len(entry.deltas[at]) <= max_bytes)
        ):
            size += len(entry.deltas[at]) + 1
            taken.append(entry.deltas[at])
            at += 1
        if at > entry.sent:
            acks.append((entry.seq, at, at == len(entry.deltas)))
            counts.append(at - entry.sent)
        if at < len(entry.deltas):
            break
    return PushPlan(tuple(taken), tuple(acks), tuple(counts))


# -- the store --------------------------------------------------------------------------------------------------------
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
_REJECT_STATUS = frozenset({400, 413, 422})
"""Answers that refuse a push for good (validation, size, schema)."""


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

        self._lock = threading.RLock()
        self._sync_lock = threading.Lock()
        self._subscribers: dict[str, list[Callable[[Change], None]]] = {}
        self._wake = threading.Event()
        self._stop = threading.Event()
        self._thread: threading.Thread | None = None
        self._listener: Any = None
        self._closed = False
        self._shapes: dict[tuple[str, tuple[str, ...]], str] = {}
        self._base_cache: collections.OrderedDict[tuple[str, str], _BaseRecord] = collections.OrderedDict()
        self._has_base = False
        """Whether ``_lakesync_base`` may hold records (when not, a missing state row is not looked up there)."""
        self._wires: dict[int, tuple[str, ...]] = {}
        self._db = sqlite3.connect(str(path), check_same_thread=False, isolation_level=None, timeout=30.0)
        try:
            self._open_file()
            self._has_base = self._probe_base()
            wall, counter = decode(int(self._meta("hlc") or "0"))
            self._clock = HLC(clock, wall=wall, counter=counter)
        except BaseException:
            self._db.close()
            raise

    # -- file ------------------------------------------------------------------------------------------------------
    def _open_file(self) -> None:
        db = self._db
        db.execute("PRAGMA journal_mode=WAL")
        db.execute("PRAGMA synchronous=NORMAL")  # WAL + NORMAL: durable across app crashes, atomic across power cuts
        with self._tx():
            db.execute("CREATE TABLE IF NOT EXISTS _lakesync_meta (key TEXT PRIMARY KEY, value TEXT NOT NULL)")
            db.execute(
                "CREATE TABLE IF NOT EXISTS _lakesync_state (tbl TEXT NOT NULL, row_id TEXT NOT NULL, "
                "state TEXT NOT NULL, PRIMARY KEY (tbl, row_id)) WITHOUT ROWID"
            )
            db.execute(
                "CREATE TABLE IF NOT EXISTS _lakesync_base (tbl TEXT NOT NULL, first_id TEXT NOT NULL, "
                "last_id TEXT NOT NULL, shape TEXT NOT NULL, ids TEXT NOT NULL, hlcs TEXT NOT NULL, "
                "clients TEXT NOT NULL, PRIMARY KEY (tbl, first_id)) WITHOUT ROWID"
            )
            db.execute(
                "CREATE TABLE IF NOT EXISTS _lakesync_outbox (seq INTEGER PRIMARY KEY AUTOINCREMENT, "
                "deltas TEXT NOT NULL, sent INTEGER NOT NULL DEFAULT 0)"
            )
            db.execute(
                "CREATE TABLE IF NOT EXISTS _lakesync_rejected (seq INTEGER PRIMARY KEY AUTOINCREMENT, "
                "delta_id TEXT NOT NULL, delta TEXT NOT NULL, status INTEGER NOT NULL, error TEXT NOT NULL, "
                "at_ms INTEGER NOT NULL)"
            )
            for key, value in (("clientId", self.client_id), ("gateway", self.gateway)):
                stored = self._meta(key)
                if stored is None:
                    self._set_meta(key, value)
                elif stored != value:
                    raise SyncStateError(f"This file belongs to {key} {stored!r}, not {value!r}")
            version = self._meta("version")
            if version is not None and (not version.isdigit() or int(version) > SCHEMA_VERSION):
                raise SyncStateError(f"This file has layout version {version}: a newer SDK wrote it")
            if version != str(SCHEMA_VERSION):
                self._set_meta("version", str(SCHEMA_VERSION))
            for table in self.tables.values():
                self._ensure_table(table)

    def _ensure_table(self, table: LocalTable) -> None:
        """Create the user table, add the columns a newer schema has, or make it again when a column's type changed;
        rows are then rewritten from their state."""
        db = self._db
        declared = {row[1].lower(): str(row[2]) for row in db.execute(f"PRAGMA table_info({quote(table.name)})")}
        existing = list(declared)
        if any(declared.get(c.lower(), table.affinity(c)) != table.affinity(c) for c in table.columns):
            self._remake_table(table)
            return
        if not existing:
            db.execute(table.create_sql())
        else:
            missing = [c for c in table.columns if c.lower() not in {e.lower() for e in existing}]
            for column in missing:
                db.execute(table.add_column_sql(column))
            if not missing:
                return
        # A new table or new columns: the state may already hold values for them (pulled before the schema was known).
        rows = db.execute("SELECT row_id, state FROM _lakesync_state WHERE tbl = ?", (table.name,)).fetchall()
        for row_id, text in rows:
            self._materialise(table.name, self._decode_state(table.name, row_id, text))

    def _remake_table(self, table: LocalTable) -> None:
        """A column's type changed: its affinity would keep converting what is written (a number stored in a TEXT
        column reads back as a string), so the table is made again and every row rewritten from its full state
        (compact states, which read their values from the user row, are expanded while the old table is there)."""
        db = self._db
        self._expand_base()
        rows = db.execute("SELECT row_id, state FROM _lakesync_state WHERE tbl = ?", (table.name,)).fetchall()
        states = [self._decode_state(table.name, row_id, text) for row_id, text in rows]
        db.execute(f"DROP TABLE {quote(table.name)}")
        db.execute(table.create_sql())
        for state in states:
            self._put_state(state)

    @contextlib.contextmanager
    def _tx(self) -> Iterator[sqlite3.Connection]:
        """One SQLite transaction (``BEGIN IMMEDIATE``) under the store's lock; rolled back on any exception."""
        with self._lock:
            self._check_open()
            self._db.execute("BEGIN IMMEDIATE")
            try:
                yield self._db
            except BaseException:
                self._db.execute("ROLLBACK")
                self._base_cache.clear()
                self._has_base = self._probe_base()
                raise
            self._db.execute("COMMIT")

    def _check_open(self) -> None:
        if self._closed:
            raise SyncStateError("The store is closed")

    def _meta(self, key: str) -> str | None:
        row = self._db.execute("SELECT value FROM _lakesync_meta WHERE key = ?", (key,)).fetchone()
        return None if row is None else str(row[0])

    def _set_meta(self, key: str, value: str) -> None:
        self._db.execute("INSERT OR REPLACE INTO _lakesync_meta (key, value) VALUES (?, ?)", (key, value))

    def _delete_meta(self, key: str) -> None:
        self._db.execute("DELETE FROM _lakesync_meta WHERE key = ?", (key,))

    def _save_clock(self) -> None:
        wall, counter = self._clock.state
        self._set_meta("hlc", str((wall << 16) | counter))

    def _state(self, table: str, row_id: str) -> RowState | None:
        row = self._db.execute(
            "SELECT state FROM _lakesync_state WHERE tbl = ? AND row_id = ?", (table, row_id)
        ).fetchone()
        if row is not None:
            return self._decode_state(table, row_id, row[0])
        text = self._base_state(table, row_id) if self._has_base else None
        return None if text is None else self._decode_state(table, row_id, text)

    # -- base records: the compact states of a checkpoint's rows, many rows an item ---------------------------------
    def _probe_base(self) -> bool:
        """Whether ``_lakesync_base`` holds a record (False while the file has no such table yet)."""
        try:
            return self._db.execute("SELECT 1 FROM _lakesync_base LIMIT 1").fetchone() is not None
        except sqlite3.OperationalError:
            return False

    def _base_record(self, table: str, row_id: str) -> _BaseRecord | None:
        """The base record whose range holds ``row_id`` (ranges of a table never overlap), if any."""
        got = self._db.execute(
            "SELECT first_id, last_id, shape, ids, hlcs, clients FROM _lakesync_base "
            "WHERE tbl = ? AND first_id <= ? ORDER BY first_id DESC LIMIT 1",
            (table, row_id),
        ).fetchone()
        if got is None or row_id > got[1]:
            return None
        key = (table, got[0])
        record = self._base_cache.get(key)
        if record is None:
            record = _BaseRecord(got[2], json.loads(got[3]), json.loads(got[4]), json.loads(got[5]))
            self._base_cache[key] = record
            if len(self._base_cache) > BASE_CACHE_RECORDS:
                self._base_cache.popitem(last=False)
        else:
            self._base_cache.move_to_end(key)
        return record

    def _base_state(self, table: str, row_id: str) -> str | None:
        """The compact state text of a row that only a base record holds (no ``_lakesync_state`` row)."""
        record = self._base_record(table, row_id)
        return None if record is None else record.state(row_id)

    def _base_holds_any(self, table: str, row_ids: Iterable[str]) -> bool:
        """Whether a base record holds any of ``row_ids``."""
        if not self._has_base:
            return False
        ranges = self._db.execute(
            "SELECT first_id, last_id FROM _lakesync_base WHERE tbl = ? ORDER BY first_id", (table,)
        ).fetchall()
        if not ranges:
            return False
        firsts = [r[0] for r in ranges]
        for row_id in row_ids:
            at = bisect.bisect_right(firsts, row_id) - 1
            if at >= 0 and row_id <= ranges[at][1] and self._base_state(table, row_id) is not None:
                return True
        return False

    def _write_base(
        self, table: str, shape: str, row_ids: Sequence[str], clients: Sequence[str], hlcs: Sequence[int]
    ) -> bool:
        """Compact states of new rows as base records, when their ids are strictly increasing and no record of
        ``table`` overlaps them; False (nothing written) otherwise."""
        if any(map(operator.ge, row_ids, row_ids[1:])):
            return False
        overlap = self._db.execute(
            "SELECT 1 FROM _lakesync_base WHERE tbl = ? AND first_id <= ? AND last_id >= ? LIMIT 1",
            (table, row_ids[-1], row_ids[0]),
        ).fetchone()
        if overlap is not None:
            return False
        records = []
        same_client = len(set(clients)) == 1
        for at in range(0, len(row_ids), BASE_RECORD_ROWS):
            ids = row_ids[at : at + BASE_RECORD_ROWS]
            who = clients[at] if same_client else list(clients[at : at + BASE_RECORD_ROWS])
            records.append(
                (
                    table,
                    ids[0],
                    ids[-1],
                    shape,
                    _dumps_ids(list(ids)),
                    _dumps_ids(list(hlcs[at : at + BASE_RECORD_ROWS])),
                    _dumps_ids(who),
                )
            )
        self._db.executemany(
            "INSERT INTO _lakesync_base (tbl, first_id, last_id, shape, ids, hlcs, clients) "
            "VALUES (?, ?, ?, ?, ?, ?, ?)",
            records,
        )
        self._has_base = True  # stays set if the transaction rolls back: a few needless look-ups, nothing wrong
        return True

    def _expand_base(self) -> None:
        """Every base record written out as ``_lakesync_state`` rows (a row's own state row wins), then dropped."""
        for table, shape, ids, hlcs, clients in self._db.execute(
            "SELECT tbl, shape, ids, hlcs, clients FROM _lakesync_base"
        ).fetchall():
            record = _BaseRecord(shape, json.loads(ids), json.loads(hlcs), json.loads(clients))
            self._db.executemany(
                "INSERT OR IGNORE INTO _lakesync_state (tbl, row_id, state) VALUES (?, ?, ?)",
                ((table, row_id, record.state_at(i)) for i, row_id in enumerate(record.ids)),
            )
        self._db.execute("DELETE FROM _lakesync_base")
        self._base_cache.clear()
        self._has_base = False

    def _decode_state(self, table: str, row_id: str, text: str) -> RowState:
        """A stored state: the full JSON, or a compact state completed with the values of the user row."""
        data = json.loads(text)
        if isinstance(data, dict):
            return state_from_json(table, row_id, data, trusted=True)
        hlc, client_id, names, kinds = data
        values: Sequence[Any] = ()
        if names:
            select = ", ".join(quote(n) for n in names)
            got = self._db.execute(
                f"SELECT {select} FROM {quote(table)} WHERE {quote(ROW_ID)} = ?", (row_id,)
            ).fetchone()
            if got is None:
                raise SyncStateError(f"Row {table}:{row_id} has a compact state but no row in its table")
            values = got
        version = [hlc, client_id]
        columns = {
            name: [from_sql(KINDS_BY_CODE[code], value), hlc, client_id]
            for name, code, value in zip(names, kinds, values, strict=True)
        }
        return state_from_json(table, row_id, {"c": columns, "t": None, "w": version}, trusted=True)

    def _put_state(self, state: RowState) -> None:
        self._db.execute(
            "INSERT OR REPLACE INTO _lakesync_state (tbl, row_id, state) VALUES (?, ?, ?)",
            (state.table, state.row_id, _fast.encode_state(state_to_json(state))),
        )
        self._materialise(state.table, state)

    def _materialise(self, table_name: str, state: RowState) -> None:
        table = self.tables.get(table_name)
        if table is None:
            return  # no schema: kept in the state only (materialised if a schema arrives)
        values = state.values()
        if values is None:
            self._db.execute(table.delete_sql(), (state.row_id,))
        else:
            self._db.execute(table.upsert_sql(), table.row_params(state.row_id, values))

    # -- reads -----------------------------------------------------------------------------------------------------
    def rows(self, table: str) -> dict[str, dict[str, JsonValue]]:
        """Every live row of a user table: ``{row_id: {column: value}}`` (typed back from SQLite).

        Raises:
            LocalWriteError: an unknown table.
        """
        local = self._table(table)
        with self._lock:
            self._check_open()
            result = self._db.execute(local.select_sql()).fetchall()
        return {row[0]: local.from_row(row) for row in result}

    def get(self, table: str, row_id: str) -> dict[str, JsonValue] | None:
        """One live row's values, or ``None``."""
        local = self._table(table)
        with self._lock:
            self._check_open()
            row = self._db.execute(local.select_sql() + f" WHERE {quote('_rowId')} = ?", (row_id,)).fetchone()
        return None if row is None else local.from_row(row)

    def query(self, sql: str, params: Sequence[Any] | Mapping[str, Any] = ()) -> list[tuple[Any, ...]]:
        """Run a read-only SQL statement on the file (writes go through :meth:`insert`, :meth:`update`,
        :meth:`delete`, so they are synced). Rows as tuples.

        Raises:
            sqlite3.DatabaseError: bad SQL, or a statement that would write (``not authorized``).
        """
        with self._lock:
            self._check_open()
            self._db.set_authorizer(_read_only)
            try:
                return [tuple(row) for row in self._db.execute(sql, params).fetchall()]
            finally:
                self._db.set_authorizer(None)

    def state(self, table: str, row_id: str) -> RowState | None:
        """The row's per-column LWW state (``None``: never seen)."""
        with self._lock:
            self._check_open()
            return self._state(table, row_id)

    def pending(self) -> int:
        """Local deltas not yet acknowledged by the gateway."""
        with self._lock:
            self._check_open()
            total = 0
            for text, sent in self._db.execute("SELECT deltas, sent FROM _lakesync_outbox"):
                total += len(_entry_keys(text)) - sent
            return total

    @property
    def cursor(self) -> str | None:
        """The pull cursor (``None`` before the first sync)."""
        with self._lock:
            self._check_open()
            return self._meta("cursor")

    def _table(self, table: str) -> LocalTable:
        local = self.tables.get(table)
        if local is None:
            raise LocalWriteError(f'Unknown table "{table}" (known: {", ".join(sorted(self.tables)) or "none"})')
        return local

    # -- writes ----------------------------------------------------------------------------------------------------
    def insert(self, table: str, row_id: str, values: Mapping[str, JsonValue]) -> None:
        """Create a row (or bring back a deleted one) with these columns.

        Raises:
            LocalWriteError: bad input; RowExistsError: the row is live. Nothing is written then.
        """
        self._write([(DeltaOp.INSERT, table, row_id, values)])

    def update(self, table: str, row_id: str, values: Mapping[str, JsonValue]) -> None:
        """Set columns of a live row (only the columns whose value changes are synced).

        Raises:
            LocalWriteError: bad input; RowNotFoundError: the row is not live. Nothing is written then.
        """
        self._write([(DeltaOp.UPDATE, table, row_id, values)])

    def delete(self, table: str, row_id: str) -> None:
        """Delete a live row (its tombstone stays in the state, so older writes cannot bring it back).

        Raises:
            LocalWriteError: bad input; RowNotFoundError: the row is not live.
        """
        self._write([(DeltaOp.DELETE, table, row_id, None)])

    def insert_many(self, table: str, rows: Mapping[str, Mapping[str, JsonValue]]) -> None:
        """Insert many rows (``{row_id: values}``) in one transaction: all or nothing.

        Raises:
            LocalWriteError: bad input; RowExistsError: a row is live. Nothing is written then.
        """
        if len(rows) < 2:
            self._write([(DeltaOp.INSERT, table, row_id, values) for row_id, values in rows.items()])
            return
        local = self._table(table)
        gateway = self.gateway
        with collector_paused():
            prepared = [local.prepare_insert(gateway, row_id, values or {}) for row_id, values in rows.items()]
            items = list(zip(itertools.repeat(table), rows.keys(), rows.values(), strict=False))
            self._write_fresh(items, prepared, {table: set(rows)})

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
            self._write(batch.ops)

    def _write(self, ops: Sequence[tuple[DeltaOp, str, str, Mapping[str, JsonValue] | None]]) -> None:
        if (
            len(ops) > 1
            and all(op is DeltaOp.INSERT for op, *_ in ops)
            and len({(t, r) for _, t, r, _ in ops}) == len(ops)
        ):
            # Checked and bound in one pass per row (the rows are kept for the bulk insert).
            prepared = [self._table(t).prepare_insert(self.gateway, r, v or {}) for _, t, r, v in ops]
            changed: dict[str, set[str]] = {}
            for _, table, row_id, _ in ops:
                changed.setdefault(table, set()).add(row_id)
            self._write_fresh([(t, r, v or {}) for _, t, r, v in ops], prepared, changed)
            return
        for _op, table, row_id, values in ops:
            self._table(table).check_write(self.gateway, row_id, values)
        with self._tx():
            self._write_general(ops)
            self._save_clock()
        changed = {}
        for _, table, row_id, _ in ops:
            changed.setdefault(table, set()).add(row_id)
        self._notify(changed, "local")
        self._wake.set()

    def _write_fresh(
        self,
        items: Sequence[tuple[str, str, Mapping[str, JsonValue]]],
        prepared: Sequence[tuple[tuple[Any, ...], int]],
        changed: dict[str, set[str]],
    ) -> None:
        """Checked INSERTs of distinct rows: in bulk when none has a state, else through the general path."""
        with self._tx():
            self._db.execute("SAVEPOINT fast_insert")
            try:
                self._insert_fresh(items, prepared)
                self._db.execute("RELEASE fast_insert")
            except sqlite3.IntegrityError:
                # Some row already has a state (live, or deleted): the general path decides per row.
                self._db.execute("ROLLBACK TO fast_insert")
                self._db.execute("RELEASE fast_insert")
                self._write_general([(DeltaOp.INSERT, t, r, v) for t, r, v in items])
            self._save_clock()
        self._notify(changed, "local")
        self._wake.set()

    def _insert_fresh(
        self,
        items: Sequence[tuple[str, str, Mapping[str, JsonValue]]],
        prepared: Sequence[tuple[tuple[Any, ...], int]],
    ) -> None:
        """Bulk INSERTs of rows with no state at all: states, user rows and one outbox entry. Raises IntegrityError if
        any row has a state.

        A row whose values are exact gets a compact state (its values are the user row's, see :meth:`_decode_state`);
        the outbox entry keeps the rows (``{"op", "hlc", "rows": [[table, rowId, values]...]}``) and their wire JSON
        and deltaIds are derived from it at push time (:func:`lakesync.client._fast.insert_delta`, deterministic: a
        re-send carries the same deltaIds)."""
        hlc = self._clock.now()  # one event: every row of the batch carries this stamp (rows are distinct)
        by_table: dict[str, list[str]] = {}
        for table, row_id, _values in items:
            by_table.setdefault(table, []).append(row_id)
        if any(self._base_holds_any(table, ids) for table, ids in by_table.items()):
            raise sqlite3.IntegrityError("a row of the batch has a base state")  # as the state insert below would
        client_json = _fast.json_text(self.client_id)
        states = []
        users: dict[str, list[tuple[Any, ...]]] = {}
        texts: dict[tuple[str, int], str] = {}
        shapes = []
        for (table, row_id, values), (params, shape) in zip(items, prepared, strict=True):
            shapes.append(shape)
            if shape >= 0:
                text = texts.get((table, shape))
                if text is None:
                    local = self.tables[table]
                    compact = self._shape_json(local, local.shape_columns(shape))
                    text = texts[(table, shape)] = f'["{hlc}",{client_json},{compact}]'
            else:
                given = dict(values or {})
                _wire, _did, pairs = _fast.insert_delta("INSERT", table, row_id, self.client_id, hlc, given)
                text = _fast.write_state_json(pairs, hlc, client_json)
            states.append((table, row_id, text))
            rows = users.get(table)
            if rows is None:
                rows = users[table] = []
            rows.append(params)
        db = self._db
        db.executemany("INSERT INTO _lakesync_state (tbl, row_id, state) VALUES (?, ?, ?)", states)
        for table, table_rows in users.items():
            db.executemany(self.tables[table].upsert_sql(), table_rows)
        if len(users) == 1 and min(shapes) >= 0:
            # Every row exact, one table: the rows are kept as their user-row parameters (a third of the JSON work).
            ((table, table_rows),) = users.items()
            local = self.tables[table]
            columns = [[c, local.types[c].value] for c in local.columns]
            entry = {"op": "INSERT", "hlc": str(hlc), "table": table, "columns": columns, "shapes": shapes}
            entry["params"] = table_rows
        else:
            entry = {"op": "INSERT", "hlc": str(hlc), "rows": items}
        db.execute("INSERT INTO _lakesync_outbox (deltas) VALUES (?)", (_encode_entry(entry),))

    def _write_general(self, ops: Sequence[tuple[DeltaOp, str, str, Mapping[str, JsonValue] | None]]) -> None:
        wires: list[str] = []
        states: dict[tuple[str, str], RowState | None] = {}
        for op, table, row_id, values in ops:
            key = (table, row_id)
            state = states[key] if key in states else self._state(table, row_id)
            live = state.values() if state is not None else None
            if op is DeltaOp.INSERT and live is not None:
                raise RowExistsError(f"Row {table}:{row_id} exists; update it instead")
            if op is not DeltaOp.INSERT and live is None:
                raise RowNotFoundError(f"Row {table}:{row_id} does not exist")
            columns: dict[str, JsonValue] = dict(values or {})
            if op is DeltaOp.UPDATE:
                assert live is not None
                columns = {
                    k: v
                    for k, v in columns.items()
                    if k not in live or stable_stringify(live[k]) != stable_stringify(v)
                }
                if not columns:
                    continue
            delta = make_delta(
                op, table=table, row_id=row_id, client_id=self.client_id, hlc=self._clock.now(), columns=columns
            )
            result = merge(state, delta)
            if op is not DeltaOp.DELETE:
                check_row_size(table, row_id, result.state.values())  # as the gateway checks the merged row
            states[key] = result.state
            if result.changed:
                self._put_state(result.state)
            wires.append(_fast.encode_state(delta.to_json()))
        if wires:
            self._db.execute("INSERT INTO _lakesync_outbox (deltas) VALUES (?)", ("[" + ",".join(wires) + "]",))

    # -- subscriptions ---------------------------------------------------------------------------------------------
    def subscribe(self, table: str, callback: Callable[[Change], None]) -> Callable[[], None]:
        """Call ``callback(Change)`` whenever rows of ``table`` change (local writes, pulls, broadcasts); returns a
        function that unsubscribes. Callbacks run outside the store's lock; an exception in one is logged."""
        with self._lock:
            self._subscribers.setdefault(table, []).append(callback)

        def unsubscribe() -> None:
            with self._lock, contextlib.suppress(ValueError):
                self._subscribers.get(table, []).remove(callback)

        return unsubscribe

    def _notify(self, changed: Mapping[str, set[str]], origin: Origin) -> None:
        for table, row_ids in changed.items():
            if not row_ids:
                continue
            with self._lock:
                callbacks = list(self._subscribers.get(table, ()))
            change = Change(table, frozenset(row_ids), origin)
            for callback in callbacks:
                try:
                    callback(change)
                except Exception:
                    logger.exception("subscriber of %s failed", table)

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
                    self._bootstrap(report, again=False)
                self._push(report)
                self._pull(report)
            except BaseException as exc:
                self.last_error = exc
                if _is_offline(exc):
                    self.online = False
                    raise OfflineError(f"The gateway is unavailable: {exc}") from exc
                raise
            self.online = True
            self.last_error = None
            report.cursor = self.cursor
        self._resolve_conflicts(report)
        self._notify(report.changed, "remote")
        _call_each(self.on_conflict, report.conflicts, "on_conflict")
        _call_each(self.on_rejected, report.rejected, "on_rejected")
        return report

    # push
    def _outbox(self) -> list[OutboxEntry]:
        """The first outbox entries with their deltas' wire JSON (rendered once per entry and cached by ``seq``: an
        entry never changes once written, and ``seq`` is never reused)."""
        entries = []
        rows = self._db.execute(
            "SELECT seq, deltas, sent FROM _lakesync_outbox ORDER BY seq LIMIT ?", (self.push_batch,)
        )
        for seq, text, sent in rows.fetchall():
            wires = self._wires.get(seq)
            if wires is None:
                wires = self._wires[seq] = tuple(_entry_wires(text, self.client_id))
            entries.append(OutboxEntry(seq, wires, sent))
        return entries

    def _push(self, report: SyncReport) -> None:
        try:
            self._push_all(report)
        finally:
            with self._lock:
                self._wires.clear()

    def _push_all(self, report: SyncReport) -> None:
        while True:
            with self._lock:
                self._check_open()
                plan = plan_push(self._outbox(), limit=self.push_batch)
            if not plan.deltas:
                return
            try:
                with _unreadable_answer("push"):
                    answer = self.http.push_wire(plan.deltas, self._clock.now())
            except ApiError as exc:
                if exc.status not in _REJECT_STATUS:
                    raise
                self._push_singly(plan, report)
                continue
            accepted, receipts = _push_answer(answer, plan.deltas)
            self._receive_hlc(answer.get("serverHlc"))
            self._collect_receipts(plan.deltas, receipts, report)
            report.pushed += accepted
            self._settle(plan.acks, plan.deltas, receipts, report)

    def _ack(self, acks: Sequence[tuple[int, int, bool]]) -> None:
        """Drop acknowledged deltas from the outbox (only after the gateway's answer; a crash before this re-sends
        them, harmlessly)."""
        with self._tx():
            self._advance(acks)

    def _advance(self, acks: Sequence[tuple[int, int, bool]]) -> None:
        """:meth:`_ack`'s writes, inside a transaction."""
        db = self._db
        for seq, sent, done in acks:
            if done:
                db.execute("DELETE FROM _lakesync_outbox WHERE seq = ?", (seq,))
            else:
                db.execute("UPDATE _lakesync_outbox SET sent = ? WHERE seq = ? AND sent < ?", (sent, seq, sent))
        self._save_clock()

    def _push_singly(self, plan: PushPlan, report: SyncReport) -> None:
        """A push was refused for good: send its deltas one by one; each is taken out of the outbox once answered, a
        refused one moved to ``_lakesync_rejected`` in the same transaction (so an interruption never records it
        twice, nor sends it again)."""
        for index, wire in enumerate(plan.deltas):
            try:
                with _unreadable_answer("push"):
                    answer = self.http.push_wire([wire], self._clock.now())
            except ApiError as exc:
                if exc.status not in _REJECT_STATUS:
                    raise
                doc = json.loads(wire)
                report.rejected.append(Rejected(doc["deltaId"], doc["table"], doc["rowId"], exc.status, str(exc)))
                with self._tx() as db:
                    db.execute(
                        "INSERT INTO _lakesync_rejected (delta_id, delta, status, error, at_ms) VALUES (?, ?, ?, ?, ?)",
                        (doc["deltaId"], wire, exc.status, str(exc), int(time.time() * 1000)),
                    )
                    self._advance(plan.acks_of_first(index + 1))
                logger.warning("the gateway refused local delta %s: %s", doc["deltaId"], exc)
                continue
            accepted, receipts = _push_answer(answer, [wire])
            self._collect_receipts([wire], receipts, report)
            report.pushed += accepted
            self._settle(plan.acks_of_first(index + 1), [wire], receipts, report)

    def _settle(
        self,
        acks: Sequence[tuple[int, int, bool]],
        wires: Sequence[str],
        receipts: Sequence[Mapping[str, Any]],
        report: SyncReport,
    ) -> None:
        """Drop the answered deltas from the outbox; in the same transaction, record the ones the write rules
        rejected in ``_lakesync_rejected`` and roll their rows back to the gateway's state
        (:mod:`lakesync.client.rejections`), so an interruption never leaves a rejected write in place."""
        found = rejections(wires, receipts)
        if not found:
            self._ack(acks)
            return
        last = last_by_row(found)
        later = accepted_after(last, wires, receipts)
        at_ms = int(time.time() * 1000)
        with self._tx() as db:
            self._advance(acks)
            db.executemany(
                "INSERT INTO _lakesync_rejected (delta_id, delta, status, error, at_ms) VALUES (?, ?, ?, ?, ?)",
                [(r.delta_id, r.wire, REJECTED_STATUS, r.error, at_ms) for r in found],
            )
            pending = self._pending_deltas(set(last))
            for key, rejection in last.items():
                self._put_state(rolled_back(key[0], key[1], rejection.row, [*later[key], *pending.get(key, ())]))
                report.changed.setdefault(key[0], set()).add(key[1])
        for r in found:
            report.rejected.append(Rejected(r.delta_id, r.table, r.row_id, REJECTED_STATUS, r.error, r.code))
            logger.warning("the gateway's write rules rejected local delta %s: %s", r.delta_id, r.error)

    def _pending_deltas(self, rows: set[tuple[str, str]]) -> dict[tuple[str, str], list[RowDelta]]:
        """The outbox's unsent deltas of ``rows``, in order (inside a transaction)."""
        found: dict[tuple[str, str], list[RowDelta]] = {}
        for text, sent in self._db.execute("SELECT deltas, sent FROM _lakesync_outbox ORDER BY seq").fetchall():
            for wire in _entry_wires(text, self.client_id)[sent:]:
                delta = RowDelta.from_json(json.loads(wire))
                if (delta.table, delta.row_id) in rows:
                    found.setdefault((delta.table, delta.row_id), []).append(delta)
        return found

    def _collect_receipts(
        self, wires: Sequence[str], receipts: Sequence[Mapping[str, Any]], report: SyncReport
    ) -> None:
        lost = [
            r for r in receipts if not r.get("duplicate") and any(not c.get("applied") for c in r.get("columns", ()))
        ]
        report.duplicates += sum(1 for r in receipts if r.get("duplicate"))
        if not lost:
            return
        by_id = {}
        for wire in wires:
            doc = json.loads(wire)
            by_id[doc["deltaId"]] = doc
        for receipt in lost:
            doc = by_id.get(receipt.get("deltaId", ""))
            if doc is None:
                continue
            values = {c["column"]: c["value"] for c in doc["columns"]}
            for col in receipt["columns"]:
                if col.get("applied"):
                    continue
                report.conflicts.append(
                    Conflict(
                        table=doc["table"],
                        row_id=doc["rowId"],
                        column=col["column"],
                        local_value=values.get(col["column"]),
                        local_hlc=int(doc["hlc"]),
                        winner_hlc=int(col["winnerHlc"]),
                        winner_client_id=str(col["winnerClientId"]),
                        deleted=bool(receipt.get("deleted")),
                    )
                )

    def _resolve_conflicts(self, report: SyncReport) -> None:
        """Fill in each conflict's winning value from the state (the pull after the push delivered it)."""
        if not report.conflicts:
            return
        resolved = []
        with self._lock:
            for conflict in report.conflicts:
                state = self._state(conflict.table, conflict.row_id)
                column = None if state is None else state.columns.get(conflict.column)
                won = column is not None and (column.hlc, column.client_id) == (
                    conflict.winner_hlc,
                    conflict.winner_client_id,
                )
                deleted = conflict.deleted or (state is not None and not state.exists)
                resolved.append(
                    Conflict(
                        **{
                            **{f: getattr(conflict, f) for f in conflict.__dataclass_fields__},
                            "winner_value": column.value if won and column is not None else None,
                            "deleted": deleted,
                        }
                    )
                )
        report.conflicts[:] = resolved

    # pull
    def _pull(self, report: SyncReport) -> None:
        expired_once = False
        for _ in range(MAX_PULL_PAGES):
            cursor = self.cursor
            try:
                with _unreadable_answer("pull"):
                    answer = self.http.pull(cursor=cursor or "", limit=self.pull_limit)
            except ApiError as exc:
                if exc.status != 410 or expired_once:
                    raise
                expired_once = True
                logger.warning("pull cursor expired (%s); reloading the checkpoint", exc)
                self._bootstrap(report, again=True)
                continue
            page = _pull_page(answer)
            self._apply_page(page.deltas, page.cursor, page.server_hlc, report)
            if not page.has_more:
                return
        raise SyncStateError(f"The pull did not end after {MAX_PULL_PAGES} pages")

    def _apply_page(self, deltas: Sequence[RowDelta], cursor: str | None, server_hlc: Any, report: SyncReport) -> None:
        """Merge one page and move the cursor, in one transaction."""
        if cursor is None:
            raise SyncStateError("The gateway's pull answer has no cursor")
        self._receive_hlc(server_hlc)
        with self._tx():
            changed = self._merge_remote(deltas)
            self._set_meta("cursor", cursor)
            self._save_clock()
        report.pulled += len(deltas)
        for table, rows in changed.items():
            report.changed.setdefault(table, set()).update(rows)
        if isinstance(server_hlc, str) and server_hlc.isdigit():
            report.server_hlc = int(server_hlc)

    def _merge_remote(self, deltas: Iterable[RowDelta]) -> dict[str, set[str]]:
        """Merge remote deltas into the states and user rows (inside a transaction); the rows that changed."""
        states: dict[tuple[str, str], RowState | None] = {}
        dirty: dict[tuple[str, str], RowState] = {}
        newest = 0
        for delta in deltas:
            key = (delta.table, delta.row_id)
            state = states[key] if key in states else self._state(*key)
            result = merge(state, delta)
            states[key] = result.state
            if result.changed:
                dirty[key] = result.state
            newest = max(newest, delta.hlc)
        for state in dirty.values():
            self._put_state(state)
        if newest:
            # Local writes must order after everything seen here (a remote clock far ahead is not followed).
            with contextlib.suppress(ClockDriftError):
                self._clock.recv(newest)
        changed: dict[str, set[str]] = {}
        for table, row_id in dirty:
            changed.setdefault(table, set()).add(row_id)
        return changed

    def apply_broadcast(self, deltas: Sequence[RowDelta]) -> dict[str, set[str]]:
        """Merge deltas a real-time broadcast carried (the cursor stays: the next pull delivers them again, and merging
        them again changes nothing), notify subscribers, and return the rows that changed."""
        with self._tx():
            changed = self._merge_remote(deltas)
            self._save_clock()
        self._notify(changed, "remote")
        return changed

    def _receive_hlc(self, server_hlc: Any) -> None:
        if isinstance(server_hlc, str) and server_hlc.isdigit():
            with contextlib.suppress(ClockDriftError):
                self._clock.recv(int(server_hlc))

    # checkpoint
    def _bootstrap(self, report: SyncReport, *, again: bool) -> None:
        """Load the latest checkpoint and take its cursor; without one, pull from the beginning."""
        with _unreadable_answer("checkpoint"):
            stream = self.http.checkpoint_stream(columns=True)
        if stream is None:
            with self._tx():
                self._set_meta("cursor", "")
            return
        if stream.cursor is None:
            raise SyncStateError("The checkpoint came without X-Checkpoint-Cursor")
        with collector_paused(), _unreadable_answer("checkpoint"):
            parts = _decoded_parts(stream.frames, stream.columnar)
        self._receive_hlc(str(stream.server_hlc))
        with self._tx() as db, collector_paused():
            empty = (
                db.execute("SELECT 1 FROM _lakesync_state LIMIT 1").fetchone() is None
                and db.execute("SELECT 1 FROM _lakesync_base LIMIT 1").fetchone() is None
            )
            if empty:
                changed: dict[str, set[str]] = {}
                for part in parts:
                    if isinstance(part, ColumnsChunk):
                        self._load_checkpoint_columns(part, changed)
                    else:
                        for table, ids in self._load_checkpoint_bulk(part).items():
                            changed.setdefault(table, set()).update(ids)
            else:
                changed = self._merge_checkpoint([row for part in parts for row in part.rows()])
            self._set_meta("cursor", stream.cursor)
            self._set_meta("checkpointId", stream.checkpoint_id or "")
            self._save_clock()
        for table, ids in changed.items():
            if table in report.changed:
                report.changed[table].update(ids)
            else:
                report.changed[table] = ids
        report.checkpoint_rows += sum(part.row_count() for part in parts)
        report.rebootstrapped = report.rebootstrapped or again

    def _load_checkpoint_columns(self, chunk: ColumnsChunk, changed: dict[str, set[str]]) -> None:
        """An empty store: a columnar document's rows written as :meth:`_load_checkpoint_bulk` writes them (rows runs
        column-wise with compact states when their values are exact, every other row with its full state); the rows
        are added to ``changed``."""
        newest = 0
        for run in chunk.runs:
            if isinstance(run, RowsRun):
                local = self.tables.get(run.table)
                given = dict(zip(run.columns, run.values, strict=True))
                if local is None or not self._write_columns(local, given, run.row_ids, run.client_ids, run.hlcs):
                    self._load_rows(run.rows())
                changed.setdefault(run.table, set()).update(run.row_ids)
                newest = max(newest, max(run.hlcs))
            else:
                self._load_rows(run)
                for row in run:
                    changed.setdefault(row[0][1], set()).add(row[0][2])
                    newest = max(newest, *(d[4] for d in row))
        if newest:
            with contextlib.suppress(ClockDriftError):
                self._clock.recv(newest)

    def _load_checkpoint_bulk(self, deltas: CheckpointDeltas) -> dict[str, set[str]]:
        """An empty store: write each row's state as the checkpoint gives it (no merge) and its user row, in bulk.

        A run of rows that are each one write delta of the same table and columns, with a schema, and whose values
        are exact (:func:`lakesync.client.tables.exact_types`), is written column-wise: user rows bound straight from
        the decoded columns and compact states (``[hlc, clientId, names, kinds]``: the values are the user row's).
        Any other row goes through :func:`lakesync.client._fast.checkpoint_state_json` (the full state)."""
        count = len(deltas)
        changed: dict[str, set[str]] = {}
        if not count:
            return changed
        tables, row_ids, ops, names = deltas.tables, deltas.row_ids, deltas.ops, deltas.names
        keys = list(zip(tables, row_ids, strict=True))
        same = list(map(operator.eq, keys[1:], keys[:-1]))  # same[i]: delta i + 1 continues delta i's row
        alone = [True, *map(operator.not_, same)]
        alone = list(map(operator.and_, alone, [*alone[1:], True]))
        runs = [
            (table, cols) if single and op is not DeltaOp.DELETE and table in self.tables else None
            for table, cols, single, op in zip(tables, names, alone, ops, strict=True)
        ]
        at = 0
        for run, group in itertools.groupby(runs):
            end = at + sum(1 for _ in group)
            if run is None or not self._load_run(deltas, at, end, *run):
                self._load_rows(deltas.rows(at, end))
            if run is not None:
                changed.setdefault(run[0], set()).update(row_ids[at:end])
            else:
                for table, row_id in keys[at:end]:
                    changed.setdefault(table, set()).add(row_id)
            at = end
        newest = max(deltas.hlcs)
        if newest:
            with contextlib.suppress(ClockDriftError):
                self._clock.recv(newest)
        return changed

    def _load_run(self, deltas: CheckpointDeltas, start: int, end: int, table: str, names: tuple[str, ...]) -> bool:
        """Rows ``start..end``, each one write delta of ``table`` with columns ``names``, written column-wise with
        compact states; False (nothing written) when a column is unknown to the schema, repeated, or has a value that
        is not exact."""
        width = len(names)
        if len(set(names)) != width:
            return False
        values = deltas.values[deltas.starts[start] : deltas.starts[end]]
        given = {name: values[i::width] for i, name in enumerate(names)}
        return self._write_columns(
            self.tables[table], given, deltas.row_ids[start:end], deltas.client_ids[start:end], deltas.hlcs[start:end]
        )

    def _write_columns(
        self,
        local: LocalTable,
        given: Mapping[str, list[Any]],
        row_ids: Sequence[str],
        clients: Sequence[str],
        hlcs: Sequence[int],
    ) -> bool:
        """New rows of ``local``, one write delta each with the columns of ``given`` (a value list per column), at
        ``hlcs`` by ``clients``: user rows bound column-wise and compact states; False (nothing written) when a
        column is unknown to the schema or a value is not exact."""
        if any(n not in local.types for n in given):
            return False
        table = local.name
        names = tuple(given)
        bound: list[Any] = []
        for column, kind, _ in local.plan:
            if column not in given:
                bound.append(itertools.repeat(None))
                continue
            column_values, exact = bind_column(kind, given[column])
            if not exact:
                return False
            bound.append(column_values)
        shape = self._shape_json(local, names)
        db = self._db
        if not self._write_base(table, shape, row_ids, clients, hlcs):
            if len(set(clients)) == 1:
                client = _fast.json_text(clients[0])
                texts = [f'["{hlc}",{client},{shape}]' for hlc in hlcs]
            else:
                texts = [f'["{hlc}",{_fast.json_text(c)},{shape}]' for hlc, c in zip(hlcs, clients, strict=True)]
            db.executemany(
                "INSERT OR REPLACE INTO _lakesync_state (tbl, row_id, state) VALUES (?, ?, ?)",
                zip(itertools.repeat(table), row_ids, texts),
            )
        db.executemany(local.upsert_sql(), zip(row_ids, *bound, strict=False))  # absent columns: repeat(None)
        return True

    def _shape_json(self, local: LocalTable, names: Sequence[str]) -> str:
        """The ``names, kinds`` part of a compact state (see :meth:`_decode_state`)."""
        key = (local.name, tuple(names))
        shape = self._shapes.get(key)
        if shape is None:
            kinds = "".join(KIND_CODES[local.types[n]] for n in names)
            shape = self._shapes[key] = (
                f'{json.dumps(list(names), ensure_ascii=False, separators=(",", ":"))},"{kinds}"'
            )
        return shape

    def _load_rows(self, rows: Iterable[list[RawDelta]]) -> None:
        """Rows of a checkpoint with their full states (no merge: the store is empty)."""
        states = []
        users: dict[str, list[tuple[Any, ...]]] = {}
        for row in rows:
            table, row_id = row[0][1], row[0][2]
            text, values = _fast.checkpoint_state_json(row)
            states.append((table, row_id, text))
            local = self.tables.get(table)
            if local is not None and values is not None:
                users.setdefault(table, []).append(local.row_params(row_id, values))
        self._db.executemany("INSERT OR REPLACE INTO _lakesync_state (tbl, row_id, state) VALUES (?, ?, ?)", states)
        for table, params in users.items():
            self._db.executemany(self.tables[table].upsert_sql(), params)

    def _merge_checkpoint(self, rows: Sequence[list[RawDelta]]) -> dict[str, set[str]]:
        """A store with data: merge the checkpoint into it. A local row the checkpoint lacks and no pending local
        write holds is dropped: the checkpoint is everything this client may see as of its cursor (a fresh client
        would not have the row either), and the pull from its cursor delivers every later change."""
        self._expand_base()  # so that dropping a row's state below cannot leave its base state behind
        changed = self._merge_remote(to_row_delta(d) for row in rows for d in row)
        present = {(row[0][1], row[0][2]) for row in rows}
        pending: set[tuple[str, str]] = set()
        for (text,) in self._db.execute("SELECT deltas FROM _lakesync_outbox").fetchall():
            pending.update(_entry_keys(text))
        for table, row_id in self._db.execute("SELECT tbl, row_id FROM _lakesync_state").fetchall():
            if (table, row_id) in present or (table, row_id) in pending:
                continue
            self._db.execute("DELETE FROM _lakesync_state WHERE tbl = ? AND row_id = ?", (table, row_id))
            local = self.tables.get(table)
            if local is not None:
                self._db.execute(local.delete_sql(), (row_id,))
            changed.setdefault(table, set()).add(row_id)
        return changed

    # -- background ------------------------------------------------------------------------------------------------
    def start(self) -> None:
        """Sync in the background: after local writes, on an interval (or when the real-time channel says so), with
        backoff while offline. Idempotent."""
        with self._lock:
            self._check_open()
            if self._thread is not None:
                return
            self._stop.clear()
            self._thread = threading.Thread(target=self._run, name=f"lakesync-sync-{self.client_id}", daemon=True)
            self._thread.start()
            if self.realtime:
                from lakesync.client.realtime import RealtimeListener

                self._listener = RealtimeListener(self)
                self._listener.start()
        self._wake.set()

    def stop(self) -> None:
        """Stop background sync and the real-time listener, and wait for them (unless called from one of them, as a
        subscriber may: that thread ends when its callback returns)."""
        with self._lock:
            thread, listener = self._thread, self._listener
            self._thread = self._listener = None
        self._stop.set()
        self._wake.set()
        if listener is not None:
            listener.stop()
        if thread is not None and thread is not threading.current_thread():
            thread.join()

    def request_sync(self) -> None:
        """Ask the background thread for a sync cycle soon (no effect without :meth:`start`)."""
        self._wake.set()

    @property
    def realtime_connected(self) -> bool:
        """Whether the real-time channel is connected (then pulls follow broadcasts instead of the poll interval)."""
        listener = self._listener
        return bool(listener is not None and listener.connected)

    def _run(self) -> None:
        retry_at = 0.0
        while not self._stop.is_set():
            interval = self.connected_poll_interval if self.realtime_connected else self.poll_interval
            now = time.monotonic()
            if retry_at > now:
                # Offline: local writes do not cut the backoff short, only stop does.
                self._stop.wait(retry_at - now)
            else:
                self._wake.wait(interval)
            if self._stop.is_set():
                return
            self._stop.wait(self.debounce)  # coalesce a burst of writes or broadcasts into one cycle
            self._wake.clear()
            if self._stop.is_set():
                return
            try:
                self.sync()
            except OfflineError as exc:
                delay = self.backoff.next_delay()
                retry_at = time.monotonic() + delay
                logger.info("offline (%s); retrying in %.1fs", exc, delay)
                continue
            except Exception:
                delay = self.backoff.next_delay()
                retry_at = time.monotonic() + delay
                logger.exception("background sync failed; retrying in %.1fs", delay)
                continue
            self.backoff.reset()
            retry_at = 0.0

    # -- lifecycle -------------------------------------------------------------------------------------------------
    def close(self) -> None:
        """Stop background sync and close the file. Idempotent."""
        self.stop()
        with self._lock:
            if self._closed:
                return
            self._closed = True
            self._db.close()

    def __enter__(self) -> Self:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()


class Batch:
    """Writes collected by :meth:`LocalStore.batch`, applied together."""

    def __init__(self) -> None:
        self.ops: list[tuple[DeltaOp, str, str, Mapping[str, JsonValue] | None]] = []

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


def _mapping_as_dict(value: object) -> dict[str, Any]:
    if isinstance(value, Mapping):
        return dict(value)
    raise TypeError(f"Object of type {type(value).__name__} is not JSON serializable")


_encode_entry = json.JSONEncoder(
    ensure_ascii=False, separators=(",", ":"), allow_nan=False, default=_mapping_as_dict, check_circular=False
).encode
"""An outbox entry's JSON (the app's values may be any Mapping). Values are checked at most 64 deep before they get
here, so a cycle never does: the encoder's own cycle check (a third of its time on a bulk insert) is off."""


def _entry_wires(text: str, client_id: str) -> list[str]:
    """The wire JSON texts of an outbox entry's deltas: a JSON array of wire deltas (re-rendered compactly), or a
    bulk insert's rows (rendered, deltaIds included, by :func:`lakesync.client._fast.insert_delta`)."""
    doc = json.loads(text)
    if isinstance(doc, list):
        return [_fast.encode_state(d) for d in doc]
    op, hlc = doc["op"], int(doc["hlc"])
    return [_fast.insert_delta(op, t, r, client_id, hlc, values)[0] for t, r, values in _entry_rows(doc)]


def _entry_rows(doc: Mapping[str, Any]) -> Iterator[tuple[str, str, dict[str, JsonValue]]]:
    """A bulk insert entry's ``(table, rowId, values)``, in order.

    Two layouts: ``"rows": [[table, rowId, values]...]``, or, when every row is exact and of one table, ``"table"``,
    ``"columns"`` (``[name, type]`` in schema order as written), ``"shapes"`` (bit ``i``: the row gives column ``i``)
    and ``"params"`` (``[rowId, *column values as bound to SQLite]``), whose values read back as the user row's do
    (:func:`~lakesync.client.tables.from_sql`). A row's columns are then in schema order.
    """
    if "rows" in doc:
        for table, row_id, values in doc["rows"]:
            yield table, row_id, values or {}
        return
    table = doc["table"]
    columns = [(i, name, ColumnType(kind)) for i, (name, kind) in enumerate(doc["columns"])]
    layouts: dict[int, list[tuple[int, str, ColumnType]]] = {}
    for shape, params in zip(doc["shapes"], doc["params"], strict=True):
        given = layouts.get(shape)
        if given is None:
            given = layouts[shape] = [c for c in columns if shape >> c[0] & 1]
        yield table, params[0], {name: from_sql(kind, params[i + 1]) for i, name, kind in given}


@contextlib.contextmanager
def _unreadable_answer(route: str) -> Iterator[None]:
    """Raise :class:`SyncStateError` for an answer that does not decode (not JSON, bad gzip, a bad checkpoint
    frame or header)."""
    try:
        yield
    except (ValueError, zlib.error, ValidationError) as exc:  # json's errors are ValueErrors
        raise SyncStateError(f"The gateway's {route} answer does not decode: {exc}") from exc


@dataclass(frozen=True, slots=True)
class _PullPage:
    """A pull answer, checked."""

    deltas: list[RowDelta]
    cursor: str
    has_more: bool
    server_hlc: Any


def _pull_page(answer: Any) -> _PullPage:
    """A pull answer as a page: ``deltas`` (each a valid wire delta), ``cursor`` (a string), ``hasMore`` (a boolean).

    Raises:
        SyncStateError: anything else; then nothing is applied and the cursor stays.
    """
    if not isinstance(answer, dict):
        raise SyncStateError(f"The gateway's pull answer is not an object: {answer!s:.200}")
    raw, cursor, has_more = answer.get("deltas"), answer.get("cursor"), answer.get("hasMore")
    if not isinstance(raw, list) or not isinstance(cursor, str) or not isinstance(has_more, bool):
        raise SyncStateError(f"The gateway's pull answer lacks deltas, cursor or hasMore: {answer!s:.200}")
    try:
        deltas = [RowDelta.from_json(d, where=f"deltas[{i}]") for i, d in enumerate(raw)]
    except ValidationError as exc:
        raise SyncStateError(f"The gateway's pull answer has a malformed delta: {exc}") from exc
    return _PullPage(deltas, cursor, has_more, answer.get("serverHlc"))


def _call_each(callback: Callable[[Any], None] | None, items: Iterable[Any], name: str) -> None:
    """Hand each item to the application's ``callback``; one that fails is logged, never raised into the sync."""
    if callback is None:
        return
    for item in items:
        try:
            callback(item)
        except Exception:
            logger.exception("%s callback failed", name)


def _push_answer(answer: Any, wires: Sequence[str]) -> tuple[int, list[dict[str, Any]]]:
    """A push answer's ``accepted`` and receipts, checked to be the gateway's answer to the deltas ``wires``: one
    receipt per delta, in order, with its deltaId (what every push is answered with).

    Raises:
        SyncStateError: anything else (an error body sent with 200, an answer to another request): then nothing may be
            acknowledged.
    """
    receipts = answer.get("receipts") if isinstance(answer, dict) else None
    accepted = answer.get("accepted") if isinstance(answer, dict) else None
    if not isinstance(receipts, list) or len(receipts) != len(wires) or type(accepted) is not int or accepted < 0:
        raise SyncStateError(f"The gateway's push answer is not one receipt per delta sent: {answer!s:.200}")
    for receipt, wire in zip(receipts, wires, strict=True):
        if not isinstance(receipt, dict) or receipt.get("deltaId") != _wire_delta_id(wire):
            raise SyncStateError(f"The gateway's push answer has a receipt for another delta: {receipt!s:.200}")
        columns = receipt.get("columns", [])
        if not isinstance(columns, list) or not all(map(_is_column_receipt, columns)):
            raise SyncStateError(f"The gateway's push answer has a malformed receipt: {receipt!s:.200}")
    return accepted, receipts


def _is_column_receipt(receipt: Any) -> bool:
    """A ``{column, applied, winnerHlc, winnerClientId}`` the conflict report can read."""
    if not isinstance(receipt, dict) or not isinstance(receipt.get("column"), str):
        return False
    hlc, winner = receipt.get("winnerHlc"), receipt.get("winnerClientId")
    return receipt.get("applied") is True or (
        isinstance(hlc, str) and hlc.isascii() and hlc.isdigit() and isinstance(winner, str)
    )


def _wire_delta_id(wire: str) -> str:
    """A wire delta's deltaId: its last key as this store renders it, else read from the JSON."""
    at = wire.rfind('"deltaId":"')
    tail = wire[at + 11 : -2] if at >= 0 and wire.endswith('"}') else ""
    if tail.isalnum():
        return tail
    found = json.loads(wire).get("deltaId")
    return found if isinstance(found, str) else ""


def _entry_keys(text: str) -> list[tuple[str, str]]:
    """``(table, rowId)`` of each delta of an outbox entry, in order."""
    doc = json.loads(text)
    if isinstance(doc, list):
        return [(d["table"], d["rowId"]) for d in doc]
    if "rows" in doc:
        return [(t, r) for t, r, _ in doc["rows"]]
    return [(doc["table"], params[0]) for params in doc["params"]]


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


def _decoded_parts(bodies: Sequence[bytes], columnar: Sequence[bool]) -> list[ColumnsChunk | CheckpointDeltas]:
    """A fetched checkpoint's bodies decoded: each columnar document alone, runs of stream bodies together.

    Raises:
        CodecError: a body that is not what its media type says.
    """
    parts: list[ColumnsChunk | CheckpointDeltas] = []
    streams: list[bytes] = []
    flags = [*columnar[: len(bodies)], *[False] * (len(bodies) - len(columnar))]
    for body, is_columns in zip(bodies, flags, strict=True):
        if not is_columns:
            streams.append(body)
            continue
        if streams:
            parts.append(decode_checkpoint_deltas(streams))
            streams = []
        parts.append(decode_columns(body))
    if streams:
        parts.append(decode_checkpoint_deltas(streams))
    return parts


_dumps_ids = json.JSONEncoder(separators=(",", ":")).encode


@dataclass(frozen=True, slots=True)
class _BaseRecord:
    """A decoded ``_lakesync_base`` record: up to :data:`BASE_RECORD_ROWS` rows of one table loaded from a checkpoint,
    each one write delta of the same columns (``shape``: the compact state's ``names, kinds`` part), ids strictly
    increasing; ``clients`` is one id for every row, or one per row."""

    shape: str
    ids: list[str]
    hlcs: list[int]
    clients: str | list[str]

    def state(self, row_id: str) -> str | None:
        """The row's compact state text, or None if the record does not hold it."""
        at = bisect.bisect_left(self.ids, row_id)
        if at == len(self.ids) or self.ids[at] != row_id:
            return None
        return self.state_at(at)

    def state_at(self, at: int) -> str:
        """The compact state text of the ``at``-th row."""
        client = self.clients if isinstance(self.clients, str) else self.clients[at]
        return f'["{self.hlcs[at]}",{_fast.json_text(client)},{self.shape}]'
