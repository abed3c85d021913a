"""The outbox: local deltas not yet acknowledged by the gateway, and the ones it refused for good.

``_lakesync_outbox`` holds one entry per write call with ``sent``, how many of its leading deltas the gateway
acknowledged. An entry is a JSON array of wire deltas, or for a bulk insert ``{"op", "hlc", "rows": [[table, rowId,
values]...]}`` (or its columnar form, see :func:`entry_rows`), rendered to wire deltas at push time: the deltaId is a
pure function of the stored rows, HLC and clientId, so a re-send after a crash carries the same deltaIds. An entry is
removed (or its ``sent`` advanced) only after the gateway acknowledged the push that carried it.
``_lakesync_rejected`` keeps the local deltas the gateway refused for good, for the app to inspect.
"""

from __future__ import annotations

import json
import sqlite3
from collections.abc import Iterable, Iterator, Mapping, Sequence
from dataclasses import dataclass
from typing import Any

from lakesync.client import _fast
from lakesync.client.tables import LocalTable, from_sql
from lakesync.core.canonical import JsonValue
from lakesync.core.delta import RowDelta
from lakesync.core.schema import ColumnType

PUSH_BATCH = 1000
"""Most deltas per push request (the gateway takes 10,000; a smaller push keeps requests well under a Lambda's
payload limit)."""
PUSH_BATCH_BYTES = 1_000_000

Ack = tuple[int, int, bool]
"""``(seq, new sent, entry done)``: what acknowledging deltas does to one outbox entry."""


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
    acks: tuple[Ack, ...]
    """``(seq, new sent, entry done)``."""
    counts: tuple[int, ...] = ()
    """Per entry of ``acks``, how many of its deltas the plan takes."""

    def acks_of_first(self, count: int) -> tuple[Ack, ...]:
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
    acks: list[Ack] = []
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


class Outbox:
    """The ``_lakesync_outbox`` and ``_lakesync_rejected`` tables (the caller holds the store's lock; writes happen
    inside a transaction)."""

    def __init__(self, conn: sqlite3.Connection, client_id: str) -> None:
        self._db = conn
        self._client_id = client_id
        self._wires: dict[int, tuple[str, ...]] = {}

    def add_wires(self, wires: Sequence[str]) -> None:
        """One entry of wire deltas."""
        self._db.execute("INSERT INTO _lakesync_outbox (deltas) VALUES (?)", ("[" + ",".join(wires) + "]",))

    def add_inserts(
        self,
        hlc: int,
        items: Sequence[tuple[str, str, Mapping[str, JsonValue]]],
        columnar: tuple[LocalTable, list[int], list[tuple[Any, ...]]] | None,
    ) -> None:
        """One bulk insert entry of ``(table, rowId, values)`` at ``hlc``; when every row is exact and of one table,
        ``columnar`` (the table, each row's shape, its user-row parameters) gives the columnar form, a third of the
        JSON work."""
        entry: dict[str, Any]
        if columnar is None:
            entry = {"op": "INSERT", "hlc": str(hlc), "rows": items}
        else:
            local, shapes, params = columnar
            columns = [[c, local.types[c].value] for c in local.columns]
            entry = {"op": "INSERT", "hlc": str(hlc), "table": local.name, "columns": columns, "shapes": shapes}
            entry["params"] = params
        self._db.execute("INSERT INTO _lakesync_outbox (deltas) VALUES (?)", (_encode_entry(entry),))

    def entries(self, limit: int) -> list[OutboxEntry]:
        """The first outbox entries with their deltas' wire JSON (rendered once per entry and cached by ``seq``: an
        entry never changes once written, and ``seq`` is never reused)."""
        entries = []
        rows = self._db.execute("SELECT seq, deltas, sent FROM _lakesync_outbox ORDER BY seq LIMIT ?", (limit,))
        for seq, text, sent in rows.fetchall():
            wires = self._wires.get(seq)
            if wires is None:
                wires = self._wires[seq] = tuple(entry_wires(text, self._client_id))
            entries.append(OutboxEntry(seq, wires, sent))
        return entries

    def forget_wires(self) -> None:
        """Drop the rendered wires (after a push cycle)."""
        self._wires.clear()

    def take_out(self, acks: Iterable[Ack]) -> None:
        """Drop acknowledged deltas (inside a transaction, only after the gateway's answer)."""
        db = self._db
        for seq, sent, done in acks:
            if done:
                db.execute("DELETE FROM _lakesync_outbox WHERE seq = ?", (seq,))
            else:
                db.execute("UPDATE _lakesync_outbox SET sent = ? WHERE seq = ? AND sent < ?", (sent, seq, sent))

    def reject(self, rejected: Iterable[tuple[str, str, int, str, int]]) -> None:
        """Record refused deltas, ``(deltaId, wire, status, error, at_ms)``, in ``_lakesync_rejected`` (inside the
        transaction that takes them out)."""
        self._db.executemany(
            "INSERT INTO _lakesync_rejected (delta_id, delta, status, error, at_ms) VALUES (?, ?, ?, ?, ?)", rejected
        )

    def pending_count(self) -> int:
        """Local deltas not yet acknowledged."""
        total = 0
        for text, sent in self._db.execute("SELECT deltas, sent FROM _lakesync_outbox"):
            total += len(entry_keys(text)) - sent
        return total

    def pending_rows(self) -> set[tuple[str, str]]:
        """``(table, rowId)`` of every row an outbox entry writes."""
        pending: set[tuple[str, str]] = set()
        for (text,) in self._db.execute("SELECT deltas FROM _lakesync_outbox").fetchall():
            pending.update(entry_keys(text))
        return pending

    def pending_deltas(self, rows: set[tuple[str, str]]) -> dict[tuple[str, str], list[RowDelta]]:
        """The outbox's unsent deltas of ``rows``, in order (inside a transaction)."""
        found: dict[tuple[str, str], list[RowDelta]] = {}
        for text, sent in self._db.execute("SELECT deltas, sent FROM _lakesync_outbox ORDER BY seq").fetchall():
            for wire in entry_wires(text, self._client_id)[sent:]:
                delta = RowDelta.from_json(json.loads(wire))
                if (delta.table, delta.row_id) in rows:
                    found.setdefault((delta.table, delta.row_id), []).append(delta)
        return found


def _mapping_as_dict(value: object) -> dict[str, Any]:
    if isinstance(value, Mapping):
        return dict(value)
    raise TypeError(f"Object of type {type(value).__name__} is not JSON serializable")


_encode_entry = json.JSONEncoder(
    ensure_ascii=False, separators=(",", ":"), allow_nan=False, default=_mapping_as_dict, check_circular=False
).encode
"""An outbox entry's JSON (the app's values may be any Mapping). Values are checked at most 64 deep before they get
here, so a cycle never does: the encoder's own cycle check (a third of its time on a bulk insert) is off."""


def entry_wires(text: str, client_id: str) -> list[str]:
    """The wire JSON texts of an outbox entry's deltas: a JSON array of wire deltas (re-rendered compactly), or a
    bulk insert's rows (rendered, deltaIds included, by :func:`lakesync.client._fast.insert_delta`)."""
    doc = json.loads(text)
    if isinstance(doc, list):
        return [_fast.encode_state(d) for d in doc]
    op, hlc = doc["op"], int(doc["hlc"])
    return [_fast.insert_delta(op, t, r, client_id, hlc, values)[0] for t, r, values in entry_rows(doc)]


def entry_rows(doc: Mapping[str, Any]) -> Iterator[tuple[str, str, dict[str, JsonValue]]]:
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


def entry_keys(text: str) -> list[tuple[str, str]]:
    """``(table, rowId)`` of each delta of an outbox entry, in order."""
    doc = json.loads(text)
    if isinstance(doc, list):
        return [(d["table"], d["rowId"]) for d in doc]
    if "rows" in doc:
        return [(t, r) for t, r, _ in doc["rows"]]
    return [(doc["table"], params[0]) for params in doc["params"]]
