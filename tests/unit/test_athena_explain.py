"""The Athena form of the lake's history of one row (lakesync.lake.athena_explain), without Athena (not run here):
its query strings name the tables and columns of lakesync.lake.tables and take every value as a parameter; the
client is driven as Athena answers (a header row, then text values, over pages); failures raise StorageError."""

from __future__ import annotations

import json
from typing import Any

import pytest

from lakesync.core import hlc
from lakesync.core.canonical import stable_stringify
from lakesync.core.delta import make_delta
from lakesync.core.errors import StorageError
from lakesync.core.merge import fold, state_to_json
from lakesync.lake.athena_explain import AthenaLakeRows, delta_sql, literal, snapshot_sql, state_sql
from lakesync.lake.tables import FLUSH_WATERMARKS, state_table

SHARD = "default#Todos#0"
T0 = 1_765_000_000_000


def test_the_query_strings_read_the_lake_tables_with_parameters_only():
    deltas, snapshots, state = delta_sql("lake_db"), snapshot_sql("lake_db"), state_sql("Todos", "lake_db")
    assert 'FROM "lake_db"."deltas"' in deltas and deltas.endswith("WHERE gateway = ? AND tbl = ? AND row_id = ?")
    assert "transform(columns, c -> ARRAY[c.name, c.value])" in deltas
    assert 'FROM "lake_db"."deltas$snapshots"' in snapshots and snapshots.count("?") == 1
    assert f"element_at(summary, '{FLUSH_WATERMARKS}')" in snapshots
    assert f'FROM "lake_db"."{state_table("Todos")}"' in state and state.endswith('"_gateway" = ? AND "_row_key" = ?')
    assert state.count("?") == 2 and "Todos" not in state.replace(state_table("Todos"), "")


def test_parameters_are_literals():
    assert literal("it's") == "'it''s'" and literal(42) == "42"


class FakeAthena:
    """Answers each query by its text: a header row and the rows given, split over two pages."""

    def __init__(self, answers: dict[str, list[list[str | None]]], state: str = "SUCCEEDED") -> None:
        self.answers, self.state, self.started = answers, state, []
        self._by_id: dict[str, list[list[str | None]]] = {}

    def start_query_execution(self, **kwargs: Any) -> dict[str, str]:
        self.started.append(kwargs)
        query_id = f"q{len(self.started)}"
        self._by_id[query_id] = next(rows for key, rows in self.answers.items() if key in kwargs["QueryString"])
        return {"QueryExecutionId": query_id}

    def get_query_execution(self, QueryExecutionId: str) -> dict[str, Any]:
        return {"QueryExecution": {"Status": {"State": self.state, "StateChangeReason": "TABLE_NOT_FOUND"}}}

    def get_paginator(self, name: str) -> FakeAthena:
        assert name == "get_query_results"
        return self

    def paginate(self, QueryExecutionId: str) -> list[dict[str, Any]]:
        rows = [
            {"Data": [{} if v is None else {"VarCharValue": v} for v in row]} for row in self._by_id[QueryExecutionId]
        ]
        return [{"ResultSet": {"Rows": rows[:2]}}, {"ResultSet": {"Rows": rows[2:]}}]


def test_a_row_is_read_from_athenas_text_answers():
    # Given Athena's answers: the row's two deltas, two flush snapshots, and the state row
    insert = make_delta("INSERT", table="Todos", row_id="t1", client_id="bob", hlc=hlc.encode(T0, 0), columns={"a": 1})
    update = make_delta(
        "UPDATE", table="Todos", row_id="t1", client_id="eve", hlc=hlc.encode(T0 + 5, 0), columns={"a": "x"}
    )

    def record(d, seq):
        columns = json.dumps([[c.column, stable_stringify(c.value)] for c in d.columns])
        return [
            d.op.value,
            d.client_id,
            str(d.hlc),
            d.delta_id,
            columns,
            SHARD,
            str(seq),
            str(d.hlc + 1),
            str(T0 + seq),
        ]

    header = ["op", "client_id", "hlc", "delta_id", "columns", "shard", "seq", "commit_hlc", "commit_ms"]
    state = fold([insert, update])
    assert state is not None
    fake = FakeAthena(
        {
            '"deltas"\n': [header, record(update, 2), record(insert, 1)],
            "$snapshots": [
                ["committed_ms", "watermarks"],
                [str(T0 + 7), json.dumps({SHARD: 1})],
                [str(T0 + 9), json.dumps({SHARD: 2})],
            ],
            "_state": [["_state", "updated_ms"], [json.dumps(state_to_json(state)), str(T0 + 10)]],
        }
    )
    # When read
    lake = AthenaLakeRows(fake, workgroup="wg", database="lake_db", sleep=lambda s: None).read_row("gw1", "Todos", "t1")
    # Then the deltas come back as written, in commit order, flushed by their snapshots; the state as stored
    assert [d.delta for d in lake.deltas] == [insert, update]
    assert [d.flushed_ms for d in lake.deltas] == [T0 + 7, T0 + 9]
    assert lake.state == state and lake.state_updated_ms == T0 + 10
    # And every value went as a parameter, the snapshots from the row's first commit
    assert [q["ExecutionParameters"] for q in fake.started] == [
        ["'gw1'", "'Todos'", "'t1'"],
        [str(T0 + 1)],
        ["'gw1'", "'t1'"],
    ]
    assert {q["WorkGroup"] for q in fake.started} == {"wg"}


def test_a_failed_query_raises_storage_error():
    fake = FakeAthena({"": [["x"]]}, state="FAILED")
    with pytest.raises(StorageError, match="FAILED: TABLE_NOT_FOUND"):
        AthenaLakeRows(fake, workgroup="wg", sleep=lambda s: None).query("SELECT 1", [])
