"""Fixtures of the SQL destination tests: one parametrized destination over SQLite, PostgreSQL and MariaDB."""

from __future__ import annotations

import sqlite3
import uuid
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pytest

from lakesync.sql import SqlDestination, connect
from tests.sql.servers import Server, mariadb_server, postgres_server

__all__ = ["mariadb_server", "postgres_server"]

KINDS = ("sqlite", "postgres", "mariadb")


@dataclass
class Db:
    """Raw access to the database behind a destination (the test's own connection)."""

    kind: str
    url: str

    def q(self, name: str) -> str:
        return f"`{name}`" if self.kind == "mariadb" else f'"{name}"'

    def _run(self, sql: str, params: tuple[Any, ...], fetch: bool) -> list[tuple[Any, ...]]:
        if self.kind == "sqlite":
            conn = sqlite3.connect(self.url.removeprefix("sqlite:///"))
            try:
                cur = conn.execute(sql.replace("%s", "?"), params)
                rows = [tuple(r) for r in cur.fetchall()] if fetch else []
                conn.commit()
                return rows
            finally:
                conn.close()
        if self.kind == "postgres":
            import psycopg

            with psycopg.connect(self.url, autocommit=True) as pg:
                cur = pg.execute(sql, params or None)
                return list(cur.fetchall()) if fetch else []
        import pymysql

        parts = self.url.removeprefix("mysql://")
        user_host, db = parts.split("/", 1)
        user, hostport = user_host.split("@")
        host, port = hostport.split(":")
        conn2 = pymysql.connect(host=host, port=int(port), user=user, database=db, autocommit=True, charset="utf8mb4")
        try:
            with conn2.cursor() as cur2:
                cur2.execute(sql, params or None)
                return [tuple(r) for r in cur2.fetchall()] if fetch else []
        finally:
            conn2.close()

    def query(self, sql: str, *params: Any) -> list[tuple[Any, ...]]:
        return self._run(sql, params, True)

    def execute(self, sql: str, *params: Any) -> None:
        self._run(sql, params, False)

    def columns(self, table: str) -> list[str]:
        if self.kind == "sqlite":
            return [r[1] for r in self.query(f"PRAGMA table_info({self.q(table)})")]
        schema = "current_schema()" if self.kind == "postgres" else "DATABASE()"
        rows = self.query(
            "SELECT column_name FROM information_schema.columns WHERE table_schema = "
            f"{schema} AND table_name = %s ORDER BY ordinal_position",
            table,
        )
        return [r[0] for r in rows]


def _server_url(request: pytest.FixtureRequest, kind: str, tmp_path: Path) -> str:
    if kind == "sqlite":
        return f"sqlite:///{tmp_path / 'dest.db'}"
    server: Server = request.getfixturevalue("postgres_server" if kind == "postgres" else "mariadb_server")
    return server.url("contract")


@pytest.fixture(params=KINDS)
def kind(request: pytest.FixtureRequest) -> str:
    return str(request.param)


@pytest.fixture
def db_url(request: pytest.FixtureRequest, kind: str, tmp_path: Path) -> str:
    return _server_url(request, kind, tmp_path)


@pytest.fixture
def db(kind: str, db_url: str) -> Db:
    return Db(kind, db_url)


@pytest.fixture
def make_dest(db_url: str) -> Iterator[Callable[[], SqlDestination]]:
    """Opens destinations on the test's database (each one a separate connection and cache, like a process)."""
    opened: list[SqlDestination] = []

    def make() -> SqlDestination:
        dest = connect(db_url, name="test")
        opened.append(dest)
        return dest

    yield make
    for dest in opened:
        dest.close()


@pytest.fixture
def dest(make_dest: Callable[[], SqlDestination]) -> SqlDestination:
    return make_dest()


@pytest.fixture
def table() -> str:
    """A table name unique to the test (the server databases are shared by the session)."""
    return f"t_{uuid.uuid4().hex[:10]}"
