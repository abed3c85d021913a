"""Row states of a destination, readable and movable: what Lifecycle and migrate build on.

A :class:`~lakesync.ports.Destination` only promises that each row equals the per-column LWW fold of the deltas
applied to it. Moving rows between destinations without losing that needs the fold itself (the per-column versions
and the tombstone, :class:`~lakesync.core.merge.RowState`), not the projected rows: a copy made from ``rows()``
would stamp every column with one version and drop tombstones, so a late older write could resurrect a deleted row
in the copy. Hence:

* :class:`StateReader` reads a destination's states, paged in ``row_id`` order (tombstoned rows included);
  :class:`StatefulDestination` adds :meth:`~StatefulDestination.purge`, a compare-and-delete of rows.
* :func:`state_deltas` turns a state back into deltas whose fold *is* that state: applying them to any destination
  joins the state into whatever the destination holds for the row (``fold(A | B) == join(fold(A), fold(B))``), so a
  copy is idempotent, order-independent and never loses a newer write already at the target.
* :class:`SqlStateDestination` gives a :class:`~lakesync.sql.SqlDestination` those methods, reading its hidden
  ``_lakesync_state`` table. The state table's ``row_id`` is compared bytewise on every dialect (``COLLATE "C"``,
  binary, SQLite's default), so ``row_id > ?`` paging is stable and equals Python's ``str`` order.
"""

from __future__ import annotations

import json
import threading
import time
from collections.abc import Callable, Iterable, Sequence
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any, Final, Protocol, TypeVar, runtime_checkable

from lakesync.core.delta import ColumnDelta, DeltaOp, RowDelta, make_delta
from lakesync.core.errors import DestinationError
from lakesync.core.merge import RowState, state_from_json, state_to_json
from lakesync.core.schema import TableSchema
from lakesync.ports import ApplyStats, Destination

if TYPE_CHECKING:
    from lakesync.sql.destination import SqlDestination

__all__ = [
    "SqlStateDestination",
    "StatePage",
    "StateReader",
    "StatefulDestination",
    "last_change",
    "state_deltas",
]

_T = TypeVar("_T")
_CHUNK: Final = 500
_ATTEMPTS: Final = 5


@dataclass(frozen=True, slots=True)
class StatePage:
    """One page of a destination's row states.

    Attributes:
        states: Row states in ``row_id`` order (tombstoned rows included; their ``RowState.table`` is the schema's
            delta table).
        next: The cursor of the next page, ``None`` when this was the last one. Opaque: pass it back as ``after``.
    """

    states: tuple[RowState, ...]
    next: str | None


@runtime_checkable
class StateReader(Protocol):
    """A destination whose per-row LWW states can be read."""

    name: str

    def states(self, schema: TableSchema, *, after: str | None = None, limit: int = 500) -> StatePage:
        """Up to ``limit`` row states of ``schema.table`` after the cursor ``after`` (``None``: from the start).

        Raises:
            DestinationError: the destination failed.
        """
        ...

    def states_of(self, schema: TableSchema, row_ids: Sequence[str]) -> dict[str, RowState]:
        """The states of ``row_ids`` that the destination has seen (others are absent)."""
        ...


@runtime_checkable
class StatefulDestination(Destination, StateReader, Protocol):
    """A destination whose states can be read and whose rows can be removed (a tier of a Lifecycle)."""

    def purge(self, schema: TableSchema, expected: Sequence[RowState]) -> int:
        """Remove each row of ``expected`` (its table row and its state) if its stored state still equals the given
        one, atomically; rows changed since they were read stay. Returns how many rows were removed."""
        ...


def last_change(state: RowState) -> int:
    """The HLC of the row's last change: its greatest write or delete version (every column is at most that)."""
    versions = [v.hlc for v in (state.written, state.tombstone) if v is not None]
    return max(versions, default=0)


def state_deltas(state: RowState) -> list[RowDelta]:
    """Deltas whose fold is exactly ``state``: a DELETE at the tombstone, one UPDATE per distinct column version and
    an UPDATE without columns at ``written`` when no column carries that version.

    Every delta is deterministic (same state, same deltaIds), so a re-run of a copy sends the same deltas.
    """
    out: list[RowDelta] = []
    table, row_id = state.table, state.row_id
    if state.tombstone is not None:
        tomb = state.tombstone
        out.append(make_delta(DeltaOp.DELETE, table=table, row_id=row_id, client_id=tomb.client_id, hlc=tomb.hlc))
    groups: dict[tuple[int, str], list[ColumnDelta]] = {}
    for name in sorted(state.columns):
        col = state.columns[name]
        groups.setdefault((col.hlc, col.client_id), []).append(ColumnDelta(name, col.value))
    if state.written is not None:
        groups.setdefault((state.written.hlc, state.written.client_id), [])
    for (hlc, client_id), columns in sorted(groups.items()):
        out.append(
            make_delta(DeltaOp.UPDATE, table=table, row_id=row_id, client_id=client_id, hlc=hlc, columns=columns)
        )
    return out


def deltas_of(states: Iterable[RowState]) -> list[RowDelta]:
    """The :func:`state_deltas` of every state, concatenated."""
    return [delta for state in states for delta in state_deltas(state)]


class SqlStateDestination:
    """A :class:`~lakesync.sql.SqlDestination` (it owns it) with its states readable and its rows purgeable.

    Every call, the wrapped destination's included, is serialised by one lock: use the SQL destination only through
    this object. ``apply``, ``rows`` and ``close`` are the SQL destination's own.

    Args:
        destination: The SQL destination (any dialect with positional placeholders: PostgreSQL, MySQL/MariaDB,
            SQLite; not BigQuery).
    """

    def __init__(self, destination: SqlDestination) -> None:
        from lakesync.sql.dialect import META_TABLE, STATE_TABLE

        if destination.dialect.name == "bigquery":
            raise DestinationError(
                f"destination {destination.name}: row states of BigQuery are not supported", retryable=False
            )
        self.destination = destination
        self.name: str = destination.name
        self._state_table = STATE_TABLE
        self._meta_table = META_TABLE
        self._lock = threading.RLock()
        self._ready: set[TableSchema] = set()

    def __repr__(self) -> str:
        return f"SqlStateDestination({self.destination!r})"

    @classmethod
    def connect(cls, url: str, *, name: str) -> SqlStateDestination:
        """Open ``url`` (as :func:`lakesync.sql.connect`) with its states readable."""
        from lakesync.sql import connect

        return cls(connect(url, name=name))

    # -- Destination ---------------------------------------------------------------------------------------------

    def apply(self, schema: TableSchema, deltas: Sequence[RowDelta]) -> ApplyStats:
        """As :meth:`lakesync.sql.SqlDestination.apply`."""
        with self._lock:
            stats: ApplyStats = self.destination.apply(schema, deltas)
            self._ready.add(schema)
            return stats

    def rows(self, schema: TableSchema) -> dict[str, dict[str, Any]]:
        """As :meth:`lakesync.sql.SqlDestination.rows`."""
        with self._lock:
            rows: dict[str, dict[str, Any]] = self.destination.rows(schema)
            return rows

    def close(self) -> None:
        """Close the connection."""
        self.destination.close()

    # -- states --------------------------------------------------------------------------------------------------

    def states(self, schema: TableSchema, *, after: str | None = None, limit: int = 500) -> StatePage:
        """Up to ``limit`` states of ``schema.table`` with ``row_id > after``, in ``row_id`` (bytewise) order."""
        if limit < 1:
            raise ValueError("limit must be at least 1")
        p = self._dialect.placeholder
        params: tuple[Any, ...] = (schema.table,) if after is None else (schema.table, after)
        sql = (
            f"SELECT row_id, state FROM {self._state_table} WHERE tbl = {p} AND state IS NOT NULL"
            f"{'' if after is None else f' AND row_id > {p}'} ORDER BY row_id LIMIT {int(limit) + 1}"
        )
        rows = self._read(schema, lambda run: run(self._stmt(sql, params)))
        states = tuple(self._decode(schema, r) for r in rows[:limit])
        return StatePage(states, states[-1].row_id if len(rows) > limit else None)

    def states_of(self, schema: TableSchema, row_ids: Sequence[str]) -> dict[str, RowState]:
        """The stored states of ``row_ids`` (rows never seen are absent)."""
        ids = sorted(set(row_ids))
        if not ids:
            return {}
        p = self._dialect.placeholder

        def read(run: Any) -> list[tuple[Any, ...]]:
            out: list[tuple[Any, ...]] = []
            for i in range(0, len(ids), _CHUNK):
                chunk = ids[i : i + _CHUNK]
                marks = ", ".join([p] * len(chunk))
                sql = (
                    f"SELECT row_id, state FROM {self._state_table} WHERE tbl = {p} AND state IS NOT NULL "
                    f"AND row_id IN ({marks})"
                )
                out.extend(run(self._stmt(sql, (schema.table, *chunk))))
            return out

        return {state.row_id: state for state in (self._decode(schema, r) for r in self._read(schema, read))}

    def purge(self, schema: TableSchema, expected: Sequence[RowState]) -> int:
        """Delete the table rows and states of ``expected`` whose stored state is unchanged, in one transaction
        holding the rows' state locks (a concurrent ``apply`` of one of them waits, then finds no state: a new
        row)."""
        wanted = {s.row_id: state_to_json(s) for s in expected}
        if not wanted:
            return 0
        dialect = self._dialect
        p = dialect.placeholder
        quoted = dialect.quote(schema.table)

        def purge(run: Any) -> int:
            run(dialect.read_meta(schema.table, exclusive=False))  # never interleave with a column back-fill
            gone: list[str] = []
            for stmt in dialect.lock_states(schema.table, sorted(wanted)):
                for row_id, text in run(stmt):
                    if text is not None and _json(text) == wanted.get(str(row_id)):
                        gone.append(str(row_id))
            for i in range(0, len(gone), _CHUNK):
                chunk = gone[i : i + _CHUNK]
                marks = ", ".join([p] * len(chunk))
                run(self._stmt(f"DELETE FROM {quoted} WHERE row_id IN ({marks})", tuple(chunk)))
                run(
                    self._stmt(
                        f"DELETE FROM {self._state_table} WHERE tbl = {p} AND row_id IN ({marks})",
                        (schema.table, *chunk),
                    )
                )
            return len(gone)

        return self._read(schema, purge)

    def stored_schemas(self, tables: Sequence[str] | None = None) -> list[TableSchema]:
        """Table schemas rebuilt from what the destination recorded (``_lakesync_tables``), sorted by table.

        The columns and their types are exact; soft delete is read from the table (a ``deleted_at`` column); the
        primary key and external id column are not recorded, so they are the defaults (``row_id``, none).
        ``tables`` narrows the result (a table that was never materialised is absent).
        """
        from lakesync.core.schema import ColumnSpec
        from lakesync.sql.dialect import columns_from_json

        dialect = self._dialect
        executor = self.destination.executor
        with self._lock:
            try:
                with executor.transaction() as run:
                    present = {str(r[0]).lower() for r in run(dialect.existing_columns(self._meta_table))}
                    if not present:
                        return []
                    meta = run(self._stmt(f"SELECT tbl, columns FROM {self._meta_table} ORDER BY tbl", ()))
                    out = []
                    for tbl, text in meta:
                        if tables is not None and str(tbl) not in tables:
                            continue
                        columns = columns_from_json(text.decode() if isinstance(text, bytes) else str(text))
                        existing = {str(r[0]).lower() for r in run(dialect.existing_columns(str(tbl)))}
                        out.append(
                            TableSchema(
                                str(tbl),
                                tuple(ColumnSpec(name, ctype) for name, ctype in columns),
                                soft_delete="deleted_at" in existing,
                            )
                        )
                    return out
            except DestinationError:
                raise
            except Exception as exc:
                from lakesync.sql.executor import scrub

                message = scrub(f"destination {self.name} failed: {type(exc).__name__}: {exc}", executor.secrets)
                raise DestinationError(message, retryable=executor.classify(exc) is not None) from None

    # -- helpers -------------------------------------------------------------------------------------------------

    @property
    def _dialect(self) -> Any:
        return self.destination.dialect

    @staticmethod
    def _stmt(sql: str, params: tuple[Any, ...]) -> Any:
        from lakesync.sql.dialect import Statement

        return Statement(sql, params, returns=sql.startswith("SELECT"))

    def _decode(self, schema: TableSchema, row: tuple[Any, ...]) -> RowState:
        return state_from_json(schema.delta_table, str(row[0]), _json(row[1]), trusted=True)

    def _read(self, schema: TableSchema, body: Callable[[Any], _T]) -> _T:
        """Run ``body`` in one transaction (the table and the state tables created first), retrying transient
        failures like the SQL destination does; errors are :class:`DestinationError` with the password scrubbed."""
        from lakesync.sql.executor import ErrorKind, scrub

        executor = self.destination.executor
        with self._lock:
            attempt = 0
            while True:
                attempt += 1
                if schema not in self._ready:
                    self.destination.apply(schema, ())  # creates the table and the state tables if missing
                    self._ready.add(schema)
                try:
                    with executor.transaction() as run:
                        return body(run)
                except DestinationError:
                    raise
                except Exception as exc:
                    kind = executor.classify(exc)
                    if kind is None:
                        raise
                    if kind is ErrorKind.CONNECTION:
                        executor.reset()
                    if kind is ErrorKind.FATAL or attempt >= _ATTEMPTS:
                        message = scrub(
                            f"destination {self.name} failed: {type(exc).__name__}: {exc}", executor.secrets
                        )
                        raise DestinationError(message, retryable=kind is not ErrorKind.FATAL) from None
                    time.sleep(0.02 * 2**attempt)


def _json(text: Any) -> Any:
    if isinstance(text, bytes | bytearray):
        text = text.decode("utf-8")
    return json.loads(text) if isinstance(text, str) else text
