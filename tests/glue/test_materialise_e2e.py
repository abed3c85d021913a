"""End to end on the embedded default: clients push over real HTTP, the flush job (local Spark + Iceberg) commits and
publishes, the local poller runs the materialise function, and the rows land in the default SQLite database and in a
PostgreSQL destination added through the admin route -- equal to what a client's pull folds to."""

from __future__ import annotations

import sqlite3
from pathlib import Path
from typing import TYPE_CHECKING, Any

import pytest

from lakesync import sql
from lakesync.auth import mint_token
from lakesync.aws.flush_store import DynamoConfig
from lakesync.aws.tables import TableNames
from lakesync.client.http import SyncClient
from lakesync.core.delta import make_delta
from lakesync.core.hlc import HLC
from lakesync.core.merge import fold
from lakesync.core.schema import parse_table_schema
from lakesync.local.runner import TABLE_PREFIX, LocalStack
from lakesync.spark import flush
from tests.factories import schema_doc
from tests.sql.servers import Server, postgres_server  # noqa: F401 (fixture)

if TYPE_CHECKING:
    from pyspark.sql import SparkSession

pytestmark = [pytest.mark.integration, pytest.mark.spark]

SCHEMA = schema_doc("todos", title="string", done="boolean", prio="number", meta="json")


def client(stack: LocalStack, name: str, role: str = "client") -> SyncClient:
    return SyncClient(stack.url, "default", mint_token(name, "default", stack.secret, role=role), name)


def folded(deltas: list[Any]) -> dict[str, dict[str, Any]]:
    by_row: dict[str, list[Any]] = {}
    for d in deltas:
        by_row.setdefault(d.row_id, []).append(d)
    out = {}
    for row_id, row in by_row.items():
        state = fold(row)
        values = None if state is None else state.values()
        if values is not None:
            out[row_id] = {c: values.get(c) for c in ("title", "done", "prio", "meta")}
    return out


def test_pushed_rows_are_materialised_into_sqlite_and_postgres_as_a_pull_folds_them(
    spark: SparkSession,
    lake_namespace: str,
    tmp_path: Path,
    postgres_server: Server,  # noqa: F811
) -> None:
    with LocalStack(tmp_path / "data", port=0, persist=False) as stack:
        # Given the todos schema and a PostgreSQL destination registered through the admin API
        ops = client(stack, "ops", role="admin")
        ops.admin("POST", "schema", SCHEMA)
        pg_url = postgres_server.url()
        ops.admin("POST", "materialise", {"name": "pg", "type": "postgres", "url": pg_url})

        # When clients push inserts, concurrent column edits, a late older write and a delete over HTTP
        clock = HLC()
        alice, bob = client(stack, "alice"), client(stack, "bob")
        stale = make_delta(
            "UPDATE", table="todos", row_id="t1", client_id="bob", hlc=clock.now(), columns={"title": "old"}
        )
        alice.push(
            [
                make_delta(
                    "INSERT",
                    table="todos",
                    row_id=f"t{i}",
                    client_id="alice",
                    hlc=clock.now(),
                    columns={"title": f"task {i}", "done": False, "prio": i, "meta": {"tags": ["a", i]}},
                )
                for i in range(1, 8)
            ]
        )
        alice.push(
            [
                make_delta(
                    "UPDATE", table="todos", row_id="t1", client_id="alice", hlc=clock.now(), columns={"title": "new"}
                )
            ]
        )
        bob.push(
            [make_delta("UPDATE", table="todos", row_id="t1", client_id="bob", hlc=clock.now(), columns={"done": True})]
        )
        bob.push([stale])
        alice.push([make_delta("DELETE", table="todos", row_id="t3", client_id="alice", hlc=clock.now())])

        # And the flush job runs (committing to Iceberg and publishing), and the local consumer drains the queue
        aws = stack.aws_kwargs()
        dynamo = DynamoConfig(
            TableNames.with_prefix(TABLE_PREFIX),
            endpoint_url=aws["endpoint_url"],
            region=aws["region_name"],
            access_key_id=aws["aws_access_key_id"],
            secret_access_key=aws["aws_secret_access_key"],
        )
        report = flush.run(
            spark,
            flush.FlushConfig(dynamo, namespace=lake_namespace, gateways=("default",), publish=stack.publish_config()),
        )
        assert report.published_jobs >= 1 and report.publish_failures == 0
        assert stack.materialiser is not None
        stack.materialiser.drain(timeout_s=60, settle_s=3)

        # Then the default SQLite database and PostgreSQL both hold what a client's pull folds to
        pulled, _ = client(stack, "carol").pull_all()
        expected = folded(pulled)
        assert expected["t1"]["title"] == "new" and expected["t1"]["done"] is True and "t3" not in expected
        schema = parse_table_schema(SCHEMA)
        for url in (stack.materialise_target, pg_url):
            destination = sql.connect(url, name="check")
            try:
                assert destination.rows(schema) == expected, url
            finally:
                destination.close()
        # And the SQLite file is readable with plain SQL; t3 (inserted and deleted within one job) is not live
        with sqlite3.connect(stack.materialise_target.removeprefix("sqlite:///")) as db:
            live = db.execute("SELECT row_id FROM todos WHERE deleted_at IS NULL ORDER BY row_id").fetchall()
            gone = db.execute("SELECT row_id FROM todos WHERE deleted_at IS NOT NULL").fetchall()
        assert [r for (r,) in live] == sorted(expected) and set(gone) <= {("t3",)}
