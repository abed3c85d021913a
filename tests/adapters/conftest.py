"""Fixtures of the composition tests: SQL destinations on throwaway SQLite files and PostgreSQL/MariaDB servers."""

from __future__ import annotations

import functools
import json
import uuid
from collections.abc import Callable, Iterator
from pathlib import Path

import pytest

from lakesync.adapters import SqlStateDestination
from lakesync.core.delta import RowDelta
from lakesync.core.materialise import MaterialiseJob, encode_payload, payload_key
from lakesync.gateway.memory import InMemoryObjectStore
from lakesync.sql import connect
from tests import factories
from tests.sql.servers import Server, mariadb_server, postgres_server
from tests.sql.test_destination_contract import H, dele, ins, upd

__all__ = ["H", "dele", "ins", "mariadb_server", "postgres_server", "upd"]

KINDS = ("sqlite", "postgres", "mariadb")

COLUMNS = {"title": "string", "done": "boolean", "n": "number"}
"""The composition tests' table columns."""

schema_of = functools.partial(factories.schema_of, columns=COLUMNS)


@pytest.fixture
def table() -> str:
    """A table name unique to the test (the server databases are shared by the session)."""
    return f"t_{uuid.uuid4().hex[:10]}"


@pytest.fixture
def url_of(request: pytest.FixtureRequest, tmp_path: Path) -> Callable[[str, str], str]:
    """``url_of(kind, database)``: a URL of that database on SQLite (a file), PostgreSQL or MariaDB."""

    def url(kind: str, database: str) -> str:
        if kind == "sqlite":
            return f"sqlite:///{tmp_path / (database + '.db')}"
        server: Server = request.getfixturevalue("postgres_server" if kind == "postgres" else "mariadb_server")
        return server.url(database)

    return url


@pytest.fixture
def open_state(url_of: Callable[[str, str], str]) -> Iterator[Callable[[str, str], SqlStateDestination]]:
    """``open_state(kind, database)``: a state-readable SQL destination (closed after the test)."""
    opened: list[SqlStateDestination] = []

    def make(kind: str, database: str) -> SqlStateDestination:
        dest = SqlStateDestination(connect(url_of(kind, database), name=f"{kind}-{database}"))
        opened.append(dest)
        return dest

    yield make
    for dest in opened:
        dest.close()


def job_message(objects: InMemoryObjectStore, table: str, deltas: list[RowDelta], lo: int) -> str:
    """A materialise job message for ``deltas`` of ``table`` (gateway ``gw``), its payload stored in ``objects``."""
    hi = lo + len(deltas)
    payload = encode_payload(
        "gw", table, f"gw#{table}#0", lo, hi, [(d.row_id, json.dumps(d.to_json())) for d in deltas]
    )
    key = payload_key("gw", table, 0, lo, hi)
    objects.put(key, payload.data)
    job = MaterialiseJob(
        gateway="gw",
        table=table,
        shard=f"gw#{table}#0",
        lo=lo,
        hi=hi,
        deltas=payload.deltas,
        rows=payload.rows,
        bytes=len(payload.data),
        sha256=payload.sha256,
        bucket="claims",
        key=key,
        run_id="run",
    )
    return job.to_message()
