"""The store's bulk paths without a server: a checkpoint loaded column-wise into an empty store and ``insert_many``
give the states ``core.merge`` gives (compact states included, completed from the user rows), and the outbox entry of
a bulk insert renders the wire deltas (deltaIds included) ``make_delta`` gives, the same after a reopen."""

from __future__ import annotations

import json
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from lakesync.auth import mint_token
from lakesync.client import LocalStore, connect
from lakesync.core.canonical import stable_stringify
from lakesync.core.checkpoint import checkpoint_id
from lakesync.core.delta import RowDelta, make_delta
from lakesync.core.hlc import encode
from lakesync.core.merge import RowState, fold, merge
from lakesync.gateway.checkpoint import encode_row, write_checkpoint
from lakesync.gateway.memory import InMemoryObjectStore
from lakesync.wire.codec import decode_sync_response
from lakesync.wire.fast_checkpoint import decode_checkpoint_deltas
from lakesync.wire.framing import iter_checkpoint

SECRET = "bulk-test-secret-bulk-test-secret-0123"
SCHEMA = {
    "table": "todos",
    "columns": [
        {"name": "title", "type": "string"},
        {"name": "done", "type": "boolean"},
        {"name": "priority", "type": "number"},
        {"name": "tags", "type": "json"},
        {"name": "nothing", "type": "null"},
    ],
}
T0 = 1_700_000_000_000


@pytest.fixture
def store(tmp_path: Path) -> Iterator[LocalStore]:
    with _open(tmp_path / "bulk.db") as opened:
        yield opened


def _open(path: Path) -> LocalStore:
    token = mint_token("bulk", "default", SECRET)
    return connect(path, url="http://127.0.0.1:9", gateway="default", token=token, schemas=[SCHEMA], realtime=False)


def _delta(
    op: str, row_id: str, t: int, columns: dict[str, Any], *, table: str = "todos", client: str = "a"
) -> RowDelta:
    return make_delta(op, table=table, row_id=row_id, client_id=client, hlc=encode(T0, t), columns=columns)


HISTORIES: dict[tuple[str, str], list[RowDelta]] = {
    # one write delta of exact values: compact states
    ("todos", "plain1"): [_delta("INSERT", "plain1", 1, {"title": "a", "done": True, "priority": 3})],
    ("todos", "plain2"): [_delta("INSERT", "plain2", 2, {"title": "b", "done": False, "priority": 2.5})],
    ("todos", "plain3"): [_delta("INSERT", "plain3", 3, {"title": "c", "done": None, "priority": 7}, client="b")],
    ("todos", "json1"): [_delta("INSERT", "json1", 4, {"tags": {"k": [1, "x", None]}, "nothing": None})],
    ("todos", "json2"): [_delta("INSERT", "json2", 5, {"tags": ["a"], "nothing": "kept"})],
    ("todos", "partial"): [_delta("INSERT", "partial", 6, {"priority": 2**60})],
    ("todos", "empty"): [_delta("INSERT", "empty", 7, {})],
    # values a column does not give back as themselves: full states
    ("todos", "odd1"): [_delta("INSERT", "odd1", 8, {"title": 5, "done": 1, "priority": "7"})],
    ("todos", "odd2"): [_delta("INSERT", "odd2", 9, {"priority": True, "nothing": False})],
    # a column the schema lacks
    ("todos", "extra"): [_delta("INSERT", "extra", 10, {"title": "e", "colour": "red"})],
    # several versions, a delete, a row deleted then written again
    ("todos", "multi"): [
        _delta("INSERT", "multi", 11, {"title": "m", "done": False}),
        _delta("UPDATE", "multi", 12, {"done": True}, client="b"),
    ],
    ("todos", "gone"): [_delta("INSERT", "gone", 13, {"title": "g"}), _delta("DELETE", "gone", 14, {})],
    ("todos", "back"): [_delta("DELETE", "back", 15, {}), _delta("INSERT", "back", 16, {"title": "again"})],
    # a table without a schema
    ("notes", "n1"): [_delta("INSERT", "n1", 17, {"body": "hi"}, table="notes")],
    ("todos", "plain4"): [_delta("INSERT", "plain4", 18, {"title": "d", "done": True, "priority": 1})],
}


def _checkpoint_frames() -> list[bytes]:
    states = [fold(deltas) for deltas in HISTORIES.values()]
    objects = InMemoryObjectStore()
    write_checkpoint(
        objects,
        gateway="default",
        checkpoint_id=checkpoint_id(T0, "00000001"),
        created_at_ms=T0,
        positions={},
        server_hlc=encode(T0, 99),
        tables=["notes", "todos"],
        rows=[encode_row(s) for s in states if s is not None],
        chunk_bytes=300,  # several chunks
    )
    return [body for key, body in sorted(objects.objects.items()) if key.endswith(".bin")]


def _served_states(frames: list[bytes]) -> dict[tuple[str, str], RowState]:
    """The states of the checkpoint as the generic codec and ``core.merge`` give them."""
    states: dict[tuple[str, str], RowState] = {}
    for body in frames:
        for payload in iter_checkpoint(body):
            for delta in decode_sync_response(payload).deltas:
                key = (delta.table, delta.row_id)
                states[key] = merge(states.get(key), delta).state
    return states


def test_a_checkpoint_loaded_in_bulk_has_the_states_the_merge_gives(store: LocalStore) -> None:
    # Given a checkpoint of rows of every kind
    frames = _checkpoint_frames()
    expected = _served_states(frames)
    assert set(expected) == set(HISTORIES)

    # When it is loaded into the empty store
    with store._tx():
        changed = store._load_checkpoint_bulk(decode_checkpoint_deltas(frames))

    # Then every row's state is the merge's, the user rows are its values, and the common rows have compact states
    assert changed == {"todos": {r for t, r in HISTORIES if t == "todos"}, "notes": {"n1"}}
    for (table, row_id), state in expected.items():
        assert store.state(table, row_id) == state, (table, row_id)
    compact = {r for (r,) in store.query("SELECT row_id FROM _lakesync_state WHERE state LIKE '[%'")}
    assert compact == {"plain1", "plain2", "plain3", "plain4", "json1", "json2", "partial", "empty"}
    rows = store.rows("todos")
    for row_id in compact:
        values = expected[("todos", row_id)].values()
        assert values is not None
        assert {c: v for c, v in rows[row_id].items() if c in values} == values
    assert "gone" not in rows and rows["back"]["title"] == "again"


def test_a_compact_state_merges_as_the_full_state_would(store: LocalStore) -> None:
    frames = _checkpoint_frames()
    expected = _served_states(frames)
    with store._tx():
        store._load_checkpoint_bulk(decode_checkpoint_deltas(frames))

    # When remote deltas reach rows with compact states (a newer column, an older one, a delete) and a local update
    remote = [
        _delta("UPDATE", "plain1", 30, {"done": False}, client="z"),
        _delta("UPDATE", "plain2", 0, {"title": "older"}, client="z"),
        _delta("DELETE", "plain3", 31, {}, client="z"),
    ]
    store.apply_broadcast(remote)
    store.update("todos", "json1", {"tags": ["new"]})

    # Then the states are what merging into the full states gives
    for delta in remote:
        key = (delta.table, delta.row_id)
        assert store.state(*key) == merge(expected[key], delta).state
    local = store.state("todos", "json1")
    assert local is not None and local.written is not None
    update = make_delta(
        "UPDATE", table="todos", row_id="json1", client_id="bulk", hlc=local.written.hlc, columns={"tags": ["new"]}
    )
    assert local == merge(expected[("todos", "json1")], update).state
    assert store.get("todos", "plain1") == {"title": "a", "done": False, "priority": 3, "tags": None, "nothing": None}
    assert store.get("todos", "plain3") is None


ROWS: dict[str, dict[str, Any]] = {
    "w1": {"title": "one", "done": True, "priority": 1},
    "w2": {"title": "two", "done": False, "priority": 2.5, "tags": {"b": 1, "a": [True, None]}},
    "w3": {"priority": 2**62, "nothing": None},
    "w4": {"priority": 2**70},  # beyond 64 bits: stored as a double in the user table, so a full state
    "w5": {"title": "été ☃", "tags": "text"},  # non-ASCII: the complete checks
    "w6": {},
}


def test_insert_many_states_and_outbox_equal_make_delta_and_merge(tmp_path: Path) -> None:
    path = tmp_path / "writes.db"
    with _open(path) as store:
        # When rows are inserted in bulk
        store.insert_many("todos", ROWS)

        # Then each state is merge(None, the delta) and the outbox renders each delta as make_delta does
        first = store.state("todos", "w1")
        assert first is not None and first.written is not None
        hlc = first.written.hlc
        deltas = [
            make_delta("INSERT", table="todos", row_id=r, client_id="bulk", hlc=hlc, columns=v) for r, v in ROWS.items()
        ]
        for delta in deltas:
            assert store.state("todos", delta.row_id) == merge(None, delta).state
        wires = [w for entry in store._outbox() for w in entry.deltas]
        # (as JSON documents, canonically: the wire writes numbers as JavaScript does; deltaIds included)
        assert [stable_stringify(json.loads(w)) for w in wires] == [stable_stringify(d.to_json()) for d in deltas]
        assert [json.loads(w)["deltaId"] for w in wires] == [d.delta_id for d in deltas]
        assert store.pending() == len(ROWS)
        assert store.rows("todos")["w4"]["priority"] == float(2**70)

    # And a reopened file renders the very same deltas (a re-send is deduplicated by deltaId)
    with _open(path) as again:
        assert [w for entry in again._outbox() for w in entry.deltas] == wires


def test_insert_many_refuses_bad_rows_and_writes_nothing(store: LocalStore) -> None:
    with pytest.raises(Exception, match="priority"):
        store.insert_many("todos", {"ok": {"title": "fine"}, "bad": {"priority": "high"}})
    with pytest.raises(Exception, match="Unknown column"):
        store.insert_many("todos", {"ok": {"title": "fine"}, "bad": {"colour": "red"}})
    with pytest.raises(Exception, match="row_id"):
        store.insert_many("todos", {"ok": {"title": "fine"}, "": {"title": "x"}})
    assert store.rows("todos") == {} and store.pending() == 0


EXACT_ROWS: dict[str, dict[str, Any]] = {
    "x1": {"priority": 1, "title": "one", "done": True},  # given out of schema order
    "x2": {"title": "two", "done": False, "priority": 2.5, "tags": {"b": 1, "a": [True, None]}},
    "x3": {"priority": 2**62, "nothing": None, "title": None},
    "x4": {},
    "x5": {"done": None, "priority": -0.125},
}


def _schema_order(values: dict[str, Any]) -> dict[str, Any]:
    return {c["name"]: values[c["name"]] for c in SCHEMA["columns"] if c["name"] in values}


def test_insert_many_of_exact_rows_keeps_them_columnar_and_renders_the_same_deltas(tmp_path: Path) -> None:
    path = tmp_path / "columnar.db"
    with _open(path) as store:
        # When rows whose values all read back exactly are inserted in bulk
        store.insert_many("todos", EXACT_ROWS)

        # Then the outbox keeps them as their user-row parameters
        ((text,),) = store._db.execute("SELECT deltas FROM _lakesync_outbox").fetchall()
        assert "params" in json.loads(text) and "rows" not in json.loads(text)
        # And renders each as make_delta does with its columns in schema order; states are merge(None, delta)
        first = store.state("todos", "x1")
        assert first is not None and first.written is not None
        deltas = [
            make_delta(
                "INSERT", table="todos", row_id=r, client_id="bulk", hlc=first.written.hlc, columns=_schema_order(v)
            )
            for r, v in EXACT_ROWS.items()
        ]
        wires = [w for entry in store._outbox() for w in entry.deltas]
        assert [stable_stringify(json.loads(w)) for w in wires] == [stable_stringify(d.to_json()) for d in deltas]
        assert [json.loads(w)["deltaId"] for w in wires] == [d.delta_id for d in deltas]
        for delta in deltas:
            assert store.state("todos", delta.row_id) == merge(None, delta).state
        assert store.pending() == len(EXACT_ROWS)

    # And a file reopened with a changed schema (a column added before the others) renders the very same deltas
    changed = {"table": "todos", "columns": [{"name": "added", "type": "string"}, *SCHEMA["columns"]]}
    token = mint_token("bulk", "default", SECRET)
    with connect(
        path, url="http://127.0.0.1:9", gateway="default", token=token, schemas=[changed], realtime=False
    ) as s:
        assert [w for entry in s._outbox() for w in entry.deltas] == wires
        assert s.pending() == len(EXACT_ROWS)
