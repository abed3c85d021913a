"""Throwaway PostgreSQL and MariaDB servers for tests (and benchmarks), started in a temporary directory.

Nothing here relies on a service already running: each server is initialised in its own data directory, listens on
127.0.0.1 on a free port, and is stopped (and its directory removed) on exit. The binaries come from the Debian
packages ``postgresql`` and ``mariadb-server``, which ``make setup`` installs when they are missing
(``scripts/sysdeps.sh``); a missing binary is an error, never a skip.

Use the pytest fixtures ``postgres_server`` / ``mariadb_server`` (session scope; import them into a conftest:
``from tests.sql.servers import postgres_server, mariadb_server``) or the context managers
:func:`running_postgres` / :func:`running_mariadb` directly. Each yields a :class:`Server` whose ``url()`` is a
password-free URL for a fresh database (trust authentication, local only).
"""

from __future__ import annotations

import contextlib
import glob
import os
import shutil
import socket
import subprocess
import tempfile
import time
import uuid
from collections.abc import Iterator
from dataclasses import dataclass, field
from pathlib import Path

import pytest

__all__ = [
    "Server",
    "mariadb_server",
    "postgres_server",
    "running_mariadb",
    "running_postgres",
]

_STARTUP_TIMEOUT_S = 60.0


@dataclass
class Server:
    """A running local database server.

    Attributes:
        kind: ``"postgres"`` or ``"mariadb"``.
        host: Always ``127.0.0.1``.
        port: The TCP port.
        user: A superuser without password (trust / grant-less local access).
        data_dir: The server's data directory.
    """

    kind: str
    host: str
    port: int
    user: str
    data_dir: Path
    _databases: list[str] = field(default_factory=list)

    def url(self, database: str | None = None) -> str:
        """A URL for ``database``, created if needed (a fresh uniquely named one when ``None``)."""
        name = database or f"t_{uuid.uuid4().hex[:12]}"
        self.create_database(name)
        scheme = "postgresql" if self.kind == "postgres" else "mysql"
        return f"{scheme}://{self.user}@{self.host}:{self.port}/{name}"

    def create_database(self, name: str) -> None:
        """Create database ``name`` unless it exists."""
        if name in self._databases:
            return
        if self.kind == "postgres":
            import psycopg

            with psycopg.connect(
                host=self.host, port=self.port, user=self.user, dbname="postgres", autocommit=True
            ) as conn:
                exists = conn.execute("SELECT 1 FROM pg_database WHERE datname = %s", (name,)).fetchone()
                if not exists:
                    conn.execute(f'CREATE DATABASE "{name}"')
        else:
            import pymysql

            conn = pymysql.connect(host=self.host, port=self.port, user=self.user, autocommit=True)
            try:
                with conn.cursor() as cur:
                    cur.execute(f"CREATE DATABASE IF NOT EXISTS `{name}` CHARACTER SET utf8mb4")
            finally:
                conn.close()
        self._databases.append(name)


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        port: int = s.getsockname()[1]
        return port


def _wait_for_port(port: int, proc: subprocess.Popen[bytes] | None, log: Path) -> None:
    deadline = time.monotonic() + _STARTUP_TIMEOUT_S
    while time.monotonic() < deadline:
        if proc is not None and proc.poll() is not None:
            raise RuntimeError(f"server exited with {proc.returncode}: {log.read_text(errors='replace')[-2000:]}")
        with contextlib.suppress(OSError), socket.create_connection(("127.0.0.1", port), timeout=0.2):
            return
        time.sleep(0.05)
    raise RuntimeError(f"server did not listen on {port} within {_STARTUP_TIMEOUT_S}s: {log.read_text()[-2000:]}")


def _postgres_bin() -> Path:
    found = sorted(glob.glob("/usr/lib/postgresql/*/bin/initdb"))
    if not found:
        raise RuntimeError("PostgreSQL is not installed: run `make setup` (scripts/sysdeps.sh installs postgresql)")
    return Path(found[-1]).parent


def _as_postgres_user() -> list[str]:
    # Postgres refuses to run as root: run its tools as the `postgres` system user the Debian package creates.
    return ["runuser", "-u", "postgres", "--"] if os.geteuid() == 0 else []


@contextlib.contextmanager
def running_postgres() -> Iterator[Server]:
    """Initialise and start a PostgreSQL server in a temporary directory; stop and remove it on exit."""
    bindir = _postgres_bin()
    root = Path(tempfile.mkdtemp(prefix="lakesync-pg-"))
    data = root / "data"
    log = root / "server.log"
    prefix = _as_postgres_user()
    if prefix:
        shutil.chown(root, user="postgres", group="postgres")
    port = _free_port()
    user = "postgres" if prefix else os.environ.get("USER", "postgres")
    subprocess.run(
        [*prefix, str(bindir / "initdb"), "-D", str(data), "-A", "trust", "-U", user, "-E", "UTF8", "--no-sync"],
        check=True,
        capture_output=True,
    )
    options = f"-p {port} -k {root} -c listen_addresses=127.0.0.1 -c fsync=off -c full_page_writes=off"
    subprocess.run(
        [*prefix, str(bindir / "pg_ctl"), "-D", str(data), "-l", str(log), "-o", options, "-w", "start"],
        check=True,
        capture_output=True,
    )
    try:
        _wait_for_port(port, None, log)
        yield Server("postgres", "127.0.0.1", port, user, data)
    finally:
        subprocess.run(
            [*prefix, str(bindir / "pg_ctl"), "-D", str(data), "-m", "immediate", "stop"],
            check=False,
            capture_output=True,
        )
        shutil.rmtree(root, ignore_errors=True)


def _mariadb_bin(name: str) -> str:
    for candidate in (shutil.which(name), f"/usr/sbin/{name}", f"/usr/bin/{name}"):
        if candidate and os.access(candidate, os.X_OK):
            return candidate
    raise RuntimeError(f"{name} is not installed: run `make setup` (scripts/sysdeps.sh installs mariadb-server)")


@contextlib.contextmanager
def running_mariadb() -> Iterator[Server]:
    """Initialise and start a MariaDB server in a temporary directory; stop and remove it on exit.

    ``root`` logs in without a password from 127.0.0.1 (``--auth-root-authentication-method=normal`` with an empty
    password), so no secret is involved; the server listens only on the loopback interface.
    """
    install_db = _mariadb_bin("mariadb-install-db")
    mariadbd = _mariadb_bin("mariadbd")
    root = Path(tempfile.mkdtemp(prefix="lakesync-mariadb-"))
    data = root / "data"
    log = root / "server.log"
    user_args = ["--user=root"] if os.geteuid() == 0 else []
    subprocess.run(
        [
            install_db,
            "--no-defaults",
            f"--datadir={data}",
            *user_args,
            "--auth-root-authentication-method=normal",
            "--skip-test-db",
        ],
        check=True,
        capture_output=True,
    )
    port = _free_port()
    with log.open("wb") as log_file:
        proc = subprocess.Popen(
            [
                mariadbd,
                "--no-defaults",
                f"--datadir={data}",
                *user_args,
                f"--port={port}",
                "--bind-address=127.0.0.1",
                f"--socket={root / 'sock'}",
                f"--pid-file={root / 'pid'}",
                "--skip-name-resolve",
                "--innodb-flush-log-at-trx-commit=0",
                "--innodb-buffer-pool-size=64M",
                "--innodb-lock-wait-timeout=20",
                "--character-set-server=utf8mb4",
            ],
            stdout=log_file,
            stderr=subprocess.STDOUT,
        )
    try:
        _wait_for_port(port, proc, log)
        yield Server("mariadb", "127.0.0.1", port, "root", data)
    finally:
        proc.terminate()
        try:
            proc.wait(timeout=20)
        except subprocess.TimeoutExpired:
            proc.kill()
            proc.wait()
        shutil.rmtree(root, ignore_errors=True)


@pytest.fixture(scope="session")
def postgres_server() -> Iterator[Server]:
    """A PostgreSQL server for the whole test session."""
    with running_postgres() as server:
        yield server


@pytest.fixture(scope="session")
def mariadb_server() -> Iterator[Server]:
    """A MariaDB server for the whole test session."""
    with running_mariadb() as server:
        yield server
