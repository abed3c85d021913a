"""Creating and dropping LakeSync's DynamoDB tables, from their specs in :mod:`lakesync.aws.tables` (the local
runner, the tests and the benchmarks; a deployed stack's tables are made by CDK)."""

from __future__ import annotations

from collections.abc import Collection
from typing import TYPE_CHECKING

from lakesync.aws.tables import TTL_ATTRIBUTE, TTL_TABLES, TableNames, connections_table_spec, table_specs

if TYPE_CHECKING:
    from mypy_boto3_dynamodb import DynamoDBClient

__all__ = ["create_tables", "drop_tables", "table_names"]


def create_tables(
    client: DynamoDBClient,
    names: TableNames,
    *,
    connections: str | None = None,
    only: Collection[str] | None = None,
) -> None:
    """Create every LakeSync table (idempotent) and enable TTL where records expire.

    Args:
        client: The DynamoDB client.
        names: The buffer's tables.
        connections: The WebSocket sessions table to create as well
            (:func:`lakesync.aws.tables.connections_table_name`), if any.
        only: Create these of the tables only (names).
    """
    existing = table_names(client)
    specs = table_specs(names) + ([connections_table_spec(connections)] if connections else [])
    if only is not None:
        specs = [spec for spec in specs if spec["TableName"] in only]
    for spec in specs:
        if spec["TableName"] not in existing:
            client.create_table(**spec)
    for spec in specs:
        client.get_waiter("table_exists").wait(TableName=spec["TableName"])
    expiring = [names.as_dict()[logical] for logical in TTL_TABLES] + ([connections] if connections else [])
    for name in [n for n in expiring if only is None or n in only]:
        client.update_time_to_live(
            TableName=name,
            TimeToLiveSpecification={"Enabled": True, "AttributeName": TTL_ATTRIBUTE},
        )


def drop_tables(client: DynamoDBClient, names: TableNames, *, connections: str | None = None) -> None:
    """Delete every LakeSync table that exists (for a fresh local start), the sessions table too when named."""
    existing = table_names(client)
    for name in [*names.as_dict().values(), *([connections] if connections else [])]:
        if name in existing:
            client.delete_table(TableName=name)
            client.get_waiter("table_not_exists").wait(TableName=name)


def table_names(client: DynamoDBClient) -> set[str]:
    """The names of the account's tables, every page of them (ListTables answers 100 a page)."""
    names: set[str] = set()
    for page in client.get_paginator("list_tables").paginate():
        names.update(page.get("TableNames", []))
    return names
