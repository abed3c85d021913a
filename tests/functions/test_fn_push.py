"""POST /v1/sync/{gw}/push through functions.push.lambda_handler on moto DynamoDB: the happy paths (JSON and
protobuf), the http_handlers push vectors, and bad input -- always a documented 4xx, never a 5xx, nothing written.
"""

from __future__ import annotations

import base64
import json
from dataclasses import replace
from pathlib import Path
from typing import Any

import pytest
from hypothesis import HealthCheck, event, given, settings
from hypothesis import strategies as st

import functions.push as push_fn
from lakesync.aws.settings.variables import MAX_BODY_BYTES_LIMIT
from lakesync.core.delta import ColumnDelta, RowDelta
from lakesync.core.hlc import encode
from lakesync.core.messages import SyncPush
from lakesync.wire import decode_sync_response, encode_sync_push
from tests.factories import delta, insert, update

VECTORS = Path(__file__).parent.parent / "vectors"
PUSH_VECTORS = json.loads((VECTORS / "http_handlers.json").read_text(encoding="utf-8"))["push"]
MS = 1_763_000_000_000
"""The millisecond of the deltas' HLCs (a past one: the clock-drift check refuses only the future)."""
EMPTY = {"deltas": 0, "rows": 0, "heads": 0, "dedup": 0, "config": 0, "actions": 0}


def _delta(row: str = "row-1", *, client: str = "client-a", table: str = "todos", ms: int = MS) -> RowDelta:
    """An UPDATE of ``row`` setting its ``title`` to the row id."""
    return update(row, hlc=encode(ms, 0), table=table, client=client, title=row)


def _body(*deltas: Any, client: str = "client-a") -> dict[str, Any]:
    return {"clientId": client, "deltas": [d.to_json() for d in deltas]}


def test_push_json_sample_event_commits_the_delta(api):
    # Given the sample JSON push event, When it is handled
    reply = api.call(push_fn, api.event("push_json"))
    # Then the delta is accepted, echoed as the effective delta with a receipt, and stored
    body = reply.json()
    assert reply.status == 200
    assert reply.headers["Content-Type"] == "application/json"
    assert body["accepted"] == 1
    sent = json.loads(api.event("push_json")["body"])["deltas"][0]
    assert body["deltas"] == [sent]
    assert body["receipts"][0]["deltaId"] == sent["deltaId"]
    assert body["receipts"][0]["duplicate"] is False
    assert isinstance(body["serverHlc"], str) and int(body["serverHlc"]) > int(sent["hlc"])
    assert api.items()["deltas"] == 1


def test_push_protobuf_sample_event_answers_in_protobuf(api):
    # Given the sample protobuf push (base64 body, Accept: application/x-protobuf)
    event = api.event("push_protobuf")
    # When it is handled
    reply = api.call(push_fn, event)
    # Then the answer is a protobuf SyncResponse carrying the effective delta
    assert reply.status == 200
    assert reply.headers["Content-Type"] == "application/x-protobuf"
    assert reply.raw["isBase64Encoded"] is True
    response = decode_sync_response(reply.body)
    assert [d.delta_id for d in response.deltas] == [d.delta_id for d in _decoded_push(event).deltas]
    assert response.has_more is False


def _decoded_push(event: dict[str, Any]) -> SyncPush:
    from lakesync.wire import decode_sync_push

    return decode_sync_push(base64.b64decode(event["body"]))


def test_push_protobuf_body_with_json_accept_answers_json(api):
    # Given a protobuf body whose client asks for JSON
    event = api.event("push_protobuf", headers={"accept": "application/json"})
    # When handled, Then the answer is the JSON push result
    reply = api.call(push_fn, event)
    assert reply.status == 200
    assert reply.json()["accepted"] == 1


def test_push_repeated_is_acknowledged_as_duplicate_and_written_once(api):
    # Given a delta already pushed
    first = api.call(push_fn, api.event("push_json"))
    assert first.status == 200
    before = api.items()
    # When the same push is sent again
    again = api.call(push_fn, api.event("push_json"))
    # Then it is accepted, reported as a duplicate, returns no effective delta and writes nothing
    body = again.json()
    assert again.status == 200
    assert body["accepted"] == 1 and body["deltas"] == []
    assert body["receipts"][0]["duplicate"] is True
    assert api.items() == before


# -- the http_handlers.json push vectors ---------------------------------------------------------------------------


@pytest.mark.parametrize("case", PUSH_VECTORS, ids=[c["name"] for c in PUSH_VECTORS])
def test_push_vector(api, monkeypatch, case):
    # Given the vector's gateway (clock fixed at 1700000000000) and its authenticated identity
    if case.get("config", {}).get("maxBackpressureBytes") is not None:
        monkeypatch.setenv("LAKESYNC_BACKPRESSURE_BYTES", str(case["config"]["maxBackpressureBytes"]))
    api.fix_clock()
    raw = json.loads(case["raw_body"])
    sub = case["header_client_id"] or raw.get("clientId") or "c1"
    expected = case["expected"]
    if expected["status"] == 503:
        # Ours: backpressure applies to a shard's unflushed bytes, so the shard must exist first.
        warm = api.call(push_fn, api.event("push_json", token=api.token(sub), body=PUSH_VECTORS[0]["raw_body"]))
        assert warm.status == 200
    before = api.items()
    # When the raw body is pushed
    reply = api.call(push_fn, api.event("push_json", token=api.token(sub), body=case["raw_body"]))
    body = reply.json()
    # Then status and body are the vector's
    assert reply.status == expected["status"]
    if expected["status"] == 200:
        # Ours: the body adds per-delta receipts; everything the original sends is identical (serverHlc included).
        assert {k: v for k, v in body.items() if k != "receipts"} == expected["body"]
        assert [r["deltaId"] for r in body["receipts"]] == [d["deltaId"] for d in raw["deltas"]]
    elif expected["status"] == 503:
        # Ours: the message names the table; the code and the status are the original's.
        assert body["code"] == expected["body"]["code"]
        assert body["error"].startswith("Buffer backpressure exceeded (")
        assert api.items() == before
    else:
        assert body == expected["body"]
        assert api.items() == before


# -- bad input: documented 4xx, nothing written --------------------------------------------------------------------


def _rejected(api, event, status, error=None, code="VALIDATION_ERROR"):
    before = api.items()
    reply = api.call(push_fn, event)
    body = reply.json()
    assert reply.status == status, body
    assert body["code"] == code
    if error is not None:
        assert body["error"] == error
    assert api.items() == before == EMPTY
    return body


@pytest.mark.parametrize(
    ("raw", "error"),
    [
        ("{", "Invalid JSON body"),
        ("", "Invalid JSON body"),
        ('{"clientId": "client-a", "deltas": [NaN]}', "Invalid JSON body"),
        ("[1, 2]", "Missing required fields: clientId, deltas"),
        ('{"clientId": "client-a", "deltas": {}}', "Missing required fields: clientId, deltas"),
        ('{"clientId": null, "deltas": []}', "Missing required fields: clientId, deltas"),
        ('{"clientId": 0, "deltas": []}', "Missing required fields: clientId, deltas"),
    ],
    ids=["truncated", "empty", "nan", "array", "deltas-object", "null-client", "zero-client"],
)
def test_push_malformed_json_is_400(api, raw, error):
    _rejected(api, api.event("push_json", body=raw), 400, error)


@pytest.mark.parametrize(
    ("mutate", "field"),
    [
        (lambda d: d.update(hlc=65536000000), "hlc"),
        (lambda d: d.update(op="UPSERT"), "op"),
        (lambda d: d.update(columns="title"), "columns"),
        (lambda d: d.pop("rowId"), "rowId"),
        (lambda d: d["columns"].append({"column": 5, "value": 1}), "column"),
    ],
    ids=["hlc-number", "bad-op", "columns-string", "no-rowId", "column-name-number"],
)
def test_push_wrong_types_are_400_naming_the_field(api, mutate, field):
    # Given a push whose only delta has a field of the wrong type
    delta = _delta().to_json()
    mutate(delta)
    # When pushed, Then 400 names the delta's field
    body = _rejected(api, api.event("push_json", body={"clientId": "client-a", "deltas": [delta]}), 400)
    assert "deltas[0]" in body["error"] and field in body["error"]


def test_push_malformed_protobuf_is_400(api):
    event = api.event("push_protobuf", body=b"\x0a\xff\xff\xff\xff\x0f garbage")
    _rejected(api, event, 400, "Failed to decode SyncPush")


def test_push_protobuf_without_client_id_is_400(api):
    data = encode_sync_push(SyncPush("", (_delta(),)))
    _rejected(api, api.event("push_protobuf", body=data), 400, "Missing required fields: clientId, deltas")


def test_push_content_length_over_limit_is_413_before_reading(api):
    event = api.event("push_json", headers={"content-length": str(1024 * 1024 + 1)})
    _rejected(api, event, 413, "Payload too large (max 1 MiB)")


def test_push_body_over_limit_is_413_even_without_content_length(api):
    filler = "x" * (1024 * 1024)
    event = api.event(
        "push_json", body={"clientId": "client-a", "deltas": [], "pad": filler}, headers={"content-length": None}
    )
    _rejected(api, event, 413, "Payload too large (max 1 MiB)")


def test_push_binary_body_over_limit_is_413(api):
    event = api.event("push_protobuf", body=b"\x00" * (1024 * 1024 + 10), headers={"content-length": None})
    _rejected(api, event, 413, "Payload too large (max 1 MiB)")


def test_push_invalid_base64_is_400(api):
    event = api.event("push_protobuf")
    event["body"] = "not*base64!"
    _rejected(api, event, 400, "Invalid base64 body")


def test_push_configured_body_limit_is_named_in_the_message(api, monkeypatch):
    monkeypatch.setenv("LAKESYNC_MAX_BODY_BYTES", "100")
    _rejected(api, api.event("push_json"), 413, "Payload too large (max 100 bytes)")


def test_push_10001_deltas_is_400_before_any_delta_is_parsed(api):
    # Given 10,001 placeholder deltas (the count is checked before the deltas' shape)
    body = {"clientId": "client-a", "deltas": [0] * 10_001}
    _rejected(api, api.event("push_json", body=body), 400, "Too many deltas in a single push (max 10,000)")


def test_push_10001_real_deltas_is_400(api, monkeypatch):
    monkeypatch.setenv("LAKESYNC_MAX_BODY_BYTES", str(MAX_BODY_BYTES_LIMIT))  # the most a Lambda event carries
    deltas = [_delta(f"r{i}") for i in range(10_001)]
    _rejected(api, api.event("push_json", body=_body(*deltas)), 400, "Too many deltas in a single push (max 10,000)")


def test_push_10000_deltas_is_within_the_limit(api, monkeypatch):
    # Given exactly 10,000 (duplicate) deltas, When pushed, Then they pass the count check
    monkeypatch.setenv("LAKESYNC_MAX_BODY_BYTES", str(MAX_BODY_BYTES_LIMIT))  # the most a Lambda event carries
    reply = api.call(push_fn, api.event("push_json", body=_body(*[_delta()] * 10_000)))
    assert reply.status == 200
    assert reply.json()["accepted"] == 10_000
    assert api.items()["deltas"] == 1


def test_push_spoofed_body_client_id_is_403(api):
    event = api.event("push_json", token=api.token("mallory"))
    _rejected(api, event, 403, "Client ID mismatch: push clientId does not match authenticated identity", "FORBIDDEN")


def test_push_spoofed_delta_client_id_is_403(api):
    # Given a body in the caller's name carrying a delta in someone else's name
    body = _body(_delta("row-1"), _delta("row-2", client="victim"))
    _rejected(
        api,
        api.event("push_json", body=body),
        403,
        "Client ID mismatch: delta clientId does not match authenticated identity",
        "FORBIDDEN",
    )


def test_push_admin_may_push_deltas_of_other_clients(api):
    # Given an admin (a connector or a backfill) pushing a client's delta
    body = _body(_delta(client="victim"), client="ops")
    # When pushed, Then it is accepted as trusted
    reply = api.call(push_fn, api.event("push_json", token=api.admin_token("ops"), body=body))
    assert reply.status == 200
    assert reply.json()["deltas"][0]["clientId"] == "victim"


@pytest.mark.parametrize("table", ["1todos", "to-dos", "x" * 65, "todos;drop", "tödös"])
def test_push_invalid_table_name_is_422(api, table):
    body = _body(_delta("row-1"), _delta("row-2", table=table))
    error = _rejected(api, api.event("push_json", body=body), 422, code="SCHEMA_ERROR")["error"]
    assert error.startswith(f'Invalid SQL identifier: "{table}"')


def test_push_clock_drift_is_409_and_writes_nothing(api):
    future = _delta("row-2", ms=4_000_000_000_000)
    _rejected(api, api.event("push_json", body=_body(_delta(), future)), 409, code="CLOCK_DRIFT")


def test_push_oversized_row_is_413(api):
    big = update("r", hlc=encode(1, 0), client="client-a", a="x" * 200_000)
    _rejected(api, api.event("push_json", body=_body(big)), 413)


# -- property: random JSON never makes the handler fail -----------------------------------------------------------

_json = st.recursive(
    st.none() | st.booleans() | st.integers() | st.floats(allow_nan=False, allow_infinity=False) | st.text(),
    lambda inner: st.lists(inner, max_size=4) | st.dictionaries(st.text(max_size=8), inner, max_size=4),
    max_leaves=12,
)
_delta_like = st.fixed_dictionaries(
    {},
    optional={
        "op": st.sampled_from(["INSERT", "UPDATE", "DELETE", "", 1]),
        "table": st.sampled_from(["todos", "", "1x", None]) | st.text(max_size=5),
        "rowId": st.text(max_size=5) | _json,
        "clientId": st.just("client-a") | _json,
        "columns": st.lists(st.fixed_dictionaries({"column": st.text(max_size=4), "value": _json}), max_size=3) | _json,
        "hlc": st.integers(0, 2**70).map(str) | _json,
        "deltaId": st.text(max_size=6) | _json,
    },
)
_valid_delta = st.builds(
    lambda op, table, row, columns, ms, client: delta(
        op, row, hlc=encode(ms, 0), table=table, client=client, columns=columns
    ).to_json(),
    op=st.sampled_from(["INSERT", "UPDATE", "DELETE"]),
    table=st.sampled_from(["todos", "notes", "1bad", "x" * 65, "a-b"]),
    row=st.text(min_size=1, max_size=6),
    columns=st.dictionaries(st.text(min_size=1, max_size=5), _json, max_size=3),
    ms=st.sampled_from([MS, 4_000_000_000_000]) | st.integers(0, 2**47),
    client=st.sampled_from(["client-a", "client-a", "someone-else"]),
)
_push_like = st.fixed_dictionaries(
    {
        "clientId": st.just("client-a") | _json,
        "deltas": st.lists(_valid_delta | _delta_like | _json, max_size=4) | _json,
    },
    optional={"lastSeenHlc": _json},
)


_mostly_valid_push = st.fixed_dictionaries(
    {"clientId": st.just("client-a"), "deltas": st.lists(_valid_delta, min_size=1, max_size=4)}
)


@settings(max_examples=150, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(body=st.one_of(_mostly_valid_push, _push_like, _json))
def test_push_random_json_never_yields_a_5xx(api, body):
    reply = api.call(push_fn, api.event("push_json", body=body))
    event(f"status {reply.status}")
    assert reply.status < 500, reply.body
    assert set(reply.json()) >= ({"error", "code"} if reply.status >= 400 else {"accepted", "serverHlc"})


def test_push_losing_delta_is_omitted_and_its_receipt_names_the_winner(api):
    # Given a newer write to row-1's title
    newer = _delta("row-1", ms=MS + 500)
    assert api.call(push_fn, api.event("push_json", body=_body(newer))).status == 200
    before = api.items()["deltas"]
    # When an older write to the same column arrives from another client (an admin pushing on its behalf)
    older = update("row-1", hlc=encode(MS, 0), client="b", title="x")
    reply = api.call(push_fn, api.event("push_json", token=api.admin_token("b"), body=_body(older, client="b")))
    body = reply.json()
    # Then (ours) it changes nothing: no effective delta, no log entry, and the receipt names the winner
    # (the original appends the merged winner again and returns it)
    assert reply.status == 200 and body["accepted"] == 1 and body["deltas"] == []
    assert body["receipts"][0]["columns"] == [
        {"column": "title", "applied": False, "winnerHlc": str(newer.hlc), "winnerClientId": "client-a"}
    ]
    assert api.items()["deltas"] == before


# -- hardening (issue 11, part 7): every bad input is a 4xx before anything is written ------------------------------


def _pb_body(*deltas: Any, client: str = "client-a") -> bytes:
    return encode_sync_push(SyncPush(client, tuple(deltas)))


def _raw_delta(**fields: Any) -> dict[str, Any]:
    delta = _delta().to_json()
    delta.update(fields)
    return delta


@pytest.mark.parametrize(
    ("mutate", "field"),
    [
        (lambda d: d.update(rowId="row-\ud800"), "deltas[0].rowId"),
        (lambda d: d.update(table="todos\udfff"), "deltas[0].table"),
        (lambda d: d.update(deltaId="\ud800" + d["deltaId"]), "deltas[0].deltaId"),
        (lambda d: d["columns"].append({"column": "ti\udc00tle", "value": 1}), "deltas[0].columns[1].column"),
        (lambda d: d["columns"].append({"column": "tags", "value": ["ok", {"k": "v\ud800"}]}), "deltas[0].columns[1]"),
        (lambda d: d["columns"].append({"column": "meta", "value": {"\ud83d": 1}}), "deltas[0].columns[1]"),
    ],
    ids=["rowId", "table", "deltaId", "column-name", "nested-value", "nested-key"],
)
def test_push_lone_surrogate_in_any_text_is_400_at_once_and_writes_nothing(api, mutate, field):
    # Given a delta with a lone surrogate (valid JSON escape, but not Unicode text) in one of its strings
    delta = _delta().to_json()
    mutate(delta)
    # When pushed, Then it is refused by validation (before: DynamoDB refused every commit and the push stalled for
    # 60 retries), naming the field, and nothing is written
    body = _rejected(api, api.event("push_json", body={"clientId": "client-a", "deltas": [delta]}), 400)
    assert body["error"].startswith(field) and "not valid UTF-8" in body["error"]


def test_push_lone_surrogate_client_id_of_an_admin_push_is_400(api):
    body = {"clientId": "ops", "deltas": [_raw_delta(clientId="a\ud800")]}
    error = _rejected(api, api.event("push_json", token=api.admin_token("ops"), body=body), 400)["error"]
    assert error.startswith("deltas[0].clientId is not valid UTF-8")


def test_push_protobuf_lone_surrogate_in_a_value_is_400(api):
    # Given a protobuf push whose value bytes hold the JSON escape of a lone surrogate
    delta = update("r", hlc=encode(MS, 0), client="client-a")
    delta = replace(delta, columns=(ColumnDelta("title", "x\ud800"),))
    # When pushed, Then the same check refuses it
    error = _rejected(api, api.event("push_protobuf", body=_pb_body(delta)), 400)["error"]
    assert error.startswith("deltas[0].columns[0].value is not valid UTF-8")


def test_push_whose_later_chunk_would_outgrow_a_row_writes_nothing(api):
    # Given a push of two chunks (48 deltas each): the first harmless, the second growing one row past the row limit
    first = [_delta(f"r{i}") for i in range(48)]
    grow = [update("big", hlc=encode(MS + i, 0), client="client-a", **{f"c{i}": "x" * 60_000}) for i in range(2)]
    # When pushed, Then it is refused with 422 before the first chunk is committed (before: the first chunk stayed)
    body = _rejected(api, api.event("push_json", body=_body(*first, *grow)), 422, code="SCHEMA_ERROR")
    assert body["error"].startswith("Row todos:big would grow to ")


def test_push_whose_later_shard_would_outgrow_a_row_writes_nothing(api):
    # Given a row already near the limit, and a push of two shards (tables) whose second grows it past the limit
    seed = insert("big", hlc=encode(MS, 0), client="client-a", a="x" * 60_000)
    assert api.call(push_fn, api.event("push_json", body=_body(seed))).status == 200
    before = api.items()
    other = _delta("n1", table="notes")
    grow = update("big", hlc=encode(MS + 1, 0), client="client-a", b="y" * 60_000)
    # When pushed, Then 422 and the other shard's chunk is not committed either
    reply = api.call(push_fn, api.event("push_json", body=_body(other, grow)))
    assert (reply.status, reply.json()["code"]) == (422, "SCHEMA_ERROR")
    assert api.items() == before


@pytest.mark.parametrize("length", [257, 2_100])
def test_push_over_long_delta_id_is_400_and_writes_nothing(api, length):
    # Given a deltaId longer than 256 bytes (before: 2,100 characters committed the delta, then its record got 500)
    delta = _raw_delta(deltaId="d" * length)
    # When pushed as JSON or as protobuf, Then 400 names the field and nothing is written
    error = _rejected(api, api.event("push_json", body={"clientId": "client-a", "deltas": [delta]}), 400)["error"]
    assert error == f"deltas[0].deltaId is {length:,} bytes; the limit is 256"
    pb = replace(_delta(), delta_id="d" * length)
    assert _rejected(api, api.event("push_protobuf", body=_pb_body(pb)), 400)["error"] == error


def test_push_delta_id_of_256_bytes_is_accepted(api):
    reply = api.call(
        push_fn, api.event("push_json", body={"clientId": "client-a", "deltas": [_raw_delta(deltaId="é" * 128)]})
    )
    assert reply.status == 200 and reply.json()["receipts"][0]["duplicate"] is False


def test_push_row_id_beyond_the_key_limit_is_400_and_writes_nothing(api):
    # Given a rowId that makes the row key "default#todos#<rowId>" one byte longer than DynamoDB's 2,048
    longest = 2048 - len("default#todos#")
    # When pushed, Then 400 (before: 500 from DynamoDB), and the longest admissible rowId is stored
    error = _rejected(api, api.event("push_json", body=_body(_delta("r" * (longest + 1)))), 400)["error"]
    assert (
        error
        == "deltas[0].rowId is too long: the row's key (gateway#table#rowId) would be 2,049 bytes; the limit is 2,048"
    )
    assert api.call(push_fn, api.event("push_json", body=_body(_delta("r" * longest)))).status == 200
    assert api.items()["rows"] == 1


def test_push_row_state_beyond_an_item_is_422_and_writes_nothing(api):
    # Given 3 deltas x 3,000 small columns from one client: the values fit the row limit, but the row's stored state
    # (every value with its HLC and clientId) would exceed DynamoDB's 400 KB item
    client = "connector-" + "x" * 90
    deltas = [
        update("wide", hlc=encode(MS + d, 0), client=client, **{f"c{d}_{i}": 0 for i in range(3_000)}) for d in range(3)
    ]
    event = api.event("push_json", token=api.admin_token("ops"), body=_body(*deltas, client="ops"))
    # When pushed, Then 422 (before: 500) and nothing is written
    body = _rejected(api, event, 422, code="SCHEMA_ERROR")
    assert body["error"].startswith("Row todos:wide would be stored as ")
    assert body["error"].endswith("columns with their versions); the limit of an item is 400,000")


@pytest.mark.parametrize(
    ("hlc", "error"),
    [
        ("9" * 5_000, "deltas[0].hlc must be a decimal string of at most 20 digits"),
        (" 123 ", "deltas[0].hlc must be a decimal string"),
        ("123 ", "deltas[0].hlc must be a decimal string"),
        ("18446744073709551616", "deltas[0].hlc is out of range for a 64-bit HLC"),
    ],
    ids=["5000-digits", "spaces", "trailing-space", "beyond-64-bits"],
)
def test_push_malformed_hlc_string_is_400(api, hlc, error):
    _rejected(api, api.event("push_json", body={"clientId": "client-a", "deltas": [_raw_delta(hlc=hlc)]}), 400, error)


@pytest.mark.parametrize(
    ("field", "error"),
    [
        ("delta_id", "deltas[0].deltaId must be a non-empty string"),
        ("row_id", "deltas[0].rowId must be a non-empty string"),
        ("table", "deltas[0].table must be a non-empty string"),
    ],
)
@pytest.mark.parametrize("encoding", ["json", "protobuf"])
def test_push_empty_identifier_is_400_in_either_encoding(api, field, error, encoding):
    # Given a delta with an empty identifier (the proto3 default of an unset string)
    delta = replace(_delta(), **{field: ""})
    # When pushed as JSON or protobuf, Then one validation refuses both alike and nothing is written
    if encoding == "json":
        event = api.event("push_json", body={"clientId": "client-a", "deltas": [delta.to_json()]})
    else:
        event = api.event("push_protobuf", body=_pb_body(delta))
    _rejected(api, event, 400, error)


def test_push_admin_protobuf_delta_without_client_id_is_400(api):
    delta = replace(_delta(), client_id="")
    event = api.event("push_protobuf", token=api.admin_token("ops"), body=_pb_body(delta, client="ops"))
    _rejected(api, event, 400, "deltas[0].clientId must be a non-empty string")


def test_push_protobuf_deltas_without_delta_ids_are_never_dropped_as_duplicates(api):
    # Given two protobuf pushes of different deltas, neither with a deltaId (before: the first was accepted and the
    # second dropped as its duplicate -- lost data)
    for row in ("r1", "r2"):
        event = api.event("push_protobuf", body=_pb_body(replace(_delta(row), delta_id="")))
        # When pushed, Then each is refused and nothing is written
        _rejected(api, event, 400, "deltas[0].deltaId must be a non-empty string")


def test_push_another_clients_delta_id_does_not_make_a_delta_vanish(api):
    # Given client-b sending, in its own name, a delta carrying the deltaId client-a is about to use
    victim = _delta("victim-row")
    squatter = replace(_delta("b-row", client="client-b"), delta_id=victim.delta_id)
    reply = api.call(
        push_fn, api.event("push_json", token=api.token("client-b"), body=_body(squatter, client="client-b"))
    )
    assert reply.status == 200
    # When client-a pushes its delta
    reply = api.call(push_fn, api.event("push_json", body=_body(victim)))
    # Then it is applied and stored, not acknowledged as a duplicate (before: it vanished)
    body = reply.json()
    assert reply.status == 200 and body["receipts"][0]["duplicate"] is False
    assert [d["rowId"] for d in body["deltas"]] == ["victim-row"]
    assert api.items()["rows"] == 2
    # And client-a re-sending it is still a duplicate
    again = api.call(push_fn, api.event("push_json", body=_body(victim))).json()
    assert again["receipts"][0]["duplicate"] is True
