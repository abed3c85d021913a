"""What a driver executor provides to :class:`~lakesync.sql.destination.SqlDestination` (pure: no driver here).

An executor owns one connection of one driver. It runs :class:`~lakesync.sql.dialect.Statement` objects inside a
transaction and sorts the driver's exceptions into :class:`ErrorKind` so the destination can retry, reconnect or
give up. Drivers are imported lazily inside the executor modules.
"""

from __future__ import annotations

import enum
from abc import ABC, abstractmethod
from collections.abc import Callable, Iterator
from contextlib import AbstractContextManager
from typing import Any

from lakesync.sql.dialect import Dialect, Statement

__all__ = ["ErrorKind", "Executor", "Run", "cursor_run", "scrub"]

Run = Callable[[Statement], list[tuple[Any, ...]]]
"""Runs one statement in the open transaction; returns its rows (empty unless ``statement.returns``)."""


class ErrorKind(enum.Enum):
    """How a database error is handled."""

    RETRY = "retry"
    """Deadlock, serialization failure, lock timeout, a concurrent DDL race: run the whole call again."""
    CONNECTION = "connection"
    """The connection failed or was lost: reconnect; retryable."""
    FATAL = "fatal"
    """The database refused the statement: retrying the same call cannot help."""


class Executor(ABC):
    """One driver connection (opened lazily, reopened after a connection error).

    Attributes:
        dialect: The SQL dialect of the database.
        secrets: Strings that must never appear in an error message (passwords), scrubbed by :func:`scrub`.
        location: A password-free description of the database for messages (masked URL).
    """

    dialect: Dialect
    secrets: tuple[str, ...] = ()
    location: str = ""

    @abstractmethod
    def transaction(self, *, ddl: bool = False) -> AbstractContextManager[Run]:
        """Open a transaction: commits when the block ends, rolls back when it raises.

        ``ddl``: the block creates or alters tables (BigQuery runs those outside transactions; MySQL commits them
        implicitly; PostgreSQL and SQLite keep them transactional).
        """

    @abstractmethod
    def classify(self, exc: BaseException) -> ErrorKind | None:
        """The kind of a driver error, or ``None`` when ``exc`` is not one (a bug: let it propagate)."""

    def reset(self) -> None:
        """Drop the connection (after a connection error); the next transaction reconnects."""
        self.close()

    @abstractmethod
    def close(self) -> None:
        """Close the connection."""


def cursor_run(cursor: Any, *, bind_empty: bool = True) -> Run:
    """A :data:`Run` over one DB-API cursor: ``executemany`` for a ``many`` statement, rows read when it ``returns``.

    ``bind_empty=False`` passes no parameters (``None``) for a statement without any, for drivers that would otherwise
    read a literal ``%`` in its SQL as a placeholder.
    """

    def run(stmt: Statement) -> list[tuple[Any, ...]]:
        if stmt.many:
            cursor.executemany(stmt.sql, stmt.params)
            return []
        cursor.execute(stmt.sql, stmt.params if bind_empty else (stmt.params or None))
        return [tuple(r) for r in cursor.fetchall()] if stmt.returns else []

    return run


def scrub(message: str, secrets: tuple[str, ...]) -> str:
    """``message`` with every secret and credential shape replaced by ``***`` (:func:`lakesync.core.redact.redact`)."""
    from lakesync.core.redact import redact

    return redact(message, secrets)


def iter_chunks(rows: list[Any], size: int) -> Iterator[list[Any]]:
    """``rows`` in consecutive lists of at most ``size``."""
    for i in range(0, len(rows), size):
        yield rows[i : i + size]
