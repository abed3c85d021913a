"""JSON conventions of the API (reference §12.1): the /hlc$/i reviver with ECMAScript StringToBigInt, the BigInt
replacer, the BigInt marker type and the strict body parser; json_bigint.json matched exactly."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest
from hypothesis import given
from hypothesis import strategies as st

from lakesync.core.errors import CodecError
from lakesync.wire import jsonapi
from lakesync.wire.jsonapi import BigInt

VECTORS = Path(__file__).parent.parent / "vectors"
BIGINT = json.loads((VECTORS / "json_bigint.json").read_text(encoding="utf-8"))
REVIVE = BIGINT["revive"]
REPLACE = BIGINT["replace"]
MARKER = "$bigint"


def _to_markers(value: Any) -> Any:
    """Our revived value in the vectors' notation: BigInt → {"$bigint": "<decimal>"}; plain ints stay numbers."""
    if isinstance(value, BigInt):
        return {MARKER: str(int(value))}
    if isinstance(value, dict):
        return {k: _to_markers(v) for k, v in value.items()}
    if isinstance(value, list):
        return [_to_markers(v) for v in value]
    return value


def _from_markers(value: Any) -> Any:
    """The vectors' notation as our values: {"$bigint": "<decimal>"} → BigInt."""
    if isinstance(value, dict):
        if set(value) == {MARKER}:
            return BigInt(int(value[MARKER]))
        return {k: _from_markers(v) for k, v in value.items()}
    if isinstance(value, list):
        return [_from_markers(v) for v in value]
    return value


@pytest.mark.parametrize("case", REVIVE, ids=[c["name"] for c in REVIVE])
def test_revive_vector(case):
    assert _to_markers(jsonapi.loads(case["json"])) == case["expected"]
    assert _to_markers(jsonapi.revive(json.loads(case["json"]))) == case["expected"]


@pytest.mark.parametrize("case", REPLACE, ids=[c["name"] for c in REPLACE])
def test_replace_vector(case):
    value = _from_markers(case["value"])
    assert jsonapi.dumps(value) == case["expected_json"]
    assert jsonapi.replace(value) == json.loads(case["expected_json"])


@pytest.mark.parametrize(
    ("text", "expected"),
    [
        ("42", 42),
        ("", 0),
        ("   ", 0),
        (" \t\n\r\v\f 12 \u00a0\u2028\u2029\ufeff\u3000", 12),
        ("-5", -5),
        ("+6", 6),
        ("-0", 0),
        ("007", 7),
        ("0x10", 16),
        ("0X1f", 31),
        ("0o17", 15),
        ("0b101", 5),
        ("18446744073709551615", 2**64 - 1),
        ("123456789012345678901234567890", 123456789012345678901234567890),
    ],
)
def test_string_to_bigint_accepts_ecmascript_integer_literals(text, expected):
    assert jsonapi.string_to_bigint(text) == expected


@pytest.mark.parametrize(
    "text",
    [
        "1.5",
        "1.",
        "1e3",
        "abc",
        "1_000",
        "-0x10",
        "+0b1",
        "0x",
        "0b2",
        "0o8",
        "+",
        "-",
        "1 2",
        "١٢",  # Arabic-Indic digits: Python's int() takes them, BigInt does not
        "\x1c7",  # Python strips U+001C as whitespace, JavaScript does not
        "7\x85",
        "Infinity",
        "9" * 5000,
    ],
)
def test_string_to_bigint_rejects_what_bigint_rejects(text):
    assert jsonapi.string_to_bigint(text) is None


@pytest.mark.parametrize(
    ("key", "matches"),
    [
        ("hlc", True),
        ("HLC", True),
        ("sinceHlc", True),
        ("lastSeenHLc", True),
        ("hlcX", False),
        ("hl", False),
        ("", False),
        ("hlc\n", False),
        ("Hlç", False),
    ],
)
def test_is_hlc_key_is_the_javascript_regex(key, matches):
    assert jsonapi.is_hlc_key(key) is matches


def test_revive_reaches_every_depth_including_arrays_of_objects_but_not_array_items():
    body = {"deltas": [{"hlc": "5", "columns": [{"column": "x", "value": {"innerHlc": "0x10"}}]}], "hlc": ["1"]}
    revived = jsonapi.revive(body)
    assert type(revived["deltas"][0]["hlc"]) is BigInt
    assert revived["deltas"][0]["columns"][0]["value"]["innerHlc"] == 16
    assert revived["hlc"] == ["1"]
    assert body["deltas"][0]["hlc"] == "5"  # the input is not mutated


def test_revive_leaves_numbers_and_unparseable_strings_alone():
    revived = jsonapi.revive({"hlc": 5, "serverHlc": "1.5", "x": "5"})
    assert revived == {"hlc": 5, "serverHlc": "1.5", "x": "5"}
    assert type(revived["hlc"]) is int


def test_bigint_is_an_int_that_serialises_as_a_string_while_plain_ints_stay_numbers():
    value = BigInt(111411200000000002)
    assert value == 111411200000000002
    assert value >> 16 == 1700000000000
    assert type(value + 1) is int
    assert repr(value) == "BigInt(111411200000000002)"
    assert jsonapi.dumps({"serverHlc": value, "accepted": 1}) == '{"serverHlc":"111411200000000002","accepted":1}'


def test_dumps_is_compact_insertion_ordered_and_javascript_formatted():
    assert jsonapi.dumps({"b": 1.0, "a": [BigInt(0), None, "é"], "c": 1e21}) == '{"b":1,"a":["0",null,"é"],"c":1e+21}'


def test_loads_without_reviver_keeps_strings():
    assert jsonapi.loads('{"hlc":"42"}', revive_hlcs=False) == {"hlc": "42"}


def test_loads_accepts_utf8_bytes():
    assert jsonapi.loads('{"sinceHlc":"7","t":"ü"}'.encode()) == {"sinceHlc": 7, "t": "ü"}


@pytest.mark.parametrize(
    "text",
    ["", "{", "NaN", '{"a":Infinity}', "[1e999]", b"\xff", "[" * 100 + "]" * 100, "[" * 100000],
    ids=["empty", "open", "nan", "infinity", "overflow", "bad-utf8", "too-deep", "recursion"],
)
def test_loads_rejects_invalid_bodies_with_a_validation_error(text):
    with pytest.raises(CodecError) as info:
        jsonapi.loads(text)
    assert info.value.message == "Invalid JSON body"
    assert info.value.status == 400
    assert info.value.to_body()["code"] == "VALIDATION_ERROR"


@given(st.integers(min_value=-(2**70), max_value=2**70))
def test_string_to_bigint_reads_every_decimal_and_hex_rendering(n):
    assert jsonapi.string_to_bigint(str(n)) == n
    assert jsonapi.string_to_bigint(f" {n}\n") == n
    if n >= 0:
        assert jsonapi.string_to_bigint(hex(n)) == n
        assert jsonapi.string_to_bigint(oct(n)) == n
        assert jsonapi.string_to_bigint(bin(n)) == n


@given(st.integers(min_value=0, max_value=2**64 - 1))
def test_replace_then_revive_round_trips_hlcs(hlc):
    text = jsonapi.dumps({"hlc": BigInt(hlc), "nested": {"serverHlc": BigInt(hlc)}})
    revived = jsonapi.loads(text)
    assert revived == {"hlc": hlc, "nested": {"serverHlc": hlc}}
    assert type(revived["nested"]["serverHlc"]) is BigInt
