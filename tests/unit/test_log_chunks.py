"""The stored form of a commit chunk (``lakesync.aws.log_chunks``): every entry reads back exactly."""

from __future__ import annotations

import json
import zlib

from hypothesis import given
from hypothesis import strategies as st

from lakesync.aws.log_chunks import FIRST_KEYED, chunk_first, chunk_key, decode_entries, encode_entries
from lakesync.core.canonical import JsonValue, js_stringify
from lakesync.core.delta import make_delta
from lakesync.core.hlc import encode
from lakesync.gateway.model import LogEntry, ShardId

SHARD = ShardId("gw", "todos", 0)
FIRST_HLC = encode(1_763_000_000_000, 0)

scalars = st.one_of(
    st.none(),
    st.booleans(),
    st.integers(-(2**53), 2**53),
    st.floats(allow_nan=False, allow_infinity=False),
    st.text(max_size=8),
)
values: st.SearchStrategy[JsonValue] = st.recursive(
    scalars, lambda inner: st.lists(inner, max_size=3) | st.dictionaries(st.text(max_size=4), inner, max_size=3),
    max_leaves=6,
)  # fmt: skip
rows = st.none() | st.dictionaries(st.sampled_from(["a", "b", "c", "d", "e"]), values, max_size=5)


def _typed(row: dict[str, JsonValue] | None) -> str:
    return json.dumps(row, sort_keys=True)


def _entry(i: int, before: dict[str, JsonValue] | None, after: dict[str, JsonValue] | None) -> LogEntry:
    delta = make_delta("UPDATE", table="todos", row_id=f"r{i}", client_id="c1", hlc=FIRST_HLC + i, columns={"a": i})
    text = js_stringify(delta.to_json())
    return LogEntry(SHARD, 7 + i, FIRST_HLC + i, delta, before, after, len(text), text)


@given(st.lists(st.tuples(rows, rows), min_size=1, max_size=6))
def test_every_entry_reads_back_with_its_images(images: list[tuple[dict[str, JsonValue] | None, ...]]) -> None:
    # Given a chunk of entries with arbitrary row images before and after (1, 1.0 and true all differ)
    entries = [_entry(i, before, after) for i, (before, after) in enumerate(images)]

    # When it is stored and read back
    back = decode_entries(SHARD, 7, FIRST_HLC, encode_entries(entries))

    # Then every entry is the same, down to the type of every value (column order aside)
    assert back == entries
    for got, want in zip(back, entries, strict=True):
        assert _typed(got.before) == _typed(want.before) and _typed(got.after) == _typed(want.after)
        assert got.wire_json == want.wire_json


def test_an_update_stores_the_row_once() -> None:
    # Given an update of one column of a wide row
    row: dict[str, JsonValue] = {f"col{i}": "x" * 40 for i in range(20)}
    entry = _entry(0, row, {**row, "col3": "changed"})

    # When it is stored, the unchanged columns are not stored a second time for the image before
    stored = zlib.decompress(encode_entries([entry])).decode()
    assert stored.count("x" * 40) == 20

    # And reading without images skips them, but keeps the delta and its size
    (bare,) = decode_entries(SHARD, 7, FIRST_HLC, encode_entries([entry]), images=False)
    assert (bare.before, bare.after, bare.size, bare.wire_json) == (None, None, entry.size, entry.wire_json)


def test_a_size_other_than_the_wire_length_is_kept() -> None:
    entry = _entry(0, None, {"a": 1})
    odd = LogEntry(entry.shard, entry.seq, entry.commit_hlc, entry.delta, None, {"a": 1}, 5, entry.wire_json)
    assert decode_entries(SHARD, 7, FIRST_HLC, encode_entries([odd]))[0].size == 5


@given(first=st.integers(1, 10**14), count=st.integers(1, 100), first_keyed=st.booleans())
def test_either_key_gives_back_the_chunks_first_sequence(first: int, count: int, first_keyed: bool) -> None:
    key = chunk_key(first, first + count - 1, first_keyed=first_keyed)
    assert chunk_first(key, count) == first
    # The two kinds sit in disjoint key ranges, each in sequence order
    assert (key >= FIRST_KEYED) is first_keyed
    assert chunk_key(first + count, first + 2 * count - 1, first_keyed=first_keyed) > key
