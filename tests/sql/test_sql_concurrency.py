"""Two writers (two connections, like two Lambda invocations) applying overlapping batches to the same rows end at
the fold, on PostgreSQL and MariaDB (row locks, deadlock retries)."""

from __future__ import annotations

import random
import threading
import uuid
from collections.abc import Callable

import pytest

from lakesync.core.delta import RowDelta, make_delta
from lakesync.core.merge import fold
from lakesync.core.schema import parse_table_schema
from lakesync.sql import SqlApplyStats, SqlDestination, connect
from tests.sql.servers import Server

pytestmark = pytest.mark.integration


@pytest.fixture(params=["postgres", "mariadb"])
def server_url(request: pytest.FixtureRequest) -> str:
    server: Server = request.getfixturevalue(f"{request.param}_server")
    return server.url("concurrency")


def _history(rng: random.Random, rows: int, count: int) -> list[RowDelta]:
    deltas = []
    for i in range(count):
        row = f"r{rng.randrange(rows)}"
        client = rng.choice(["a", "b", "c"])
        hlc = rng.randrange(1, 50) << 16
        if rng.random() < 0.1:
            deltas.append(make_delta("DELETE", table="c", row_id=row, client_id=client, hlc=hlc))
        else:
            cols = {rng.choice(["x", "y"]): f"v{i}", "n": rng.randrange(100)}
            deltas.append(make_delta("UPDATE", table="c", row_id=row, client_id=client, hlc=hlc, columns=cols))
    return deltas


def test_two_writers_on_overlapping_rows_end_at_the_fold(server_url: str) -> None:
    rng = random.Random(7)
    schema = parse_table_schema(
        {
            "table": f"c_{uuid.uuid4().hex[:8]}",
            "sourceTable": "c",
            "columns": [
                {"name": "x", "type": "string"},
                {"name": "y", "type": "string"},
                {"name": "n", "type": "number"},
            ],
        }
    )
    deltas = _history(rng, rows=12, count=600)
    streams = [deltas[:], deltas[:]]  # both writers deliver everything, in different orders
    rng.shuffle(streams[0])
    rng.shuffle(streams[1])
    stats: list[SqlApplyStats] = []
    errors: list[BaseException] = []
    dests = [connect(server_url, name=f"w{i}") for i in range(2)]
    # Create the table first so both writers race on rows, not on DDL (DDL races are retried too, but slower).
    dests[0].apply(schema, [])
    barrier = threading.Barrier(2)

    def writer(dest: SqlDestination, stream: list[RowDelta]) -> Callable[[], None]:
        def run() -> None:
            try:
                barrier.wait()
                for i in range(0, len(stream), 25):
                    stats.append(dest.apply(schema, stream[i : i + 25]))
            except BaseException as exc:
                errors.append(exc)

        return run

    threads = [threading.Thread(target=writer(d, s)) for d, s in zip(dests, streams, strict=True)]
    for t in threads:
        t.start()
    for t in threads:
        t.join(timeout=120)
    try:
        assert not errors, errors
        expected = {}
        for row in sorted({d.row_id for d in deltas}):
            state = fold(d for d in deltas if d.row_id == row)
            values = state.values() if state is not None else None
            if values is not None:
                expected[row] = {
                    "x": values.get("x"),
                    "y": values.get("y"),
                    "n": float(values["n"]) if values.get("n") is not None else None,
                }
        assert dests[0].rows(schema) == expected
        assert sum(s.deltas for s in stats) == 2 * len(deltas)
    finally:
        for d in dests:
            d.close()
