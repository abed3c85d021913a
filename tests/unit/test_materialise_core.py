"""The claim-check job format (lakesync.core.materialise): messages, payloads and their checks against each other."""

from __future__ import annotations

import gzip
import json
from typing import Any

import pytest
from hypothesis import given
from hypothesis import strategies as st

from lakesync.core.delta import make_delta
from lakesync.core.hlc import encode
from lakesync.core.materialise import (
    PAYLOAD_PREFIX,
    MaterialiseJob,
    PayloadError,
    decode_payload,
    encode_payload,
    payload_key,
)

T0 = 1_700_000_000_000


def deltas(n: int, table: str = "todos") -> list[Any]:
    out = []
    for i in range(n):
        if i % 4 == 3:
            out.append(make_delta("DELETE", table=table, row_id=f"r{i % 3}", client_id="c", hlc=encode(T0, i)))
        else:
            cols = {"title": f"t\u00e9{i}", "n": i / 3, "tags": [i, None, {"x": "😀"}]}
            out.append(
                make_delta("UPDATE", table=table, row_id=f"r{i % 3}", client_id="c", hlc=encode(T0, i), columns=cols)
            )
    return out


def job_for(items: list[Any], lo: int = 10, **overrides: Any) -> tuple[MaterialiseJob, bytes]:
    hi = lo + len(items)
    payload = encode_payload("gw", "todos", "gw#todos#0", lo, hi, [(d.row_id, json.dumps(d.to_json())) for d in items])
    fields: dict[str, Any] = {
        "gateway": "gw",
        "table": "todos",
        "shard": "gw#todos#0",
        "lo": lo,
        "hi": hi,
        "deltas": payload.deltas,
        "rows": payload.rows,
        "bytes": len(payload.data),
        "sha256": payload.sha256,
        "bucket": "claims",
        "key": payload_key("gw", "todos", 0, lo, hi),
        "run_id": "run1",
    }
    fields.update(overrides)
    return MaterialiseJob(**fields), payload.data


def test_payload_round_trips_the_deltas_and_counts_rows() -> None:
    items = deltas(9)
    job, data = job_for(items)
    assert decode_payload(job, data) == items
    assert job.rows == 3 and job.deltas == 9


def test_payload_is_deterministic_so_a_republished_range_is_the_same_object() -> None:
    items = deltas(5)
    (a, data_a), (b, data_b) = job_for(items), job_for(items)
    assert data_a == data_b and a.sha256 == b.sha256 and a.key == b.key


def test_payload_key_is_a_function_of_the_range_and_sorts_by_position() -> None:
    assert payload_key("gw", "todos", 1, 0, 5000).startswith(PAYLOAD_PREFIX + "gw/todos/1/")
    keys = [payload_key("gw", "t", 0, lo, lo + 10) for lo in (0, 10, 100, 1000, 10_000)]
    assert keys == sorted(keys)


def test_message_round_trips_and_is_small() -> None:
    job, _ = job_for(deltas(5000))
    body = job.to_message()
    assert MaterialiseJob.from_message(body) == job
    assert len(body.encode()) < 1024


def test_encode_refuses_entries_that_do_not_fill_the_range() -> None:
    with pytest.raises(ValueError, match="entries"):
        encode_payload("gw", "todos", "gw#todos#0", 0, 5, [("r", "{}")])


@pytest.mark.parametrize(
    ("damage", "message"),
    [
        (lambda job, data: (job, None), "is missing"),
        (lambda job, data: (job, data[:-3]), "checksum"),
        (lambda job, data: (job, bytes([data[0] ^ 1]) + data[1:]), "checksum"),
        (lambda job, data: (job.__class__(**{**_fields(job), "lo": job.lo + 1, "hi": job.hi + 1}), data), "range"),
        (lambda job, data: (job.__class__(**{**_fields(job), "table": "notes"}), data), "table"),
        (lambda job, data: (job.__class__(**{**_fields(job), "gateway": "other"}), data), "gateway"),
    ],
)
def test_decode_refuses_a_missing_corrupt_or_mismatched_payload(damage: Any, message: str) -> None:
    job, data = job_for(deltas(4))
    bad_job, bad_data = damage(job, data)
    with pytest.raises(PayloadError, match=message):
        decode_payload(bad_job, bad_data)


def _fields(job: MaterialiseJob) -> dict[str, Any]:
    return {name: getattr(job, name) for name in MaterialiseJob.__dataclass_fields__}


def _rehash(job: MaterialiseJob, text: str) -> tuple[MaterialiseJob, bytes]:
    import hashlib

    data = gzip.compress(text.encode())
    return MaterialiseJob(**{**_fields(job), "sha256": hashlib.sha256(data).hexdigest()}), data


@pytest.mark.parametrize(
    "text",
    [
        "not json",
        "[1, 2]",
        '{"v":1,"gateway":"gw","table":"todos","shard":"gw#todos#0","range":[10,12],"deltas":[{"op":"INSERT"}, 1]}',
        '{"v":1,"gateway":"gw","table":"todos","shard":"gw#todos#0","range":[10,12],"deltas":"x"}',
    ],
)
def test_decode_refuses_well_hashed_payloads_that_are_not_valid(text: str) -> None:
    job, _ = job_for(deltas(2))
    bad_job, data = _rehash(job, text)
    with pytest.raises(PayloadError):
        decode_payload(bad_job, data)


def test_decode_refuses_deltas_of_another_table() -> None:
    job, _ = job_for(deltas(2))
    other = deltas(2, table="notes")
    text = json.dumps(
        {
            "v": 1,
            "gateway": "gw",
            "table": "todos",
            "shard": "gw#todos#0",
            "range": [10, 12],
            "deltas": [d.to_json() for d in other],
        }
    )
    bad_job, data = _rehash(job, text)
    with pytest.raises(PayloadError, match="another table"):
        decode_payload(bad_job, data)


@pytest.mark.parametrize(
    "body",
    [
        "",
        "null",
        "[]",
        '{"v": 2}',
        '{"v": 1}',
        '{"v": 1, "gateway": "g", "table": "t", "shard": "s", "range": [5, 5], "counts": {"deltas": 0, "rows": 0,'
        ' "bytes": 0}, "sha256": "' + "0" * 64 + '", "payload": {"bucket": "b", "key": "materialise/x"}, "run": "r"}',
        '{"v": 1, "gateway": "g", "table": "t", "shard": "s", "range": [0, 5], "counts": {"deltas": 5, "rows": 1,'
        ' "bytes": 1}, "sha256": "' + "0" * 64 + '", "payload": {"bucket": "b", "key": "../etc/passwd"}, "run": "r"}',
        '{"v": 1, "gateway": 5, "table": "t", "shard": "s", "range": [0, 5], "counts": {"deltas": 5, "rows": 1,'
        ' "bytes": 1}, "sha256": "' + "0" * 64 + '", "payload": {"bucket": "b", "key": "materialise/x"}, "run": "r"}',
        '{"v": 1, "gateway": "g", "table": "t", "shard": "s", "range": [0, true], "counts": {"deltas": 5, "rows": 1,'
        ' "bytes": 1}, "sha256": "' + "0" * 64 + '", "payload": {"bucket": "b", "key": "materialise/x"}, "run": "r"}',
        "[" * 100_000,
    ],
)
def test_message_parsing_refuses_anything_but_a_consistent_job(body: str) -> None:
    with pytest.raises(PayloadError):
        MaterialiseJob.from_message(body)


@given(st.text(max_size=300) | st.binary(max_size=300).map(lambda b: b.decode("latin-1")))
def test_message_parsing_never_fails_with_anything_but_a_payload_error(body: str) -> None:
    try:
        MaterialiseJob.from_message(body)
    except PayloadError:
        pass
