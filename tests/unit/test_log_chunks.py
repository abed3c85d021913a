"""The stored form of a commit chunk (``lakesync.aws.buffer.log_chunks``): every entry reads back exactly."""

from __future__ import annotations

import json
import zlib

import pytest
from hypothesis import given
from hypothesis import strategies as st

from lakesync.aws.buffer.log_chunks import (
    FIRST_KEYED,
    _encode,
    chunk_first,
    chunk_key,
    decode_entries,
    encode_entries,
)
from lakesync.core.canonical import JsonValue, js_stringify
from lakesync.core.delta import make_delta
from lakesync.core.hlc import encode
from lakesync.core.log import LogEntry, ShardId

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


def encode_in(entries: list[LogEntry], layout: int) -> bytes:
    """The chunk's text in ``layout``: 2, as writers store a chunk; 1, as they store one whose wire JSON holds a raw
    newline."""
    if layout == 2:
        return encode_entries(entries)
    return _encode(entries, [e.wire_json or "" for e in entries], 1)


def _typed(row: dict[str, JsonValue] | None) -> str:
    return json.dumps(row, sort_keys=True)


def _entry(i: int, before: dict[str, JsonValue] | None, after: dict[str, JsonValue] | None) -> LogEntry:
    delta = make_delta("UPDATE", table="todos", row_id=f"r{i}", client_id="c1", hlc=FIRST_HLC + i, columns={"a": i})
    text = js_stringify(delta.to_json())
    return LogEntry(SHARD, 7 + i, FIRST_HLC + i, delta, before, after, len(text), text)


@given(st.lists(st.tuples(rows, rows), min_size=1, max_size=6), st.sampled_from([1, 2]))
def test_every_entry_reads_back_with_its_images(
    images: list[tuple[dict[str, JsonValue] | None, ...]], layout: int
) -> None:
    # Given a chunk of entries with arbitrary row images before and after (1, 1.0 and true all differ)
    entries = [_entry(i, before, after) for i, (before, after) in enumerate(images)]

    # When it is stored in either layout and read back, with its images and without
    blob = encode_in(entries, layout)
    back = decode_entries(SHARD, 7, FIRST_HLC, blob)
    bare = decode_entries(SHARD, 7, FIRST_HLC, blob, images=False)

    # Then every entry is the same, down to the type of every value (column order aside)
    assert back == entries
    for got, want in zip(back, entries, strict=True):
        assert _typed(got.before) == _typed(want.before) and _typed(got.after) == _typed(want.after)
        assert got.wire_json == want.wire_json
    assert [(e.seq, e.commit_hlc, e.size, e.wire_json, e.before, e.after) for e in bare] == [
        (e.seq, e.commit_hlc, e.size, e.wire_json, None, None) for e in entries
    ]


@given(st.lists(st.text(max_size=6), min_size=1, max_size=5), st.sampled_from([1, 2]))
def test_ids_and_values_of_any_text_read_back(texts: list[str], layout: int) -> None:
    # Given deltas whose row ids and values hold any characters (newlines, quotes, lone surrogates, non-ASCII)
    entries = []
    for i, text in enumerate(texts):
        delta = make_delta("INSERT", table="todos", row_id=f"r{i}{text}", client_id="c1", hlc=FIRST_HLC + i,
                           columns={"a": text})  # fmt: skip
        wire = js_stringify(delta.to_json())
        entries.append(
            LogEntry(
                SHARD, 7 + i, FIRST_HLC + i, delta, None, {"a": text}, len(wire.encode("utf-8", "surrogatepass")), wire
            )
        )

    # When stored and read back, the wire JSON, the sizes and the deltas are the same
    back = decode_entries(SHARD, 7, FIRST_HLC, encode_in(entries, layout))
    assert [(e.wire_json, e.size, e.delta) for e in back] == [(e.wire_json, e.size, e.delta) for e in entries]


@given(
    st.lists(st.tuples(rows, rows, st.text(max_size=300)), min_size=1, max_size=40),
    st.sampled_from([1, 2]),
    st.integers(0, 45),
    st.integers(0, 45),
    st.booleans(),
)
def test_a_slice_of_a_chunk_decodes_as_the_same_slice_of_the_whole(
    images: list[tuple[dict[str, JsonValue] | None, dict[str, JsonValue] | None, str]],
    layout: int,
    start: int,
    length: int,
    sized: bool,
) -> None:
    # Given a chunk of entries whose wire JSON is long enough (and sometimes sized otherwise) for a chunk's text to
    # span several inflate steps
    entries = []
    for i, (before, after, text) in enumerate(images):
        delta = make_delta("INSERT", table="todos", row_id=f"r{i}", client_id="c1", hlc=FIRST_HLC + i,
                           columns={"a": text * 60})  # fmt: skip
        wire = js_stringify(delta.to_json())
        size = len(wire.encode("utf-8", "surrogatepass")) + (i if sized else 0)
        entries.append(LogEntry(SHARD, 7 + i, FIRST_HLC + i, delta, before, after, size, wire))
    blob = encode_in(entries, layout)

    # When entries start .. start + length are decoded alone, with their images and without
    part = decode_entries(SHARD, 7, FIRST_HLC, blob, start=start, stop=start + length)
    bare = decode_entries(SHARD, 7, FIRST_HLC, blob, images=False, start=start, stop=start + length)

    # Then they are the same slice of the whole chunk's entries, images, sizes and positions included
    whole = decode_entries(SHARD, 7, FIRST_HLC, blob)
    want = whole[start : start + length]
    assert part == want
    assert [(e.seq, e.commit_hlc, e.size, e.wire_json) for e in bare] == [
        (e.seq, e.commit_hlc, e.size, e.wire_json) for e in want
    ]


def test_the_first_entries_of_a_long_chunk_are_read_without_inflating_the_rest() -> None:
    # Given a chunk whose later entries would not inflate (the stream cut short after its first part)
    entries = [_entry(i, None, {"a": "x" * 2000 + str(i)}) for i in range(200)]
    blob = encode_entries(entries)
    inflater = zlib.decompressobj()
    inflater.decompress(blob, 20_000)
    consumed = len(blob) - len(inflater.unconsumed_tail)

    # When its first entry is read from the first part alone
    got = decode_entries(SHARD, 7, FIRST_HLC, blob[: consumed + 64], stop=1)

    # Then it is there, whole, with its images
    assert got == entries[:1]
    # And the whole chunk cut short does not inflate
    with pytest.raises(zlib.error):
        zlib.decompress(blob[: consumed + 64])


def test_layout_2_keeps_each_wire_json_on_a_line_of_its_own_followed_by_its_images() -> None:
    entries = [_entry(i, None, {"a": i}) for i in range(3)]
    header, *lines = zlib.decompress(encode_entries(entries)).decode().split("\n")
    assert header == "2"
    assert lines[::2] == [e.wire_json for e in entries]
    assert [json.loads(line) for line in lines[1::2]] == [[{"a": i}, None] for i in range(3)]


def test_layout_2_is_no_larger_than_layout_1_for_a_full_chunk_of_wide_rows() -> None:
    # Given a push chunk (48) of 2 KB inserts whose values do not compress (the images repeat them)
    import random

    rng = random.Random(7)
    entries = []
    for i in range(48):
        columns: dict[str, JsonValue] = {"body": "".join(rng.choice("abcdefghijklmnopqrstuvwxyz") for _ in range(2000))}
        delta = make_delta("INSERT", table="todos", row_id=f"r{i}", client_id="c1", hlc=FIRST_HLC + i, columns=columns)
        text = js_stringify(delta.to_json())
        entries.append(LogEntry(SHARD, 7 + i, FIRST_HLC + i, delta, None, columns, len(text), text))
    # Then both layouts store each value about once (zlib finds the images' copy near the delta's)
    one, two = len(encode_in(entries, 1)), len(encode_entries(entries))
    assert two <= one * 1.01
    assert two < 48 * 2000 * 0.7  # 26 letters: ~4.7 bits a character, stored once


def test_a_wire_json_with_a_raw_newline_is_stored_in_layout_1() -> None:
    entry = _entry(0, None, {"a": 1})
    assert entry.wire_json is not None
    spaced = entry.wire_json.replace(",", ",\n", 1)  # JSON all the same, but not one line
    odd = LogEntry(entry.shard, entry.seq, entry.commit_hlc, entry.delta, None, {"a": 1}, len(spaced), spaced)
    blob = encode_entries([odd])
    assert zlib.decompress(blob).startswith(b"[")
    assert decode_entries(SHARD, 7, FIRST_HLC, blob)[0].wire_json == spaced


def test_a_layout_1_chunk_reads_back() -> None:
    # Stored as [[wire JSON, after, before form, size?], ...]
    wire = '{"op":"DELETE","table":"todos","rowId":"r1","clientId":"c1","columns":[],"hlc":"5","deltaId":"d"}'
    text = json.dumps([[wire, None, {"f": {"a": 1}}], [wire, {"a": 2}, None, 3]])
    (first, second) = decode_entries(SHARD, 7, FIRST_HLC, zlib.compress(text.encode()))
    assert (first.seq, first.before, first.after, first.size, first.wire_json) == (7, {"a": 1}, None, len(wire), wire)
    assert (second.seq, second.commit_hlc, second.before, second.after, second.size) == (
        8,
        FIRST_HLC + 1,
        None,
        {"a": 2},
        3,
    )


@pytest.mark.parametrize("text", ["3\n{}\n[]", "2:1,2\n{}\n[[null,null]]"])
def test_a_chunk_in_a_layout_this_code_does_not_know_or_inconsistent_is_refused(text: str) -> None:
    with pytest.raises(ValueError):
        decode_entries(SHARD, 7, FIRST_HLC, zlib.compress(text.encode()))


def test_images_that_disagree_with_the_lines_are_refused_when_first_asked_for() -> None:
    blob = zlib.compress(b'2\n{"op":"INSERT"}\n[]')
    (entry,) = decode_entries(SHARD, 7, FIRST_HLC, blob)
    assert entry.wire_json == '{"op":"INSERT"}'
    with pytest.raises(ValueError):
        _ = entry.after


def test_images_are_parsed_once_per_chunk_on_first_use() -> None:
    entries = [_entry(i, {"a": i}, {"a": i + 1}) for i in range(3)]
    back = decode_entries(SHARD, 7, FIRST_HLC, encode_entries(entries))
    assert all(e._images is not None for e in back)  # nothing parsed yet
    assert back[1].after == {"a": 2}
    assert back[0]._images is not None and back[0]._images[0]._pairs is not None  # the chunk's line, parsed once
    assert [(e.before, e.after) for e in back] == [({"a": i}, {"a": i + 1}) for i in range(3)]


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


@pytest.mark.parametrize("layout", [1, 2])
def test_a_size_other_than_the_wire_length_is_kept(layout: int) -> None:
    entry = _entry(0, None, {"a": 1})
    odd = LogEntry(entry.shard, entry.seq, entry.commit_hlc, entry.delta, None, {"a": 1}, 5, entry.wire_json)
    plain = _entry(1, None, {"a": 2})
    blob = encode_in([odd, plain], layout)
    assert [e.size for e in decode_entries(SHARD, 7, FIRST_HLC, blob)] == [5, plain.size]
    assert [e.size for e in decode_entries(SHARD, 7, FIRST_HLC, blob, images=False)] == [5, plain.size]


@given(first=st.integers(1, 10**14), count=st.integers(1, 100))
def test_the_key_gives_back_the_chunks_first_sequence(first: int, count: int) -> None:
    key = chunk_key(first)
    assert chunk_first(key) == first
    # Keys sit far above any sequence, in sequence order
    assert key > FIRST_KEYED > first
    assert chunk_key(first + count) > key
