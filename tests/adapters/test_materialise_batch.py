"""The consumer's batch (lakesync.gateway.materialise.materialise_batch): jobs of one gateway and table are applied
together, the rows equal the fold, and a job that makes a destination fail still fails alone."""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import replace
from pathlib import Path

from lakesync.aws.destinations import ConfiguredDestinations
from lakesync.core.delta import RowDelta
from lakesync.core.errors import DestinationError, LakeSyncError, StorageError
from lakesync.core.materialise import MaterialiseJob, PayloadError
from lakesync.core.merge import fold
from lakesync.core.schema import TableSchema
from lakesync.gateway.materialise import JobOutcome, MaterialiseDeps, MaterialiseFailed, materialise_batch
from lakesync.gateway.memory import InMemoryConfigStore, InMemoryObjectStore
from lakesync.ports import ApplyStats
from lakesync.sql import SqlDestination, connect
from tests.adapters.conftest import H, dele, ins, job_message, schema_of, upd


class Watched:
    """A real SQLite destination that records every apply and refuses batches holding a row named ``poison``."""

    def __init__(self, inner: SqlDestination) -> None:
        self.name = inner.name
        self.inner = inner
        self.calls: list[int] = []

    def apply(self, schema: TableSchema, deltas: Sequence[RowDelta]) -> ApplyStats:
        self.calls.append(len(deltas))
        if any(d.row_id == "poison" for d in deltas):
            raise DestinationError("refused: poison row", retryable=False)
        return self.inner.apply(schema, deltas)

    def close(self) -> None:
        self.inner.close()


def setup(tmp_path: Path) -> tuple[MaterialiseDeps, InMemoryObjectStore, Watched, TableSchema]:
    config, objects = InMemoryConfigStore(), InMemoryObjectStore()
    schema = schema_of("todos")
    config.put_schema("gw", schema, 1, 0)
    watched = Watched(connect(f"sqlite:///{tmp_path / 'm.db'}", name="lite"))
    deps = MaterialiseDeps(objects, "claims", config, ConfiguredDestinations(config, extra=[watched]))
    return deps, objects, watched, schema


def history() -> list[list[RowDelta]]:
    """Four jobs touching the same rows from several clients, with a delete and an older write arriving late."""
    return [
        [ins("todos", f"r{i}", H(1), "a", title=f"a{i}", n=i) for i in range(5)],
        [upd("todos", "r1", H(3), "b", title="b1"), dele("todos", "r2", H(3), "b")],
        [upd("todos", "r1", H(2), "c", title="late", done=True), upd("todos", "r2", H(2), "c", n=9)],
        [upd("todos", f"r{i}", H(4), "a", n=40 + i) for i in range(3, 5)],
    ]


def test_jobs_of_one_table_are_applied_together_and_equal_the_fold(tmp_path: Path) -> None:
    deps, objects, watched, schema = setup(tmp_path)
    jobs = history()
    messages, lo = [], 0
    for deltas in jobs:
        messages.append(job_message(objects, "todos", deltas, lo))
        lo += len(deltas)

    results = materialise_batch(deps, messages[::-1])

    assert all(isinstance(r, JobOutcome) for r in results)
    assert watched.calls == [sum(len(d) for d in jobs)]  # one apply for the whole batch
    first = results[0]
    assert isinstance(first, JobOutcome) and len(first.together) == 4 and first.applied
    assert all(isinstance(r, JobOutcome) and not r.applied for r in results[1:])
    everything = [d for deltas in jobs for d in deltas]
    expected = {}
    for row in sorted({d.row_id for d in everything}):
        state = fold(d for d in everything if d.row_id == row)
        if state is not None and state.exists:
            values = state.values() or {}
            # Numbers come back from the table as floats.
            expected[row] = {c: values.get(c) for c in schema.column_names}
            if expected[row]["n"] is not None:
                expected[row]["n"] = float(expected[row]["n"])
    assert watched.inner.rows(schema) == expected
    assert set(expected) == {"r0", "r1", "r3", "r4"} and expected["r1"]["title"] == "b1"


def test_a_job_that_fails_a_destination_fails_alone_and_the_rest_of_its_group_is_applied(tmp_path: Path) -> None:
    deps, objects, watched, schema = setup(tmp_path)
    good = job_message(objects, "todos", [ins("todos", "r1", H(1), title="kept")], 0)
    poison = job_message(objects, "todos", [ins("todos", "poison", H(1), title="x")], 1)
    later = job_message(objects, "todos", [upd("todos", "r1", H(2), n=2)], 2)
    broken = '{"v": 1, "not": "a job"}'

    results = materialise_batch(deps, [good, poison, broken, later])

    kinds: list[type[JobOutcome | LakeSyncError]] = [type(r) for r in results]
    assert kinds == [JobOutcome, MaterialiseFailed, PayloadError, JobOutcome]
    # The combined apply was refused, then each job went alone: only the poison job failed.
    assert watched.calls == [3, 1, 1, 1]
    assert watched.inner.rows(schema) == {"r1": {"title": "kept", "done": None, "n": 2.0}}


class Unserved(InMemoryObjectStore):
    """An object store that will not serve one key (an archived payload: S3 answers InvalidObjectState)."""

    def __init__(self, inner: InMemoryObjectStore, refused: str) -> None:
        super().__init__()
        self.inner, self.refused = inner, refused

    def get(self, key: str) -> bytes | None:
        if key == self.refused:
            raise StorageError("S3 GetObject failed: InvalidObjectState")
        return self.inner.get(key)


def test_a_job_whose_payload_the_store_will_not_serve_fails_alone(tmp_path: Path) -> None:
    deps, objects, watched, schema = setup(tmp_path)
    good = job_message(objects, "todos", [ins("todos", "r1", H(1), title="kept")], 0)
    archived = job_message(objects, "todos", [ins("todos", "r2", H(1), title="x")], 1)
    later = job_message(objects, "todos", [upd("todos", "r1", H(2), n=2)], 2)
    unserved = replace(deps, payloads=Unserved(objects, MaterialiseJob.from_message(archived).key))

    results = materialise_batch(unserved, [good, archived, later])

    # Then that job alone fails, with the store's error, and the others are applied together
    assert [type(r) for r in results] == [JobOutcome, StorageError, JobOutcome]
    assert watched.calls == [2]
    assert watched.inner.rows(schema) == {"r1": {"title": "kept", "done": None, "n": 2.0}}


class FlakyConfig(InMemoryConfigStore):
    """A config store whose schema reads fail the first ``failures`` times (a throttled or unreachable table)."""

    def __init__(self, inner: InMemoryConfigStore, failures: int) -> None:
        super().__init__()
        self.inner, self.failures = inner, failures

    def get_schemas(self, gateway: str) -> dict[str, tuple[TableSchema, int]]:
        if self.failures > 0:
            self.failures -= 1
            raise StorageError("DynamoDB Query failed: ThrottlingException")
        return self.inner.get_schemas(gateway)


def test_a_group_whose_apply_fails_before_the_destinations_is_applied_job_by_job(tmp_path: Path) -> None:
    deps, objects, watched, schema = setup(tmp_path)
    first = job_message(objects, "todos", [ins("todos", "r1", H(1), title="kept")], 0)
    second = job_message(objects, "todos", [upd("todos", "r1", H(2), n=2)], 1)

    # When the combined apply's schema read fails once, then succeeds
    results = materialise_batch(replace(deps, config=FlakyConfig(deps.config, 1)), [first, second])

    # Then each job was applied on its own, and both are done
    assert [type(r) for r in results] == [JobOutcome, JobOutcome]
    assert watched.calls == [1, 1]
    assert watched.inner.rows(schema) == {"r1": {"title": "kept", "done": None, "n": 2.0}}

    # And when the reads keep failing, every job reports the store's error (retried by the queue), nothing applied
    results = materialise_batch(replace(deps, config=FlakyConfig(deps.config, 3)), [first, second])
    assert [type(r) for r in results] == [StorageError, StorageError]
    assert watched.calls == [1, 1]
