"""The store's first sync from a checkpoint and its re-bootstrap when the gateway no longer serves its cursor, against
the embedded default with a checkpoint written into its bucket by the real checkpoint writer (own stack: a
checkpoint changes every later client's first sync)."""

from __future__ import annotations

import sqlite3
from collections.abc import Callable, Mapping
from typing import Any

import pytest

from lakesync.aws.objects import S3ObjectStore, s3_client
from lakesync.client import LocalStore
from lakesync.client.http import CHECKPOINT_MEDIA_TYPE as STREAM_MEDIA_TYPE
from lakesync.client.http import COLUMNS_MEDIA_TYPE, SyncClient
from lakesync.core.checkpoint import checkpoint_id
from lakesync.core.delta import RowDelta
from lakesync.core.hlc import HLC
from lakesync.core.merge import RowState, merge
from lakesync.gateway.checkpoint import encode_row, write_checkpoint
from lakesync.gateway.cursor import decode_cursor, encode_cursor
from lakesync.local.runner import CHECKPOINT_BUCKET, LocalStack
from tests.client.conftest import admin, full_rows, gateway_rows, unique_table

pytestmark = pytest.mark.integration

Open = Callable[..., LocalStore]


def _cut_checkpoint(
    stack: LocalStack, lost: Callable[[RowDelta], bool] = lambda _delta: False
) -> tuple[dict[tuple[str, str], RowState], str]:
    """A checkpoint of everything the gateway holds now, cut as the checkpoint job does; its states and cursor.
    ``lost``: deltas left out, as a restore from a lake that never got them leaves them out."""
    deltas, cursor = admin(stack).pull_all()
    assert cursor is not None
    states: dict[tuple[str, str], RowState] = {}
    for delta in (d for d in deltas if not lost(d)):
        key = (delta.table, delta.row_id)
        states[key] = merge(states.get(key), delta).state
    now = HLC().now()
    manifest = write_checkpoint(
        S3ObjectStore(CHECKPOINT_BUCKET, s3_client()),
        gateway="default",
        checkpoint_id=checkpoint_id(now >> 16, f"{len(states):08x}"),
        created_at_ms=now >> 16,
        positions=decode_cursor(cursor, "default"),
        server_hlc=now,
        tables=sorted({t for t, _ in states}),
        rows=[encode_row(s) for s in states.values()],
        chunk_bytes=2048,  # several chunks
    )
    return states, manifest.cursor


def _expire_cursor(path: Any, table: str) -> None:
    """Point a closed store's cursor where the gateway no longer serves (past the head: 410 CURSOR_EXPIRED)."""
    with sqlite3.connect(path) as db:
        db.execute(
            "UPDATE _lakesync_meta SET value = ? WHERE key = 'cursor'",
            (encode_cursor({f"default#{table}#0": 10**9}),),
        )
    db.close()


@pytest.fixture(params=["columns", "stream", "mixed"])
def served_as(request: pytest.FixtureRequest, monkeypatch: pytest.MonkeyPatch) -> tuple[str, list[str]]:
    """How the gateway answers the store's checkpoint requests: as asked (columnar documents), as an older gateway
    (the framed stream whatever is asked), or chunk by chunk in both (a deployment that is half rolled out); and the
    media types of its answers."""
    mode: str = request.param
    seen: list[str] = []
    fetch = SyncClient._checkpoint_get

    def answer(self: SyncClient, query: Mapping[str, Any]) -> Any:
        if mode == "mixed" and "chunk" not in query:
            return None, {}  # 413: fetch it chunk by chunk
        if mode == "stream" or (mode == "mixed" and int(query["chunk"]) % 2 == 1):
            query = {k: v for k, v in query.items() if k != "format"}
        got = fetch(self, query)
        if got is not None:
            seen.append(got[1].get("Content-Type", ""))
        return got

    monkeypatch.setattr(SyncClient, "_checkpoint_get", answer)
    return mode, seen


def test_a_new_store_loads_the_checkpoint_then_follows_its_cursor(
    stack: LocalStack, open_store: Open, served_as: tuple[str, list[str]]
) -> None:
    table = unique_table()
    writer = open_store("cw", table)
    writer.insert_many(table, {f"r{i:02d}": {"title": f"t{i}", "priority": i, "tags": {"i": i}} for i in range(40)})
    writer.sync()
    writer.update(table, "r01", {"title": "edited"})
    writer.delete(table, "r02")
    writer.sync()
    states, _ = _cut_checkpoint(stack)
    # Given changes after the checkpoint (the tail)
    writer.update(table, "r03", {"done": True})
    writer.insert(table, "tail", {"title": "after the checkpoint"})
    writer.sync()

    # When a new store syncs for the first time
    reader = open_store("cr", table)
    report = reader.sync()

    # Then it loaded every row of the checkpoint in bulk, pulled only the tail, and equals the gateway
    assert report.checkpoint_rows == len(states)
    assert report.pulled == 2
    assert reader.rows(table) == full_rows(gateway_rows(stack, table))
    # and each row's stored state is exactly the fold of the gateway's deltas (the bulk path equals the merge)
    everything, _ = admin(stack).pull_all()
    folded: dict[str, RowState] = {}
    for delta in everything:
        if delta.table == table:
            folded[delta.row_id] = merge(folded.get(delta.row_id), delta).state
    assert {row_id: reader.state(table, row_id) for row_id in folded} == folded
    # and it read the checkpoint in the form the gateway answered with
    mode, seen = served_as
    expected = {
        "columns": {COLUMNS_MEDIA_TYPE},
        "stream": {STREAM_MEDIA_TYPE},
        "mixed": {COLUMNS_MEDIA_TYPE, STREAM_MEDIA_TYPE},
    }
    assert set(seen) == expected[mode]


def test_an_expired_cursor_reloads_the_checkpoint_and_keeps_pending_local_writes(
    stack: LocalStack, open_store: Open, tmp_path: Any
) -> None:
    table = unique_table()
    path = tmp_path / "behind.db"
    behind = open_store("behind", table, path=path)
    other = open_store("other", table)
    other.insert_many(table, {f"r{i}": {"title": f"t{i}"} for i in range(5)})
    other.sync()
    behind.sync()
    # Given the store is offline while others change things, and it edits a row of its own
    behind.insert(table, "mine", {"title": "written while behind"})
    behind.update(table, "r0", {"priority": 7})
    other.update(table, "r1", {"title": "changed while away"})
    other.delete(table, "r2")
    other.sync()
    _cut_checkpoint(stack)
    behind.close()
    # and its cursor points where the gateway no longer serves (past the head: 410 CURSOR_EXPIRED)
    _expire_cursor(path, table)

    # When it syncs again
    again = open_store("behind", table, path=path)
    report = again.sync()

    # Then it re-bootstrapped from the checkpoint, pushed its pending writes, and equals the gateway
    assert report.rebootstrapped is True
    assert report.pushed == 2
    expected = full_rows(gateway_rows(stack, table))
    assert again.rows(table) == expected
    assert expected["mine"]["title"] == "written while behind"
    assert expected["r0"]["priority"] == 7
    assert expected["r1"]["title"] == "changed while away"
    assert "r2" not in expected
    other.sync()
    assert other.rows(table) == expected


def test_a_reload_gives_up_what_the_gateway_lost_and_keeps_pending_local_writes(
    stack: LocalStack, open_store: Open, tmp_path: Any
) -> None:
    table = unique_table()
    path = tmp_path / "lost.db"
    store = open_store("loser", table, path=path)
    store.insert_many(table, {f"r{i}": {"title": f"t{i}", "priority": i} for i in range(3)})
    store.sync()
    # Given writes the gateway acknowledged, then lost (a checkpoint past them that does not hold them, as a
    # restore from a lake they never reached cuts)
    store.update(table, "r0", {"title": "acknowledged, then lost"})
    store.insert(table, "gone", {"title": "created, then lost"})
    store.sync()
    _cut_checkpoint(
        stack, lost=lambda d: d.table == table and (d.row_id == "gone" or (d.row_id == "r0" and d.op.value == "UPDATE"))
    )
    # and an edit the store has not pushed yet, with its cursor where the gateway no longer serves
    store.update(table, "r1", {"priority": 70})
    store.close()
    _expire_cursor(path, table)

    # When it syncs again
    again = open_store("loser", table, path=path)
    report = again.sync()

    # Then it holds the checkpoint's rows with its pending edit on top: the lost writes are gone from it too
    assert report.rebootstrapped is True
    rows = again.rows(table)
    assert rows["r0"]["title"] == "t0" and "gone" not in rows
    assert rows["r1"]["priority"] == 70
    assert again.state(table, "r0") is not None and again.state(table, "gone") is None
