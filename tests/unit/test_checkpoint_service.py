"""Checkpoint writing and serving (lakesync.gateway.checkpoint) on an in-memory object store and the in-memory gateway:
the object layout and write order, chunks cut at row boundaries, sync-rule filtering on row values, chunk and pinned
fetches, the size cap, 404/400/500 cases, and the end-to-end claim: checkpoint + pull from its cursor (or ``since`` its
HLC) == the server's state after every push.
"""

from __future__ import annotations

import json
import random
from typing import Any

import pytest

from lakesync.core.canonical import JsonValue, stable_stringify
from lakesync.core.checkpoint import (
    Manifest,
    checkpoint_id,
    chunk_key,
    group_rows,
    latest_key,
    load_manifest,
    manifest_key,
    row_deltas,
)
from lakesync.core.delta import DeltaOp, RowDelta
from lakesync.core.errors import NotFoundError, PayloadTooLargeError, StorageError, ValidationError
from lakesync.core.hlc import HLC
from lakesync.core.merge import RowState, fold, state_from_json, state_to_json
from lakesync.core.messages import SyncPush
from lakesync.core.rules import Bucket, SyncRules, user_scoped_rules
from lakesync.core.since import ResyncMark
from lakesync.gateway.checkpoint import (
    COLUMNS_EXPANSION,
    CONTENT_TYPE,
    HEADER_CHUNKS,
    HEADER_CURSOR,
    HEADER_HLC,
    HEADER_ID,
    encode_row,
    serve,
    write_checkpoint,
)
from lakesync.gateway.cursor import decode_cursor
from lakesync.gateway.deps import GatewayDeps
from lakesync.gateway.memory import InMemoryActionStore, InMemoryBufferStore, InMemoryConfigStore
from lakesync.gateway.pull import pull
from lakesync.gateway.push import push
from lakesync.gateway.resync import resync_page
from lakesync.wire import decode_sync_response
from lakesync.wire.checkpoint_columns import MEDIA_TYPE, decode_columns
from lakesync.wire.fast_checkpoint import to_row_delta
from lakesync.wire.framing import iter_checkpoint, iter_checkpoint_responses
from tests import factories
from tests.factories import T0, at, delete, insert, update

GW = "default"


class MemoryObjects:
    """A dict as the ObjectStore, remembering the order of writes."""

    def __init__(self) -> None:
        self.objects: dict[str, bytes] = {}
        self.writes: list[str] = []

    def put(self, key: str, data: bytes, content_type: str = "application/octet-stream") -> None:
        self.objects[key] = bytes(data)
        self.writes.append(key)

    def get(self, key: str) -> bytes | None:
        return self.objects.get(key)

    def list_keys(self, prefix: str) -> list[str]:
        return sorted(k for k in self.objects if k.startswith(prefix))


def _deps(objects: MemoryObjects | None = None) -> GatewayDeps:
    return GatewayDeps(
        buffer=InMemoryBufferStore(),
        config=InMemoryConfigStore(),
        actions=InMemoryActionStore(),
        clock=HLC(lambda: T0 + 60_000),
        wall_ms=lambda: T0 + 60_000,
        sleep=lambda _: None,
        objects=objects,
    )


def _state(table: str, row: str, *deltas: RowDelta) -> RowState:
    state = fold(deltas)
    assert state is not None and (state.table, state.row_id) == (table, row)
    return state


def _row(table: str, row: str, user: str, ms: int, **cols: JsonValue) -> RowState:
    return _state(table, row, insert(row, hlc=at(ms), table=table, user_id=user, **cols))


def _write(
    objects: MemoryObjects, states: list[RowState], *, ms: int = 0, chunk_bytes: int = 1 << 20, server_hlc: int = 0
) -> Manifest:
    return write_checkpoint(
        objects,
        gateway=GW,
        checkpoint_id=checkpoint_id(T0 + ms, "0000abcd"),
        created_at_ms=T0 + ms,
        positions={f"{GW}#todos#0": 7},
        server_hlc=server_hlc or at(ms),
        tables=sorted({s.table for s in states}),
        rows=(encode_row(s) for s in states),
        chunk_bytes=chunk_bytes,
    )


def _deltas(body: bytes | str) -> list[RowDelta]:
    """The deltas of a served body, in order: a framed stream, or a columnar document."""
    if isinstance(body, str):
        return [to_row_delta(d) for row in decode_columns(body).rows() for d in row]
    return [d for response in iter_checkpoint_responses(body) for d in response.deltas]


def _client(deltas: list[RowDelta]) -> dict[tuple[str, str], Any]:
    """What a per-column LWW client holds after applying ``deltas``: each row's state, values as canonical JSON."""
    rows: dict[tuple[str, str], list[RowDelta]] = {}
    for delta in deltas:
        rows.setdefault((delta.table, delta.row_id), []).append(delta)
    return {key: _snapshot(fold(ds)) for key, ds in rows.items()}


def _snapshot(state: RowState | None) -> Any:
    return None if state is None else stable_stringify(state_to_json(state))


# -- writing -------------------------------------------------------------------------------------------------------


def test_write_checkpoint_writes_chunks_then_manifest_then_latest() -> None:
    objects = MemoryObjects()
    states = [_row("todos", f"r{i}", "u1", i, title="x" * 50) for i in range(40)]

    manifest = _write(objects, states, chunk_bytes=1000)

    cid = manifest.checkpoint_id
    chunk_keys = [chunk_key(GW, cid, i) for i in range(len(manifest.chunks))]
    assert len(chunk_keys) > 1
    assert objects.writes == [*chunk_keys, manifest_key(GW, cid), latest_key(GW)]
    assert json.loads(objects.objects[latest_key(GW)]) == {"checkpointId": cid}
    assert Manifest.from_json(json.loads(objects.objects[manifest_key(GW, cid)])) == manifest
    assert (manifest.rows, manifest.deltas) == (40, 40)
    assert [c.key for c in manifest.chunks] == chunk_keys
    for info in manifest.chunks:
        body = objects.objects[info.key]
        # Each chunk is one frame of at most the budget, holding the rows and deltas the manifest says
        assert info.bytes == len(body) <= 1000
        (payload,) = iter_checkpoint(body)
        response = decode_sync_response(payload)
        assert response.server_hlc == manifest.server_hlc and not response.has_more
        assert (len(list(group_rows(response.deltas))), len(response.deltas)) == (info.rows, info.deltas)


def test_write_checkpoint_never_splits_a_row_across_chunks() -> None:
    # Given rows of several deltas each (deletes, resurrections, several column versions)
    rnd = random.Random(7)
    states = []
    for i in range(30):
        deltas = [
            factories.delta(
                rnd.choice(["INSERT", "UPDATE", "DELETE"]),
                f"r{i}",
                client=rnd.choice(["a", "b"]),
                hlc=at(j),
                columns={rnd.choice("xyz"): j},
            )
            for j in range(rnd.randrange(1, 6))
        ]
        states.append(_state("todos", f"r{i}", *deltas))
    objects = MemoryObjects()

    # When packed under a small budget
    manifest = _write(objects, states, chunk_bytes=300)

    # Then every row's deltas sit together in one chunk, in row order, exactly as row_deltas made them
    seen: list[list[RowDelta]] = []
    for info in manifest.chunks:
        seen.extend(group_rows(_deltas(objects.objects[info.key])))
    assert seen == [row_deltas(s) for s in states]


def test_write_checkpoint_without_rows_has_no_chunks() -> None:
    objects = MemoryObjects()

    manifest = _write(objects, [])

    assert manifest.chunks == () and manifest.rows == 0
    assert serve(_deps(objects), GW, {}).body == b""


def test_write_checkpoint_rejects_a_bad_id() -> None:
    with pytest.raises(ValueError, match="checkpoint id"):
        write_checkpoint(
            MemoryObjects(), gateway=GW, checkpoint_id="x", created_at_ms=0, positions={}, server_hlc=0, tables=(),
            rows=(),
        )  # fmt: skip


# -- serving -------------------------------------------------------------------------------------------------------


def test_serve_whole_checkpoint_is_the_chunks_back_to_back_with_headers() -> None:
    objects = MemoryObjects()
    manifest = _write(objects, [_row("todos", f"r{i}", "u1", i) for i in range(20)], chunk_bytes=400)

    payload = serve(_deps(objects), GW, {})

    assert payload.body == b"".join(objects.objects[c.key] for c in manifest.chunks)
    assert payload.headers == {
        HEADER_ID: manifest.checkpoint_id,
        HEADER_CURSOR: manifest.cursor,
        HEADER_HLC: str(manifest.server_hlc),
        HEADER_CHUNKS: str(len(manifest.chunks)),
    }
    assert decode_cursor(payload.headers[HEADER_CURSOR], GW) == {f"{GW}#todos#0": 7}


def test_serve_filters_rows_by_sync_rules_on_their_values() -> None:
    # Given rows of two users, one of which moved to u1 by a later UPDATE of user_id only
    moved = _state(
        "todos",
        "moved",
        insert("moved", hlc=at(1), user_id="u2"),
        update("moved", hlc=at(2), user_id="u1"),
        update("moved", hlc=at(3), title="t"),
    )
    states = [_row("todos", "a", "u1", 0), _row("todos", "b", "u2", 0), moved, _row("notes", "n", "u2", 0)]
    objects = MemoryObjects()
    _write(objects, states, chunk_bytes=150)
    deps = _deps(objects)
    deps.config.put_sync_rules(GW, user_scoped_rules(["todos"]))

    # When u1 fetches the checkpoint
    body = serve(deps, GW, {"sub": "u1"}).body

    # Then it gets exactly its rows, each whole (every version of `moved`, including the one that named u2)
    assert _client(_deltas(body)) == {
        ("todos", "a"): _snapshot(states[0]),
        ("todos", "moved"): _snapshot(moved),
    }
    # and every frame that is left holds rows (empty frames are dropped)
    assert all(r.deltas for r in iter_checkpoint_responses(body))
    # A client the rules give nothing gets an empty stream
    assert serve(deps, GW, {"sub": "nobody"}).body == b""


def test_serve_deleted_rows_reach_only_buckets_without_filters() -> None:
    deleted = _state(
        "todos",
        "gone",
        insert("gone", hlc=at(1), user_id="u1"),
        delete("gone", hlc=at(2)),
    )
    objects = MemoryObjects()
    _write(objects, [deleted])
    deps = _deps(objects)

    deps.config.put_sync_rules(GW, user_scoped_rules(["todos"]))
    assert serve(deps, GW, {"sub": "u1"}).body == b""
    deps.config.put_sync_rules(GW, SyncRules(1, (Bucket("all", ("todos",)),)))
    assert [d.op for d in _deltas(serve(deps, GW, {"sub": "u1"}).body)] == [DeltaOp.DELETE]


RULE_SETS: dict[str, SyncRules | None] = {
    "no rules": None,
    "filtered buckets only": user_scoped_rules(["todos", "notes"]),
    "a bucket without filters": SyncRules(1, (Bucket("all", ("todos", "notes")),)),
    "filters on todos, none on notes": SyncRules(
        1, (*user_scoped_rules(["todos"]).buckets, Bucket("all_notes", ("notes",)))
    ),
}


@pytest.mark.parametrize("rule_set", list(RULE_SETS))
def test_tombstones_reach_a_resynced_since_client_exactly_as_the_checkpoint_route_serves_them(rule_set: str) -> None:
    # Given a checkpoint holding live rows and deleted rows (kept as their DELETE, as the checkpoint job does) of two
    # tables, and sync rules
    def deleted(table: str, row: str, user: str) -> RowState:
        return _state(
            table,
            row,
            insert(row, hlc=at(1), table=table, user_id=user),
            delete(row, hlc=at(2), table=table),
        )

    states = [
        deleted("notes", "n-gone", "u1"),
        _row("notes", "n-u2", "u2", 0),
        deleted("todos", "t-gone", "u1"),
        deleted("todos", "t-gone-u2", "u2"),
        _row("todos", "t-u1", "u1", 0),
    ]
    objects = MemoryObjects()
    manifest = _write(objects, states)
    deps = _deps(objects)
    rules = RULE_SETS[rule_set]
    if rules is not None:
        deps.config.put_sync_rules(GW, rules)
    claims = {"sub": "u1"}

    # When u1 fetches the checkpoint, and when u1 is resynced from it as an original client behind a release that
    # never named any row (a session without pushed or redelivered rows)
    served = {(d.table, d.row_id, d.op) for d in _deltas(serve(deps, GW, claims).body)}
    page = resync_page(deps, GW, ResyncMark(manifest.checkpoint_id), 1000, rules, claims, "u1", frozenset())
    assert page is not None and page.next is None
    resynced = {(d.table, d.row_id, d.op) for d in page.deltas}

    # Then both name exactly the same tombstones (none outside what the rules give the client: a tombstone has no
    # values, so only a bucket without filters serves it)
    tombstones = {(table, row) for table, row, op in served if op is DeltaOp.DELETE}
    assert tombstones == {(table, row) for table, row, op in resynced if (table, row, DeltaOp.INSERT) not in resynced}
    expected = {
        "no rules": {("notes", "n-gone"), ("todos", "t-gone"), ("todos", "t-gone-u2")},
        "filtered buckets only": set(),
        "a bucket without filters": {("notes", "n-gone"), ("todos", "t-gone"), ("todos", "t-gone-u2")},
        "filters on todos, none on notes": {("notes", "n-gone")},
    }
    assert tombstones == expected[rule_set]


@pytest.mark.parametrize("rule_set", list(RULE_SETS))
def test_columns_serve_the_streams_rows_whole_and_by_chunk_for_any_rules(rule_set: str) -> None:
    # Given a checkpoint in several chunks: rows of one write, rows of several versions, deleted rows, two tables
    states = [
        _state(
            "notes",
            "n-gone",
            insert("n-gone", hlc=at(1), table="notes", user_id="u1"),
            delete("n-gone", hlc=at(2), table="notes"),
        ),
        *(_row("notes", f"n{i}", f"u{i % 2 + 1}", i) for i in range(6)),
        _state(
            "todos",
            "moved",
            insert("moved", hlc=at(1), user_id="u2"),
            update("moved", hlc=at(2), client="c2", user_id="u1"),
        ),
        *(_row("todos", f"t{i}", f"u{i % 2 + 1}", i, title=f"task {i}", done=i % 3 == 0) for i in range(12)),
    ]
    objects = MemoryObjects()
    manifest = _write(objects, states, chunk_bytes=600)
    assert len(manifest.chunks) > 2
    deps = _deps(objects)
    rules = RULE_SETS[rule_set]
    if rules is not None:
        deps.config.put_sync_rules(GW, rules)
    claims = {"sub": "u1"}

    # When a client fetches the columnar document, whole and chunk by chunk
    whole = serve(deps, GW, claims, columns=True)
    chunks = [serve(deps, GW, claims, i, columns=True) for i in range(len(manifest.chunks))]

    # Then each carries exactly the deltas the stream carries, in the same order, with the same headers
    stream = serve(deps, GW, claims)
    assert whole.content_type == MEDIA_TYPE and stream.content_type == CONTENT_TYPE
    assert _deltas(whole.body) == _deltas(stream.body)
    assert [d for c in chunks for d in _deltas(c.body)] == _deltas(stream.body)
    assert whole.headers == stream.headers
    for i, chunk in enumerate(chunks):
        assert _deltas(chunk.body) == _deltas(serve(deps, GW, claims, i).body)


def test_columns_whole_checkpoint_cap_is_a_third_of_the_streams() -> None:
    objects = MemoryObjects()
    manifest = _write(objects, [_row("todos", f"r{i}", "u1", i) for i in range(20)], chunk_bytes=400)
    cap = manifest.bytes * COLUMNS_EXPANSION

    with pytest.raises(PayloadTooLargeError):
        serve(_deps(objects), GW, {}, max_bytes=cap - 1, columns=True)
    assert _deltas(serve(_deps(objects), GW, {}, max_bytes=cap, columns=True).body)
    assert _deltas(serve(_deps(objects), GW, {}, 0, max_bytes=1, columns=True).body)


def test_serve_one_chunk_and_a_pinned_checkpoint() -> None:
    objects = MemoryObjects()
    first = _write(objects, [_row("todos", f"r{i}", "u1", i) for i in range(20)], chunk_bytes=400)
    deps = _deps(objects)

    # When a chunk is fetched, and again after a newer checkpoint was published, pinned to the first one
    chunk1 = serve(deps, GW, {}, 1)
    _write(objects, [_row("todos", "other", "u1", 99)], ms=5)
    pinned = serve(deps, GW, {}, 1, checkpoint_id=first.checkpoint_id)
    latest = serve(deps, GW, {})

    # Then the chunk is that object, the pin still serves the first checkpoint, and the latest is the new one
    assert chunk1.body == pinned.body == objects.objects[first.chunks[1].key]
    assert pinned.headers[HEADER_ID] == first.checkpoint_id
    assert latest.headers[HEADER_ID] != first.checkpoint_id
    assert [d.row_id for d in _deltas(latest.body)] == ["other"]


@pytest.mark.parametrize("index", [-1, 3, 99])
def test_serve_chunk_index_outside_the_checkpoint_is_400(index: int) -> None:
    objects = MemoryObjects()
    manifest = _write(objects, [_row("todos", f"r{i}", "u1", i) for i in range(20)], chunk_bytes=800)
    assert len(manifest.chunks) == 3

    with pytest.raises(ValidationError, match=r"has 3 chunks \(0\.\.2\)"):
        serve(_deps(objects), GW, {}, index)


def test_serve_whole_checkpoint_over_the_cap_is_413_but_chunks_still_serve() -> None:
    objects = MemoryObjects()
    manifest = _write(objects, [_row("todos", f"r{i}", "u1", i) for i in range(20)], chunk_bytes=400)

    with pytest.raises(PayloadTooLargeError, match=r"\?chunk=0\.\.") as err:
        serve(_deps(objects), GW, {}, max_bytes=manifest.bytes - 1)
    assert err.value.status == 413
    assert serve(_deps(objects), GW, {}, max_bytes=manifest.bytes).body
    assert serve(_deps(objects), GW, {}, 0, max_bytes=1).body == objects.objects[manifest.chunks[0].key]


def test_serve_without_a_checkpoint_is_404() -> None:
    with pytest.raises(NotFoundError, match="No checkpoint available"):
        serve(_deps(MemoryObjects()), GW, {})
    with pytest.raises(NotFoundError, match="No checkpoint available"):
        serve(_deps(None), GW, {})
    with pytest.raises(NotFoundError, match="not found"):
        serve(_deps(MemoryObjects()), GW, {}, checkpoint_id=checkpoint_id(1, "00000000"))
    # another gateway's checkpoint is not this one's
    objects = MemoryObjects()
    _write(objects, [_row("todos", "a", "u1", 0)])
    with pytest.raises(NotFoundError):
        serve(_deps(objects), "other", {})


def test_serve_malformed_pinned_id_is_400() -> None:
    with pytest.raises(ValidationError, match="'checkpoint'"):
        serve(_deps(MemoryObjects()), GW, {}, checkpoint_id="../secrets")


@pytest.mark.parametrize("damage", ["missing-chunk", "short-chunk", "garbage-chunk", "manifest-json", "pointer"])
def test_serve_damaged_objects_are_storage_errors_never_partial_checkpoints(damage: str) -> None:
    objects = MemoryObjects()
    manifest = _write(objects, [_row("todos", f"r{i}", "u1", i) for i in range(10)], chunk_bytes=300)
    key = manifest.chunks[1].key
    if damage == "missing-chunk":
        del objects.objects[key]
    elif damage == "short-chunk":
        objects.objects[key] = objects.objects[key][:-1]
    elif damage == "garbage-chunk":
        objects.objects[key] = b"\x00\x00\x00\x02\xff\xff" + b"\x00" * (manifest.chunks[1].bytes - 6)
    elif damage == "manifest-json":
        objects.objects[manifest_key(GW, manifest.checkpoint_id)] = b"{not json"
    else:
        objects.objects[latest_key(GW)] = b'{"checkpointId": "../x"}'
    deps = _deps(objects)
    deps.config.put_sync_rules(GW, user_scoped_rules(["todos"]))

    with pytest.raises(StorageError) as err:
        serve(deps, GW, {"sub": "u1"})
    assert err.value.status == 500


def test_load_manifest_rejects_a_manifest_of_another_gateway() -> None:
    objects = MemoryObjects()
    manifest = _write(objects, [])
    objects.objects[manifest_key("other", manifest.checkpoint_id)] = objects.objects[
        manifest_key(GW, manifest.checkpoint_id)
    ]
    objects.objects[latest_key("other")] = objects.objects[latest_key(GW)]

    with pytest.raises(StorageError, match="names another"):
        load_manifest(objects.get, "other")


# -- the end-to-end claim on the in-memory gateway -----------------------------------------------------------------


def _random_delta(rnd: random.Random, step: int) -> RowDelta:
    op = rnd.choices(["INSERT", "UPDATE", "DELETE"], weights=[3, 5, 2])[0]
    columns = {rnd.choice(["title", "done", "user_id"]): rnd.choice([step, None, "x", True]) for _ in range(2)}
    return factories.delta(
        op,
        table=rnd.choice(["todos", "notes"]),
        row=f"r{rnd.randrange(6)}",
        client=rnd.choice(["a", "b", "c"]),
        hlc=at(rnd.randrange(step + 1) * 10, rnd.randrange(3)),
        columns=columns,
    )


def _cut_checkpoint(deps: GatewayDeps, objects: MemoryObjects, *, include_deleted: bool) -> Manifest:
    """What the job does, on the in-memory buffer: every row's state at the current heads."""
    shards = deps.buffer.list_shards(GW)
    heads = deps.buffer.get_heads(shards)
    entries = [e for s in shards for e in deps.buffer.read_log(s, 0, 1_000_000)]
    keys = sorted({(e.delta.table, e.delta.row_id) for e in entries})
    stored = deps.buffer.get_rows(GW, keys)
    # through the JSON codec, as the state tables store it
    states = [state_from_json(k[0], k[1], json.loads(json.dumps(state_to_json(stored[k].state)))) for k in keys]
    last_commit = {s.key: max(e.commit_hlc for e in deps.buffer.read_log(s, 0, 1_000_000)) for s in shards}
    return write_checkpoint(
        objects,
        gateway=GW,
        checkpoint_id=checkpoint_id(T0, "0000beef"),
        created_at_ms=T0,
        positions={s.key: h.seq for s, h in heads.items()},
        server_hlc=min(last_commit.values()),
        tables={k[0] for k in keys},
        rows=(encode_row(s) for s in states if include_deleted or s.exists),
        chunk_bytes=256,
    )


@pytest.mark.parametrize("columns", [False, True], ids=["stream", "columns"])
@pytest.mark.parametrize("include_deleted", [False, True], ids=["deleted-omitted", "deleted-kept"])
@pytest.mark.parametrize("seed", range(6))
def test_checkpoint_then_pull_from_its_cursor_equals_the_servers_state(
    seed: int, include_deleted: bool, columns: bool
) -> None:
    # Given a gateway with a history, a checkpoint cut from its row states, then more pushes
    rnd = random.Random(seed)
    objects = MemoryObjects()
    deps = _deps(objects)
    step = 0
    for _ in range(25):
        step += 1
        push(deps, GW, SyncPush("admin", (_random_delta(rnd, step),)), client_id="admin", trusted=True)
    _cut_checkpoint(deps, objects, include_deleted=include_deleted)
    for _ in range(25):
        step += 1
        push(deps, GW, SyncPush("admin", (_random_delta(rnd, step),)), client_id="admin", trusted=True)

    # When a new client loads the checkpoint and pulls from its cursor (or, like the original client, since its HLC)
    payload = serve(deps, GW, {}, columns=columns)
    tail = pull(deps, GW, limit=10_000, claims={}, cursor=payload.headers[HEADER_CURSOR])
    since = pull(deps, GW, limit=10_000, claims={}, since=int(payload.headers[HEADER_HLC]))
    assert not tail.has_more and not since.has_more

    # Then it holds exactly the server's live rows (and with deleted rows kept, the server's whole states)
    log = _log(deps)
    server = {k: r.state for k, r in deps.buffer.get_rows(GW, sorted({(d.table, d.row_id) for d in log})).items()}
    live = {key: state.values() for key, state in server.items() if state.exists}
    by_cursor = _client_states([*_deltas(payload.body), *tail.deltas])
    assert _live_values(by_cursor) == live
    # A since page is for the original client's plain SQL applier (full rows, DELETE+INSERT where the server cannot
    # know what it holds; removed columns as null, which SQL holds as NULL): applied in order over the checkpoint
    # rows, it gives the same rows
    by_since = _plain_apply(_live_values(_client_states(_deltas(payload.body))), since.deltas)
    assert _without_nulls(by_since) == _without_nulls(live)
    if include_deleted:
        assert {k: _snapshot(s) for k, s in by_cursor.items()} == {k: _snapshot(s) for k, s in server.items()}
    # and the cursor pull delivered exactly the entries committed after the checkpoint
    assert len(tail.deltas) == len(log) - sum(decode_cursor(payload.headers[HEADER_CURSOR], GW).values()) > 0


def _client_states(deltas: list[RowDelta]) -> dict[tuple[str, str], RowState]:
    rows: dict[tuple[str, str], list[RowDelta]] = {}
    for delta in deltas:
        rows.setdefault((delta.table, delta.row_id), []).append(delta)
    return {key: _state(key[0], key[1], *ds) for key, ds in rows.items()}


def _plain_apply(rows: dict[tuple[str, str], Any], deltas: tuple[RowDelta, ...]) -> dict[tuple[str, str], Any]:
    """The original client's applier on dicts: INSERT must find no row, UPDATE sets columns of a row it finds."""
    out = {key: dict(values) for key, values in rows.items()}
    for delta in deltas:
        key = (delta.table, delta.row_id)
        if delta.op.value == "INSERT":
            assert key not in out, f"a plain INSERT of {key} would fail: the client holds it"
            out[key] = delta.values()
        elif delta.op.value == "UPDATE":
            if key in out:
                out[key].update(delta.values())
        else:
            out.pop(key, None)
    return out


def _without_nulls(rows: dict[tuple[str, str], Any]) -> dict[tuple[str, str], Any]:
    return {key: {c: v for c, v in values.items() if v is not None} for key, values in rows.items()}


def _live_values(states: dict[tuple[str, str], RowState]) -> dict[tuple[str, str], Any]:
    return {key: state.values() for key, state in states.items() if state.exists}


def _log(deps: GatewayDeps) -> list[RowDelta]:
    return [e.delta for s in deps.buffer.list_shards(GW) for e in deps.buffer.read_log(s, 0, 1_000_000)]
