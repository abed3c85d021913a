"""Base records: the compact states of rows loaded from a checkpoint into an empty store, many rows a record.

``_lakesync_base`` holds :data:`BASE_RECORD_ROWS` rows a record, a range of row ids (increasing; ranges of a table
apart). A row without a ``_lakesync_state`` row has the state its base record gives, if any; a row's own state row,
written at its first change, wins. Reloading a checkpoint into a store with data first writes the records out as state
rows (:meth:`BaseRecords.expand`).
"""

from __future__ import annotations

import bisect
import collections
import json
import operator
import sqlite3
from collections.abc import Iterable, Sequence
from dataclasses import dataclass

from lakesync.client import _fast

BASE_RECORD_ROWS = 256
"""Rows per ``_lakesync_base`` record: small enough that reading one row's state decodes little."""
BASE_CACHE_RECORDS = 64

_dumps_ids = json.JSONEncoder(separators=(",", ":")).encode


@dataclass(frozen=True, slots=True)
class BaseRecord:
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


class BaseRecords:
    """The ``_lakesync_base`` table, with a small cache of decoded records (the caller holds the store's lock)."""

    def __init__(self, conn: sqlite3.Connection) -> None:
        self._db = conn
        self._cache: collections.OrderedDict[tuple[str, str], BaseRecord] = collections.OrderedDict()
        self.present = False
        """Whether ``_lakesync_base`` may hold records (when not, a missing state row is not looked up there)."""

    def reset(self) -> None:
        """Forget the cache and probe the table again (after a rollback, or once the file is open)."""
        self._cache.clear()
        self.present = self._probe()

    def _probe(self) -> bool:
        """Whether ``_lakesync_base`` holds a record (False while the file has no such table yet)."""
        try:
            return self._db.execute("SELECT 1 FROM _lakesync_base LIMIT 1").fetchone() is not None
        except sqlite3.OperationalError:
            return False

    def record(self, table: str, row_id: str) -> BaseRecord | None:
        """The base record whose range holds ``row_id`` (ranges of a table never overlap), if any."""
        got = self._db.execute(
            "SELECT first_id, last_id, shape, ids, hlcs, clients FROM _lakesync_base "
            "WHERE tbl = ? AND first_id <= ? ORDER BY first_id DESC LIMIT 1",
            (table, row_id),
        ).fetchone()
        if got is None or row_id > got[1]:
            return None
        key = (table, got[0])
        record = self._cache.get(key)
        if record is None:
            record = BaseRecord(got[2], json.loads(got[3]), json.loads(got[4]), json.loads(got[5]))
            self._cache[key] = record
            if len(self._cache) > BASE_CACHE_RECORDS:
                self._cache.popitem(last=False)
        else:
            self._cache.move_to_end(key)
        return record

    def state(self, table: str, row_id: str) -> str | None:
        """The compact state text of a row that only a base record holds (no ``_lakesync_state`` row)."""
        record = self.record(table, row_id)
        return None if record is None else record.state(row_id)

    def holds_any(self, table: str, row_ids: Iterable[str]) -> bool:
        """Whether a base record holds any of ``row_ids``."""
        if not self.present:
            return False
        ranges = self._db.execute(
            "SELECT first_id, last_id FROM _lakesync_base WHERE tbl = ? ORDER BY first_id", (table,)
        ).fetchall()
        if not ranges:
            return False
        firsts = [r[0] for r in ranges]
        for row_id in row_ids:
            at = bisect.bisect_right(firsts, row_id) - 1
            if at >= 0 and row_id <= ranges[at][1] and self.state(table, row_id) is not None:
                return True
        return False

    def write(
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
        self.present = True  # stays set if the transaction rolls back: a few needless look-ups, nothing wrong
        return True

    def expand(self) -> None:
        """Every base record written out as ``_lakesync_state`` rows (a row's own state row wins), then dropped."""
        for table, shape, ids, hlcs, clients in self._db.execute(
            "SELECT tbl, shape, ids, hlcs, clients FROM _lakesync_base"
        ).fetchall():
            record = BaseRecord(shape, json.loads(ids), json.loads(hlcs), json.loads(clients))
            self._db.executemany(
                "INSERT OR IGNORE INTO _lakesync_state (tbl, row_id, state) VALUES (?, ?, ?)",
                ((table, row_id, record.state_at(i)) for i, row_id in enumerate(record.ids)),
            )
        self._db.execute("DELETE FROM _lakesync_base")
        self._cache.clear()
        self.present = False
