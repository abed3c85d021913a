"""``SqlDestination``: materialise deltas into a SQL table with the one merge rule (:mod:`lakesync.core.merge`).

Invariant: after any sequence of :meth:`SqlDestination.apply` calls -- batches in any order, with duplicates and
redeliveries -- each destination row equals the per-column LWW fold of every delta ever applied to its row id,
projected onto the table's columns (missing → NULL, values coerced by :mod:`lakesync.sql.coerce`); the row is
absent (hard delete) or has ``deleted_at`` set (soft delete) iff the fold says the row does not exist. No merge is
written in SQL: the per-column state is kept beside the row in the hidden ``_lakesync_state`` table and folded in
Python with :func:`lakesync.core.merge.merge_all` (repeated :func:`~lakesync.core.merge.merge`).

One ``apply`` is one database transaction:

1. (once per process and table layout) create the table, add missing columns, back-fill added columns of existing
   rows from their stored states and record them in ``_lakesync_tables`` -- the back-fill in its own transaction,
   under an exclusive lock of the table's metadata row;
2. ``BEGIN`` (SQLite: ``BEGIN IMMEDIATE``); read the table's materialised columns under a shared lock of its
   metadata row (so a concurrent back-fill and a batch never interleave); if the schema has columns not yet
   materialised, roll back and do step 1 again;
3. lock the batch's state rows (``SELECT ... FOR UPDATE`` in ``row_id`` order), then create and lock the rows seen for
   the first time;
4. fold each row's deltas into its stored state; rows whose state did not change are left alone. A stored state
   whose text equals what this process last committed for the row is taken from memory instead of decoded (the
   text comparison makes a stale entry harmless); only columns a merge wrote are encoded and coerced again;
5. write the changed states; upsert the live rows with every column (``deleted_at = NULL`` un-deletes); delete or
   soft-delete rows that existed and no longer do (a late older write cannot resurrect them: the tombstone in the
   state keeps it out);
6. ``COMMIT``.

Deadlocks, serialization failures and lock timeouts roll back and retry the whole call (a few times, with jittered
backoff); a lost connection is reopened and retried; anything else raises :class:`DestinationError` and nothing of
the call is written. Rows whose primary key columns would be NULL cannot be stored: they are skipped and counted
(:attr:`SqlApplyStats.skipped`); when a live row's primary key changes, its old destination row is removed first.
"""

from __future__ import annotations

import json
import logging
import random
import threading
import time
from collections import Counter
from collections.abc import Callable, Sequence
from dataclasses import dataclass, replace
from typing import Any, Final, TypeVar

from lakesync.collector import collector_paused
from lakesync.core.canonical import JsonValue
from lakesync.core.delta import RowDelta
from lakesync.core.errors import DestinationError
from lakesync.core.merge import RowState, StateParts, merge_all, state_from_json, state_json_text
from lakesync.core.schema import ColumnType, TableSchema
from lakesync.ports import ApplyStats
from lakesync.sql.coerce import NOT_REPRESENTABLE, Coerced, coerce_value, decode_value
from lakesync.sql.dialect import (
    LayoutError,
    TableLayout,
    check_layout,
    columns_from_json,
    layout_for,
)
from lakesync.sql.executor import ErrorKind, Executor, Run, scrub

__all__ = ["SqlApplyStats", "SqlDestination"]

logger = logging.getLogger(__name__)

_T = TypeVar("_T")

MAX_ATTEMPTS: Final = 8
"""Tries of one call before a retryable error is raised."""
_BACKOFF_S: Final = 0.02
_BACKOFF_CAP_S: Final = 1.0
WRITE_CHUNK_ROWS: Final = 2500
"""Rows merged and written per chunk of a call (one transaction either way)."""
STATE_CACHE_BYTES: Final = 16 * 1024 * 1024
"""Stored state text kept decoded per table and process; a stored state equal to the kept text is not decoded again."""


@dataclass(frozen=True, slots=True)
class SqlApplyStats(ApplyStats):
    """:class:`~lakesync.ports.ApplyStats` plus what coercion cost.

    Attributes:
        nulled: Column values written as NULL because the column's type cannot represent them.
        skipped: Live rows not written because a primary-key column would be NULL, or (MySQL/MariaDB) their row id
            is longer than a key column holds.
        attempts: Transactions it took (1 unless a deadlock or serialization failure forced a retry).
    """

    nulled: int = 0
    skipped: int = 0
    attempts: int = 1


@dataclass(slots=True)
class _Known:
    """A row's committed state as stored (``text``), decoded, with its encoded columns and its last projection."""

    text: str
    state: RowState
    parts: StateParts | None = None
    layout: TableLayout | None = None
    coerced: tuple[Coerced, ...] | None = None


class _SchemaBehind(Exception):
    """The table lacks columns of the schema (another process's cache was stale, or ours): ensure again."""


class SqlDestination:
    """A :class:`~lakesync.ports.Destination` over one SQL connection (one call at a time; thread-safe).

    Args:
        name: The destination's name (for messages and metrics).
        executor: The driver executor; the destination owns it and closes it in :meth:`close`.
        sleep: Backoff sleep (injectable for tests).
    """

    def __init__(self, name: str, executor: Executor, *, sleep: Any = time.sleep) -> None:
        self.name = name
        self.executor = executor
        self.dialect = executor.dialect
        self._sleep = sleep
        self._lock = threading.Lock()
        self._system_ready = False
        self._ensured: set[TableLayout] = set()
        self._known: dict[tuple[str, str], dict[str, _Known]] = {}
        self._known_bytes: dict[tuple[str, str], int] = {}
        self._layouts: dict[TableLayout, TableLayout] = {}

    def __repr__(self) -> str:
        return f"SqlDestination({self.name!r}, {self.dialect.name}, {self.executor.location})"

    # -- public API ----------------------------------------------------------------------------------------------

    def apply(self, schema: TableSchema, deltas: Sequence[RowDelta]) -> SqlApplyStats:
        """Merge ``deltas`` (all of ``schema.delta_table``) into table ``schema.table``, atomically.

        Returns:
            What the call did; ``unchanged`` counts touched rows whose destination row did not change.

        Raises:
            DestinationError: the layout is refused (not retryable), a delta names another table (not retryable),
                the database refused (not retryable) or kept failing transiently / lost the connection (retryable).
        """
        layout = self._layout(schema)
        source = schema.delta_table
        others = {delta.table for delta in deltas} - {source}
        if others:
            raise DestinationError(
                f"destination {self.name}: a delta of table {min(others)!r} in a batch for {source!r}",
                retryable=False,
            )
        with self._lock, collector_paused():
            groups: dict[str, list[RowDelta]] = {}
            for delta in deltas:
                row = groups.get(delta.row_id)
                if row is None:
                    groups[delta.row_id] = [delta]
                else:
                    row.append(delta)
            unkeyable = self._unkeyable_row_ids(layout, groups)
            stats = self._with_retries(lambda attempt: self._apply_once(layout, source, groups, len(deltas), attempt))
            return replace(stats, skipped=stats.skipped + unkeyable) if unkeyable else stats

    def rows(self, schema: TableSchema) -> dict[str, dict[str, Any]]:
        """The live rows of ``schema.table`` by ``row_id`` (soft-deleted excluded), schema columns only.

        Values are decoded back to JSON values: numbers as floats, booleans as bools, json columns parsed.
        """
        layout = self._layout(schema)
        names = list(layout.column_names)

        def read(attempt: int) -> dict[str, dict[str, Any]]:
            self._ensure(layout)
            with self.executor.transaction() as run:
                result = run(self.dialect.select_rows(layout, names))
            return {
                str(row[0]): {n: decode_value(v, layout.types[n]) for n, v in zip(names, row[1:], strict=True)}
                for row in result
            }

        with self._lock:
            return self._with_retries(read)

    def close(self) -> None:
        """Close the connection and drop the kept states."""
        self.executor.close()
        self._known.clear()
        self._known_bytes.clear()

    # -- the call ------------------------------------------------------------------------------------------------

    def _unkeyable_row_ids(self, layout: TableLayout, groups: dict[str, list[RowDelta]]) -> int:
        """Drop the rows whose id is longer than the database's key columns hold; how many.

        Failing the call instead would fail every batch holding such a row, forever; truncating would write it over
        another row. It is skipped and counted, like a row whose primary key is NULL.
        """
        limit = self.dialect.max_key_chars
        if limit is None:
            return 0
        too_long = [row_id for row_id in groups if len(row_id) > limit]
        for row_id in too_long:
            del groups[row_id]
        if too_long:
            logger.warning(
                "destination %s: %d row(s) of %s skipped: row id longer than %d characters (first: %r...)",
                self.name,
                len(too_long),
                layout.table,
                limit,
                too_long[0][:40],
            )
        return len(too_long)

    def _coerce(self, layout: TableLayout, name: str, ctype: ColumnType, value: JsonValue) -> Coerced:
        """``value`` for column ``name``; text too long for a key column is not representable."""
        coerced = coerce_value(value, ctype, allow_nul=self.dialect.allow_nul)
        limit = self.dialect.max_key_chars
        if (
            limit is not None
            and isinstance(coerced.value, str)
            and len(coerced.value) > limit
            and (name in layout.primary_key or name == layout.external_id)
        ):
            return NOT_REPRESENTABLE
        return coerced

    def _layout(self, schema: TableSchema) -> TableLayout:
        layout = layout_for(schema)
        try:
            check_layout(layout, self.dialect.max_identifier)
        except LayoutError as exc:
            raise DestinationError(f"destination {self.name}: {exc}", retryable=False) from None
        return layout

    def _with_retries(self, body: Callable[[int], _T]) -> _T:
        attempt = 0
        while True:
            attempt += 1
            try:
                return body(attempt)
            except _SchemaBehind:
                self._ensured.clear()
                kind: ErrorKind | None = ErrorKind.RETRY
                error: BaseException | None = None
            except DestinationError:
                raise
            except Exception as exc:
                kind = self.executor.classify(exc)
                if kind is None:
                    raise
                error = exc
            if kind is ErrorKind.CONNECTION:
                self.executor.reset()
                self._system_ready = False
                self._ensured.clear()
            if kind is ErrorKind.FATAL or attempt >= MAX_ATTEMPTS:
                message = scrub(
                    f"destination {self.name} ({self.dialect.name}) failed: {type(error).__name__}: {error}",
                    self.executor.secrets,
                )
                raise DestinationError(message, retryable=kind is not ErrorKind.FATAL) from None
            delay = min(_BACKOFF_CAP_S, _BACKOFF_S * 2 ** (attempt - 1))
            self._sleep(delay * (0.5 + random.random()))

    def _ensure(self, layout: TableLayout) -> None:
        if layout in self._ensured:
            return
        dialect = self.dialect
        if not self._system_ready:
            with self.executor.transaction(ddl=True) as run:
                for sql in dialect.create_system_tables():
                    run(_stmt(sql))
            self._system_ready = True
        with self.executor.transaction(ddl=True) as run:
            for sql in dialect.create_table(layout):
                run(_stmt(sql))
            existing = {str(r[0]).lower() for r in run(dialect.existing_columns(layout.table))}
            for name, ctype in layout.columns:
                if name.lower() not in existing:
                    run(_stmt(dialect.add_column(layout.table, name, ctype)))
            if layout.soft_delete and "deleted_at" not in existing:
                run(_stmt(dialect.add_deleted_at(layout.table)))
        with self.executor.transaction() as run:
            run(dialect.insert_meta(layout.table))
            meta = _meta_columns(run(dialect.read_meta(layout.table, exclusive=True)))
            known = {name for name, _ in meta}
            added = [(n, t) for n, t in layout.columns if n not in known]
            if added:
                self._backfill(run, layout, added)
                run(dialect.update_meta(layout.table, [*meta, *added]))
        self._ensured.add(layout)

    def _backfill(self, run: Run, layout: TableLayout, added: list[tuple[str, Any]]) -> None:
        """Set the added columns of existing live rows from their states (the state keeps every column)."""
        names = [n for n, _ in added]
        rows: list[tuple[Any, ...]] = []
        for row_id, text in run(self.dialect.all_states(layout.table)):
            values = state_from_json("", str(row_id), json.loads(text)).values()
            if values is None:
                continue
            coerced = [coerce_value(values.get(n), t, allow_nul=self.dialect.allow_nul).value for n, t in added]
            if any(v is not None for v in coerced):
                rows.append((str(row_id), *coerced))
        if rows:
            logger.info("destination %s: back-filling %s of %d rows in %s", self.name, names, len(rows), layout.table)
        for stmt in self.dialect.backfill(layout, names, rows):
            run(stmt)

    def _apply_once(
        self, wanted: TableLayout, source: str, groups: dict[str, list[RowDelta]], count: int, attempt: int
    ) -> SqlApplyStats:
        self._ensure(wanted)
        dialect = self.dialect
        row_ids = sorted(groups)
        cache_key = (wanted.table, source)
        known = self._known.setdefault(cache_key, {})
        learned: dict[str, _Known] = {}
        with self.executor.transaction() as run:
            meta = _meta_columns(run(dialect.read_meta(wanted.table, exclusive=False)))
            names = {name for name, _ in meta}
            if any(name not in names for name in wanted.column_names):
                raise _SchemaBehind
            # Project onto every materialised column, including ones a newer schema added: the row stays the fold.
            layout = wanted.with_columns(meta)
            layout = self._layouts.setdefault(layout, layout)  # one object per layout: projections compare by identity
            if not row_ids:
                return SqlApplyStats(deltas=count, attempts=attempt)
            stored = self._lock_states(run, layout.table, row_ids)

            upserted = deleted = unchanged = skipped = 0
            nulled: Counter[str] = Counter()
            keyed = layout.primary_key != ("row_id",)
            # Rows go in chunks, each written as soon as it is merged: a driver that pipelines (PostgreSQL) lets the
            # database write one chunk while the next is merged. Only rows keyed by row_id alone are independent of
            # each other; with a primary key or an external id of columns, a row may take over the key another row
            # leaves in the same call, so all key moves must come before all upserts: one chunk.
            chunk = WRITE_CHUNK_ROWS if not keyed and layout.external_id is None else len(row_ids)
            for start in range(0, len(row_ids), chunk):
                new_states: list[tuple[str, str]] = []
                live: list[tuple[Any, ...]] = []
                dead: list[str] = []
                moved: list[str] = []
                for row_id in row_ids[start : start + chunk]:
                    text = stored.get(row_id)
                    before = known.get(row_id)
                    if text is None:
                        before = None
                    elif before is None or before.text != text:
                        state_json = json.loads(text)
                        before = _Known(text, state_from_json(source, row_id, state_json, trusted=True))
                        learned[row_id] = before
                    old = before.state if before is not None else None
                    state, changed = merge_all(old, groups[row_id])
                    if not changed or state is None:
                        unchanged += 1
                        continue
                    new_text, parts = state_json_text(state, before.parts if before is not None else None)
                    new_states.append((row_id, new_text))
                    after = _Known(new_text, state, parts)
                    learned[row_id] = after
                    was_live = old is not None and old.exists
                    if not state.exists:
                        if was_live:
                            dead.append(row_id)
                        else:
                            unchanged += 1
                        continue
                    row = self._project(layout, row_id, after, before, nulled)
                    if keyed and was_live and old is not None:
                        old_key = self._key_of(layout, row_id, old)
                        if old_key is not None and old_key != self._key_of(layout, row_id, state):
                            moved.append(row_id)
                    if row is None:
                        skipped += 1
                        continue
                    live.append(row)
                self._write(run, layout, new_states, live, dead, moved)
                upserted += len(live)
                deleted += len(dead)
        self._remember(cache_key, learned)
        if nulled:
            logger.warning(
                "destination %s: %d value(s) not representable in %s written as NULL: %s",
                self.name,
                sum(nulled.values()),
                layout.table,
                dict(nulled),
            )
        return SqlApplyStats(
            deltas=count,
            upserted=upserted,
            deleted=deleted,
            unchanged=unchanged,
            nulled=sum(nulled.values()),
            skipped=skipped,
            attempts=attempt,
        )

    def _write(
        self,
        run: Run,
        layout: TableLayout,
        new_states: list[tuple[str, str]],
        live: list[tuple[Any, ...]],
        dead: list[str],
        moved: list[str],
    ) -> None:
        """Write one chunk: states, then rows whose key moved out of the way, the live rows, the deleted ones."""
        dialect = self.dialect
        for stmt in dialect.write_states(layout.table, new_states):
            run(stmt)
        if moved:
            hard = TableLayout(layout.table, layout.columns, layout.primary_key, layout.external_id, False)
            for stmt in dialect.delete_rows(hard, moved):
                run(stmt)
        rest = live
        by_key = dialect.update_by_key(layout, live)
        if by_key is not None:
            matched = {str(r[0]) for r in run(by_key)}
            rest = [r for r in live if r[0] not in matched]
        for stmt in dialect.upsert_rows(layout, rest):
            run(stmt)
        for stmt in dialect.delete_rows(layout, dead):
            run(stmt)

    def _lock_states(self, run: Run, table: str, row_ids: list[str]) -> dict[str, str | None]:
        """Lock the state rows of ``row_ids`` (creating the missing ones) and return their stored states.

        The rows that exist are locked first, in one statement; only rows seen for the first time are created and
        then locked (a row another consumer created meanwhile comes back with its state).
        """
        dialect = self.dialect
        stored: dict[str, str | None] = {}
        for stmt in dialect.lock_states(table, row_ids):
            stored.update((str(rid), text) for rid, text in run(stmt))
        missing = [rid for rid in row_ids if rid not in stored]
        if missing:
            for stmt in dialect.ensure_states(table, missing):
                run(stmt)
            for stmt in dialect.lock_states(table, missing):
                stored.update((str(rid), text) for rid, text in run(stmt))
        return stored

    def _remember(self, cache_key: tuple[str, str], learned: dict[str, _Known]) -> None:
        """Keep the committed states (bounded by their text size; the whole table's cache is dropped when full)."""
        known = self._known[cache_key]
        size = self._known_bytes.get(cache_key, 0)
        for row_id, entry in learned.items():
            previous = known.get(row_id)
            size += len(entry.text) - (len(previous.text) if previous is not None else 0)
            known[row_id] = entry
        if size > STATE_CACHE_BYTES:
            known.clear()
            size = 0
        self._known_bytes[cache_key] = size

    def _project(
        self,
        layout: TableLayout,
        row_id: str,
        after: _Known,
        before: _Known | None,
        nulled: Counter[str],
    ) -> tuple[Any, ...] | None:
        """The row to write (``None`` if a primary-key column would be NULL); ``after`` keeps it for the next call.

        A column whose :class:`ColumnState` did not change since ``before`` was projected under the same layout keeps
        its coerced value.
        """
        state = after.state
        reuse = before is not None and before.layout is layout and before.coerced is not None
        old_columns = before.state.columns if before is not None else {}
        old_coerced = before.coerced if reuse and before is not None else None
        columns = state.columns
        coerced_row: list[Coerced] = []
        out: list[Any] = [row_id]
        for i, (name, ctype) in enumerate(layout.columns):
            col = columns.get(name)
            if old_coerced is not None and old_columns.get(name) is col:
                coerced = old_coerced[i]
            else:
                coerced = self._coerce(layout, name, ctype, None if col is None else col.value)
            if coerced.dropped:
                nulled[name] += 1
            coerced_row.append(coerced)
            out.append(coerced.value)
        after.layout, after.coerced = layout, tuple(coerced_row)
        for key in layout.primary_key:
            if key != "row_id" and out[1 + layout.column_names.index(key)] is None:
                return None
        return tuple(out)

    def _key_of(self, layout: TableLayout, row_id: str, state: RowState) -> tuple[Any, ...] | None:
        values = state.values()
        if values is None:
            return None
        return tuple(
            row_id if key == "row_id" else self._coerce(layout, key, layout.types[key], values.get(key)).value
            for key in layout.primary_key
        )


def _stmt(sql: str) -> Any:
    from lakesync.sql.dialect import Statement

    return Statement(sql)


def _meta_columns(rows: list[tuple[Any, ...]]) -> list[tuple[str, Any]]:
    if not rows:
        raise _SchemaBehind
    text = rows[0][0]
    if isinstance(text, bytes | bytearray):
        text = text.decode("utf-8")
    return list(columns_from_json(str(text)))
