"""The Iceberg tables of the lake and their formats (see docs/lake.md): one definition for every job and the query CLI.

Pure definitions (names, Spark DDL, property keys); nothing here opens a catalog.
"""

from __future__ import annotations

import hashlib
import re

from lakesync.core.schema import ColumnType, TableSchema

NAMESPACE = "lakesync"
DELTA_LOG = "deltas"
STATE_PREFIX = "state_"

# Snapshot summary properties (written with Spark's `snapshot-property.<key>` write option).
FLUSH_WATERMARKS = "lakesync.flush.watermarks"
"""On delta-log snapshots: JSON ``{shard: seq}``, every entry up to ``seq`` of each shard is in the table."""
COMPACT_WATERMARKS = "lakesync.compact.watermarks"
"""On state-table snapshots: JSON ``{shard: seq}`` of the delta-log entries folded into the state."""

ROW_KEY = "_row_key"
"""The state tables' row id column (Iceberg 1.10 reserves ``_row_id`` for row lineage)."""
STATE_SYSTEM_COLUMNS = ("_gateway", ROW_KEY, "_exists", "_state", "_hlc", "_values", "_updated_at")


def qualified(catalog: str, table: str, namespace: str = NAMESPACE) -> str:
    """``catalog.namespace.table`` (namespace ``lakesync`` unless a test isolates itself in another)."""
    return f"{catalog}.{namespace}.{table}"


GLUE_NAME = re.compile(r"^[a-z0-9_]{1,255}$")
"""The names AWS Glue (and Iceberg's GlueCatalog) accept for databases and tables: Glue stores names in lower case."""


def state_table(table: str) -> str:
    """The current-state table of a synced table: a Glue-safe name, the same for every job and the query CLI.

    A lower-case table name maps to ``state_<table>``. A name with capitals maps to ``state_<lower>_<hash>``, the hash
    being 8 hex digits of the SHA-256 of the name as written, so ``Todos`` and ``todos`` get two tables.
    """
    if table == table.lower():
        return f"{STATE_PREFIX}{table}"
    digest = hashlib.sha256(table.encode("utf-8")).hexdigest()[:8]
    return f"{STATE_PREFIX}{table.lower()}_{digest}"


def delta_log_ddl(catalog: str, namespace: str = NAMESPACE) -> str:
    """``CREATE TABLE IF NOT EXISTS`` of the delta log (format v2, partitioned by gateway, table and day)."""
    return f"""
CREATE TABLE IF NOT EXISTS {qualified(catalog, DELTA_LOG, namespace)} (
    gateway STRING NOT NULL,
    tbl STRING NOT NULL,
    row_id STRING NOT NULL,
    op STRING NOT NULL,
    client_id STRING NOT NULL,
    hlc BIGINT NOT NULL,
    delta_id STRING NOT NULL,
    columns ARRAY<STRUCT<name: STRING, value: STRING>> NOT NULL,
    shard STRING NOT NULL,
    seq BIGINT NOT NULL,
    commit_hlc BIGINT NOT NULL,
    commit_ts TIMESTAMP NOT NULL
)
USING iceberg
PARTITIONED BY (gateway, tbl, days(commit_ts))
TBLPROPERTIES ('format-version' = '2', 'write.parquet.compression-codec' = 'zstd')
""".strip()


SPARK_TYPES = {
    ColumnType.STRING: "STRING",
    ColumnType.NUMBER: "DOUBLE",
    ColumnType.BOOLEAN: "BOOLEAN",
    ColumnType.JSON: "STRING",
    ColumnType.NULL: "STRING",
}


def typed_columns(schema: TableSchema | None) -> list[tuple[str, str]]:
    """``(name, Spark type)`` of the typed columns a state table gets from its schema (system names skipped)."""
    if schema is None:
        return []
    return [(c.name, SPARK_TYPES[ColumnType(c.type)]) for c in schema.columns if c.name not in STATE_SYSTEM_COLUMNS]


def state_table_ddl(catalog: str, table: str, schema: TableSchema | None, namespace: str = NAMESPACE) -> str:
    """``CREATE TABLE IF NOT EXISTS`` of a current-state table."""
    typed = "".join(f",\n    `{name}` {spark_type}" for name, spark_type in typed_columns(schema))
    return f"""
CREATE TABLE IF NOT EXISTS {qualified(catalog, state_table(table), namespace)} (
    _gateway STRING NOT NULL,
    _row_key STRING NOT NULL,
    _exists BOOLEAN NOT NULL,
    _state STRING NOT NULL,
    _hlc BIGINT NOT NULL,
    _values STRING,
    _updated_at TIMESTAMP NOT NULL{typed}
)
USING iceberg
PARTITIONED BY (_gateway, bucket(16, _row_key))
TBLPROPERTIES ('format-version' = '2', 'write.parquet.compression-codec' = 'zstd')
""".strip()
