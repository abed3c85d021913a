"""The client SDK's pure parts, without a server: schema → SQLite DDL and values, input checks, the outbox's push
plan, backoff, tokens, the real-time URL and frames, and the fast paths against the generic code they replace."""

from __future__ import annotations

import base64
import json
import sqlite3
from typing import Any

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from lakesync.auth import mint_token
from lakesync.client import _fast
from lakesync.client.backoff import Backoff
from lakesync.client.outbox import OutboxEntry, plan_push
from lakesync.client.realtime import decode_message, websocket_url
from lakesync.client.store import token_subject
from lakesync.client.tables import LocalTable, LocalWriteError, from_sql, to_sql
from lakesync.core.canonical import stable_stringify
from lakesync.core.checkpoint import checkpoint_id, row_deltas
from lakesync.core.delta import make_delta
from lakesync.core.errors import CodecError, ValidationError
from lakesync.core.hlc import encode
from lakesync.core.merge import fold, merge, state_to_json
from lakesync.core.messages import SyncResponse
from lakesync.core.schema import ColumnType
from lakesync.gateway.checkpoint import encode_row, write_checkpoint
from lakesync.gateway.memory import InMemoryObjectStore
from lakesync.wire import _json
from lakesync.wire.codec import decode_sync_response
from lakesync.wire.fast_checkpoint import decode_checkpoint, to_row_delta
from lakesync.wire.framing import encode_broadcast, iter_checkpoint
from tests.factories import T0, todo_schema

SCHEMA = todo_schema(nothing="null", order="string")


# -- schema → SQLite -------------------------------------------------------------------------------------------------
def test_schema_becomes_a_typed_sqlite_table_other_tools_can_read() -> None:
    table = LocalTable.from_schema(SCHEMA)
    db = sqlite3.connect(":memory:")
    try:
        db.execute(table.create_sql())
        info = {row[1]: (row[2], row[5]) for row in db.execute('PRAGMA table_info("todos")')}
        assert info == {
            "_rowId": ("TEXT", 1),
            "title": ("TEXT", 0),
            "done": ("INTEGER", 0),
            "priority": ("NUMERIC", 0),
            "tags": ("TEXT", 0),
            "nothing": ("", 0),
            "order": ("TEXT", 0),  # a keyword, quoted
        }
        values = {"title": "a", "done": True, "priority": 2.5, "tags": {"k": [1, None]}, "order": "x"}
        db.execute(table.upsert_sql(), table.row_params("r1", values))
        raw = db.execute('SELECT done, priority, tags, json_extract(tags, "$.k[0]") FROM todos').fetchone()
        assert raw == (1, 2.5, '{"k":[1,null]}', 1)
        row = db.execute(table.select_sql()).fetchone()
        assert table.from_row(row) == {**values, "nothing": None}
    finally:
        db.close()


@pytest.mark.parametrize(
    ("kind", "value", "stored"),
    [
        (ColumnType.BOOLEAN, False, 0),
        (ColumnType.NUMBER, 7, 7),
        (ColumnType.NUMBER, 2**70, float(2**70)),
        (ColumnType.STRING, "é😀", "é😀"),
        (ColumnType.JSON, "text", '"text"'),
        (ColumnType.JSON, [1, {"a": True}], '[1,{"a":true}]'),
        (ColumnType.STRING, None, None),
    ],
)
def test_values_round_trip_through_their_column(kind: ColumnType, value: Any, stored: Any) -> None:
    assert to_sql(kind, value) == stored
    assert from_sql(kind, stored) == value


@pytest.mark.parametrize(
    ("schema", "message"),
    [
        ({"table": "t", "columns": [{"name": "_rowid", "type": "string"}]}, "clashes"),
        ({"table": "t", "columns": [{"name": "a", "type": "string"}, {"name": "A", "type": "string"}]}, "case"),
        ({"table": "_lakesync_x", "columns": []}, "reserved"),
        ({"table": "sqlite_x", "columns": []}, "reserved"),
    ],
)
def test_schemas_the_local_file_cannot_hold_are_refused(schema: dict[str, Any], message: str) -> None:
    with pytest.raises(ValidationError, match=message):
        LocalTable.from_schema(schema)


@pytest.mark.parametrize(
    ("row_id", "values", "message"),
    [
        ("", {}, "row_id must be a non-empty string"),
        (5, {}, "row_id must be a non-empty string"),
        ("x" * 2040, {}, "must fit 2,048 bytes"),
        ("\ud800", {}, "lone surrogate"),
        ("r", {"nope": 1}, 'Unknown column "nope"'),
        ("r", {"title": 1}, "todos.title is a string column; got int"),
        ("r", {"done": 1}, "todos.done is a boolean column"),
        ("r", {"priority": True}, "todos.priority is a number column; got bool"),
        ("r", {"priority": float("nan")}, "finite"),
        ("r", {"tags": {1: "a"}}, "non-string object key"),
        ("r", {"tags": {1, 2}}, "not a JSON value"),
        ("r", {"nothing": "x"}, "null column"),
        ("r", {"title": "x" * 100_001}, "the gateway accepts 100,000"),
    ],
)
def test_bad_writes_are_refused_with_a_clear_message(row_id: Any, values: dict[str, Any], message: str) -> None:
    with pytest.raises(LocalWriteError, match=message):
        LocalTable.from_schema(SCHEMA).check_write("default", row_id, values)


# -- the outbox ----------------------------------------------------------------------------------------------------
def test_push_plan_takes_the_outbox_in_order_and_acknowledges_partially_sent_entries() -> None:
    entries = [OutboxEntry(7, ("c", "d", "e"), 0), OutboxEntry(3, ("a0", "a", "b"), 1), OutboxEntry(9, ("f",), 0)]

    first = plan_push(entries, limit=4)
    assert first.deltas == ("a", "b", "c", "d")
    assert first.acks == ((3, 3, True), (7, 2, False))

    # Acknowledging a prefix of the plan (deltas one by one) advances the entries as far as it reaches
    assert first.acks_of_first(0) == ()
    assert first.acks_of_first(1) == ((3, 2, False),)
    assert first.acks_of_first(2) == ((3, 3, True),)
    assert first.acks_of_first(3) == ((3, 3, True), (7, 1, False))
    assert first.acks_of_first(4) == first.acks

    rest = plan_push([OutboxEntry(7, ("c", "d", "e"), 2), entries[2]], limit=4)
    assert rest.deltas == ("e", "f")
    assert rest.acks == ((7, 3, True), (9, 1, True))


def test_push_plan_respects_the_byte_budget_but_always_moves() -> None:
    big = "x" * 600
    plan = plan_push([OutboxEntry(1, (big, big, "y"), 0)], max_bytes=1000)
    assert plan.deltas == (big,)
    assert plan.acks == ((1, 1, False),)
    assert plan_push([]).deltas == ()


# -- backoff -------------------------------------------------------------------------------------------------------
def test_backoff_grows_exponentially_with_jitter_up_to_the_cap_and_resets() -> None:
    low = Backoff(initial=1.0, factor=2.0, cap=10.0, random=lambda: 0.0)
    assert [low.next_delay() for _ in range(6)] == [0.5, 1.0, 2.0, 4.0, 5.0, 5.0]
    high = Backoff(initial=1.0, factor=2.0, cap=10.0, random=lambda: 0.999999)
    assert [round(high.next_delay(), 3) for _ in range(5)] == [1.0, 2.0, 4.0, 8.0, 10.0]
    high.failures = 10_000
    assert high.next_delay() <= 10.0
    high.reset()
    assert round(high.next_delay(), 3) == 1.0
    with pytest.raises(ValueError):
        Backoff(initial=0)


# -- tokens and the real-time channel ---------------------------------------------------------------------------------
def test_client_id_defaults_to_the_tokens_subject_read_without_the_secret() -> None:
    assert token_subject(mint_token("alice", "default", "s" * 32)) == "alice"
    with pytest.raises(ValueError):
        token_subject("not-a-jwt")


def test_websocket_url_follows_the_http_url_and_carries_the_query() -> None:
    assert websocket_url("https://api.example.com/prod/", "gw", "t.o.k") == (
        "wss://api.example.com/prod/v1/sync/gw/ws?gateway=gw&encoding=base64&token=t.o.k"
    )
    assert websocket_url("http://127.0.0.1:8787", "default", "x", ws_url="wss://rt.example.com/dev?a=1") == (
        "wss://rt.example.com/dev?a=1&gateway=default&encoding=base64&token=x"
    )


def test_broadcasts_decode_from_base64_text_and_from_binary_frames() -> None:
    delta = make_delta("INSERT", table="t", row_id="r", client_id="bob", hlc=encode(T0, 1), columns={"a": [1]})
    frame = encode_broadcast(SyncResponse((delta,), encode(T0, 2), has_more=True))
    for message in (base64.b64encode(frame).decode(), frame):
        response = decode_message(message)
        assert response.deltas == (delta,)
        assert response.has_more is True
    with pytest.raises(CodecError):
        decode_message("not base64!")
    with pytest.raises(CodecError, match="Expected broadcast tag"):
        decode_message(base64.b64encode(b"\x01" + frame[1:]).decode())


# -- fast paths == generic code ---------------------------------------------------------------------------------------
json_values = st.recursive(
    st.none()
    | st.booleans()
    | st.integers(min_value=-(2**60), max_value=2**60)
    | st.floats(allow_nan=False, allow_infinity=False)
    | st.text(),
    lambda children: st.lists(children, max_size=3) | st.dictionaries(st.text(max_size=4), children, max_size=3),
    max_leaves=6,
)
names = st.text(alphabet='abcxyz_"é', min_size=1, max_size=5)


@settings(max_examples=200, deadline=None)
@given(value=json_values)
def test_json_text_is_the_canonical_json(value: Any) -> None:
    assert _fast.json_text(value) == stable_stringify(value)
    assert json.loads(_fast.state_json_text(value)) == value


@settings(max_examples=150, deadline=None)
@given(
    values=st.dictionaries(names, json_values, max_size=4),
    row_id=st.text(min_size=1, max_size=8),
    client=st.text(min_size=1, max_size=6),
    hlc=st.integers(min_value=0, max_value=2**64 - 1),
)
def test_fast_insert_delta_and_state_equal_make_delta_and_merge(
    values: dict[str, Any], row_id: str, client: str, hlc: int
) -> None:
    wire, did, pairs = _fast.insert_delta("INSERT", "todos", row_id, client, hlc, values)
    delta = make_delta("INSERT", table="todos", row_id=row_id, client_id=client, hlc=hlc, columns=values)
    assert did == delta.delta_id
    # as the gateway reads them (numbers are doubles)
    assert _json.parse(wire) == _json.parse(json.dumps(delta.to_json(), ensure_ascii=False))
    state = json.loads(_fast.write_state_json(pairs, hlc, _fast.json_text(client)))
    assert state == json.loads(json.dumps(state_to_json(merge(None, delta).state)))


deltas_of_one_row = st.lists(
    st.tuples(
        st.sampled_from(["INSERT", "UPDATE", "DELETE"]),
        st.integers(min_value=1, max_value=40),
        st.sampled_from(["a", "b"]),
        st.dictionaries(st.sampled_from(["x", "y", "z"]), json_values, max_size=3),
    ),
    min_size=1,
    max_size=5,
)


@settings(max_examples=150, deadline=None)
@given(history=deltas_of_one_row)
def test_checkpoint_rows_load_as_the_state_fold_gives(history: list[tuple[str, int, str, dict[str, Any]]]) -> None:
    # Given a row's history, cut into a checkpoint by the real checkpoint writer
    deltas = [
        make_delta(op, table="todos", row_id="r", client_id=c, hlc=encode(T0, t), columns=cols)
        for op, t, c, cols in history
    ]
    state = fold(deltas)
    assert state is not None
    objects = InMemoryObjectStore()
    write_checkpoint(
        objects,
        gateway="default",
        checkpoint_id=checkpoint_id(T0, "00000001"),
        created_at_ms=T0,
        positions={},
        server_hlc=encode(T0, 99),
        tables=["todos"],
        rows=[encode_row(state)],
    )
    frames = [body for key, body in sorted(objects.objects.items()) if key.endswith(".bin")]

    # When the fast decoder reads it and the row's state is written as is
    rows = list(decode_checkpoint(frames))
    generic = [d for body in frames for payload in iter_checkpoint(body) for d in decode_sync_response(payload).deltas]
    assert [to_row_delta(d) for row in rows for d in row] == generic
    assert [d.delta_id for d in generic] == [d.delta_id for d in row_deltas(state)]
    text, values = _fast.checkpoint_state_json(rows[0])

    # Then it is the state the merge gives (numbers as the wire carries them: doubles), and the row's values
    served = fold(generic)
    assert served is not None
    assert json.loads(text) == json.loads(json.dumps(state_to_json(served)))
    assert values == served.values()
