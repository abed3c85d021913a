"""Pure parts of lakesync.sql: coercion, layout checks, generated SQL, URL handling and error hygiene."""

from __future__ import annotations

import math
import socket

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from lakesync.core.delta import make_delta
from lakesync.core.errors import DestinationError
from lakesync.core.schema import ColumnType, parse_table_schema
from lakesync.sql import connect, connect_params, mask_url
from lakesync.sql.coerce import coerce_value, decode_value
from lakesync.sql.dialect import LayoutError, TableLayout, check_layout
from lakesync.sql.mysql import MySQLDialect
from lakesync.sql.postgres import PostgresDialect
from lakesync.sql.sqlite import SQLiteDialect
from tests.sql.servers import Server

S, N, B, J, Z = ColumnType.STRING, ColumnType.NUMBER, ColumnType.BOOLEAN, ColumnType.JSON, ColumnType.NULL


@pytest.mark.parametrize(
    ("value", "ctype", "stored", "dropped"),
    [
        (None, N, None, False),
        (1, N, 1.0, False),
        (-2.5, N, -2.5, False),
        (True, N, None, True),
        ("12", N, None, True),
        ([1], N, None, True),
        (10**400, N, None, True),
        (True, B, True, False),
        (0, B, None, True),
        ("true", B, None, True),
        ("x", S, "x", False),
        (1.0, S, "1", False),
        (0.5, S, "0.5", False),
        (1e21, S, "1e+21", False),
        (False, S, "false", False),
        ({"b": 1, "a": None}, S, '{"a":null,"b":1}', False),
        ("a\x00b", S, "a\x00b", False),
        ("\ud800", S, None, True),
        ("x", Z, "x", False),
        ("é", J, '"é"', False),
        ({"k": [1, 2.5, None, True]}, J, '{"k":[1,2.5,null,true]}', False),
        ({"\ud800": 1}, J, None, True),
    ],
)
def test_coerce_value(value: object, ctype: ColumnType, stored: object, dropped: bool) -> None:
    result = coerce_value(value, ctype)
    assert (result.value, result.dropped) == (stored, dropped)


def test_nul_is_not_representable_where_the_dialect_forbids_it() -> None:
    assert coerce_value("a\x00", S, allow_nul=False).dropped
    assert coerce_value({"k": ["a\x00"]}, J, allow_nul=False).dropped
    assert coerce_value({"a\x00": 1}, J, allow_nul=False).dropped
    assert not coerce_value("a\x00", S, allow_nul=True).dropped
    # A literal backslash-u0000 in a string is six ordinary characters, not a NUL.
    assert coerce_value({"k": "\\u0000"}, J, allow_nul=False) == coerce_value({"k": "\\u0000"}, J)
    assert not coerce_value({"k": "\\u0000"}, J, allow_nul=False).dropped


JSON_VALUES = st.recursive(
    st.none()
    | st.booleans()
    | st.integers(-(2**53), 2**53)
    | st.floats(allow_nan=False, allow_infinity=False)
    | st.text(),
    lambda inner: st.lists(inner, max_size=3) | st.dictionaries(st.text(max_size=3), inner, max_size=3),
    max_leaves=8,
)


@settings(max_examples=200)
@given(value=JSON_VALUES, ctype=st.sampled_from(list(ColumnType)))
def test_coercion_never_raises_and_round_trips_what_it_keeps(value: object, ctype: ColumnType) -> None:
    result = coerce_value(value, ctype)
    if result.value is None:
        return
    back = decode_value(result.value, ctype)
    if ctype is J:
        assert back == value or (isinstance(value, float) and math.isclose(back, value))  # type: ignore[arg-type]
    elif ctype is N:
        assert back == float(value)  # type: ignore[arg-type]
    elif ctype is B:
        assert back is value
    else:
        assert isinstance(back, str)


def test_decode_value_per_driver_shape() -> None:
    assert decode_value(1, B) is True and decode_value(0, B) is False
    assert decode_value('{"a":1}', J) == {"a": 1}
    assert decode_value(b"[1]", J) == [1]
    assert decode_value(3, N) == 3.0
    assert decode_value(None, J) is None


@pytest.mark.parametrize(
    "layout",
    [
        TableLayout("a b", ((("x", S)),)),
        TableLayout("ok", (("x;drop", S),)),
        TableLayout("ok", (("deleted_at", S),)),
        TableLayout("ok", (("x", S), ("X", S))),
        TableLayout("_lakesync_tables", (("x", S),)),
        TableLayout("ok", (("x", S),), primary_key=("y",)),
        TableLayout("ok", (("x", S),), external_id="y"),
    ],
)
def test_check_layout_refuses(layout: TableLayout) -> None:
    with pytest.raises(LayoutError):
        check_layout(layout, 64)


def test_generated_sql_quotes_identifiers_and_binds_values() -> None:
    layout = TableLayout("todos", (("title", S), ("n", N), ("meta", J)), external_id="title")
    pg = PostgresDialect()
    (create, *_) = pg.create_table(layout)
    assert '"title" TEXT' in create and "props JSONB NOT NULL DEFAULT '{}'" in create
    assert 'UNIQUE ("title")' in create and "deleted_at TIMESTAMPTZ" in create
    (insert,) = pg.upsert_rows(layout, [("r1", "t", 1.0, '{"a":1}')])
    assert '(e->>1) AS "title", (e->>2)::float8 AS "n", (e->>3)::jsonb AS "meta"' in insert.sql
    assert "FROM json_array_elements(%s::json)" in insert.sql
    # The values travel as one JSON text of row arrays; the json column's value is its JSON text, as a string.
    assert 'ON CONFLICT ("title")' in insert.sql and insert.params == ['[["r1","t",1.0,"{\\"a\\":1}"]]']
    by_key = pg.update_by_key(layout, [("r1", "t", 1.0, None)])
    assert by_key is not None and 'WHERE t."row_id" = v."row_id"' in by_key.sql and by_key.returns

    my = MySQLDialect(mariadb=True)
    (create,) = my.create_table(layout)
    assert "`title` VARCHAR(255) CHARACTER SET utf8mb4 COLLATE utf8mb4_nopad_bin" in create  # a key column
    assert "`meta` JSON" in create and "DATETIME(6)" in create
    (upsert,) = my.upsert_rows(layout, [("r1", "t", 1.0, None)])
    assert upsert.many and "ON DUPLICATE KEY UPDATE `title` = VALUES(`title`)" in upsert.sql
    assert MySQLDialect(mariadb=False).key_collation == "utf8mb4_0900_bin"

    lite = SQLiteDialect()
    (upsert,) = lite.upsert_rows(layout, [("r1", "t", 1.0, None)])
    assert 'ON CONFLICT ("row_id") DO UPDATE' in upsert.sql and 'ON CONFLICT ("title") DO UPDATE' in upsert.sql
    (delete,) = lite.delete_rows(TableLayout("t", (), soft_delete=False), ["a", "b"])
    assert delete.sql == 'DELETE FROM "t" WHERE row_id IN (?, ?)' and delete.params == ("a", "b")


def test_mask_url_hides_passwords_and_query_values() -> None:
    assert mask_url("postgresql://u:s3cret@db:5432/app?sslmode=require") == "postgresql://u:***@db:5432/app?sslmode=***"
    assert mask_url("mysql://u@db/app") == "mysql://u@db/app"
    assert "s3cret" not in mask_url("mysql://u:s3cret@db/app")


def test_connect_routes_by_scheme() -> None:
    assert connect("sqlite:///:memory:", name="x").dialect.name == "sqlite"
    assert connect("postgres://u@h/d", name="x").dialect.name == "postgres"
    assert connect("mariadb://u@h/d", name="x").dialect.name == "mysql"
    for bad in ("oracle://u@h/d", "sqlite://relative", "nothing"):
        with pytest.raises(DestinationError) as err:
            connect(bad, name="x")
        assert err.value.retryable is False
    with pytest.raises(DestinationError):
        connect_params({"engine": "mysql", "host": "h"}, name="x", type="postgres")
    with pytest.raises(DestinationError):
        connect_params({"engine": "postgres"}, name="x", type="postgres")


def _closed_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        port: int = s.getsockname()[1]
        return port


@pytest.mark.parametrize("scheme", ["postgresql", "mysql"])
def test_connection_errors_are_retryable_and_never_show_the_password(scheme: str) -> None:
    port = _closed_port()
    dest = connect(f"{scheme}://user:Sup3rS3cret@127.0.0.1:{port}/db", name="x")
    dest._sleep = lambda s: None
    with pytest.raises(DestinationError) as err:
        dest.apply(parse_table_schema({"table": "t", "columns": []}), [])
    assert err.value.retryable is True
    assert "Sup3rS3cret" not in str(err.value) and "Sup3rS3cret" not in repr(dest)
    params = connect_params(
        {
            "engine": scheme,
            "host": "127.0.0.1",
            "port": port,
            "username": "u",
            "password": "An0therS3cret",
            "dbname": "d",
        },
        name="y",
        type="postgres" if scheme == "postgresql" else "mysql",
    )
    params._sleep = lambda s: None
    with pytest.raises(DestinationError) as err2:
        params.rows(parse_table_schema({"table": "t", "columns": []}))
    assert "An0therS3cret" not in str(err2.value) and err2.value.retryable


@pytest.mark.integration
def test_connect_params_with_an_rds_style_secret(postgres_server: Server, mariadb_server: Server) -> None:
    schema = parse_table_schema({"table": "secret_t", "columns": [{"name": "a", "type": "string"}]})
    for server, type_ in ((postgres_server, "postgres"), (mariadb_server, "mysql")):
        server.create_database("secretdb")
        secret = {
            "engine": "postgres" if type_ == "postgres" else "mariadb",
            "host": server.host,
            "port": server.port,
            "username": server.user,
            "password": "",
            "dbname": "secretdb",
        }
        dest = connect_params(secret, name="s", type=type_)
        try:
            dest.apply(
                schema, [make_delta("INSERT", table="secret_t", row_id="r", client_id="c", hlc=1, columns={"a": "x"})]
            )
            assert dest.rows(schema) == {"r": {"a": "x"}}
        finally:
            dest.close()
        via_url = connect_params({"url": server.url("secretdb")}, name="u", type=type_)
        try:
            assert via_url.rows(schema) == {"r": {"a": "x"}}
        finally:
            via_url.close()
