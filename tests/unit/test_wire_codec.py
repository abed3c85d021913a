"""Protobuf codec: byte-exact against proto_wire.json on both the dict and the typed path, the codec rules of
reference §11.1, field-naming validation on encode, and decoders that only ever raise CodecError (hypothesis fuzz)."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from lakesync import wire
from lakesync.core.canonical import js_stringify
from lakesync.core.delta import ColumnDelta, DeltaOp, RowDelta
from lakesync.core.errors import CodecError, ValidationError
from lakesync.core.messages import SyncPull, SyncPush, SyncResponse
from lakesync.wire import framing

VECTORS = Path(__file__).parent.parent / "vectors"
PROTO = json.loads((VECTORS / "proto_wire.json").read_text(encoding="utf-8"))
CASES = PROTO["cases"]
DECODE_CASES = PROTO["decode_cases"]
FRAMED_PREFIX = "framed:TAG_SYNC_PUSH+"
TYPED_MESSAGES = ("RowDelta", "SyncPush", "SyncPull", "SyncResponse")


def _row(obj: dict[str, Any]) -> RowDelta:
    """A domain RowDelta from a vector's JSON shape without from_json's non-empty checks (vectors hold '')."""
    return RowDelta(
        op=DeltaOp(obj["op"]),
        table=obj["table"],
        row_id=obj["rowId"],
        client_id=obj["clientId"],
        columns=tuple(ColumnDelta(c["column"], c["value"]) for c in obj["columns"]),
        hlc=int(obj["hlc"]),
        delta_id=obj["deltaId"],
    )


def _domain(message: str, obj: dict[str, Any]) -> Any:
    if message == "RowDelta":
        return _row(obj)
    if message == "SyncPush":
        return SyncPush(obj["clientId"], tuple(_row(d) for d in obj["deltas"]), int(obj["lastSeenHlc"]))
    if message == "SyncPull":
        return SyncPull(obj["clientId"], int(obj["sinceHlc"]), obj["maxDeltas"])
    return SyncResponse(tuple(_row(d) for d in obj["deltas"]), int(obj["serverHlc"]), obj["hasMore"])


TYPED_ENCODERS = {
    "RowDelta": wire.encode_row_delta,
    "SyncPush": wire.encode_sync_push,
    "SyncPull": wire.encode_sync_pull,
    "SyncResponse": wire.encode_sync_response,
}
TYPED_DECODERS = {
    "RowDelta": wire.decode_row_delta,
    "SyncPush": wire.decode_sync_push,
    "SyncPull": wire.decode_sync_pull,
    "SyncResponse": wire.decode_sync_response,
}


def _message_and_bytes(case: dict[str, Any]) -> tuple[str, bytes]:
    """The message name and the unframed protobuf bytes of a vector case."""
    data = bytes.fromhex(case["hex"])
    message = case["message"]
    if message.startswith(FRAMED_PREFIX):
        tag, payload = framing.decode_frame(data)
        assert tag == framing.TAG_SYNC_PUSH
        return message.removeprefix(FRAMED_PREFIX), payload
    return message, data


# -- vectors --------------------------------------------------------------------------------------------------------


@pytest.mark.parametrize("case", CASES, ids=[c["name"] for c in CASES])
def test_encode_vector_is_byte_exact(case):
    message, payload = _message_and_bytes(case)
    encoded = wire.encode(message, case["input"])
    if case["message"].startswith(FRAMED_PREFIX):
        encoded = framing.encode_frame(framing.TAG_SYNC_PUSH, encoded)
    assert encoded.hex() == case["hex"]
    assert payload == wire.encode(message, case["input"])


@pytest.mark.parametrize("case", CASES, ids=[c["name"] for c in CASES])
def test_decode_vector_round_trips_to_the_same_json(case):
    message, payload = _message_and_bytes(case)
    assert wire.decode(message, payload) == case["input"]


@pytest.mark.parametrize(
    "case",
    [c for c in CASES if _message_and_bytes(c)[0] in TYPED_MESSAGES],
    ids=[c["name"] for c in CASES if _message_and_bytes(c)[0] in TYPED_MESSAGES],
)
def test_typed_codec_vector_is_byte_exact_and_round_trips(case):
    message, payload = _message_and_bytes(case)
    domain = _domain(message, case["input"])
    assert TYPED_ENCODERS[message](domain) == payload
    decoded = TYPED_DECODERS[message](payload)
    assert decoded == domain
    assert decoded.to_json() == case["input"]


def test_row_delta_vector_column_bytes_are_js_stringify():
    case = next(c for c in CASES if "column_value_json" in c)
    for col, expected in zip(case["input"]["columns"], case["column_value_json"], strict=True):
        assert js_stringify(col["value"]) == expected
        # The value bytes sit verbatim inside the message.
        assert expected.encode("utf-8") in bytes.fromhex(case["hex"])


def _decode_case(name: str, data: bytes) -> Any:
    """Dispatch a decode_cases entry by its ``decodeX:`` prefix."""
    function = name.split(":", 1)[0]
    if function == "decodeBroadcastFrame":
        return framing.decode_broadcast_frame(data).to_json()
    message = function.removeprefix("decode")
    typed = TYPED_DECODERS[message](data).to_json()
    assert wire.decode(message, data) == typed
    return typed


@pytest.mark.parametrize("case", DECODE_CASES, ids=[c["name"] for c in DECODE_CASES])
def test_decode_case_behaves_as_the_original(case):
    data = bytes.fromhex(case["hex"])
    expected = case["expected"]
    if expected["ok"]:
        assert _decode_case(case["name"], data) == expected["value"]
    else:
        with pytest.raises(CodecError) as info:
            _decode_case(case["name"], data)
        assert info.value.message == expected["message"]
        assert info.value.code == "CODEC_ERROR"


# -- codec rules ----------------------------------------------------------------------------------------------------


def _varint(n: int) -> bytes:
    out = bytearray()
    while True:
        byte = n & 0x7F
        n >>= 7
        if n:
            out.append(byte | 0x80)
        else:
            out.append(byte)
            return bytes(out)


def _ld(field: int, payload: bytes) -> bytes:
    """A length-delimited protobuf field (wire type 2)."""
    return _varint(field << 3 | 2) + _varint(len(payload)) + payload


def _row_with_value(value_bytes: bytes, op: int = 1) -> bytes:
    """RowDelta bytes with one column whose value bytes are given raw."""
    return _varint(1 << 3) + _varint(op) + _ld(2, b"t") + _ld(4, _ld(1, b"c") + _ld(2, value_bytes))


def test_decode_empty_input_gives_defaults_for_every_message_without_json_fields():
    for message in ("SyncPush", "SyncPull", "SyncResponse", "ActionPush", "ActionResponse", "ActionErrorMsg"):
        decoded = wire.decode(message, b"")
        assert decoded, message
        assert all(v in ("", "0", 0, False, []) for v in decoded.values()), (message, decoded)
    assert wire.decode_sync_response(b"") == SyncResponse(deltas=(), server_hlc=0, has_more=False)


@pytest.mark.parametrize("op", [0, 4, 9, 127])
def test_decode_rejects_unspecified_or_unknown_op(op):
    data = _row_with_value(b"1", op=op)
    with pytest.raises(CodecError, match=r"^Failed to decode RowDelta$"):
        wire.decode_row_delta(data)
    with pytest.raises(CodecError, match=r"^Failed to decode RowDelta$"):
        wire.decode("RowDelta", data)
    with pytest.raises(CodecError, match=r"^Failed to decode SyncResponse$"):
        wire.decode_sync_response(_ld(1, data))


@pytest.mark.parametrize(
    "value_bytes",
    [b"\xff\xfe", b"\xc3", b"", b"{", b"NaN", b"Infinity", b"-Infinity", b"1e999", b"1" * 400, b"[1,]", b"'x'"],
    ids=[
        "invalid-utf8",
        "truncated-utf8",
        "empty",
        "open-brace",
        "nan",
        "inf",
        "neg-inf",
        "overflow",
        "huge-int",
        "trailing-comma",
        "single-quotes",
    ],
)
def test_decode_rejects_value_bytes_that_are_not_strict_utf8_json(value_bytes):
    data = _row_with_value(value_bytes)
    with pytest.raises(CodecError, match=r"^Failed to decode RowDelta$"):
        wire.decode_row_delta(data)
    with pytest.raises(CodecError, match=r"^Failed to decode SyncPush$"):
        wire.decode_sync_push(_ld(2, data))
    with pytest.raises(CodecError, match=r"^Failed to decode RowDelta$"):
        wire.decode("RowDelta", data)


def test_decode_rejects_values_nested_deeper_than_the_json_limit_but_accepts_the_limit():
    ok = b"[" * 64 + b"]" * 64
    assert wire.decode_row_delta(_row_with_value(ok)).columns[0].value is not None
    for too_deep in (b"[" * 66 + b"]" * 66, b"[" * 5000 + b"]" * 5000):
        with pytest.raises(CodecError):
            wire.decode_row_delta(_row_with_value(too_deep))


def test_decode_reads_integers_beyond_2_53_as_the_double_javascript_sees_but_keeps_them_ints():
    exact = 2**53 + 1
    value = wire.decode_row_delta(_row_with_value(str(exact).encode())).columns[0].value
    assert type(value) is int
    assert value == float(exact)
    assert value != exact
    small = wire.decode_row_delta(_row_with_value(str(2**53).encode())).columns[0].value
    assert small == 2**53
    assert type(small) is int


def test_decode_drops_a_leading_byte_order_mark_like_textdecoder():
    assert wire.decode_row_delta(_row_with_value(b"\xef\xbb\xbf[1]")).columns[0].value == [1]


def test_decode_rejects_invalid_utf8_in_string_fields():
    data = _varint(1 << 3) + _varint(1) + _ld(2, b"\xff")
    with pytest.raises(CodecError, match=r"^Failed to decode RowDelta$"):
        wire.decode_row_delta(data)


@pytest.mark.parametrize("data", [b"\x0a", b"\x0a\x05ab", b"\xff\xff\xff\xff\xff\xff\xff\xff\xff\xff\x01", b"\x07"])
def test_decode_rejects_truncated_or_malformed_protobuf(data):
    for message in ("SyncPush", "SyncPull", "SyncResponse", "ActionPush"):
        with pytest.raises(CodecError, match=rf"^Failed to decode {message}$"):
            wire.decode(message, data)


def test_decode_rejects_non_bytes_input_with_codec_error():
    with pytest.raises(CodecError):
        wire.decode_sync_pull("0a0163")  # type: ignore[arg-type]
    with pytest.raises(CodecError):
        wire.decode("SyncPull", None)  # type: ignore[arg-type]


def test_decode_accepts_bytearray_and_memoryview():
    data = wire.encode_sync_pull(SyncPull("c", 5, 10))
    assert wire.decode_sync_pull(bytearray(data)) == wire.decode_sync_pull(memoryview(data)) == SyncPull("c", 5, 10)


def test_action_idempotency_key_empty_means_absent():
    action = {
        "actionId": "a1",
        "clientId": "c1",
        "hlc": "1",
        "connector": "slack",
        "actionType": "send",
        "params": {"text": "hello"},
    }
    without = wire.encode("Action", action)
    assert wire.decode("Action", without) == action
    assert wire.encode("Action", {**action, "idempotencyKey": ""}) == without
    assert wire.encode("Action", {**action, "idempotencyKey": None}) == without
    keyed = {**action, "idempotencyKey": "idem-123"}
    assert wire.decode("Action", wire.encode("Action", keyed)) == keyed


def test_action_push_round_trips_params_in_insertion_order():
    push = {
        "clientId": "c1",
        "actions": [
            {
                "actionId": "a1",
                "clientId": "c1",
                "hlc": "1",
                "connector": "gh",
                "actionType": "pr",
                "params": {"title": "Fix", "branch": "fix/1"},
            },
            {
                "actionId": "a2",
                "clientId": "c1",
                "hlc": "2",
                "connector": "slack",
                "actionType": "send",
                "params": {},
                "idempotencyKey": "k",
            },
        ],
    }
    data = wire.encode("ActionPush", push)
    assert b'{"title":"Fix","branch":"fix/1"}' in data
    assert wire.decode("ActionPush", data) == push


@pytest.mark.parametrize(
    ("result", "member"),
    [
        ({"actionId": "a", "data": {"x": 1}, "serverHlc": "5"}, "success"),
        ({"actionId": "a", "data": None, "serverHlc": "5"}, "success"),
        ({"actionId": "a", "data": {"x": 1}}, "error"),
        ({"actionId": "a", "serverHlc": "5", "code": "E", "message": "m", "retryable": True}, "error"),
        ({"actionId": "a", "code": "E", "message": "m", "retryable": False}, "error"),
    ],
    ids=["data+serverHlc", "null data", "data only", "serverHlc only", "error fields"],
)
def test_action_response_entry_is_success_iff_data_and_server_hlc(result, member):
    data = wire.encode("ActionResponse", {"results": [result], "serverHlc": "9"})
    decoded = wire.decode("ActionResponse", data)["results"][0]
    if member == "success":
        assert decoded == {"actionId": "a", "data": result["data"], "serverHlc": result["serverHlc"]}
    else:
        assert set(decoded) == {"actionId", "code", "message", "retryable"}
        assert decoded["code"] == result.get("code", "")


def test_action_response_entry_with_no_member_fails_to_decode():
    data = _ld(1, b"")  # one ActionResponseEntry with neither success nor error
    with pytest.raises(CodecError, match=r"^Failed to decode ActionResponse$"):
        wire.decode("ActionResponse", data)


def test_message_names_cover_the_proto_and_unknown_names_are_programming_errors():
    assert set(wire.MESSAGE_NAMES) >= {
        "ColumnDelta",
        "RowDelta",
        "SyncPush",
        "SyncPull",
        "SyncResponse",
        "Action",
        "ActionPush",
        "ActionResultMsg",
        "ActionErrorMsg",
        "ActionResponseEntry",
        "ActionResponse",
    }
    with pytest.raises(ValueError, match="unknown wire message"):
        wire.encode("Nope", {})
    with pytest.raises(ValueError, match="unknown wire message"):
        wire.decode("Nope", b"")


def test_decode_returns_plain_json_types_only():
    case = next(c for c in CASES if c["message"] == "ActionResponse")
    decoded = wire.decode("ActionResponse", bytes.fromhex(case["hex"]))
    assert json.loads(json.dumps(decoded)) == decoded


def test_encode_is_deterministic_and_independent_of_input_key_order():
    case = next(c for c in CASES if c["message"] == "RowDelta")
    shuffled = dict(reversed(list(case["input"].items())))
    assert wire.encode("RowDelta", shuffled) == wire.encode("RowDelta", case["input"])


def test_encode_accepts_int_hlcs_as_revived_by_jsonapi():
    case = next(c for c in CASES if c["message"] == "SyncResponse")
    revived = wire.jsonapi.revive(case["input"])
    assert isinstance(revived["serverHlc"], int)
    assert wire.encode("SyncResponse", revived).hex() == case["hex"]


def test_sync_pull_extremes_round_trip():
    for pull in (SyncPull("", 0, 0), SyncPull("c", (1 << 64) - 1, (1 << 32) - 1)):
        assert wire.decode_sync_pull(wire.encode_sync_pull(pull)) == pull


# -- encode validation ----------------------------------------------------------------------------------------------

GOOD_ROW = CASES[0]["input"]


@pytest.mark.parametrize(
    ("message", "obj", "field"),
    [
        ("RowDelta", [], "RowDelta must be an object"),
        ("RowDelta", {**GOOD_ROW, "op": "UPSERT"}, "RowDelta.op"),
        ("RowDelta", {k: v for k, v in GOOD_ROW.items() if k != "op"}, "RowDelta.op is required"),
        ("RowDelta", {**GOOD_ROW, "table": 5}, "RowDelta.table must be a string"),
        ("RowDelta", {**GOOD_ROW, "rowId": "\ud800"}, "RowDelta.rowId must be valid Unicode"),
        ("RowDelta", {**GOOD_ROW, "hlc": "-1"}, "RowDelta.hlc"),
        ("RowDelta", {**GOOD_ROW, "hlc": 1 << 64}, "RowDelta.hlc"),
        ("RowDelta", {**GOOD_ROW, "hlc": True}, "RowDelta.hlc"),
        ("RowDelta", {**GOOD_ROW, "columns": {}}, "RowDelta.columns must be an array"),
        ("RowDelta", {**GOOD_ROW, "columns": [{"column": "a"}]}, "RowDelta.columns[0].value is required"),
        ("RowDelta", {**GOOD_ROW, "columns": [{"column": "a", "value": float("nan")}]}, "RowDelta.columns[0].value"),
        ("RowDelta", {**GOOD_ROW, "columns": [{"column": "a", "value": 10**400}]}, "RowDelta.columns[0].value"),
        ("RowDelta", {**GOOD_ROW, "columns": [{"column": "a", "value": {1: 2}}]}, "RowDelta.columns[0].value"),
        ("RowDelta", {**GOOD_ROW, "columns": [{"column": "a", "value": {1, 2}}]}, "RowDelta.columns[0].value"),
        ("SyncPull", {"clientId": "c", "sinceHlc": "0", "maxDeltas": -1}, "SyncPull.maxDeltas"),
        ("SyncPull", {"clientId": "c", "sinceHlc": "0", "maxDeltas": 1 << 32}, "SyncPull.maxDeltas"),
        ("SyncPull", {"clientId": "c", "sinceHlc": "0", "maxDeltas": 1.0}, "SyncPull.maxDeltas"),
        ("SyncResponse", {"deltas": [], "serverHlc": "1", "hasMore": 1}, "SyncResponse.hasMore must be a boolean"),
        ("SyncPush", {"clientId": "c", "deltas": [{**GOOD_ROW, "deltaId": None}]}, "SyncPush.deltas[0].deltaId"),
        ("Action", {"actionId": "a"}, "Action.params is required"),
    ],
)
def test_encode_rejects_bad_fields_naming_them(message, obj, field):
    with pytest.raises(ValidationError) as info:
        wire.encode(message, obj)
    assert field in info.value.message


def test_encode_rejects_values_nested_beyond_the_limit():
    deep: Any = 1
    for _ in range(70):
        deep = [deep]
    with pytest.raises(ValidationError, match="nested too deeply"):
        wire.encode("ColumnDelta", {"column": "a", "value": deep})


def test_encode_rejects_self_referencing_values_instead_of_looping():
    loop: list[Any] = []
    loop.append(loop)
    via_tuple: tuple[list[Any]] = ([],)
    via_tuple[0].append(via_tuple)
    for value in (loop, via_tuple):
        with pytest.raises(ValidationError, match="nested too deeply"):
            wire.encode("ColumnDelta", {"column": "a", "value": value})


def test_lone_surrogates_inside_json_values_are_escaped_and_round_trip():
    value = {"k\udc00": "x\ud800y"}
    data = wire.encode("ColumnDelta", {"column": "a", "value": value})
    assert b'{"k\\udc00":"x\\ud800y"}' in data
    assert wire.decode("ColumnDelta", data) == {"column": "a", "value": value}
    delta = RowDelta(DeltaOp.INSERT, "t", "r", "c", (ColumnDelta("a", value),), 1, "d")
    assert wire.decode_row_delta(wire.encode_row_delta(delta)) == delta


def test_typed_encoders_raise_codec_error_for_unserialisable_domain_objects():
    bad_value = RowDelta(DeltaOp.INSERT, "t", "r", "c", (ColumnDelta("a", object()),), 1, "d")
    with pytest.raises(CodecError, match=r"^Failed to encode RowDelta$"):
        wire.encode_row_delta(bad_value)
    with pytest.raises(CodecError, match=r"^Failed to encode SyncResponse$"):
        wire.encode_sync_response(SyncResponse((bad_value,), 1))
    with pytest.raises(CodecError, match=r"^Failed to encode SyncPull$"):
        wire.encode_sync_pull(SyncPull("c", 0, 1 << 32))
    with pytest.raises(CodecError, match=r"^Failed to encode SyncPush$"):
        wire.encode_sync_push(SyncPush("c", (), 1 << 64))
    lone = RowDelta(DeltaOp.INSERT, "t\ud800", "r", "c", (), 1, "d")
    with pytest.raises(CodecError, match=r"^Failed to encode RowDelta$"):
        wire.encode_row_delta(lone)


def test_typed_encoder_writes_ints_beyond_double_range_as_null_like_javascript():
    delta = RowDelta(DeltaOp.INSERT, "t", "r", "c", (ColumnDelta("a", 10**400),), 1, "d")
    assert wire.decode_row_delta(wire.encode_row_delta(delta)).columns[0].value is None


# -- properties -----------------------------------------------------------------------------------------------------

json_scalars = (
    st.none()
    | st.booleans()
    | st.integers(min_value=-(2**53), max_value=2**53)
    | st.floats(allow_nan=False, allow_infinity=False)
    | st.text(max_size=20)
)
json_values = st.recursive(
    json_scalars,
    lambda inner: st.lists(inner, max_size=4) | st.dictionaries(st.text(max_size=8), inner, max_size=4),
    max_leaves=12,
)
hlcs = st.integers(min_value=0, max_value=(1 << 64) - 1)
names = st.text(max_size=12)
row_deltas = st.builds(
    RowDelta,
    op=st.sampled_from(list(DeltaOp)),
    table=names,
    row_id=names,
    client_id=names,
    columns=st.lists(st.builds(ColumnDelta, names, json_values), max_size=4).map(tuple),
    hlc=hlcs,
    delta_id=names,
)


@given(st.lists(row_deltas, max_size=4).map(tuple), hlcs, st.booleans())
def test_sync_response_typed_round_trip_and_agrees_with_dict_path(deltas, server_hlc, has_more):
    response = SyncResponse(deltas, server_hlc, has_more)
    data = wire.encode_sync_response(response)
    assert wire.decode_sync_response(data) == response
    assert wire.encode("SyncResponse", response.to_json()) == data
    assert wire.decode("SyncResponse", data) == response.to_json()


@given(names, st.lists(row_deltas, max_size=3).map(tuple), hlcs)
def test_sync_push_typed_round_trip(client_id, deltas, last_seen):
    push = SyncPush(client_id, deltas, last_seen)
    data = wire.encode_sync_push(push)
    assert wire.decode_sync_push(data) == push
    assert framing.decode_frame(framing.encode_frame(framing.TAG_SYNC_PUSH, data + b"\x00"))[1][:-1] == data


@settings(suppress_health_check=[HealthCheck.too_slow])
@given(st.binary(max_size=200), st.sampled_from(wire.MESSAGE_NAMES))
def test_fuzz_random_bytes_decode_to_a_result_or_codec_error(data, message):
    try:
        decoded = wire.decode(message, data)
    except CodecError as exc:
        assert exc.message == f"Failed to decode {message}"
    else:
        assert isinstance(decoded, dict)
        assert json.loads(json.dumps(decoded)) == decoded


@given(st.binary(max_size=200), st.sampled_from(TYPED_MESSAGES))
def test_fuzz_random_bytes_typed_decoders_give_domain_objects_or_codec_error(data, message):
    try:
        decoded = TYPED_DECODERS[message](data)
    except CodecError as exc:
        assert exc.message == f"Failed to decode {message}"
    else:
        assert TYPED_ENCODERS[message](decoded) is not None


@given(st.binary(max_size=40))
def test_fuzz_random_value_bytes_decode_to_json_or_codec_error(value_bytes):
    try:
        delta = wire.decode_row_delta(_row_with_value(value_bytes))
    except CodecError:
        return
    # Compared through js_stringify: both sides then mean the same JavaScript value (big ints round to doubles).
    assert js_stringify(json.loads(value_bytes.decode("utf-8-sig"))) == js_stringify(delta.columns[0].value)


@given(st.binary(min_size=1, max_size=120))
def test_fuzz_mutated_valid_message_decodes_or_fails_cleanly(noise):
    valid = bytes.fromhex(CASES[5]["hex"])[1:]  # the SyncPush of the framed vector
    position = noise[0] % len(valid)
    mutated = valid[:position] + noise[1:] + valid[position + len(noise) - 1 :]
    try:
        wire.decode_sync_push(mutated)
    except CodecError as exc:
        assert exc.message == "Failed to decode SyncPush"


# -- one field validation for both encodings ---------------------------------------------------------------------

_PUSHED = RowDelta(DeltaOp.UPDATE, "todos", "r1", "c1", (ColumnDelta("title", "x"),), 5, "d1")


@pytest.mark.parametrize(
    "change",
    [
        {"delta_id": ""},
        {"row_id": ""},
        {"table": ""},
        {"client_id": ""},
        {"columns": (ColumnDelta("", 1),)},
        {"columns": (ColumnDelta("title", "x\ud800"),)},
        {"columns": (ColumnDelta("title", {"k": ["\udfff"]}),)},
        {"delta_id": "d" * 300},
    ],
    ids=["deltaId", "rowId", "table", "clientId", "column", "lone-surrogate", "nested-surrogate", "long-deltaId"],
)
def test_protobuf_and_json_deltas_fail_the_same_field_check(change):
    # Given one bad delta in both encodings (a protobuf string left unset decodes as "", the proto3 default)
    from dataclasses import replace

    from lakesync.core.delta import validate_row_delta

    bad = replace(_PUSHED, **change)
    decoded = wire.decode_sync_push(wire.encode_sync_push(SyncPush("c1", (bad,)))).deltas[0]
    assert decoded == bad  # the codec decodes; it does not judge the fields

    # When the gateway checks each, Then both are refused with the same message
    def refusal(parse: Any) -> str:
        with pytest.raises(ValidationError) as info:
            validate_row_delta(parse(), where="deltas[0]")
        return info.value.message

    from_json = refusal(lambda: RowDelta.from_json(bad.to_json(), where="deltas[0]"))
    from_pb = refusal(lambda: decoded)
    assert from_json == from_pb


def test_the_codec_s_message_names_and_numbers_are_the_generated_code_s() -> None:
    # The codec knows the .proto's messages and numbers without loading protobuf; loading it checks them
    from google.protobuf.descriptor import FieldDescriptor

    from lakesync.wire import _pb, codec

    assert codec.MESSAGE_NAMES == tuple(_pb.lakesync_pb2.DESCRIPTOR.message_types_by_name)
    assert codec.DELTA_OP_BY_NUMBER == {
        _pb.lakesync_pb2.DELTA_OP_INSERT: DeltaOp.INSERT,
        _pb.lakesync_pb2.DELTA_OP_UPDATE: DeltaOp.UPDATE,
        _pb.lakesync_pb2.DELTA_OP_DELETE: DeltaOp.DELETE,
    }
    assert (codec._TYPE_STRING, codec._TYPE_BYTES, codec._TYPE_FIXED64, codec._TYPE_MESSAGE) == (
        FieldDescriptor.TYPE_STRING,
        FieldDescriptor.TYPE_BYTES,
        FieldDescriptor.TYPE_FIXED64,
        FieldDescriptor.TYPE_MESSAGE,
    )
    assert codec.protobuf_module() is _pb.lakesync_pb2
