"""Provenance reaches the lake: a PostgreSQL connector polled by ``lakesync local``'s loop writes its rows and, per
delta, a ``_lakesync_provenance`` row; the flush and compaction jobs (local Spark + Iceberg) take both to the lake,
where an auditor's SQL (``lakesync query``'s path, :func:`lakesync.spark.query.run_query`) finds which connector
brought each row in, from which source version."""

from __future__ import annotations

import json
import time
import urllib.request
from pathlib import Path
from typing import TYPE_CHECKING, Any

import pytest

from lakesync.auth import mint_token
from lakesync.aws.flush_store import DynamoConfig
from lakesync.aws.tables import TableNames
from lakesync.client.http import SyncClient
from lakesync.lake.tables import state_table
from lakesync.local.runner import TABLE_PREFIX, LocalStack
from lakesync.spark import compact, flush
from lakesync.spark.query import run_query
from tests.sql.servers import Server, postgres_server

if TYPE_CHECKING:
    from pyspark.sql import SparkSession

__all__ = ["postgres_server"]

pytestmark = [pytest.mark.integration, pytest.mark.spark]


def _register(stack: LocalStack, config: dict[str, Any]) -> None:
    token = mint_token("ops", "default", stack.secret, role="admin")
    req = urllib.request.Request(
        f"{stack.url}/v1/admin/connectors/default",
        data=json.dumps(config).encode(),
        method="POST",
        headers={"Authorization": f"Bearer {token}", "Content-Type": "application/json"},
    )
    with urllib.request.urlopen(req, timeout=30) as resp:
        assert resp.status == 200


def test_connector_rows_and_their_provenance_are_queryable_in_the_lake(
    spark: SparkSession, lake_namespace: str, tmp_path: Path, postgres_server: Server
) -> None:
    import psycopg

    url = postgres_server.url()
    with psycopg.connect(url, autocommit=True) as conn:
        conn.execute("CREATE TABLE plans (id INT PRIMARY KEY, name TEXT, updated BIGINT)")
        conn.execute("INSERT INTO plans VALUES (1, 'free', 10), (2, 'pro', 20)")
    with LocalStack(tmp_path / "data", port=0, persist=False, materialise=False) as stack:
        # Given a PostgreSQL connector in cursor mode, polled by the local loop until its rows are in the gateway
        _register(
            stack,
            {
                "name": "billing",
                "type": "postgres",
                "postgres": {"connectionString": url},
                "ingest": {
                    "intervalMs": 200,
                    "tables": [
                        {
                            "table": "plans",
                            "query": "SELECT id, name, updated FROM plans",
                            "rowIdColumn": "id",
                            "strategy": {"type": "cursor", "cursorColumn": "updated"},
                        }
                    ],
                },
            },
        )
        reader = SyncClient(stack.url, "default", mint_token("auditor", "default", stack.secret), "auditor")
        deadline = time.monotonic() + 30
        pulled: list[Any] = []
        while time.monotonic() < deadline:
            pulled, _ = reader.pull_all()
            if {d.row_id for d in pulled if d.table == "plans"} == {"1", "2"}:
                break
            time.sleep(0.2)
        data = {d.delta_id: d for d in pulled if d.table == "plans"}
        assert {d.row_id for d in data.values()} == {"1", "2"}

        # When the flush and compaction jobs run
        aws = stack.aws_kwargs()
        dynamo = DynamoConfig(
            TableNames.with_prefix(TABLE_PREFIX),
            endpoint_url=aws["endpoint_url"],
            region=aws["region_name"],
            access_key_id=aws["aws_access_key_id"],
            secret_access_key=aws["aws_secret_access_key"],
        )
        flush.run(spark, flush.FlushConfig(dynamo, namespace=lake_namespace, gateways=("default",)))
        compact.run(spark, compact.CompactConfig(namespace=lake_namespace))

    # Then the lake's provenance table names, for every connector row, the connector, its row and source version
    provenance = run_query(
        spark,
        f"SELECT _row_key, _values FROM lake.{lake_namespace}.{state_table('_lakesync_provenance')} WHERE _exists",
        namespace=lake_namespace,
    )
    records = {row[0]: json.loads(row[1]) for row in provenance.rows}
    assert set(data) <= set(records)
    for delta_id, delta in data.items():
        record = records[delta_id]
        assert (record["kind"], record["connector"], record["table"], record["rowId"]) == (
            "ingest",
            "billing",
            "plans",
            delta.row_id,
        )
        assert record["version"]
    # And the rows themselves are in the lake, each written by the connector's identity
    plans = run_query(
        spark,
        f"SELECT _row_key, _values FROM lake.{lake_namespace}.{state_table('plans')} WHERE _exists",
        namespace=lake_namespace,
    )
    assert {row[0]: json.loads(row[1])["name"] for row in plans.rows} == {"1": "free", "2": "pro"}
    assert {d.client_id for d in data.values()} == {"ingest:billing"}
