"""The SQL connector types (``postgres``, ``mysql``, ``bigquery``): their descriptors and factories."""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Final

from lakesync.connectors.base import Connector, ConnectorTypeDescriptor
from lakesync.connectors.sql.ingest import SqlIngestSource
from lakesync.connectors.sql.mysql import MySQLRunner
from lakesync.connectors.sql.postgres import PostgresRunner
from lakesync.connectors.sql.query import DEFAULT_LOOKBACK_MS, check_single_statements, ingest_tables
from lakesync.connectors.sql.runner import QueryRunner
from lakesync.connectors.sql.source import SqlSourceAdapter
from lakesync.core.canonical import JsonValue
from lakesync.core.connectors import ConnectorConfig
from lakesync.core.errors import AdapterError

__all__ = ["BIGQUERY", "MYSQL", "POSTGRES", "open_bigquery_connector", "open_sql_connector"]


def _runner(kind: str, connection: str, name: str) -> QueryRunner:
    if kind == "postgres":
        return PostgresRunner(connection, name=name)
    return MySQLRunner(connection, name=name)


def open_sql_connector(config: ConnectorConfig, secrets: Mapping[str, str]) -> Connector:
    """The connector of a ``postgres`` or ``mysql`` config (its ``connectionString`` resolved in ``secrets``).

    Nothing connects here: the first poll or pull does (and reports an unreachable source as ``AdapterError``).

    Raises:
        ForbiddenTargetError: the connection string carries a parameter that redirects it, or names a refused host.
        ConnectorValidationError: an ingest query of more than one statement.
    """
    settings = config.settings or {}
    connection = secrets.get("connectionString") or str(settings.get("connectionString", ""))
    tables = ingest_tables(config)
    check_single_statements(tables, config.type)
    ingest_runner = _runner(config.type, connection, config.name)
    source_runner = _runner(config.type, connection, config.name)
    return Connector(
        name=config.name,
        ingest=SqlIngestSource(config.name, ingest_runner, tables) if tables else None,
        source=SqlSourceAdapter(config.name, source_runner, tables),
    )


def _object(properties: Mapping[str, JsonValue], required: Sequence[str]) -> dict[str, JsonValue]:
    return {"type": "object", "properties": dict(properties), "required": list(required)}


_INGEST_SCHEMA: Final = _object(
    {
        "intervalMs": {"type": "number", "minimum": 1, "default": 10000},
        "tables": {
            "type": "array",
            "minItems": 1,
            "items": _object(
                {
                    "table": {"type": "string"},
                    "query": {"type": "string"},
                    "rowIdColumn": {"type": "string", "default": "id"},
                    "strategy": {
                        "oneOf": [
                            _object(
                                {
                                    "type": {"const": "cursor"},
                                    "cursorColumn": {"type": "string"},
                                    "lookbackMs": {"type": "number", "minimum": 0, "default": DEFAULT_LOOKBACK_MS},
                                },
                                ["type", "cursorColumn"],
                            ),
                            _object({"type": {"const": "diff"}}, ["type"]),
                        ]
                    },
                },
                ["table", "query", "strategy"],
            ),
        },
    },
    ["tables"],
)

_CONNECTION_SCHEMA: Final = {
    "type": "string",
    "description": "A connection URL, or secret://<Secrets Manager ARN or name>[#key]; a plaintext value is moved "
    "into Secrets Manager at registration",
}


def _polled_database(connector_type: str, display_name: str, databases: str) -> ConnectorTypeDescriptor:
    """The descriptor of a database type polled through a connection string (a secret)."""
    return ConnectorTypeDescriptor(
        type=connector_type,
        display_name=display_name,
        description=f"Poll {databases} query results (cursor or diff) and serve them to source= pulls.",
        category="database",
        config_schema=_object({"connectionString": _CONNECTION_SCHEMA}, ["connectionString"]),
        ingest_schema=_INGEST_SCHEMA,
        secret_fields=("connectionString",),
    )


POSTGRES: Final = _polled_database("postgres", "PostgreSQL", "PostgreSQL")
MYSQL: Final = _polled_database("mysql", "MySQL / MariaDB", "MySQL or MariaDB")

BIGQUERY: Final = ConnectorTypeDescriptor(
    type="bigquery",
    display_name="BigQuery",
    description="BigQuery query results (statements generated and bound; polling BigQuery is not available yet).",
    category="database",
    config_schema=_object(
        {
            "projectId": {"type": "string"},
            "dataset": {"type": "string"},
            "keyFilename": {"type": "string"},
            "location": {"type": "string"},
        },
        ["projectId", "dataset"],
    ),
    ingest_schema=_INGEST_SCHEMA,
)


def open_bigquery_connector(config: ConnectorConfig, secrets: Mapping[str, str]) -> Connector:
    """BigQuery connectors register (actions none, ingest none): polling BigQuery is not implemented.

    Raises:
        AdapterError: when the config asks for ingest (502: the source cannot be polled).
    """
    if config.has_ingest:
        raise AdapterError(f'Connector "{config.name}": BigQuery ingest is not supported by this deployment')
    return Connector(name=config.name)
