"""migrate: copy between adapters, resumable after a crash, idempotent; the target ends with the fold of every delta
(lakesync.core.merge), whatever was re-applied. Also the ``lakesync migrate`` command."""

from __future__ import annotations

import json
import random
from collections.abc import Callable, Sequence
from pathlib import Path
from typing import Any

import pytest

from lakesync.adapters import (
    LifecycleDestination,
    MigrateCheckpoint,
    MigrateError,
    MigrateProgress,
    SqlStateDestination,
    migrate,
    migrate_source,
)
from lakesync.cli import main
from lakesync.core.delta import RowDelta
from lakesync.core.merge import RowState, fold
from lakesync.core.schema import TableSchema
from tests.adapters.conftest import H, dele, schema_of, upd

pytestmark = pytest.mark.integration

Open = Callable[[str, str], SqlStateDestination]


def history(table: str, rows: int, seed: int) -> list[RowDelta]:
    """Writes by three clients with HLC ties, deletes and resurrections, in a random order."""
    rng = random.Random(seed)
    out: list[RowDelta] = []
    for i in range(rows * 4):
        row, hlc, client = f"r{rng.randrange(rows):03d}", H(rng.randrange(1, 60)), rng.choice("abc")
        if rng.random() < 0.15:
            out.append(dele(table, row, hlc, client))
        else:
            cols = rng.sample([("title", f"t{i}"), ("done", rng.random() < 0.5), ("n", i)], rng.randrange(0, 3))
            out.append(upd(table, row, hlc, client, **dict(cols)))
    rng.shuffle(out)
    return out


def folds(deltas: Sequence[RowDelta]) -> dict[str, RowState]:
    out = {}
    for row in sorted({d.row_id for d in deltas}):
        state = fold(d for d in deltas if d.row_id == row)
        assert state is not None
        out[row] = state
    return out


def live(states: dict[str, RowState]) -> dict[str, dict[str, Any]]:
    out = {}
    for row, state in states.items():
        values = state.values()
        if values is not None:
            out[row] = {
                c: (float(v) if c == "n" and v is not None else v)
                for c in ("title", "done", "n")
                for v in [values.get(c)]
            }
    return out


def all_states(dest: SqlStateDestination, schema: TableSchema) -> dict[str, RowState]:
    return {s.row_id: s for s in dest.states(schema, limit=10_000).states}


class CrashAfter:
    """A checkpoint file whose n-th save dies: the page was applied to the target, its position not saved."""

    def __init__(self, inner: MigrateCheckpoint, saves: int) -> None:
        self.inner, self.saves = inner, saves

    def __getattr__(self, name: str) -> Any:
        return getattr(self.inner, name)

    def put(self, table: str, position: Any) -> None:
        self.saves -= 1
        if self.saves < 0:
            raise KeyboardInterrupt("killed")
        self.inner.put(table, position)


def test_a_crashed_migration_resumes_and_ends_with_the_fold_of_everything(
    open_state: Open, table: str, tmp_path: Path
) -> None:
    schema, other = schema_of(table), schema_of(table + "_b", softDelete=False)
    source, target = open_state("postgres", "mig_src"), open_state("mariadb", "mig_dst")
    deltas, deltas_b = history(table, 40, seed=1), history(other.table, 15, seed=2)
    for i in range(0, len(deltas), 25):  # the source got them in many batches
        source.apply(schema, deltas[i : i + 25])
    source.apply(other, deltas_b)
    # The target already has writes of its own, some newer than the source's: migrate must keep them.
    own = [upd(table, "r001", H(100), "z", title="target's newer"), upd(table, "r999", H(5), "z", title="only here")]
    target.apply(schema, own)

    path = tmp_path / "cp.json"
    progress: list[MigrateProgress] = []
    with pytest.raises(KeyboardInterrupt):
        migrate(source, target, [schema, other], checkpoint=CrashAfter(MigrateCheckpoint("job", path), 3), batch=7)
    saved = json.loads(path.read_text())["tables"][table]
    assert saved["rows"] == 21 and not saved["done"]  # 3 pages saved; the 4th was applied, then the crash

    resumed = migrate(
        source, target, [schema, other], checkpoint=MigrateCheckpoint("job", path), batch=7, on_progress=progress.append
    )
    assert resumed.resumed and resumed.tables[table].done and resumed.tables[other.table].done
    n, n_b = len(folds(deltas)), len(folds(deltas_b))
    assert resumed.tables[table].rows == n and resumed.tables[other.table].rows == n_b
    assert progress[0] == MigrateProgress(table, 28, 7, False)  # continued after the saved position
    assert progress[-1].done and progress[-1].table == other.table

    # The target holds exactly the fold of the source's deltas and its own (the re-applied page was harmless).
    assert all_states(target, schema) == folds(deltas + own)
    assert all_states(target, other) == folds(deltas_b)
    assert target.rows(schema) == live(folds(deltas + own))
    assert target.rows(other) == live(folds(deltas_b))
    # Running it all again from scratch changes nothing; and a finished checkpoint does nothing at all.
    again = migrate(source, target, [schema, other], batch=7)
    assert again.pages == -(-n // 7) - (-n_b // 7) and all_states(target, schema) == folds(deltas + own)
    assert migrate(source, target, [schema, other], checkpoint=MigrateCheckpoint("job", path)).pages == 0


def test_a_checkpoint_of_another_migration_is_refused(tmp_path: Path) -> None:
    path = tmp_path / "cp.json"
    MigrateCheckpoint("job-a", path).put("t", MigrateCheckpoint("job-a").get("t"))
    with pytest.raises(MigrateError, match="belongs to another migration"):
        MigrateCheckpoint("job-b", path)
    path.write_text("{not json")
    with pytest.raises(MigrateError, match="cannot be read"):
        MigrateCheckpoint("job-a", path)


class ListSource:
    def __init__(self, deltas: list[RowDelta]) -> None:
        self.name = "list"
        self.deltas = sorted(deltas, key=lambda d: (d.hlc, d.delta_id))

    def query_deltas_since(self, since_hlc: int, limit: int) -> list[RowDelta]:
        return [d for d in self.deltas if d.hlc > since_hlc][:limit]


class FailingTarget:
    def __init__(self, inner: SqlStateDestination, fail_on: int) -> None:
        self.inner, self.name, self.calls, self.fail_on = inner, inner.name, 0, fail_on

    def apply(self, schema: TableSchema, deltas: Sequence[RowDelta]) -> Any:
        self.calls += 1
        if self.calls == self.fail_on:
            raise KeyboardInterrupt("killed")
        return self.inner.apply(schema, deltas)

    def rows(self, schema: TableSchema) -> Any:
        return self.inner.rows(schema)

    def close(self) -> None:
        self.inner.close()


def test_a_source_migration_resumes_by_hlc_without_splitting_an_hlc(open_state: Open, table: str) -> None:
    schema = schema_of(table)
    deltas = history(table, 20, seed=3)  # 80 deltas over 59 HLCs: many HLCs are shared
    source, target = ListSource(deltas), open_state("sqlite", "mig_source")
    checkpoint = MigrateCheckpoint("src")
    with pytest.raises(KeyboardInterrupt):
        migrate_source(source, FailingTarget(target, fail_on=4), [schema], checkpoint=checkpoint, batch=5)
    result = migrate_source(source, target, [schema], checkpoint=checkpoint, batch=5)
    assert result.tables["*source*"].done and result.skipped_deltas == 0
    assert all_states(target, schema) == folds(deltas)
    # Tables without a schema are counted, not copied.
    stray = [upd("stray", "x", H(70), title="no schema")]
    skipped = migrate_source(ListSource(deltas + stray), target, [schema], batch=5)
    assert skipped.skipped_deltas == 1


def test_a_lifecycle_is_a_migrate_source_with_both_tiers(open_state: Open, table: str) -> None:
    schema = schema_of(table)
    hot, cold, target = open_state("sqlite", "lc_hot"), open_state("sqlite", "lc_cold"), open_state("postgres", "lc")
    lifecycle = LifecycleDestination("lc", hot, cold, max_age_ms=0, clock=lambda: 30)
    deltas = history(table, 12, seed=4)
    lifecycle.apply(schema, deltas[:30])
    lifecycle.sweep(schema)
    lifecycle.apply(schema, deltas[30:])
    migrate(lifecycle, target, [schema], batch=4)
    assert all_states(target, schema) == folds(deltas)
    assert target.rows(schema) == lifecycle.rows(schema) == live(folds(deltas))


def test_the_migrate_command_copies_between_databases_and_resumes(
    open_state: Open, url_of: Callable[[str, str], str], table: str, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    schema = schema_of(table, softDelete=False)
    source_url, target_url = url_of("sqlite", "cli_src"), url_of("postgres", "cli_dst")
    source = open_state("sqlite", "cli_src")
    deltas = history(table, 10, seed=5)
    source.apply(schema, deltas)
    checkpoint = tmp_path / "cp.json"
    argv = ["migrate", "--from", source_url, "--to", target_url, "--tables", table, "--checkpoint", str(checkpoint)]
    assert main([*argv, "--batch", "3"]) == 0
    out = capsys.readouterr()
    assert f"{table}: 10 rows copied (done)" in out.err and "migrated (started; 4 pages this run)" in out.out
    target = open_state("postgres", "cli_dst")
    assert all_states(target, schema) == folds(deltas)
    assert target.rows(schema) == live(folds(deltas))
    # The table was rebuilt from the source's record: hard delete, so no deleted_at column.
    assert [s.soft_delete for s in source.stored_schemas([table])] == [False]
    # Done: a re-run resumes and copies nothing; --restart copies again, harmlessly.
    assert main(argv) == 0 and "resumed; 0 pages" in capsys.readouterr().out
    assert main([*argv, "--restart"]) == 0 and "started; 1 pages" in capsys.readouterr().out
    assert all_states(target, schema) == folds(deltas)
    # Bad input is a clear error, not a traceback.
    assert main(["migrate", "--from", source_url, "--to", target_url, "--tables", "nope", "--checkpoint", ""]) == 1
    assert "Unknown table(s) in the source: nope" in capsys.readouterr().err
