"""The local store against a buggy or hostile gateway (a real HTTP server answering what each test scripts): what it
answers never costs an unacknowledged outbox entry, never moves the cursor past what was applied, and surfaces as the
store's documented errors."""

from __future__ import annotations

import itertools
import json
import math
import urllib.parse
import zlib
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import pytest

from lakesync.auth import mint_token
from lakesync.client import LocalStore, OfflineError, SyncStateError, connect
from lakesync.client.http import ApiError
from lakesync.core.delta import RowDelta
from lakesync.core.messages import SyncResponse
from lakesync.wire.framing import encode_sync_response, frame_checkpoint
from tests.client.hostile import Answer, ScriptedGateway, Seen, empty_pull, good_push, json_answer, sent_delta_ids
from tests.factories import insert, todo_schema

pytestmark = pytest.mark.integration

_names = itertools.count()
TABLE = "todos"


@pytest.fixture
def gateway() -> Iterator[ScriptedGateway]:
    with ScriptedGateway() as running:
        yield running


@pytest.fixture
def open_store(tmp_path: Path) -> Iterator[Callable[..., LocalStore]]:
    """``open_store(gateway)`` → a store of client ``c`` on a file of its own, synced with ``gateway``."""
    opened: list[LocalStore] = []

    def make(gateway: ScriptedGateway, **options: Any) -> LocalStore:
        store = connect(
            options.pop("path", tmp_path / f"s{next(_names)}.db"),
            url=gateway.url,
            gateway="default",
            token=mint_token("c", "default", "s" * 32),
            schemas=[todo_schema(TABLE)],
            realtime=False,
            **options,
        )
        opened.append(store)
        return store

    yield make
    for store in opened:
        store.close()


def test_a_redirect_is_not_followed_so_the_token_and_the_push_stay_with_the_gateway(
    gateway: ScriptedGateway, open_store: Callable[..., LocalStore]
) -> None:
    with ScriptedGateway() as elsewhere:
        elsewhere.routes["push"] = lambda _seen: json_answer({"serverHlc": "1", "accepted": 0, "receipts": []})
        elsewhere.routes["pull"] = empty_pull
        # Given a gateway that redirects its push and pull routes to another host
        gateway.routes["push"] = lambda _seen: Answer(302, headers={"Location": elsewhere.url + "/v1/sync/x/push"})
        gateway.routes["pull"] = lambda _seen: Answer(301, headers={"Location": elsewhere.url + "/v1/sync/x/pull"})
        store = open_store(gateway)
        store.insert(TABLE, "r1", {"title": "keep me"})

        # When the store syncs
        with pytest.raises(ApiError) as raised:
            store.sync()
        assert raised.value.status == 302
        with pytest.raises(ApiError) as raised:
            store.http.pull(cursor="")

        # Then the other host saw nothing (neither the token nor a body-less re-send of the push) and nothing was lost
        assert raised.value.status == 301
        assert elsewhere.seen == []
        assert store.pending() == 1


def _receipts(ids: list[str], **receipt: Any) -> dict[str, Any]:
    return {"serverHlc": "1", "accepted": len(ids), "receipts": [{"deltaId": i, **receipt} for i in ids]}


PUSH_ANSWERS: dict[str, Callable[[list[str]], Any]] = {
    "an error body with 200": lambda _ids: {"error": "Internal error", "code": "INTERNAL_ERROR"},
    "an empty object": lambda _ids: {},
    "a list": lambda _ids: [],
    "null": lambda _ids: None,
    "receipts for fewer deltas": lambda ids: _receipts(ids[:-1], duplicate=False, columns=[]),
    "receipts for other deltas": lambda ids: _receipts([i[::-1] for i in ids], duplicate=False, columns=[]),
    "receipts out of order": lambda ids: _receipts(ids[::-1], duplicate=False, columns=[]),
    "receipts that are not objects": lambda ids: {"serverHlc": "1", "accepted": len(ids), "receipts": ids},
    "a column receipt without its winner": lambda ids: _receipts(ids, duplicate=False, columns=[{"column": "title"}]),
    "accepted not a count": lambda ids: {**_receipts(ids, duplicate=False, columns=[]), "accepted": "all"},
}


@pytest.mark.parametrize("answer", list(PUSH_ANSWERS), ids=list(PUSH_ANSWERS))
def test_a_push_answer_that_is_not_its_receipts_acknowledges_nothing(
    gateway: ScriptedGateway, open_store: Callable[..., LocalStore], answer: str
) -> None:
    # Given two local writes and a gateway answering their push with something else than their receipts
    gateway.routes["pull"] = empty_pull
    gateway.routes["push"] = lambda seen: json_answer(PUSH_ANSWERS[answer](sent_delta_ids(seen)))
    store = open_store(gateway)
    store.insert(TABLE, "r1", {"title": "one"})
    store.update(TABLE, "r1", {"done": True})

    # When the store syncs, it says so and keeps both writes
    with pytest.raises(SyncStateError):
        store.sync()
    assert store.pending() == 2
    first = sent_delta_ids(gateway.sent("push")[0])

    # Then once the gateway answers properly, the same deltas are pushed and acknowledged
    gateway.routes["push"] = good_push
    report = store.sync()
    assert (report.pushed, store.pending()) == (2, 0)
    assert sent_delta_ids(gateway.sent("push")[-1]) == first


def _delta(row_id: str, **fields: Any) -> dict[str, Any]:
    """A remote wire delta (another client's insert of ``row_id``, deltaId ``d-<row_id>``), with ``fields`` replaced."""
    remote = insert(row_id, hlc=1 << 16, table=TABLE, client="other", title=row_id)
    return {**remote.to_json(), "deltaId": f"d-{row_id}", **fields}


def _page(*deltas: Any, **fields: Any) -> dict[str, Any]:
    return {"deltas": list(deltas), "serverHlc": "1", "hasMore": False, "cursor": "c2", **fields}


PULL_ANSWERS: dict[str, Answer] = {
    "not JSON": Answer(body=b"<html>maintenance</html>"),
    "truncated gzip": Answer(body=b"\x1f\x8b\x08\x00", headers={"Content-Encoding": "gzip"}),
    "a list": json_answer([_delta("a")]),
    "an error body with 200": json_answer({"error": "Internal error", "code": "INTERNAL_ERROR"}),
    "deltas not a list": json_answer(_page() | {"deltas": 5}),
    "a delta missing its rowId": json_answer(
        _page(_delta("a"), {k: v for k, v in _delta("b").items() if k != "rowId"})
    ),
    "an hlc that is a number": json_answer(_page(_delta("a"), _delta("b", hlc=65536))),
    "a NaN value": Answer(  # json.dumps writes NaN, which is not JSON
        body=json.dumps(_page(_delta("a"), _delta("b", columns=[{"column": "priority", "value": math.nan}]))).encode()
    ),
    "a cursor that is not a string": json_answer(_page(_delta("a"), cursor={"page": 2})),
    "hasMore that is not a boolean": json_answer(_page(_delta("a"), hasMore="false")),
}


@pytest.mark.parametrize("answer", list(PULL_ANSWERS), ids=list(PULL_ANSWERS))
def test_a_malformed_pull_answer_applies_nothing_and_keeps_the_cursor(
    gateway: ScriptedGateway, open_store: Callable[..., LocalStore], answer: str
) -> None:
    # Given a store that synced (no checkpoint: its first cursor is c1) and holds a row of its own
    gateway.routes["pull"] = lambda _seen: json_answer(_page(cursor="c1"))
    gateway.routes["push"] = good_push
    store = open_store(gateway)
    store.sync()
    store.insert(TABLE, "mine", {"title": "pending"})
    gateway.routes["pull"] = lambda _seen: PULL_ANSWERS[answer]

    # When a pull is answered with something that is not a page
    with pytest.raises(SyncStateError):
        store.sync()

    # Then nothing of it was applied and the cursor did not move
    assert store.cursor == "c1"
    assert list(store.rows(TABLE)) == ["mine"]
    assert store.state(TABLE, "a") is None


CHECKPOINT_ANSWERS: dict[str, Callable[[Seen], Answer]] = {
    "a body that is not a checkpoint": lambda _seen: Answer(
        body=b"\x00\x00\x00\x09not proto", headers={"X-Checkpoint-Cursor": "c1"}
    ),
    "a chunk count that is not a number": lambda seen: (
        Answer(413)
        if "chunk" not in seen.query
        else Answer(headers={"X-Checkpoint-Chunks": "many", "X-Checkpoint-Cursor": "c1"})
    ),
    "a columnar document that is not JSON": lambda _seen: Answer(
        body=b"{",
        headers={"Content-Type": "application/x-lakesync-checkpoint-columns+json", "X-Checkpoint-Cursor": "c1"},
    ),
}


@pytest.mark.parametrize("answer", list(CHECKPOINT_ANSWERS), ids=list(CHECKPOINT_ANSWERS))
def test_a_malformed_checkpoint_loads_nothing_and_is_asked_for_again(
    gateway: ScriptedGateway, open_store: Callable[..., LocalStore], answer: str
) -> None:
    # Given a store that never synced, with a local write, and a gateway whose checkpoint does not decode
    gateway.routes["checkpoint"] = CHECKPOINT_ANSWERS[answer]
    gateway.routes["push"] = good_push
    gateway.routes["pull"] = empty_pull
    store = open_store(gateway)
    store.insert(TABLE, "mine", {"title": "pending"})

    # When it syncs, it says so, keeps its write and takes no cursor
    with pytest.raises(SyncStateError):
        store.sync()
    assert (store.cursor, store.pending()) == (None, 1)

    # Then the next sync asks for the checkpoint again, and without one pulls from the beginning
    del gateway.routes["checkpoint"]
    store.sync()
    assert (store.cursor, store.pending()) == ("c1", 0)
    assert list(store.rows(TABLE)) == ["mine"]


def test_a_refused_delta_is_recorded_once_and_not_sent_again_when_the_push_is_interrupted(
    gateway: ScriptedGateway, open_store: Callable[..., LocalStore]
) -> None:
    # Given three writes in one entry, the first of which the gateway refuses for good
    store = open_store(gateway)
    store.insert_many(TABLE, {f"r{i}": {"title": f"t{i}"} for i in range(3)})
    refused = sent_delta_ids(Seen("POST", "push", "", _push_body(store), {}))[0]
    available = False

    def push(seen: Seen) -> Answer:
        ids = sent_delta_ids(seen)
        if len(ids) > 1 or ids == [refused]:
            return json_answer({"error": "bad delta", "code": "VALIDATION_ERROR"}, 400)
        return good_push(seen) if available else json_answer({"error": "busy", "code": "INTERNAL_ERROR"}, 503)

    gateway.routes["push"] = push
    gateway.routes["pull"] = empty_pull

    # When the one-by-one re-send is interrupted after the refusal (the gateway goes down), twice
    for _ in range(2):
        with pytest.raises(OfflineError):
            store.sync()
    available = True
    report = store.sync()

    # Then the refused delta was recorded once and sent alone once; the others went through
    rejected = store.query("SELECT delta_id FROM _lakesync_rejected")
    assert rejected == [(refused,)]
    assert sum(sent_delta_ids(s) == [refused] for s in gateway.sent("push")) == 1
    assert (report.pushed, store.pending()) == (2, 0)


def _push_body(store: LocalStore) -> bytes:
    """The JSON body the store's next push would send."""
    wires = [wire for entry in store._outbox.entries(store.push_batch) for wire in entry.deltas]
    return ('{"deltas":[' + ",".join(wires) + "]}").encode()


def test_an_answer_sent_drop_by_drop_times_out_instead_of_holding_the_sync(
    gateway: ScriptedGateway, open_store: Callable[..., LocalStore]
) -> None:
    # Given a gateway that sends its (correct) push answer a byte every 50 ms: seconds for the whole of it
    def slow_push(seen: Seen) -> Answer:
        answer = good_push(seen)
        return Answer(answer.status, answer.body, answer.headers, drip=0.05)

    gateway.routes["push"] = slow_push
    gateway.routes["pull"] = empty_pull
    store = open_store(gateway, timeout=0.5)
    store.insert(TABLE, "r1", {"title": "one"})
    assert len(slow_push(Seen("POST", "push", "", _push_body(store), {})).body) > 100

    # When the store syncs with a timeout of half a second per request
    with pytest.raises(OfflineError) as raised:
        store.sync()

    # Then the request timed out (the store is offline, the write still pending) rather than waiting for it all
    assert isinstance(raised.value.__cause__, TimeoutError)
    assert store.pending() == 1


@pytest.mark.parametrize(
    "answer",
    [
        Answer(body=b"<html>Service Unavailable</html>"),
        Answer(body=b'{"serverHlc":"1","accepted":1,"receipts":[', headers={"Content-Type": "application/json"}),
        Answer(body=b"\x1f\x8b\x08\x00\x00", headers={"Content-Encoding": "gzip"}),
    ],
    ids=["html", "cut JSON", "bad gzip"],
)
def test_a_push_answer_that_does_not_decode_raises_sync_state_error_and_keeps_the_outbox(
    gateway: ScriptedGateway, open_store: Callable[..., LocalStore], answer: Answer
) -> None:
    gateway.routes["push"] = lambda _seen: answer
    gateway.routes["pull"] = empty_pull
    store = open_store(gateway)
    store.insert(TABLE, "r1", {"title": "one"})
    with pytest.raises(SyncStateError, match="does not decode"):
        store.sync()
    assert store.pending() == 1


def _padded_page(padding: int) -> bytes:
    """A valid last pull page (cursor ``c2``) followed by ``padding`` spaces: JSON all the same."""
    return json.dumps(_page()).encode() + b" " * padding


def _gzip_bomb(padding: int) -> bytes:
    """:func:`_padded_page` gzipped, a MiB at a time (64 MiB of spaces gzip to about 64 KB)."""
    deflate = zlib.compressobj(wbits=31)
    parts = [deflate.compress(json.dumps(_page()).encode())]
    spaces = b" " * (1 << 20)
    parts += [deflate.compress(spaces) for _ in range(padding >> 20)]
    return b"".join([*parts, deflate.flush()])


@pytest.mark.parametrize(
    "answer",
    [
        Answer(body=_gzip_bomb(64 << 20), headers={"Content-Encoding": "gzip"}),
        Answer(body=_padded_page(3 << 20)),
    ],
    ids=["gzip bomb", "enormous body"],
)
def test_an_answer_larger_than_the_limit_is_not_read_whole(
    gateway: ScriptedGateway, open_store: Callable[..., LocalStore], answer: Answer
) -> None:
    # Given a store accepting answers of at most 1 MiB, and a pull page that is (or un-gzips to) far more
    gateway.routes["pull"] = lambda _seen: json_answer(_page(cursor="c1"))
    store = open_store(gateway)
    store.sync()
    store.http.max_answer_bytes = 1 << 20
    if "Content-Encoding" in answer.headers:
        assert len(answer.body) < 1 << 20  # the bomb itself is small: its un-gzipped size is what the limit stops
    gateway.routes["pull"] = lambda _seen: answer

    # When it pulls, it refuses the answer without reading it whole, and the cursor stays
    with pytest.raises(SyncStateError, match="1,048,576 bytes"):
        store.sync()
    assert store.cursor == "c1"


def _checkpoint_body(row_id: str) -> bytes:
    """A checkpoint stream body holding another client's insert of ``row_id``."""
    delta = RowDelta.from_json(_delta(row_id, deltaId=f"d-{row_id}"))
    return frame_checkpoint([encode_sync_response(SyncResponse((delta,), 1 << 16))])


def test_a_chunk_of_another_checkpoint_is_not_mixed_into_the_one_being_loaded(
    gateway: ScriptedGateway, open_store: Callable[..., LocalStore]
) -> None:
    pinned = {"honoured": False}

    def checkpoint(seen: Seen) -> Answer:
        query = urllib.parse.parse_qs(seen.query)
        if "chunk" not in query:
            return Answer(413)  # too large to send whole: by chunks
        index = int(query["chunk"][0])
        # Chunk 0 is of checkpoint A; chunk 1 of B, published meanwhile, unless the pin is honoured
        served = "A" if index == 0 or pinned["honoured"] else "B"
        headers = {"X-Checkpoint-Id": served, "X-Checkpoint-Chunks": "2", "X-Checkpoint-Cursor": f"cursor-{served}"}
        return Answer(body=_checkpoint_body(f"{served}{index}"), headers=headers)

    # Given a gateway that serves chunk 1 of a newer checkpoint than chunk 0's
    gateway.routes["checkpoint"] = checkpoint
    gateway.routes["pull"] = empty_pull
    store = open_store(gateway)

    # When the store loads it, it loads nothing and will try again (the gateway is as good as unavailable)
    with pytest.raises(OfflineError, match="replaced"):
        store.sync()
    assert store.cursor is None and store.rows(TABLE) == {}

    # Then once the chunks are of one checkpoint, it is loaded whole with its cursor
    pinned["honoured"] = True
    report = store.sync()
    assert report.checkpoint_rows == 2 and sorted(store.rows(TABLE)) == ["A0", "A1"]
    assert "checkpoint=A" in gateway.sent("checkpoint")[-1].query
