"""What a database offers a SQL connector: read-only queries (:class:`QueryRunner`, implemented once per database
beside this module), and its driver, imported only when a connector of its kind runs."""

from __future__ import annotations

import importlib
from collections.abc import Sequence
from typing import Any, Protocol

from lakesync.core.errors import AdapterError

__all__ = ["QueryRunner", "driver"]


class QueryRunner(Protocol):
    """Runs read-only queries against one database."""

    dialect: str

    def query(self, sql: str, params: Sequence[Any] = ()) -> tuple[list[str], list[tuple[Any, ...]]]:
        """Column names and rows of one read-only query.

        Raises:
            AdapterError: the database is unreachable or refused the query (the message holds no credential).
        """
        ...

    def close(self) -> None:
        """Close the connection."""
        ...


def driver(module: str, connector: str, database: str) -> Any:
    """The driver module, or a clear 502 where this function was deployed without it (the API functions' small asset
    carries no SQL drivers)."""
    try:
        return importlib.import_module(module)
    except ImportError:
        raise AdapterError(
            f'Connector "{connector}": this function has no {database} driver ({module}); deploy it with the SQL '
            "drivers (the materialise asset) to use this connector here"
        ) from None
