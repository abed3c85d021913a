"""The store's bulk paths without a server: a checkpoint loaded column-wise into an empty store and ``insert_many``
give the states ``core.merge`` gives (compact states included, completed from the user rows), and the outbox entry of
a bulk insert renders the wire deltas (deltaIds included) ``make_delta`` gives, the same after a reopen."""

from __future__ import annotations

import itertools
import json
import tempfile
from collections.abc import Iterable, Iterator
from pathlib import Path
from typing import Any

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from lakesync.auth import mint_token
from lakesync.client import LocalStore, connect
from lakesync.client.base import BASE_RECORD_ROWS
from lakesync.client.database import SCHEMA_VERSION
from lakesync.client.model import SyncStateError
from lakesync.client.tables import RowExistsError
from lakesync.core.canonical import stable_stringify
from lakesync.core.checkpoint import checkpoint_id
from lakesync.core.delta import RowDelta, make_delta
from lakesync.core.errors import LakeSyncError
from lakesync.core.hlc import encode
from lakesync.core.merge import RowState, fold, merge
from lakesync.gateway.checkpoint import encode_row, write_checkpoint
from lakesync.gateway.memory import InMemoryObjectStore
from lakesync.wire.codec import decode_sync_response
from lakesync.wire.fast_checkpoint import decode_checkpoint_deltas
from lakesync.wire.framing import iter_checkpoint
from tests import factories
from tests.factories import T0, at, delete, insert, schema_doc, todo_schema, update

SECRET = "bulk-test-secret-bulk-test-secret-0123"
SCHEMA = todo_schema(nothing="null")


@pytest.fixture
def store(tmp_path: Path) -> Iterator[LocalStore]:
    with _open(tmp_path / "bulk.db") as opened:
        yield opened


def _open(path: Path) -> LocalStore:
    token = mint_token("bulk", "default", SECRET)
    return connect(path, url="http://127.0.0.1:9", gateway="default", token=token, schemas=[SCHEMA], realtime=False)


HISTORIES: dict[tuple[str, str], list[RowDelta]] = {
    # one write delta of exact values: compact states
    ("todos", "plain1"): [insert("plain1", hlc=at(0, 1), client="a", title="a", done=True, priority=3)],
    ("todos", "plain2"): [insert("plain2", hlc=at(0, 2), client="a", title="b", done=False, priority=2.5)],
    ("todos", "plain3"): [insert("plain3", hlc=at(0, 3), client="b", title="c", done=None, priority=7)],
    ("todos", "json1"): [insert("json1", hlc=at(0, 4), client="a", tags={"k": [1, "x", None]}, nothing=None)],
    ("todos", "json2"): [insert("json2", hlc=at(0, 5), client="a", tags=["a"], nothing="kept")],
    ("todos", "partial"): [insert("partial", hlc=at(0, 6), client="a", priority=2**60)],
    ("todos", "empty"): [insert("empty", hlc=at(0, 7), client="a")],
    # values a column does not give back as themselves: full states
    ("todos", "odd1"): [insert("odd1", hlc=at(0, 8), client="a", title=5, done=1, priority="7")],
    ("todos", "odd2"): [insert("odd2", hlc=at(0, 9), client="a", priority=True, nothing=False)],
    # a column the schema lacks
    ("todos", "extra"): [insert("extra", hlc=at(0, 10), client="a", title="e", colour="red")],
    # several versions, a delete, a row deleted then written again
    ("todos", "multi"): [
        insert("multi", hlc=at(0, 11), client="a", title="m", done=False),
        update("multi", hlc=at(0, 12), client="b", done=True),
    ],
    ("todos", "gone"): [
        insert("gone", hlc=at(0, 13), client="a", title="g"),
        delete("gone", hlc=at(0, 14), client="a"),
    ],
    ("todos", "back"): [
        delete("back", hlc=at(0, 15), client="a"),
        insert("back", hlc=at(0, 16), client="a", title="again"),
    ],
    # a table without a schema
    ("notes", "n1"): [insert("n1", hlc=at(0, 17), table="notes", client="a", body="hi")],
    ("todos", "plain4"): [insert("plain4", hlc=at(0, 18), client="a", title="d", done=True, priority=1)],
}


def _frames_of(states: Iterable[RowState | None], chunk_bytes: int) -> list[bytes]:
    """The chunk bodies of a checkpoint of ``states``, cut by the real writer."""
    kept = [s for s in states if s is not None]
    objects = InMemoryObjectStore()
    write_checkpoint(
        objects,
        gateway="default",
        checkpoint_id=checkpoint_id(T0, "00000001"),
        created_at_ms=T0,
        positions={},
        server_hlc=encode(T0, 99),
        tables=sorted({s.table for s in kept}),
        rows=[encode_row(s) for s in kept],
        chunk_bytes=chunk_bytes,
    )
    return [body for key, body in sorted(objects.objects.items()) if key.endswith(".bin")]


def _checkpoint_frames() -> list[bytes]:
    return _frames_of((fold(deltas) for deltas in HISTORIES.values()), chunk_bytes=300)  # several chunks


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
    with store._db.tx():
        changed = store._bootstrap.load_bulk(decode_checkpoint_deltas(frames))

    # Then every row's state is the merge's, the user rows are its values, and the common rows have compact states
    assert changed == {"todos": {r for t, r in HISTORIES if t == "todos"}, "notes": {"n1"}}
    for (table, row_id), state in expected.items():
        assert store.state(table, row_id) == state, (table, row_id)
    compact = {r for (r,) in store.query("SELECT row_id FROM _lakesync_state WHERE state LIKE '[%'")} | {
        r for (ids,) in store.query("SELECT ids FROM _lakesync_base") for r in json.loads(ids)
    }
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
    with store._db.tx():
        store._bootstrap.load_bulk(decode_checkpoint_deltas(frames))

    # When remote deltas reach rows with compact states (a newer column, an older one, a delete) and a local update
    remote = [
        update("plain1", hlc=at(0, 30), client="z", done=False),
        update("plain2", hlc=at(0, 0), client="z", title="older"),
        delete("plain3", hlc=at(0, 31), client="z"),
    ]
    store.apply_broadcast(remote)
    store.update("todos", "json1", {"tags": ["new"]})

    # Then the states are what merging into the full states gives
    for delta in remote:
        key = (delta.table, delta.row_id)
        assert store.state(*key) == merge(expected[key], delta).state
    local = store.state("todos", "json1")
    assert local is not None and local.written is not None
    edit = update("json1", hlc=local.written.hlc, client="bulk", tags=["new"])
    assert local == merge(expected[("todos", "json1")], edit).state
    assert store.get("todos", "plain1") == {"title": "a", "done": False, "priority": 3, "tags": None, "nothing": None}
    assert store.get("todos", "plain3") is None


class _Text(str):
    """A str subclass (an app's own string type)."""


ROWS: dict[str, dict[str, Any]] = {
    "w1": {"title": "one", "done": True, "priority": 1},
    "w2": {"title": "two", "done": False, "priority": 2.5, "tags": {"b": 1, "a": [True, None]}},
    "w3": {"priority": 2**53 - 1, "nothing": None},  # the largest integer a JSON number carries exactly
    "w4": {"title": _Text("subclass")},  # not a plain str: no compact state, a full one
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
        wires = [w for entry in store._outbox.entries(store.push_batch) for w in entry.deltas]
        # (as JSON documents, canonically: the wire writes numbers as JavaScript does; deltaIds included)
        assert [stable_stringify(json.loads(w)) for w in wires] == [stable_stringify(d.to_json()) for d in deltas]
        assert [json.loads(w)["deltaId"] for w in wires] == [d.delta_id for d in deltas]
        assert store.pending() == len(ROWS)
        assert store.rows("todos")["w4"]["title"] == "subclass"
        assert json.loads(store.query("SELECT state FROM _lakesync_state WHERE row_id = 'w4'")[0][0])["c"]

    # And a reopened file renders the very same deltas (a re-send is deduplicated by deltaId)
    with _open(path) as again:
        assert [w for entry in again._outbox.entries(again.push_batch) for w in entry.deltas] == wires


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
    "x3": {"priority": 2**53 - 1, "nothing": None, "title": None},
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
        ((text,),) = store._db.conn.execute("SELECT deltas FROM _lakesync_outbox").fetchall()
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
        wires = [w for entry in store._outbox.entries(store.push_batch) for w in entry.deltas]
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
        assert [w for entry in s._outbox.entries(s.push_batch) for w in entry.deltas] == wires
        assert s.pending() == len(EXACT_ROWS)


# -- base records: the compact states of a checkpoint's rows, BASE_RECORD_ROWS rows an item --------------------------


def _many_frames(row_ids: list[str], *, chunk_bytes: int = 4096) -> tuple[list[bytes], dict[str, RowState]]:
    """A checkpoint of one-write rows (``row-NNNN``) in the order given (several chunks), and their states."""
    states = {}
    for row_id in row_ids:
        i = int(row_id.removeprefix("row-"))  # the row's values depend on its id only
        delta = insert(row_id, hlc=at(0, i % 50), client="ab"[i % 2], title=f"t{i}", done=i % 2 == 0, priority=i)
        state = fold([delta])
        assert state is not None
        states[row_id] = state
    frames = _frames_of(states.values(), chunk_bytes)
    return frames, states


def _load(store: LocalStore, frames: list[bytes]) -> None:
    with store._db.tx():
        store._bootstrap.load_bulk(decode_checkpoint_deltas(frames))


def _state_rows(store: LocalStore) -> int:
    return int(store.query("SELECT count(*) FROM _lakesync_state")[0][0])


SORTED_IDS = [f"row-{i:04d}" for i in range(700)]


def test_sorted_one_write_rows_are_held_by_base_records_and_read_back_as_their_merge(tmp_path: Path) -> None:
    frames, expected = _many_frames(SORTED_IDS)
    assert len(frames) > 1

    with _open(tmp_path / "base.db") as store:
        _load(store, frames)

        # Then no row has a state row: base records of at most BASE_RECORD_ROWS rows hold them, ranges apart
        assert _state_rows(store) == 0
        records = store.query("SELECT first_id, last_id, ids FROM _lakesync_base ORDER BY first_id")
        assert sorted(r for _, _, ids in records for r in json.loads(ids)) == SORTED_IDS
        assert all(len(json.loads(ids)) <= BASE_RECORD_ROWS for _, _, ids in records)
        assert all(a[1] < b[0] for a, b in itertools.pairwise(records))
        # and every row's state is the merge's (first and last of each record, and the rest), reopened too
        assert {r: store.state("todos", r) for r in SORTED_IDS} == expected
        assert store.state("todos", "row-0000x") is None and store.state("todos", "zzz") is None
    with _open(tmp_path / "base.db") as reopened:
        assert {r: reopened.state("todos", r) for r in SORTED_IDS[::97]} == {r: expected[r] for r in SORTED_IDS[::97]}


def test_rows_out_of_order_get_state_rows_instead(tmp_path: Path) -> None:
    ids = [f"row-{i:04d}" for i in range(300)]
    frames, expected = _many_frames(list(reversed(ids)))

    with _open(tmp_path / "unsorted.db") as store:
        _load(store, frames)

        assert _state_rows(store) == len(ids)
        assert store.query("SELECT count(*) FROM _lakesync_base")[0][0] == 0
        assert {r: store.state("todos", r) for r in ids} == expected


def test_a_run_whose_range_overlaps_a_base_record_gets_state_rows(tmp_path: Path) -> None:
    # Given two sorted runs whose ranges interleave (even ids, then a row of another shape, then odd ids)
    evens, odds = SORTED_IDS[0:200:2], SORTED_IDS[1:200:2]
    frames, expected = _many_frames([*evens, *odds])
    separated = decode_checkpoint_deltas(frames)
    split = len(evens)
    separated.names[split] = ("title",)  # the first odd row: one column fewer, so a run of its own
    width = len(separated.names[split + 1])
    start = separated.starts[split]
    del separated.values[start + 1 : start + width]
    separated.starts[split + 1 :] = [at - (width - 1) for at in separated.starts[split + 1 :]]

    with _open(tmp_path / "overlap.db") as store:
        with store._db.tx():
            store._bootstrap.load_bulk(separated)

        # Then the first run is held by base records and the ones overlapping it by state rows, all read back right
        held = {r for (ids,) in store.query("SELECT ids FROM _lakesync_base") for r in json.loads(ids)}
        assert held == set(evens)
        assert _state_rows(store) == len(odds)
        assert {r: store.state("todos", r) for r in evens} == {r: expected[r] for r in evens}
        assert {r: store.state("todos", r) for r in odds[1:]} == {r: expected[r] for r in odds[1:]}


def test_merges_and_local_writes_into_base_rows_act_as_on_full_states(tmp_path: Path) -> None:
    frames, expected = _many_frames(SORTED_IDS)
    with _open(tmp_path / "base.db") as store:
        _load(store, frames)

        # When remote deltas and local writes reach base rows
        remote = [
            update("row-0000", hlc=at(0, 60), client="z", done=True),
            update("row-0300", hlc=at(0, 0), client="a", title="older"),
            delete("row-0699", hlc=at(0, 61), client="z"),
        ]
        store.apply_broadcast(remote)
        store.update("todos", "row-0400", {"title": "local"})
        store.delete("todos", "row-0500")

        # Then each state is what merging into the full state gives, and the user rows follow
        for delta in remote:
            assert store.state("todos", delta.row_id) == merge(expected[delta.row_id], delta).state
        local = store.state("todos", "row-0400")
        assert local is not None and local.values() == {**(expected["row-0400"].values() or {}), "title": "local"}
        rows = store.rows("todos")
        assert "row-0699" not in rows and "row-0500" not in rows and rows["row-0400"]["title"] == "local"
        gone = store.state("todos", "row-0500")
        assert gone is not None and not gone.exists
        # and an INSERT of a row a base record holds is refused, in bulk as one by one, with nothing written
        before = store.pending()
        with pytest.raises(RowExistsError):
            store.insert_many("todos", {"new-a": {"title": "n"}, "row-0123": {"title": "again"}})
        with pytest.raises(RowExistsError):
            store.insert("todos", "row-0001", {"title": "again"})
        assert store.pending() == before and "new-a" not in store.rows("todos")
        # while new rows inside the base ranges are fresh inserts
        store.insert_many("todos", {"row-0001a": {"title": "between"}, "row-0650b": {"title": "also"}})
        assert store.state("todos", "row-0001a") is not None and store.rows("todos")["row-0650b"]["title"] == "also"


def test_a_reloaded_checkpoint_drops_base_rows_it_lacks_for_good(tmp_path: Path) -> None:
    frames, expected = _many_frames(SORTED_IDS)
    kept = SORTED_IDS[::2]
    newer, _ = _many_frames(kept)
    with _open(tmp_path / "base.db") as store:
        _load(store, frames)

        # When a newer checkpoint without half of the rows is merged in (a reload behind a release)
        with store._db.tx():
            store._bootstrap.merge_checkpoint(list(decode_checkpoint_deltas(newer).rows()))

        # Then the rows it lacks are gone (no base state left to bring them back), the rest as they were
        assert store.query("SELECT count(*) FROM _lakesync_base")[0][0] == 0
        assert set(store.rows("todos")) == set(kept)
        assert all(store.state("todos", r) is None for r in SORTED_IDS[1::2])
        assert {r: store.state("todos", r) for r in kept} == {r: expected[r] for r in kept}


def test_a_reload_that_fails_half_way_leaves_the_base_records_in_force(tmp_path: Path) -> None:
    frames, expected = _many_frames(SORTED_IDS)
    with _open(tmp_path / "base.db") as store:
        _load(store, frames)
        assert store.state("todos", "row-0010") == expected["row-0010"]  # a record in the cache

        # When a reload writes the records out as state rows, then fails before it commits
        with pytest.raises(RuntimeError), store._db.tx():
            store._base.expand()
            raise RuntimeError("the reload failed")

        # Then the records are back in force, cached or not, and no state row is left
        assert _state_rows(store) == 0
        assert {r: store.state("todos", r) for r in SORTED_IDS[::50]} == {r: expected[r] for r in SORTED_IDS[::50]}


def test_a_file_of_a_newer_layout_is_refused(tmp_path: Path) -> None:
    path = tmp_path / "newer.db"
    with _open(path) as store:
        with store._db.tx():
            store._db.set_meta("version", str(SCHEMA_VERSION + 1))

    with pytest.raises(SyncStateError, match="newer SDK"):
        _open(path)


# A model of base records: the same operations on a store whose checkpoint rows sit in base records and on one whose
# rows got their states by the merge give the same states, rows and outboxes at every step.
MODEL_IDS = [f"row-{i:04d}" for i in range(0, 600, 3)]
_touched = st.sampled_from([*MODEL_IDS[:4], *MODEL_IDS[-3:], "row-0001", "row-0300", "row-9999", "new"])
_values = st.fixed_dictionaries({}, optional={"title": st.sampled_from(["x", "y"]), "priority": st.integers(0, 3)})
_steps = st.lists(
    st.one_of(
        st.tuples(st.just("remote"), _touched, _values, st.integers(0, 60), st.sampled_from(["a", "z"])),
        st.tuples(st.just("remote-delete"), _touched, st.none(), st.integers(0, 60), st.sampled_from(["a", "z"])),
        st.tuples(st.just("update"), _touched, _values, st.none(), st.none()),
        st.tuples(st.just("delete"), _touched, st.none(), st.none(), st.none()),
        st.tuples(st.just("insert"), _touched, _values, st.none(), st.none()),
        st.tuples(st.just("insert_many"), _touched, _values, st.none(), st.none()),
        st.tuples(st.just("reopen"), st.none(), st.none(), st.none(), st.none()),
    ),
    max_size=12,
)


def _model_open(path: Path, now: list[int]) -> LocalStore:
    token = mint_token("bulk", "default", SECRET)
    return connect(
        path,
        url="http://127.0.0.1:9",
        gateway="default",
        token=token,
        schemas=[SCHEMA],
        realtime=False,
        clock=lambda: now[0],
    )


def _apply(store: LocalStore, step: tuple[Any, ...]) -> str:
    """One step; what it raised (by type), if anything."""
    kind, row_id, values, t, client = step
    try:
        if kind in ("remote", "remote-delete"):
            op = "UPDATE" if kind == "remote" else "DELETE"
            store.apply_broadcast([factories.delta(op, row_id, hlc=at(0, t), client=client, columns=values or {})])
        elif kind == "update":
            store.update("todos", row_id, values)
        elif kind == "delete":
            store.delete("todos", row_id)
        elif kind == "insert":
            store.insert("todos", row_id, values)
        elif kind == "insert_many":
            store.insert_many("todos", {row_id: values, f"{row_id}-sibling": {"title": "s"}})
    except LakeSyncError as exc:
        return type(exc).__name__
    return ""


@settings(max_examples=150, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(_steps)
def test_base_records_behave_as_state_rows_under_any_operations(tmp_path: Path, steps: list[tuple[Any, ...]]) -> None:
    frames, _ = _many_frames(MODEL_IDS)
    folder = Path(tempfile.mkdtemp(dir=tmp_path))
    now = [T0 + 10_000]
    paths = {"base": folder / "base.db", "merged": folder / "merged.db"}
    stores = {name: _model_open(path, now) for name, path in paths.items()}
    try:
        with stores["base"]._db.tx():
            stores["base"]._bootstrap.load_bulk(decode_checkpoint_deltas(frames))
        with stores["merged"]._db.tx():
            stores["merged"]._bootstrap.merge_checkpoint(list(decode_checkpoint_deltas(frames).rows()))
        assert stores["base"].query("SELECT count(*) FROM _lakesync_base")[0][0] > 0
        assert stores["merged"].query("SELECT count(*) FROM _lakesync_base")[0][0] == 0
        for step in steps:
            now[0] += 1
            if step[0] == "reopen":
                for name in stores:
                    stores[name].close()
                    stores[name] = _model_open(paths[name], now)
                continue
            outcomes = {name: _apply(store, step) for name, store in stores.items()}
            assert outcomes["base"] == outcomes["merged"], step
            keys = {*MODEL_IDS[:5], *MODEL_IDS[-4:], "row-0001", "row-0300", "row-9999", "new", "new-sibling"}
            assert {k: stores["base"].state("todos", k) for k in keys} == {
                k: stores["merged"].state("todos", k) for k in keys
            }, step
        assert stores["base"].rows("todos") == stores["merged"].rows("todos")
        outboxes = [s.query("SELECT deltas, sent FROM _lakesync_outbox ORDER BY seq") for s in stores.values()]
        assert outboxes[0] == outboxes[1]
    finally:
        for store in stores.values():
            store.close()


def test_a_column_whose_type_changes_is_remade_so_its_values_read_back_as_written(tmp_path: Path) -> None:
    path = tmp_path / "retyped.db"
    token = mint_token("bulk", "default", SECRET)

    def schema(priority: str) -> dict[str, Any]:
        return schema_doc("todos", title="string", priority=priority)

    def open_with(priority: str) -> LocalStore:
        return connect(
            path, url="http://127.0.0.1:9", gateway="default", token=token, schemas=[schema(priority)], realtime=False
        )

    # Given rows written while priority was a string column: one alone (a full state), two in bulk (compact states)
    with open_with("string") as store:
        store.insert("todos", "one", {"priority": "high"})
        store.insert_many("todos", {"two": {"priority": "medium"}, "three": {"title": "t", "priority": "low"}})

    # When the schema makes it a number column and numbers are written, alone and in bulk
    with open_with("number") as store:
        store.insert("todos", "four", {"priority": 7})
        store.insert_many("todos", {"five": {"priority": 5}, "six": {"priority": 2.5}})

        # Then every row reads back as written (a number as a number, the strings as strings), equal to its state
        rows = store.rows("todos")
        assert {row_id: values["priority"] for row_id, values in rows.items()} == {
            "one": "high",
            "two": "medium",
            "three": "low",
            "four": 7,
            "five": 5,
            "six": 2.5,
        }
        for row_id, values in rows.items():
            state = store.state("todos", row_id)
            assert state is not None and state.values() == {k: v for k, v in values.items() if v is not None}
        # And the deltas pushed carry the same values
        wires = [json.loads(w) for entry in store._outbox.entries(store.push_batch) for w in entry.deltas]
        assert [d["columns"] for d in wires if d["rowId"] in ("four", "five")] == [
            [{"column": "priority", "value": 7}],
            [{"column": "priority", "value": 5}],
        ]
