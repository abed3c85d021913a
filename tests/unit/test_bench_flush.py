"""The flush benchmark's floor (``benchmarks/flush.py``): its simplest-way decoding of a log item gives the same
delta-log rows as the flush's own records, so the two sides write the same table."""

from __future__ import annotations

from benchmarks.flush import chunk_rows, markdown
from lakesync.aws.buffer.log_chunks import chunk_key, encode_entries
from lakesync.aws.flush_store import log_record
from lakesync.core.hlc import encode
from lakesync.core.log import LogEntry, ShardId
from tests.factories import delete, insert, update

SHARD = ShardId("gw", "todos", 0)
FIRST_HLC = encode(1_763_000_000_000, 0)


def _entries() -> list[LogEntry]:
    deltas = [
        insert("r1", title="café", done=False, priority=3, notes="a\nb"),
        update("r1", done=True, priority=-7),
        insert("r2", title='say "hi"', tags=None),
        delete("r1"),
    ]
    return [LogEntry(SHARD, 11 + i, FIRST_HLC + i, d, None, None, 0) for i, d in enumerate(deltas)]


def test_floor_rows_equal_the_flush_records():
    # Given a chunk of entries as the push stores it
    entries = _entries()
    item = {
        "shard": {"S": SHARD.key},
        "seq": {"N": str(chunk_key(11))},
        "n": {"N": str(len(entries))},
        "c": {"N": str(FIRST_HLC)},
        "z": {"B": encode_entries(entries)},
    }
    # When the floor decodes it the simplest way
    rows = list(chunk_rows(item))
    # Then every row is the flush's record of the same entry, with commit_ts (µs) in place of commit_ms and size
    expected = []
    for entry in entries:
        record = log_record(entry)
        record["commit_ts"] = record.pop("commit_ms") * 1000
        del record["size"]
        expected.append(record)
    assert rows == expected


def test_report_says_the_verdict_and_both_sides():
    # Given the figures of a run that missed the goal
    stats = {"median": 2.0, "min": 1.5, "max": 2.5, "spread_pct": 50.0, "n": 2, "values": [1.5, 2.5]}
    doc = {
        "timestamp": "2026-12-07T00:00:00+00:00",
        "duration_s": 60,
        "machine": {
            "cpu": "cpu",
            "cpu_count": 2,
            "memory_gib": 4,
            "os": "Linux",
            "python": "3.11",
            "load_average_start": [3.0, 2.0, 1.0],
            "load_average_end": [3.5, 2.0, 1.0],
            "git": {"commit": "abc", "src_or_functions_modified": False},
            "packages": {},
        },
        "workload": {
            "deltas": 1000,
            "tables": 2,
            "push_batch": 100,
            "repetitions": 2,
            "warm_up_deltas": 200,
            "shards": 2,
        },
        "measured": {"seed_s": 3, "warm_up_s": 0.5, "log_items": 10, "same_rows": {"rows": 1000, "equal": True}},
        "function_s": stats,
        "floor_s": {**stats, "median": 1.0},
        "ratio_floor_over_function": {**stats, "median": 0.5, "min": 0.4, "max": 0.6},
        "function_cpu_s": stats,
        "floor_cpu_s": stats,
        "function_moto_cpu_s": stats,
        "floor_moto_cpu_s": stats,
        "cpu_ratio_floor_over_function": {**stats, "median": 0.6},
        "function_deltas_per_s": {**stats, "median": 500},
        "floor_deltas_per_s": {**stats, "median": 1000},
        "function_steps_s": {"write": 1.8},
        "floor_steps_s": {"query": 0.5},
        "goal": {"ratio_at_least": 0.8, "met": False},
        "profile": None,
    }
    # When it is written for people
    text = markdown(doc)
    # Then the verdict, the ratio and both sides' rates are in it, and the contention is named
    assert "| floor time / flush function time (wall clock) | ≥ 0.8 | 0.50× (0.40–0.60) | **missed** |" in text
    assert "| 500 |" in text and "| 1,000 |" in text
    assert "shared and busy" in text
