"""BigQuery: generated SQL and parameter binding, through a recording fake client (no BigQuery is reachable here;
the destination has not been run against BigQuery)."""

from __future__ import annotations

import json
from dataclasses import dataclass, field
from typing import Any

import pytest
from google.api_core import exceptions as gexc
from google.cloud import bigquery

from lakesync.core.errors import DestinationError
from lakesync.core.merge import fold, state_to_json
from lakesync.sql import connect, connect_params
from lakesync.sql.bigquery import parse_bigquery_url
from tests.factories import delete, insert, schema_with, table_schema, update


@dataclass
class FakeJob:
    rows: list[dict[str, Any]]
    session_id: str | None = None

    @property
    def session_info(self) -> Any:
        return type("SessionInfo", (), {"session_id": self.session_id})()

    def result(self) -> list[Any]:
        return [type("Row", (), {"values": lambda self, r=r: tuple(r.values())})() for r in self.rows]


@dataclass
class FakeClient:
    """Records every query and its job config; answers the few reads the destination makes."""

    meta: list[list[str]] | None = None
    states: dict[str, str] = field(default_factory=dict)
    calls: list[tuple[str, Any]] = field(default_factory=list)
    fail_on: str | None = None
    failure: Exception | None = None

    def query(self, sql: str, job_config: Any = None) -> FakeJob:
        self.calls.append((sql, job_config))
        if self.fail_on and self.fail_on in sql and self.failure is not None:
            failure, self.failure = self.failure, None
            raise failure
        if sql == "BEGIN TRANSACTION":
            return FakeJob([], session_id="sess-1")
        if sql.startswith("SELECT columns FROM _lakesync_tables"):
            return FakeJob([{"columns": json.dumps(self.meta)}] if self.meta is not None else [])
        if sql.startswith("SELECT row_id, state FROM _lakesync_state"):
            params = job_config.query_parameters
            wanted = params[1].values if len(params) > 1 else list(self.states)
            return FakeJob([{"row_id": r, "state": self.states[r]} for r in wanted if r in self.states])
        return FakeJob([])

    def statements(self) -> list[str]:
        return [sql for sql, _ in self.calls]


SCHEMA = table_schema("todos", title="string", n="number", done="boolean", meta="json")
META = [["title", "string"], ["n", "number"], ["done", "boolean"], ["meta", "json"]]


def _dest(client: FakeClient) -> Any:
    return connect("bigquery://my-project/analytics", name="bq", bigquery_client_factory=lambda project: client)


def test_url_parsing() -> None:
    assert parse_bigquery_url("bigquery://my-project/analytics") == ("my-project", "analytics")
    for bad in ("bigquery://x/analytics", "bigquery://my-project/", "bigquery://my-project/a-b", "bq://p/d"):
        with pytest.raises(ValueError):
            parse_bigquery_url(bad)


def test_first_apply_creates_tables_outside_the_transaction_then_merges_inside_it() -> None:
    client = FakeClient(meta=[])  # the metadata row starts empty: ensure adds the columns and records them
    dest = _dest(client)
    delta = insert("r1", hlc=1 << 16, client="a", title="x'y", n=2, meta=[1])
    client_meta_after = META

    original = client.query

    def query(sql: str, job_config: Any = None) -> FakeJob:
        if sql.startswith("UPDATE _lakesync_tables"):
            client.meta = client_meta_after
        return original(sql, job_config)

    client.query = query  # type: ignore[method-assign]
    stats = dest.apply(SCHEMA, [delta])
    assert stats.upserted == 1
    sqls = client.statements()
    ddl = [s for s in sqls if s.startswith("CREATE TABLE")]
    assert any("`todos`" in s and "CLUSTER BY `row_id`" in s and "props JSON DEFAULT JSON '{}'" in s for s in ddl)
    assert any(s.startswith("CREATE TABLE IF NOT EXISTS _lakesync_state") for s in ddl)
    # DDL jobs carry no session; the data jobs run in the transaction's session.
    for sql, config in client.calls:
        assert config.default_dataset.project == "my-project" and config.default_dataset.dataset_id == "analytics"
        in_session = bool(config.connection_properties)
        if sql.startswith(("CREATE", "ALTER")):
            assert not in_session
    begin = sqls.index("BEGIN TRANSACTION", sqls.index("SELECT columns FROM _lakesync_tables WHERE tbl = ?") - 1)
    merge_sql = next(s for s in sqls[begin:] if s.startswith("MERGE `todos`"))
    assert "PARSE_JSON(v.`meta`)" in merge_sql and "deleted_at = NULL" in merge_sql
    assert sqls[-2] == "COMMIT TRANSACTION"
    assert sqls[-1] == "CALL BQ.ABORT_SESSION()"


def test_upsert_binds_a_typed_struct_array() -> None:
    client = FakeClient(meta=META)
    dest = _dest(client)
    deltas = [insert("r1", hlc=1 << 16, client="a", title="it's; DROP", n="bad", done=True, meta={"k": [1]})]
    stats = dest.apply(SCHEMA, deltas)
    assert stats.nulled == 1
    sql, config = next(c for c in client.calls if c[0].startswith("MERGE `todos`"))
    assert "it's" not in sql  # values are parameters, never SQL text
    (param,) = config.query_parameters
    assert isinstance(param, bigquery.ArrayQueryParameter) and param.array_type == "STRUCT"
    (struct,) = param.values
    assert struct.struct_types == {
        "row_id": "STRING",
        "title": "STRING",
        "n": "FLOAT64",
        "done": "BOOL",
        "meta": "STRING",
    }
    assert struct.struct_values == {
        "row_id": "r1",
        "title": "it's; DROP",
        "n": None,
        "done": True,
        "meta": '{"k":[1]}',
    }
    assert param.to_api_repr()["parameterType"]["type"] == "ARRAY"
    begin = len(client.calls) - 1 - client.statements()[::-1].index("BEGIN TRANSACTION")  # the apply's own
    assert all(c[1].connection_properties[0].value == "sess-1" for c in client.calls[begin + 1 :])


def test_state_is_read_and_merged_with_the_one_rule() -> None:
    old = insert("r1", hlc=5 << 16, client="a", title="new")
    state = fold([old])
    assert state is not None
    client = FakeClient(meta=META, states={"r1": json.dumps(state_to_json(state))})
    dest = _dest(client)
    late = update("r1", hlc=1 << 16, client="b", title="older")
    stats = dest.apply(SCHEMA, [late])
    assert stats.unchanged == 1 and stats.upserted == 0
    sql, config = next(c for c in client.calls if c[0].startswith("SELECT row_id, state"))
    assert "row_id IN UNNEST(?)" in sql
    assert config.query_parameters[1].values == ["r1"] and config.query_parameters[1].array_type == "STRING"
    assert not any(s.startswith("MERGE `todos`") for s in client.statements())


def test_delete_soft_and_hard() -> None:
    live = insert("r1", hlc=1 << 16, client="a", title="x")
    state = fold([live])
    assert state is not None
    for soft, expected in (
        (True, "UPDATE `todos` SET deleted_at = CURRENT_TIMESTAMP()"),
        (False, "DELETE FROM `todos`"),
    ):
        schema = schema_with(SCHEMA, softDelete=soft)
        client = FakeClient(meta=META, states={"r1": json.dumps(state_to_json(state))})
        dest = _dest(client)
        stats = dest.apply(schema, [delete("r1", hlc=2 << 16, client="a")])
        assert stats.deleted == 1
        sql, config = next(c for c in client.calls if c[0].startswith(expected))
        assert "row_id IN UNNEST(?)" in sql and config.query_parameters[0].values == ["r1"]
        write = next(c for c in client.calls if c[0].startswith("MERGE _lakesync_state"))
        struct = write[1].query_parameters[0].values[0]
        assert json.loads(struct.struct_values["state"])["t"] == [str(2 << 16), "a"]


def test_concurrent_update_is_retried_and_other_errors_are_not() -> None:
    client = FakeClient(
        meta=META,
        fail_on="COMMIT TRANSACTION",
        failure=gexc.BadRequest("Transaction is aborted due to concurrent update"),
    )
    dest = _dest(client)
    dest._sleep = lambda s: None
    delta = insert("r1", hlc=1 << 16, client="a", title="x")
    assert dest.apply(SCHEMA, [delta]).attempts == 2
    # the metadata check of the first ensure, the commit that failed, the retried one
    assert client.statements().count("COMMIT TRANSACTION") == 3
    client.fail_on, client.failure = "MERGE `todos`", gexc.BadRequest("Syntax error")
    with pytest.raises(DestinationError) as err:
        dest.apply(SCHEMA, [delta])
    assert err.value.retryable is False


def test_connect_params_with_a_service_account_secret_uses_the_factory() -> None:
    client = FakeClient(meta=META)
    dest = connect_params(
        {"type": "service_account", "project_id": "my-project"},
        name="bq",
        type="bigquery",
        url="bigquery://my-project/analytics",
        bigquery_client_factory=lambda project: client,
    )
    assert dest.dialect.name == "bigquery"
    assert dest.rows(SCHEMA) == {}
    sql = next(s for s in client.statements() if s.startswith("SELECT row_id"))
    assert "TO_JSON_STRING(`meta`)" in sql and "WHERE deleted_at IS NULL" in sql
