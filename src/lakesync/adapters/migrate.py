"""``migrate``: copy everything from one adapter to another, resumable and idempotent.

Two sources:

* a destination whose states can be read (:class:`~lakesync.adapters.state.StateReader`: a SQL destination wrapped
  in :class:`~lakesync.adapters.state.SqlStateDestination`, or a Composite, FanOut or Lifecycle of them):
  :func:`migrate` copies each table's row **states** (per-column versions and tombstones, not the projected rows),
  page by page in ``row_id`` order. The position is per table: the last ``row_id`` copied, and whether the table is
  done;
* a :class:`~lakesync.ports.SourceAdapter`: :func:`migrate_source` copies its deltas in HLC order. The position is
  the HLC up to which every delta was copied (a page is cut before its greatest HLC unless the source had no more,
  so deltas sharing an HLC are never split across the position).

**Idempotent.** A page is applied to the target *before* its position is saved, so a crash (or a kill) at any point
leaves the saved position at or behind what the target holds; a re-run applies the pages after the saved position
again. Re-applied deltas are harmless: the target folds with per-column LWW, and the deltas of a state
(:func:`~lakesync.adapters.state.state_deltas`) fold to exactly that state, so the target ends with
``join(target's own, source's)`` for every row — the same after one run or after ten interrupted ones, and no row is
duplicated (rows are keyed by ``row_id``).

**Checkpoint.** :class:`MigrateCheckpoint` keeps the position in a JSON file (written to a temporary file, fsynced,
then renamed over the old one: a crash never leaves half a file). It records which migration it belongs to and
refuses to resume another one. Without a path it lives in memory (one run).

**Progress.** ``on_progress`` is called after each page with a :class:`MigrateProgress`.

Rows written to the source *during* a migration may or may not be copied (a row whose ``row_id`` was already passed
is not revisited); run it again with a fresh checkpoint to catch up (idempotent), or stop writes first.
"""

from __future__ import annotations

import hashlib
import json
import os
import tempfile
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Final

from lakesync.adapters.state import StateReader, deltas_of
from lakesync.core.delta import RowDelta
from lakesync.core.errors import LakeSyncError
from lakesync.core.schema import TableSchema
from lakesync.ports import Destination, SourceAdapter

__all__ = [
    "MigrateCheckpoint",
    "MigrateError",
    "MigrateProgress",
    "MigrateResult",
    "TablePosition",
    "migrate",
    "migrate_source",
    "migrate_sql",
]

DEFAULT_BATCH: Final = 500
_VERSION: Final = 1
_SOURCE_KEY: Final = "*source*"


class MigrateError(LakeSyncError):
    """A migration cannot run: a checkpoint of another migration, or an unreadable checkpoint."""

    code = "MIGRATE_ERROR"


@dataclass(frozen=True, slots=True)
class TablePosition:
    """Where a table's copy stands.

    Attributes:
        after: The last ``row_id`` copied (or, for a source migration, the HLC as a decimal string); ``None``: none.
        rows: Row states (or deltas) copied so far, over every run (a re-applied page counts again).
        done: The table is copied.
    """

    after: str | None = None
    rows: int = 0
    done: bool = False

    def to_json(self) -> dict[str, Any]:
        """The checkpoint's form."""
        return {"after": self.after, "rows": self.rows, "done": self.done}


@dataclass(frozen=True, slots=True)
class MigrateProgress:
    """Reported after each page.

    Attributes:
        table: The table (``*source*`` for a source migration).
        copied: Rows (or deltas) of the table copied so far, over every run.
        page: Rows (or deltas) in the page just applied.
        done: The table is finished.
    """

    table: str
    copied: int
    page: int
    done: bool


@dataclass(frozen=True, slots=True)
class MigrateResult:
    """What a run did.

    Attributes:
        tables: Per table, its position at the end.
        pages: Pages applied by this run.
        resumed: The run continued a checkpoint.
        skipped_deltas: Source deltas of tables with no schema (not copied).
    """

    tables: dict[str, TablePosition]
    pages: int
    resumed: bool
    skipped_deltas: int = 0


@dataclass
class MigrateCheckpoint:
    """The persisted position of one migration (see the module docstring).

    Args:
        job: What migration this is (e.g. the masked URLs and the tables); a stored checkpoint of another job is
            refused.
        path: The JSON file; ``None`` keeps it in memory.
    """

    job: str
    path: Path | None = None
    positions: dict[str, TablePosition] = field(default_factory=dict)
    resumed: bool = False

    def __post_init__(self) -> None:
        if self.path is None or not self.path.exists():
            return
        try:
            doc = json.loads(self.path.read_text(encoding="utf-8"))
            stored_job = doc["job"]
            positions = {
                t: TablePosition(p["after"], int(p["rows"]), bool(p["done"])) for t, p in doc["tables"].items()
            }
        except (OSError, ValueError, KeyError, TypeError) as exc:
            raise MigrateError(f"The migrate checkpoint {self.path} cannot be read ({type(exc).__name__})") from None
        if doc.get("v") != _VERSION or stored_job != self.job:
            raise MigrateError(
                f"The migrate checkpoint {self.path} belongs to another migration ({stored_job!r}); "
                "remove it or choose another checkpoint file"
            )
        self.positions = positions
        self.resumed = True

    def get(self, table: str) -> TablePosition:
        """The table's position (the start when unknown)."""
        return self.positions.get(table, TablePosition())

    def put(self, table: str, position: TablePosition) -> None:
        """Record the table's position and persist the checkpoint."""
        self.positions[table] = position
        self.save()

    def save(self) -> None:
        """Write the file atomically (temporary file, fsync, rename); nothing for an in-memory checkpoint."""
        if self.path is None:
            return
        doc = {"v": _VERSION, "job": self.job, "tables": {t: p.to_json() for t, p in sorted(self.positions.items())}}
        self.path.parent.mkdir(parents=True, exist_ok=True)
        fd, tmp = tempfile.mkstemp(dir=self.path.parent, prefix=self.path.name, suffix=".tmp")
        try:
            with os.fdopen(fd, "w", encoding="utf-8") as f:
                json.dump(doc, f, indent=1, sort_keys=True)
                f.flush()
                os.fsync(f.fileno())
            os.replace(tmp, self.path)
        except BaseException:
            Path(tmp).unlink(missing_ok=True)
            raise

    @staticmethod
    def job_id(*parts: str) -> str:
        """A short stable id of a migration from its describing parts."""
        return hashlib.sha256("\x00".join(parts).encode("utf-8")).hexdigest()[:16]


def migrate(
    source: StateReader,
    target: Destination,
    schemas: Sequence[TableSchema],
    *,
    checkpoint: MigrateCheckpoint | None = None,
    batch: int = DEFAULT_BATCH,
    on_progress: Callable[[MigrateProgress], None] | None = None,
) -> MigrateResult:
    """Copy the row states of every table of ``schemas`` from ``source`` to ``target``, resuming ``checkpoint``.

    Raises:
        DestinationError: the source or the target failed; the checkpoint holds the position (re-run to resume).
        MigrateError: the checkpoint belongs to another migration.
    """
    if batch < 1:
        raise ValueError("batch must be at least 1")
    cp = checkpoint if checkpoint is not None else MigrateCheckpoint("in-memory")
    pages = 0
    for schema in schemas:
        pos = cp.get(schema.table)
        while not pos.done:
            page = source.states(schema, after=pos.after, limit=batch)
            if page.states:
                target.apply(schema, deltas_of(page.states))
                pages += 1
            done = page.next is None
            pos = TablePosition(page.next if not done else pos.after, pos.rows + len(page.states), done)
            cp.put(schema.table, pos)
            if on_progress is not None:
                on_progress(MigrateProgress(schema.table, pos.rows, len(page.states), done))
    return MigrateResult({s.table: cp.get(s.table) for s in schemas}, pages, cp.resumed)


def migrate_source(
    source: SourceAdapter,
    target: Destination,
    schemas: Sequence[TableSchema],
    *,
    checkpoint: MigrateCheckpoint | None = None,
    batch: int = DEFAULT_BATCH,
    on_progress: Callable[[MigrateProgress], None] | None = None,
) -> MigrateResult:
    """Copy every delta of ``source`` to ``target`` (each delta with every schema whose delta table is its table),
    resuming ``checkpoint`` (the position is an HLC).

    Raises:
        DestinationError: the target failed; the checkpoint holds the position (re-run to resume).
        MigrateError: the checkpoint belongs to another migration.
    """
    if batch < 1:
        raise ValueError("batch must be at least 1")
    cp = checkpoint if checkpoint is not None else MigrateCheckpoint("in-memory")
    by_table: dict[str, list[TableSchema]] = {}
    for schema in schemas:
        by_table.setdefault(schema.delta_table, []).append(schema)
    pos = cp.get(_SOURCE_KEY)
    pages = skipped = 0
    limit = batch
    while not pos.done:
        since = int(pos.after) if pos.after is not None else 0
        fetched = source.query_deltas_since(since, limit)
        done = len(fetched) < limit
        page: list[RowDelta] = fetched
        if not done:
            top = max(d.hlc for d in fetched)
            page = [d for d in fetched if d.hlc < top]
            if not page:  # a whole page shares one HLC: ask for more until that HLC is complete
                limit *= 2
                continue
        limit = batch
        groups: dict[str, list[RowDelta]] = {}
        for delta in page:
            groups.setdefault(delta.table, []).append(delta)
        for table in sorted(groups):
            targets = by_table.get(table)
            if not targets:
                skipped += len(groups[table])
                continue
            for schema in targets:
                target.apply(schema, groups[table])
        if page:
            pages += 1
        after = str(max(d.hlc for d in page)) if page else pos.after
        pos = TablePosition(after, pos.rows + len(page), done)
        cp.put(_SOURCE_KEY, pos)
        if on_progress is not None:
            on_progress(MigrateProgress(_SOURCE_KEY, pos.rows, len(page), done))
    return MigrateResult({_SOURCE_KEY: pos}, pages, cp.resumed, skipped)


def migrate_sql(
    from_url: str,
    to_url: str,
    *,
    tables: Sequence[str] | None = None,
    schemas: Sequence[TableSchema] | None = None,
    checkpoint_path: Path | None = None,
    restart: bool = False,
    batch: int = DEFAULT_BATCH,
    on_progress: Callable[[MigrateProgress], None] | None = None,
) -> MigrateResult:
    """Copy SQL destination ``from_url`` into ``to_url`` (URLs as :func:`lakesync.sql.connect` takes them).

    Args:
        from_url: The source database (its ``_lakesync_state`` is read).
        to_url: The target database.
        tables: Copy only these destination tables (default: every table the source recorded).
        schemas: The tables' schemas (default: rebuilt from the source, see
            :meth:`~lakesync.adapters.state.SqlStateDestination.stored_schemas`).
        checkpoint_path: Where the position is kept (``None``: in memory).
        restart: Start over, ignoring (and then replacing) an existing checkpoint file.
        batch: Rows per page.
        on_progress: Called after each page.

    Raises:
        DestinationError: a database failed (re-run to resume from the checkpoint).
        MigrateError: the checkpoint belongs to another migration, or a named table is unknown.
    """
    from lakesync.adapters.state import SqlStateDestination
    from lakesync.sql import connect, mask_url

    source = SqlStateDestination(connect(from_url, name="from"))
    target = connect(to_url, name="to")
    try:
        chosen = list(schemas) if schemas is not None else source.stored_schemas(tables)
        if tables is not None:
            chosen = [s for s in chosen if s.table in tables]
            missing = sorted(set(tables) - {s.table for s in chosen})
            if missing:
                raise MigrateError(f"Unknown table(s) in the source: {', '.join(missing)}")
        job = MigrateCheckpoint.job_id(mask_url(from_url), mask_url(to_url), *sorted(s.table for s in chosen))
        if restart and checkpoint_path is not None:
            checkpoint_path.unlink(missing_ok=True)
        checkpoint = MigrateCheckpoint(job, checkpoint_path)
        return migrate(source, target, chosen, checkpoint=checkpoint, batch=batch, on_progress=on_progress)
    finally:
        source.close()
        target.close()
