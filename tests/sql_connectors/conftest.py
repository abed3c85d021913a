"""Fixtures of the connector tests: the throwaway PostgreSQL and MariaDB servers (session scope, started by the suite,
never skipped), a fresh database per test on the server of the test's kind, and gateway dependencies in memory with
the connector runtime, a secret store, a position store and a recording scheduler."""

from __future__ import annotations

import uuid
from collections.abc import Iterator
from dataclasses import dataclass
from typing import Any

import pytest

from lakesync import egress
from lakesync.connectors.runtime import ConnectorRuntime
from lakesync.connectors.secrets import InMemorySecretStore
from lakesync.core.hlc import HLC
from lakesync.core.network import LOCAL_DEVELOPMENT
from lakesync.gateway.deps import GatewayDeps
from lakesync.gateway.memory import (
    InMemoryActionStore,
    InMemoryBufferStore,
    InMemoryConfigStore,
    InMemoryPositionStore,
    RecordingScheduler,
)
from tests.sql.servers import Server, mariadb_server, postgres_server

__all__ = ["mariadb_server", "postgres_server"]

GW = "default"


@dataclass
class Source:
    """A database of one kind on its throwaway server, with a driver connection for the test's own writes."""

    kind: str
    url: str
    conn: Any

    def run(self, sql: str, *params: Any) -> None:
        if self.kind == "mysql":
            sql = sql.replace('"', "`")
        with self.conn.cursor() as cur:
            cur.execute(sql, params or None)
        self.conn.commit()

    @property
    def ts_type(self) -> str:
        return "TIMESTAMP(3)"

    def close(self) -> None:
        self.conn.close()


@pytest.fixture(autouse=True)
def local_network_policy() -> Iterator[None]:
    """The test servers listen on loopback: these tests run under ``lakesync local``'s policy (restored after)."""
    previous = egress.configure(LOCAL_DEVELOPMENT)
    yield
    egress.configure(previous)


@pytest.fixture(params=["postgres", "mysql"])
def source(request: pytest.FixtureRequest) -> Iterator[Source]:
    kind = request.param
    server: Server = request.getfixturevalue("postgres_server" if kind == "postgres" else "mariadb_server")
    url = server.url(f"src_{uuid.uuid4().hex[:10]}")
    if kind == "postgres":
        import psycopg

        conn: Any = psycopg.connect(url)
    else:
        import pymysql

        conn = pymysql.connect(host=server.host, port=server.port, user=server.user, database=url.rsplit("/", 1)[1])
    src = Source(kind, url, conn)
    yield src
    src.close()


@pytest.fixture
def deps() -> Iterator[GatewayDeps]:
    config = InMemoryConfigStore()
    secrets = InMemorySecretStore()
    runtime = ConnectorRuntime(config, secrets, config_ttl_s=0.0)
    d = GatewayDeps(
        buffer=InMemoryBufferStore(),
        config=config,
        actions=InMemoryActionStore(),
        clock=HLC(),
        connectors=runtime,
        positions=InMemoryPositionStore(),
        connector_scheduler=RecordingScheduler(),
    )
    yield d
    runtime.close()
