"""The SQL a database connector generates, without a database: the original's cursor statements per dialect (quoted
cursor column, ``%s`` placeholder, a literal ``%`` of the user's query doubled only when the driver formats the
statement), the look-back arithmetic of reference §14.1, and BigQuery's statement with its named parameter (BigQuery
itself is not reachable here: the statement and binding are what is tested)."""

from __future__ import annotations

import datetime as dt

import pytest

from lakesync.connectors.sql.query import IngestTable, bigquery_poll_statement
from lakesync.connectors.sql.values import decode_cursor, encode_cursor, look_back

TABLE = IngestTable("t", "SELECT * FROM items WHERE name LIKE 'a%'", "id", "cursor", "updated_at", 5000)


def test_cursor_statements_per_dialect() -> None:
    assert TABLE.select("postgres", limit=11) == (
        "SELECT * FROM (SELECT * FROM items WHERE name LIKE 'a%') AS _src ORDER BY \"updated_at\" ASC LIMIT 11"
    )
    assert TABLE.select("mysql", where="`updated_at` > %s", limit=3) == (
        "SELECT * FROM (SELECT * FROM items WHERE name LIKE 'a%%') AS _src WHERE `updated_at` > %s"
        " ORDER BY `updated_at` ASC LIMIT 3"
    )


@pytest.mark.parametrize(
    ("cursor", "expected"),
    [
        (10_000, 5_000),
        (dt.datetime(2024, 1, 1, 0, 0, 10), dt.datetime(2024, 1, 1, 0, 0, 5)),
        ("2024-01-01T00:00:10.000Z", "2024-01-01T00:00:05.000Z"),
        ("not a date", "not a date"),
    ],
)
def test_look_back_as_the_original(cursor: object, expected: object) -> None:
    assert look_back(cursor, 5000) == expected


def test_cursor_values_round_trip_through_a_position() -> None:
    for value in (dt.datetime(2024, 5, 1, 12, 30, tzinfo=dt.UTC), dt.date(2024, 5, 1), 42, "x"):
        assert decode_cursor(encode_cursor(value)) == value


def test_bigquery_statement_binds_the_cursor_as_a_named_parameter() -> None:
    sql, params = bigquery_poll_statement(TABLE, "proj-123", "sales", dt.datetime(2024, 1, 1, 0, 0, 10))
    assert sql == (
        "SELECT * FROM (SELECT * FROM items WHERE name LIKE 'a%') AS _src WHERE `updated_at` > @cursor"
        " ORDER BY `updated_at` ASC"
    )
    assert params == {"cursor": dt.datetime(2024, 1, 1, 0, 0, 5), "default_dataset": "proj-123.sales"}
    first, none = bigquery_poll_statement(TABLE, "proj-123", "sales", None)
    assert "@cursor" not in first and none == {}
