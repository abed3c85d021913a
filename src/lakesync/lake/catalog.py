"""pyiceberg catalogs over the same store Spark uses.

Locally, Spark's Iceberg ``JdbcCatalog`` and pyiceberg's ``SqlCatalog`` share one sqlite file and one ``file://``
warehouse. Both keep the same two tables (``iceberg_tables``, ``iceberg_namespace_properties``), rows keyed by the
catalog *name* (so both sides must use the same name, ``lake`` by default), namespaces joined with ``.``. Both sides
are pinned to the catalog schema ``V1`` (the one with the ``iceberg_type`` column), whichever creates the tables first.

Without an explicit location both put a table of a one-level namespace at ``<warehouse>/<ns>/<table>`` (the Glue
catalog would use ``<ns>.db``); for nested namespaces they differ (Java ``a/b/t``, pyiceberg ``a.b/t``). Java writes
locations as ``file:/abs``, pyiceberg as ``file:///abs``; each reads the other's, since the catalog row points at the
metadata file.

The path helpers here are pure, so the Spark session factory shares them without importing pyiceberg.
"""

from __future__ import annotations

import sqlite3
from contextlib import closing
from pathlib import Path
from typing import TYPE_CHECKING
from urllib.parse import unquote, urlparse

if TYPE_CHECKING:
    from pyiceberg.catalog.sql import SqlCatalog

__all__ = ["CATALOG_SCHEMA_VERSION", "create_catalog_tables", "local_catalog", "sqlite_file", "warehouse_uri"]

CATALOG_SCHEMA_VERSION = "v1"
"""The JDBC catalog schema revision both Spark (``jdbc.schema-version``) and pyiceberg (``schema_version``) use."""

_CATALOG_DDL = (
    "CREATE TABLE IF NOT EXISTS iceberg_tables("
    "catalog_name VARCHAR(255) NOT NULL, table_namespace VARCHAR(255) NOT NULL, table_name VARCHAR(255) NOT NULL, "
    "metadata_location VARCHAR(1000), previous_metadata_location VARCHAR(1000), iceberg_type VARCHAR(5), "
    "PRIMARY KEY (catalog_name, table_namespace, table_name))",
    "CREATE TABLE IF NOT EXISTS iceberg_namespace_properties("
    "catalog_name VARCHAR(255) NOT NULL, namespace VARCHAR(255) NOT NULL, property_key VARCHAR(255), "
    "property_value VARCHAR(1000), PRIMARY KEY (catalog_name, namespace, property_key))",
)


def sqlite_file(catalog_uri_or_path: str | Path) -> Path:
    """The absolute sqlite file behind a catalog location.

    Args:
        catalog_uri_or_path: A filesystem path, a ``jdbc:sqlite:<path>`` URI or an SQLAlchemy
            ``sqlite:///<path>`` URI.

    Returns:
        The absolute path of the sqlite database file.

    Raises:
        ValueError: the location is not a sqlite file (in-memory databases cannot be shared with Spark).
    """
    text = str(catalog_uri_or_path)
    if text.startswith("jdbc:sqlite:"):
        text = text.removeprefix("jdbc:sqlite:")
        text = text.removeprefix("file:")
    elif text.startswith("sqlite:"):
        parsed = urlparse(text)
        # SQLAlchemy: sqlite:///rel.db is relative, sqlite:////abs.db absolute; either way drop one slash.
        text = unquote(parsed.path)[1:]
    if not text or text == ":memory:" or text.startswith("file::memory:"):
        raise ValueError(f"not a sqlite file: {catalog_uri_or_path!r}")
    return Path(text).expanduser().absolute()


def warehouse_uri(warehouse: str | Path) -> str:
    """A local warehouse as a ``file:///abs/path`` URI (no trailing slash, path not percent-encoded).

    Args:
        warehouse: A filesystem path or a ``file:`` URI.

    Raises:
        ValueError: the warehouse is a non-local URI (use the Glue catalog for ``s3://``).
    """
    text = str(warehouse)
    if "://" in text or text.startswith("file:"):
        parsed = urlparse(text)
        if parsed.scheme != "file" or parsed.netloc not in ("", "localhost"):
            raise ValueError(f"a local warehouse must be a path or file:// URI, not {warehouse!r}")
        text = unquote(parsed.path)
    # Unescaped on purpose: Hadoop's Path and pyiceberg's urlparse both take the URI's path literally.
    path = Path(text).expanduser().absolute()
    return "file://" + path.as_posix().rstrip("/")


def create_catalog_tables(catalog_uri_or_path: str | Path) -> Path:
    """Create the catalog tables (schema V1) in a sqlite file unless they exist; the file too if needed.

    The local Spark session calls this before it starts, and tells Iceberg's ``JdbcCatalog`` not to create tables:
    when they already exist, that code path (Iceberg 1.10) leaves a ``getTables`` result set open, and sqlite then
    keeps a shared lock for the life of the JVM, so no other process (pyiceberg) can ever commit to the catalog.
    Plain ``sqlite3`` keeps pyiceberg out of Spark's start-up; the DDL is the one Iceberg's JDBC catalog uses, which
    pyiceberg's ``SqlCatalog`` reads as a V1 catalog.

    Args:
        catalog_uri_or_path: The catalog's sqlite file (path, ``jdbc:sqlite:`` or ``sqlite:///`` URI).

    Returns:
        The absolute path of the sqlite file.
    """
    db = sqlite_file(catalog_uri_or_path)
    db.parent.mkdir(parents=True, exist_ok=True)
    with closing(sqlite3.connect(db, timeout=30)) as conn, conn:
        for ddl in _CATALOG_DDL:
            conn.execute(ddl)
    return db


def local_catalog(catalog_uri_or_path: str | Path, warehouse: str | Path, name: str = "lake") -> SqlCatalog:
    """A pyiceberg ``SqlCatalog`` over the sqlite file and warehouse a local Spark session uses.

    Args:
        catalog_uri_or_path: The catalog's sqlite file (path, ``jdbc:sqlite:`` or ``sqlite:///`` URI).
        warehouse: The warehouse directory (path or ``file://`` URI).
        name: The catalog name; must equal Spark's catalog name, since rows are keyed by it.

    Returns:
        The catalog, with its tables created if the file is new.
    """
    from pyiceberg.catalog.sql import SqlCatalog

    db = sqlite_file(catalog_uri_or_path)
    db.parent.mkdir(parents=True, exist_ok=True)
    return SqlCatalog(
        name,
        uri=f"sqlite:///{db}",
        warehouse=warehouse_uri(warehouse),
        schema_version=CATALOG_SCHEMA_VERSION,
    )
