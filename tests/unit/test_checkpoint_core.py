"""lakesync.core.checkpoint: a row state as exact-version deltas (folding them gives the state back, and folding them
with any later deltas gives the state of the whole history), chunk packing at row boundaries, keys and the manifest.
"""

from __future__ import annotations

import dataclasses
import itertools
from typing import Any

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from lakesync.core.canonical import JsonValue, stable_stringify, utf16_key
from lakesync.core.checkpoint import (
    ChunkInfo,
    Manifest,
    checkpoint_id,
    chunk_key,
    group_rows,
    is_checkpoint_id,
    latest_from_json,
    latest_key,
    latest_to_json,
    manifest_key,
    merge_positions,
    pack_chunks,
    positions_of_gateway,
    row_deltas,
)
from lakesync.core.delta import ColumnDelta, DeltaOp, RowDelta, make_delta
from lakesync.core.errors import StorageError
from lakesync.core.merge import ColumnState, RowState, Version, fold
from tests import factories
from tests.factories import at, delete, insert

SETTINGS = settings(max_examples=300, deadline=None)

# Few clients (an astral one and U+FF01 order differently in UTF-16 and code points), columns and HLCs, so equal
# versions, ties and deletes that hit writes are common.
CLIENTS = ["a", "b", "Z", "\uff01", "\U0001f600"]
COLUMNS = ["x", "y", "z", "\U0001f600", "\uff01"]
HLCS = [at(ms, c) for ms in range(2) for c in range(2)]
VALUES: list[JsonValue] = [None, True, False, 0, 1, 2.5, "", "a", "1", [], [1], {"k": 1}]


DELTAS = st.builds(
    factories.delta,
    st.sampled_from(list(DeltaOp)),
    client=st.sampled_from(CLIENTS),
    hlc=st.sampled_from(HLCS),
    columns=st.lists(st.builds(ColumnDelta, st.sampled_from(COLUMNS), st.sampled_from(VALUES)), max_size=4),
)
HISTORIES = st.lists(DELTAS, min_size=1, max_size=10)


def snapshot(state: RowState | None) -> Any:
    """Every field of a state, values as canonical JSON (so ``1`` and ``True`` cannot pass for each other)."""
    if state is None:
        return None
    tomb = None if state.tombstone is None else (state.tombstone.hlc, state.tombstone.client_id)
    written = None if state.written is None else (state.written.hlc, state.written.client_id)
    columns = sorted((name, c.hlc, c.client_id, stable_stringify(c.value)) for name, c in state.columns.items())
    return state.table, state.row_id, tomb, written, columns


def _fold(deltas: list[RowDelta]) -> RowState:
    state = fold(deltas)
    assert state is not None
    return state


# -- row_deltas: properties ----------------------------------------------------------------------------------------


@SETTINGS
@given(history=HISTORIES)
def test_row_deltas_fold_back_to_the_same_state(history: list[RowDelta]) -> None:
    # Given the state of a history
    state = _fold(history)

    # When it is turned into checkpoint deltas and folded again
    rebuilt = fold(row_deltas(state))

    # Then every field (tombstone, written, each column's value and version) is the same
    assert snapshot(rebuilt) == snapshot(state)


@SETTINGS
@given(history=HISTORIES, tail=st.lists(DELTAS, max_size=8), data=st.data())
def test_row_deltas_then_tail_equals_replaying_the_whole_history(
    history: list[RowDelta], tail: list[RowDelta], data: st.DataObject
) -> None:
    # Given a checkpoint cut from the state of a history, and later deltas in any order
    checkpoint = row_deltas(_fold(history))
    later = data.draw(st.permutations(tail))

    # When a client folds the checkpoint and then the tail
    client = fold([*checkpoint, *later])

    # Then it holds exactly the state of a client that replayed everything
    assert snapshot(client) == snapshot(fold([*history, *tail]))


@SETTINGS
@given(history=HISTORIES)
def test_row_deltas_shape_delete_first_then_writes_oldest_first(history: list[RowDelta]) -> None:
    state = _fold(history)
    deltas = row_deltas(state)
    deletes = [d for d in deltas if d.op is DeltaOp.DELETE]
    writes = [d for d in deltas if d.op is not DeltaOp.DELETE]

    # A DELETE exactly when there is a tombstone, first, at the tombstone's version, without columns
    if state.tombstone is None:
        assert deletes == []
    else:
        assert deltas[0] == deletes[0] and len(deletes) == 1
        assert Version(deletes[0].hlc, deletes[0].client_id) == state.tombstone
        assert deletes[0].columns == ()
    # Writes at strictly increasing versions, the first an INSERT and the rest UPDATEs, the last at `written`
    versions = [Version(d.hlc, d.client_id) for d in writes]
    assert all(a < b for a, b in itertools.pairwise(versions))
    assert [d.op for d in writes] == [DeltaOp.INSERT, *[DeltaOp.UPDATE] * (len(writes) - 1)][: len(writes)]
    assert (versions[-1] if versions else None) == state.written
    for delta in writes:
        # each carries exactly the columns of its version, sorted by name in UTF-16 order
        names = [c.column for c in delta.columns]
        expected = [n for n, c in state.columns.items() if c.version == Version(delta.hlc, delta.client_id)]
        assert names == sorted(expected, key=utf16_key)
    # and every deltaId is the canonical one of its content
    for delta in deltas:
        rebuilt = make_delta(
            delta.op, table=delta.table, row_id=delta.row_id, client_id=delta.client_id, hlc=delta.hlc,
            columns=delta.columns,
        )  # fmt: skip
        assert delta.delta_id == rebuilt.delta_id


@SETTINGS
@given(history=HISTORIES)
def test_row_deltas_are_deterministic(history: list[RowDelta]) -> None:
    state = _fold(history)
    shuffled = RowState(
        state.table, state.row_id, dict(reversed(list(state.columns.items()))), state.tombstone, state.written
    )
    assert row_deltas(shuffled) == row_deltas(state)


# -- row_deltas: examples ------------------------------------------------------------------------------------------


H1, H2, H3 = (at(0, c) for c in (1, 2, 3))


def test_row_deltas_row_without_columns_is_one_insert_at_written() -> None:
    state = RowState("todos", "r", {}, None, Version(H1, "c"))

    assert row_deltas(state) == [insert("r", hlc=H1, client="c")]


def test_row_deltas_written_above_every_column_adds_an_empty_write() -> None:
    # Given a column written at H1 and a later INSERT without columns at H3 (the row exists from H3 on)
    state = RowState("todos", "r", {"x": ColumnState(1, H1, "c")}, None, Version(H3, "d"))

    deltas = row_deltas(state)

    # Then the empty write keeps `written`, so a DELETE at H2 still leaves the row alive
    assert [(d.op, d.hlc, d.client_id, d.values()) for d in deltas] == [
        (DeltaOp.INSERT, H1, "c", {"x": 1}),
        (DeltaOp.UPDATE, H3, "d", {}),
    ]
    after_delete = fold([*deltas, delete("r", hlc=H2, client="e")])
    assert after_delete is not None and after_delete.values() == {}


def test_row_deltas_deleted_row_is_a_lone_delete() -> None:
    state = RowState("todos", "r", {}, Version(H2, "c"), None)

    assert row_deltas(state) == [delete("r", hlc=H2, client="c")]


def test_group_rows_splits_runs_of_the_same_row() -> None:
    a1 = insert("a", hlc=H1, table="t", client="c")
    a2 = dataclasses.replace(a1, hlc=H2)
    b1 = insert("b", hlc=H1, table="t", client="c")
    other_table = insert("b", hlc=H1, table="u", client="c")

    assert list(group_rows([a1, a2, b1, other_table])) == [[a1, a2], [b1], [other_table]]
    assert list(group_rows([])) == []


# -- chunk packing -----------------------------------------------------------------------------------------------


@SETTINGS
@given(sizes=st.lists(st.integers(0, 50), max_size=40), budget=st.integers(1, 60))
def test_pack_chunks_keeps_order_and_budget_and_never_splits_an_item(sizes: list[int], budget: int) -> None:
    items = list(enumerate(sizes))

    chunks = list(pack_chunks(items, budget, lambda item: item[1]))

    # Then concatenated they are the input, none is empty, and each fits unless it is one oversized item
    assert [item for chunk in chunks for item in chunk] == items
    assert all(chunks)
    for chunk in chunks:
        total = sum(size for _, size in chunk)
        assert total <= budget or len(chunk) == 1
    # and a chunk only closed because the next item did not fit
    for chunk, following in itertools.pairwise(chunks):
        assert sum(size for _, size in chunk) + following[0][1] > budget


def test_pack_chunks_rejects_a_non_positive_budget() -> None:
    with pytest.raises(ValueError, match="positive"):
        list(pack_chunks([1], 0, lambda n: n))


# -- keys and ids --------------------------------------------------------------------------------------------------


def test_keys_follow_the_documented_layout() -> None:
    cid = checkpoint_id(1_700_000_000_000, "0a1b2c3d")

    assert cid == "1700000000000-0a1b2c3d"
    assert latest_key("gw") == "checkpoints/gw/latest.json"
    assert manifest_key("gw", cid) == f"checkpoints/gw/{cid}/manifest.json"
    assert chunk_key("gw", cid, 7) == f"checkpoints/gw/{cid}/chunk-00007.bin"
    assert latest_from_json(latest_to_json(cid)) == cid


def test_checkpoint_ids_sort_by_creation_time() -> None:
    assert checkpoint_id(999, "ffffffff") < checkpoint_id(1000, "00000000")


@pytest.mark.parametrize(
    "text", ["", "1700000000000-0A1B2C3D", "1700000000000-0a1b2c3", "../x", "170000000000-0a1b2c3d"]
)
def test_is_checkpoint_id_rejects_other_shapes(text: str) -> None:
    assert not is_checkpoint_id(text)
    with pytest.raises(StorageError, match=r"latest\.json"):
        latest_from_json({"checkpointId": text})


def test_checkpoint_id_rejects_a_bad_nonce() -> None:
    with pytest.raises(ValueError, match="invalid checkpoint id"):
        checkpoint_id(1, "xyz")


def test_positions_of_gateway_and_merge_positions() -> None:
    positions = {"gw#todos#0": 4, "gw#notes#1": 2, "gw2#todos#0": 9, "g#w#todos#0": 1}

    # A gateway id may contain '#': the shard key is split from the right
    assert positions_of_gateway(positions, "gw") == {"gw#todos#0": 4, "gw#notes#1": 2}
    assert positions_of_gateway(positions, "g#w") == {"g#w#todos#0": 1}
    assert merge_positions([{"gw#a#0": 1}, {"gw#b#0": 2}, {"gw#a#0": 1}]) == {"gw#a#0": 1, "gw#b#0": 2}
    with pytest.raises(ValueError, match="two positions"):
        merge_positions([{"gw#a#0": 1}, {"gw#a#0": 2}])


# -- the manifest --------------------------------------------------------------------------------------------------


def _manifest() -> Manifest:
    cid = checkpoint_id(1_700_000_000_000, "00c0ffee")
    return Manifest(
        gateway="gw",
        checkpoint_id=cid,
        created_at_ms=1_700_000_000_000,
        positions={"gw#todos#0": 12, "gw#notes#0": 3},
        cursor="eyJ2IjoxfQ",
        server_hlc=2**63 + 5,
        tables=("notes", "todos"),
        rows=5,
        chunks=(ChunkInfo(chunk_key("gw", cid, 0), 3, 7, 100), ChunkInfo(chunk_key("gw", cid, 1), 2, 2, 40)),
    )


def test_manifest_round_trips_through_json_with_documented_keys() -> None:
    manifest = _manifest()
    body = manifest.to_json()

    assert list(body) == [
        "version", "gateway", "checkpointId", "createdAtMs", "positions", "cursor", "serverHlc", "tables", "rows",
        "chunks",
    ]  # fmt: skip
    assert body["serverHlc"] == str(2**63 + 5)
    assert body["chunks"][0] == {"key": manifest.chunks[0].key, "rows": 3, "deltas": 7, "bytes": 100}
    assert Manifest.from_json(body) == manifest
    assert (manifest.bytes, manifest.deltas) == (140, 9)


@pytest.mark.parametrize(
    ("change", "what"),
    [
        pytest.param({"version": 2}, "unsupported version", id="version"),
        pytest.param({"checkpointId": "latest"}, "checkpointId", id="id"),
        pytest.param({"positions": {"gw#t#0": -1}}, "positions", id="negative-position"),
        pytest.param({"positions": {"gw#t#0": True}}, "positions", id="bool-position"),
        pytest.param({"positions": []}, "positions", id="positions-list"),
        pytest.param({"serverHlc": 5}, "serverHlc", id="hlc-number"),
        pytest.param({"serverHlc": "-5"}, "serverHlc", id="hlc-negative"),
        pytest.param({"tables": "todos"}, "tables", id="tables"),
        pytest.param({"chunks": [{"key": "k", "rows": 1, "deltas": 1}]}, "bytes", id="chunk-bytes"),
        pytest.param({"chunks": {}}, "chunks", id="chunks-object"),
        pytest.param({"gateway": ""}, "gateway", id="gateway"),
        pytest.param({"createdAtMs": 1.5}, "createdAtMs", id="created"),
        pytest.param({"rows": None}, "rows", id="rows"),
    ],
)
def test_manifest_from_json_rejects_corrupt_fields(change: dict[str, Any], what: str) -> None:
    body = {**_manifest().to_json(), **change}

    with pytest.raises(StorageError, match=f"Corrupt checkpoint manifest: .*{what}"):
        Manifest.from_json(body)


def test_manifest_from_json_rejects_a_non_object() -> None:
    with pytest.raises(StorageError, match="Corrupt checkpoint manifest"):
        Manifest.from_json([1, 2])


def test_manifest_releasable_needs_both_the_position_and_the_since_hlc() -> None:
    # Given a checkpoint covering todos up to seq 12 and notes up to 3, resumable `since` 2**63 + 5
    manifest = _manifest()
    hlc = manifest.server_hlc

    # Then an entry is releasable only if both its shard position and the since HLC cover it
    assert manifest.releasable("gw#todos#0", 12, hlc)
    assert not manifest.releasable("gw#todos#0", 13, hlc)
    assert not manifest.releasable("gw#todos#0", 12, hlc + 1)
    assert manifest.releasable("gw#notes#0", 1, 0)
    assert not manifest.releasable("gw#tags#0", 1, 0)
