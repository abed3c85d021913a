"""The lake's history of one row through Amazon Athena (:class:`~lakesync.ports.LakeRowReader` on AWS; the Athena
client is given, so no boto3 here).

The same three questions as the Spark SQL reader (:mod:`lakesync.spark.explain`), in Athena's (Trino) SQL over the
Glue Data Catalog: the row's delta-log records, the delta log's flush snapshots (the ``$snapshots`` metadata table)
and the row's state-table row. Values travel as execution parameters (``?``), never spliced into the text; names come
from :mod:`lakesync.lake.tables`.

**Not run here.** Neither moto nor the local stack runs Athena: the query strings and the reading of Athena's result
rows are unit-tested (``tests/unit/test_athena_explain.py``), the queries themselves are not. A deployment that wires
it needs a workgroup with a result location and, for the caller, ``athena:StartQueryExecution``,
``athena:GetQueryExecution``, ``athena:GetQueryResults``, ``glue:GetTable`` and ``glue:GetDatabase`` on the lake's
database, ``s3:GetObject``/``s3:ListBucket`` on the lake and read/write on the result location (plus KMS through S3);
the admin Lambda is not given them, and answers from the buffer alone (docs/lake.md, "Explain a row").
"""

from __future__ import annotations

import time
from collections.abc import Callable, Iterator, Sequence
from typing import Any

from lakesync.core.errors import StorageError
from lakesync.core.row_history import LakeRow, flush_snapshot, lake_row
from lakesync.lake.tables import DELTA_LOG, FLUSH_WATERMARKS, NAMESPACE, state_table

__all__ = ["AthenaLakeRows", "delta_sql", "literal", "snapshot_sql", "state_sql"]

_DONE = frozenset({"SUCCEEDED", "FAILED", "CANCELLED"})


def _name(database: str, table: str) -> str:
    return f'"{database}"."{table}"'


def delta_sql(database: str = NAMESPACE) -> str:
    """The row's delta-log records (parameters: gateway, table, row id), columns as ``[[name, value], ...]``."""
    return f"""
SELECT op, client_id, CAST(hlc AS VARCHAR) AS hlc, delta_id,
       json_format(CAST(transform(columns, c -> ARRAY[c.name, c.value]) AS JSON)) AS columns,
       shard, seq, CAST(commit_hlc AS VARCHAR) AS commit_hlc,
       CAST(to_unixtime(commit_ts) * 1000 AS BIGINT) AS commit_ms
FROM {_name(database, DELTA_LOG)}
WHERE gateway = ? AND tbl = ? AND row_id = ?
""".strip()


def snapshot_sql(database: str = NAMESPACE) -> str:
    """The delta log's flush snapshots committed at or after a time (parameter: epoch ms)."""
    return f"""
SELECT CAST(to_unixtime(committed_at) * 1000 AS BIGINT) AS committed_ms,
       element_at(summary, '{FLUSH_WATERMARKS}') AS watermarks
FROM {_name(database, DELTA_LOG + "$snapshots")}
WHERE element_at(summary, '{FLUSH_WATERMARKS}') IS NOT NULL AND committed_at >= from_unixtime(? / 1000.0)
""".strip()


def state_sql(table: str, database: str = NAMESPACE) -> str:
    """The row's state-table row (parameters: gateway, row id): its state text and when it was written."""
    return f"""
SELECT "_state", CAST(to_unixtime("_updated_at") * 1000 AS BIGINT) AS updated_ms
FROM {_name(database, state_table(table))}
WHERE "_gateway" = ? AND "_row_key" = ?
""".strip()


def literal(value: str | int) -> str:
    """An execution parameter as Athena takes it: a quoted string literal (quotes doubled), or a number."""
    if isinstance(value, int):
        return str(value)
    return "'" + value.replace("'", "''") + "'"


class AthenaLakeRows:
    """Reads one row's history from the lake with Athena queries (not run here; see the module)."""

    def __init__(
        self,
        client: Any,
        *,
        workgroup: str,
        database: str = NAMESPACE,
        poll_s: float = 0.5,
        timeout_s: float = 60.0,
        sleep: Callable[[float], None] = time.sleep,
    ) -> None:
        self._athena = client
        self._workgroup = workgroup
        self._database = database
        self._poll_s = poll_s
        self._timeout_s = timeout_s
        self._sleep = sleep

    def query(self, sql: str, params: Sequence[str | int]) -> list[dict[str, str | None]]:
        """Run one query and return its rows by column name (Athena's text values).

        Raises:
            StorageError: the query failed, was cancelled or outlasted the timeout.
        """
        started = self._athena.start_query_execution(
            QueryString=sql,
            QueryExecutionContext={"Database": self._database},
            WorkGroup=self._workgroup,
            ExecutionParameters=[literal(p) for p in params],
        )
        query_id = started["QueryExecutionId"]
        waited = 0.0
        while True:
            status = self._athena.get_query_execution(QueryExecutionId=query_id)["QueryExecution"]["Status"]
            if status["State"] in _DONE:
                break
            if waited >= self._timeout_s:
                raise StorageError(f"Athena query {query_id} still {status['State']} after {self._timeout_s}s")
            self._sleep(self._poll_s)
            waited += self._poll_s
        if status["State"] != "SUCCEEDED":
            raise StorageError(f"Athena query {query_id} {status['State']}: {status.get('StateChangeReason', '')}")
        return list(self._rows(query_id))

    def _rows(self, query_id: str) -> Iterator[dict[str, str | None]]:
        header: list[str] | None = None
        pages = self._athena.get_paginator("get_query_results").paginate(QueryExecutionId=query_id)
        for page in pages:
            for row in page["ResultSet"]["Rows"]:
                values = [cell.get("VarCharValue") for cell in row["Data"]]
                if header is None:
                    header = [str(v) for v in values]  # the first row of the first page names the columns
                    continue
                yield dict(zip(header, values, strict=True))

    def read_row(self, gateway: str, table: str, row_id: str) -> LakeRow:
        """The row's deltas in the delta log, each with when it was flushed, and its state-table row."""
        records = self.query(delta_sql(self._database), [gateway, table, row_id])
        since = min((int(str(r["commit_ms"])) for r in records), default=0)
        snapshots = [
            flush_snapshot(int(str(s["committed_ms"])), str(s["watermarks"]))
            for s in self.query(snapshot_sql(self._database), [since])
        ]
        notes: list[str] = []
        try:
            states = self.query(state_sql(table, self._database), [gateway, row_id])
        except StorageError as exc:  # most often: no state table for the table yet
            states = []
            notes.append(f"the state table of {table!r} could not be read: {exc}")
        state = (str(states[0]["_state"]), int(str(states[0]["updated_ms"]))) if states else None
        return lake_row(table, row_id, records, snapshots, state, notes)
