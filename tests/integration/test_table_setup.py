"""Table setup stays idempotent however many other tables the account holds (ListTables pages at 100)."""

from __future__ import annotations

import uuid
from typing import Any

from lakesync.aws.table_setup import create_tables, drop_tables
from lakesync.aws.tables import TableNames


def test_create_and_drop_tables_see_tables_beyond_the_first_page(dynamodb_client: Any) -> None:
    # Given more than one ListTables page of other tables, and ours created once
    run = uuid.uuid4().hex[:8]
    for i in range(101):
        dynamodb_client.create_table(
            TableName=f"aaa-{run}-{i:03d}",
            KeySchema=[{"AttributeName": "k", "KeyType": "HASH"}],
            AttributeDefinitions=[{"AttributeName": "k", "AttributeType": "S"}],
            BillingMode="PAY_PER_REQUEST",
        )
    names = TableNames.with_prefix(f"zzz-{run}")
    create_tables(dynamodb_client, names)

    # When setup runs again, then tears down
    create_tables(dynamodb_client, names)
    drop_tables(dynamodb_client, names)

    # Then nothing failed and our tables are gone
    remaining = set()
    for page in dynamodb_client.get_paginator("list_tables").paginate():
        remaining.update(page["TableNames"])
    assert not remaining & set(names.as_dict().values())
