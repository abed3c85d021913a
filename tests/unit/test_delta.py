"""Deltas: the deltaId is byte-identical to the original; extract/apply follow reference §2.3–2.4; JSON shape."""

from __future__ import annotations

import hashlib
import json
from dataclasses import replace
from pathlib import Path

import pytest
from hypothesis import given
from hypothesis import strategies as st

from lakesync.core.canonical import js_number, js_stringify, stable_stringify
from lakesync.core.delta import (
    ColumnDelta,
    DeltaOp,
    RowDelta,
    apply_delta,
    delta_id,
    extract_delta,
    make_delta,
    validate_row_delta,
)
from lakesync.core.errors import ValidationError

VECTORS = Path(__file__).parent.parent / "vectors"
ID_CASES = json.loads((VECTORS / "delta_id.json").read_text())["cases"]
EXTRACT_CASES = json.loads((VECTORS / "extract_delta.json").read_text())["cases"]
APPLY_CASES = json.loads((VECTORS / "apply_delta.json").read_text())["cases"]


@pytest.mark.parametrize("case", ID_CASES, ids=[c["name"] for c in ID_CASES])
def test_delta_id_matches_original_bytes(case):
    given_ = case["input"]
    payload = stable_stringify(
        {
            "clientId": given_["clientId"],
            "hlc": given_["hlc"],
            "table": given_["table"],
            "rowId": given_["rowId"],
            "columns": given_["columns"],
        }
    )
    assert payload == case["canonical_payload"]
    got = delta_id(given_["clientId"], int(given_["hlc"]), given_["table"], given_["rowId"], given_["columns"])
    assert got == case["expected_deltaId"]


@pytest.mark.parametrize("case", EXTRACT_CASES, ids=[c["name"] for c in EXTRACT_CASES])
def test_extract_delta_matches_vectors(case):
    opts = case["opts"]
    schema = opts.get("schema")
    result = extract_delta(
        case["before"],
        case["after"],
        table=opts["table"],
        row_id=opts["rowId"],
        client_id=opts["clientId"],
        hlc=int(opts["hlc"]),
        schema_columns=[c["name"] for c in schema["columns"]] if schema else None,
    )
    if case["expected"] is None:
        assert result is None
    else:
        assert result is not None
        assert result.op.value == case["expected"]["op"]
        assert [c.to_json() for c in result.columns] == case["expected"]["columns"]
        assert result.delta_id == case["expected"]["deltaId"]


@pytest.mark.parametrize("case", APPLY_CASES, ids=[c["name"] for c in APPLY_CASES])
def test_apply_delta_matches_vectors(case):
    d = case["delta"]
    delta = make_delta(d["op"], table="t", row_id="r", client_id="c", hlc=1, columns={})
    delta = RowDelta.from_json(
        {**delta.to_json(), "columns": d.get("columns", []), "op": d["op"]},
    )
    before = None if case["row"] is None else dict(case["row"])
    assert apply_delta(case["row"], delta) == case["expected"]
    assert case["row"] == before  # the input row is never mutated


def test_js_number_formats_like_ecmascript():
    assert [js_number(x) for x in (30.0, -0.0, 1e21, 1e-7, 0.000001, 1e20, 12345678901234567890, 0.1)] == [
        "30",
        "0",
        "1e+21",
        "1e-7",
        "0.000001",
        "100000000000000000000",
        "12345678901234567000",
        "0.1",
    ]
    assert js_number(float("nan")) is None


def test_js_stringify_keeps_insertion_order_and_escapes_like_json_stringify():
    assert js_stringify({"b": 1, "a": [True, None, "x\n\u2028\x7f"]}) == '{"b":1,"a":[true,null,"x\\n\u2028\x7f"]}'
    assert js_stringify("\ud800") == '"\\ud800"'
    assert js_stringify("\x01") == '"\\u0001"'


def test_stable_stringify_sorts_keys_by_utf16_code_units():
    assert stable_stringify({"\uff01": 1, "\U0001f600": 2, "a": 3}) == '{"a":3,"\U0001f600":2,"\uff01":1}'


def test_row_delta_json_round_trip():
    delta = make_delta("UPDATE", table="todos", row_id="r1", client_id="c1", hlc=2**63 + 5, columns={"t": "x"})
    wire = delta.to_json()
    assert wire["hlc"] == str(2**63 + 5)
    assert RowDelta.from_json(wire) == delta
    assert (
        delta.delta_id
        == hashlib.sha256(
            stable_stringify(
                {
                    "clientId": "c1",
                    "columns": [{"column": "t", "value": "x"}],
                    "hlc": wire["hlc"],
                    "rowId": "r1",
                    "table": "todos",
                }
            ).encode()
        ).hexdigest()
    )


@pytest.mark.parametrize(
    ("patch", "message"),
    [
        ({"op": "UPSERT"}, "op must be one of"),
        ({"table": ""}, "table must be a non-empty string"),
        ({"rowId": 7}, "rowId must be a non-empty string"),
        ({"hlc": 65536000000}, "hlc must be a decimal string"),
        ({"columns": {"a": 1}}, "columns must be an array"),
        ({"columns": [{"value": 1}]}, "columns\\[0\\].column must be a non-empty string"),
        ({"columns": [{"column": "a"}]}, "must have a 'value'"),
        ({"columns": [{"column": "a", "value": float("inf")}]}, "finite"),
    ],
)
def test_row_delta_from_json_rejects_bad_fields_by_name(patch, message):
    wire = make_delta("INSERT", table="todos", row_id="r1", client_id="c1", hlc=1, columns={"a": 1}).to_json()
    with pytest.raises(ValidationError, match=message):
        RowDelta.from_json({**wire, **patch})


def test_make_delta_delete_carries_no_columns():
    delta = make_delta(DeltaOp.DELETE, table="t", row_id="r", client_id="c", hlc=9, columns={"a": 1})
    assert delta.columns == ()


json_values = st.recursive(
    st.none() | st.booleans() | st.integers() | st.floats(allow_nan=False, allow_infinity=False) | st.text(),
    lambda inner: st.lists(inner, max_size=4) | st.dictionaries(st.text(max_size=5), inner, max_size=4),
    max_leaves=12,
)


@given(json_values)
def test_js_stringify_is_valid_json_that_round_trips_numbers_as_doubles(value):
    text = js_stringify(value)
    parsed = json.loads(text)
    assert js_stringify(parsed) == text


stored_deltas = st.builds(
    make_delta,
    st.sampled_from(list(DeltaOp)),
    table=st.text(min_size=1, max_size=8),
    row_id=st.text(min_size=1, max_size=8),
    client_id=st.text(min_size=1, max_size=8),
    hlc=st.integers(min_value=0, max_value=(1 << 64) - 1),
    columns=st.dictionaries(st.text(min_size=1, max_size=6), json_values, max_size=4),
)


@given(stored_deltas)
def test_from_stored_json_decodes_stored_text_exactly_as_from_json(delta):
    # The text a store keeps: the delta's JSON.stringify rendering
    text = js_stringify(delta.to_json())
    assert RowDelta.from_stored_json(text) == RowDelta.from_json(json.loads(text))


# -- validate_row_delta: the one field check of a client's delta, whatever its encoding -------------------------


def _valid() -> RowDelta:
    return make_delta("UPDATE", table="todos", row_id="r1", client_id="c1", hlc=5, columns={"title": "x"})


def test_validate_row_delta_accepts_a_valid_delta():
    validate_row_delta(_valid(), where="deltas[0]")
    validate_row_delta(replace(_valid(), client_id="é" * 128, delta_id="d" * 256))  # exactly 256 bytes each


@pytest.mark.parametrize(
    ("change", "message"),
    [
        ({"table": ""}, "deltas[2].table must be a non-empty string"),
        ({"row_id": ""}, "deltas[2].rowId must be a non-empty string"),
        ({"client_id": ""}, "deltas[2].clientId must be a non-empty string"),
        ({"delta_id": ""}, "deltas[2].deltaId must be a non-empty string"),
        ({"row_id": "a\ud800"}, "deltas[2].rowId is not valid UTF-8 text (it holds the lone surrogate U+D800)"),
        ({"table": "\udfff"}, "deltas[2].table is not valid UTF-8 text (it holds the lone surrogate U+DFFF)"),
        ({"client_id": "c\udc00"}, "deltas[2].clientId is not valid UTF-8 text (it holds the lone surrogate U+DC00)"),
        ({"delta_id": "\ud83d"}, "deltas[2].deltaId is not valid UTF-8 text (it holds the lone surrogate U+D83D)"),
        ({"client_id": "c" * 257}, "deltas[2].clientId is 257 bytes; the limit is 256"),
        ({"delta_id": "é" * 129}, "deltas[2].deltaId is 258 bytes; the limit is 256"),
        ({"hlc": 1 << 64}, "deltas[2].hlc is out of range for a 64-bit HLC"),
        ({"columns": (ColumnDelta("", 1),)}, "deltas[2].columns[0].column must be a non-empty string"),
        ({"columns": (ColumnDelta("a", 1), ColumnDelta("b\ud800", 1))}, "deltas[2].columns[1].column is not valid"),
        ({"columns": (ColumnDelta("a", ["x", {"y": "\ud800"}]),)}, "deltas[2].columns[0].value is not valid UTF-8"),
        ({"columns": (ColumnDelta("a", {"k\udfff": 1}),)}, "deltas[2].columns[0].value is not valid UTF-8"),
        ({"columns": (ColumnDelta("a", float("nan")),)}, "deltas[2].columns[0].value must be a finite number"),
    ],
)
def test_validate_row_delta_names_the_first_bad_field(change, message):
    with pytest.raises(ValidationError) as info:
        validate_row_delta(replace(_valid(), **change), where="deltas[2]")
    assert info.value.message.startswith(message) and info.value.status == 400


def test_validate_row_delta_keeps_well_formed_non_bmp_text():
    # A character beyond the BMP is one code point in Python (a surrogate pair only in UTF-16): valid text
    validate_row_delta(replace(_valid(), row_id="😀", columns=(ColumnDelta("a", {"😀": ["😀"]}),)))


def test_from_json_only_parses_so_stored_deltas_with_old_text_still_load():
    # (the gateway validates what clients send; a stored delta is read back whatever it holds)
    delta = RowDelta.from_json({**_valid().to_json(), "columns": [{"column": "a", "value": "x\ud800"}]})
    assert delta.columns[0].value == "x\ud800"
    with pytest.raises(ValidationError):
        validate_row_delta(delta)
