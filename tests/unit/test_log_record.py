"""log_record (lakesync.aws.flush_store): the delta-log record of a log entry, made from its stored wire JSON, is the
record its delta describes, whichever form the wire JSON was stored in."""

from __future__ import annotations

import json
from typing import Any

from hypothesis import given, settings
from hypothesis import strategies as st

from lakesync.aws.flush_store import log_record
from lakesync.core.canonical import JsonValue, js_stringify, stable_stringify
from lakesync.core.hlc import encode
from lakesync.core.log import LogEntry, ShardId
from tests.factories import delete, insert, update
from tests.unit.test_canonical import JSON

SHARD = ShardId("gw", "todos", 0)
FIRST_HLC = encode(1_763_000_000_000, 0)
# Every path of the canonical JSON: escapes, a lone surrogate, floats, integers past 2**53, objects with keys out of
# order, arrays, booleans, null.
VALUES: list[JsonValue] = [
    "plain",
    'quote " and \\ and \n and \x01',
    "lone \ud800 surrogate",
    "café ☕",
    0,
    -(2**53),
    2**53 + 1,
    10**22,
    1.0,
    1e21,
    -0.0,
    0.1,
    True,
    False,
    None,
    {"b": 1, "a": [1, "x", None]},
    [],
]


def _expected(entry: LogEntry) -> dict[str, Any]:
    """The record as the delta describes it."""
    delta = entry.delta
    return {
        "gateway": entry.shard.gateway,
        "tbl": delta.table,
        "row_id": delta.row_id,
        "op": delta.op.value,
        "client_id": delta.client_id,
        "hlc": delta.hlc,
        "delta_id": delta.delta_id,
        "columns": [{"name": c.column, "value": stable_stringify(c.value)} for c in delta.columns],
        "shard": entry.shard.key,
        "seq": entry.seq,
        "commit_hlc": entry.commit_hlc,
        "commit_ms": entry.commit_hlc >> 16,
        "size": entry.size,
    }


def _stored_forms(entry: LogEntry) -> list[LogEntry]:
    """The entry as a store gives it: its delta, or only its wire JSON as JavaScript or the buffer writes it."""
    wire = entry.delta.to_json()
    texts = [js_stringify(wire), json.dumps(wire, ensure_ascii=False, separators=(",", ":"))]
    stored = [LogEntry(entry.shard, entry.seq, entry.commit_hlc, None, None, None, entry.size, t) for t in texts]
    return [entry, *stored]


def test_records_of_every_kind_of_delta_and_value():
    # Given entries of every op whose column values take every path of the canonical JSON
    deltas = [insert(f"r{i}", v=value, w=i) for i, value in enumerate(VALUES)]
    deltas += [update("r1", done=True, priority=-7), delete("r1")]
    entries = [LogEntry(SHARD, i + 1, FIRST_HLC + i, d, None, None, 10 + i) for i, d in enumerate(deltas)]
    for entry in entries:
        # Then each stored form gives the record the delta describes
        for stored in _stored_forms(entry):
            assert log_record(stored) == _expected(entry)


@settings(max_examples=200, deadline=None)
@given(st.lists(JSON, min_size=1, max_size=4))
def test_records_of_arbitrary_values(values: list[JsonValue]) -> None:
    entry = LogEntry(SHARD, 7, FIRST_HLC, insert("r", **{f"c{i}": v for i, v in enumerate(values)}), None, None, 99)
    for stored in _stored_forms(entry):
        assert log_record(stored) == _expected(entry)
