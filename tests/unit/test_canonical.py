"""canonical_value (lakesync.core.canonical): its direct paths for strings, safe integers, booleans and null write
exactly what stable_stringify writes, for any JSON value."""

from __future__ import annotations

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from lakesync.core.canonical import JsonValue, canonical_value, stable_stringify

# Every code point, lone surrogates included, with the characters JSON escapes made frequent.
TEXT = st.text(
    st.characters(exclude_categories=())
    | st.sampled_from(['"', "\\", "\n", "\x00", "\x1f", "\u2028", "\ud800", "\udfff", "\U0001f600"])
)
EDGE_NUMBERS = st.sampled_from([0, -0.0, 0.0, 2**53, -(2**53), 2**53 + 1, -(2**53) - 1, 10**21, 10**22, 10**400, 1e21])
SCALARS = (
    st.none()
    | st.booleans()
    | st.integers()
    | st.integers(min_value=-(2**54), max_value=2**54)
    | EDGE_NUMBERS
    | st.floats(allow_nan=False, allow_infinity=False)
    | TEXT
)
JSON = st.recursive(
    SCALARS, lambda inner: st.lists(inner, max_size=4) | st.dictionaries(TEXT, inner, max_size=4), max_leaves=12
)


@settings(max_examples=1000, deadline=None)
@given(SCALARS)
def test_canonical_value_of_a_scalar_is_stable_stringify(value: JsonValue) -> None:
    assert canonical_value(value) == stable_stringify(value)


@settings(max_examples=300, deadline=None)
@given(JSON)
def test_canonical_value_of_any_json_value_is_stable_stringify(value: JsonValue) -> None:
    assert canonical_value(value) == stable_stringify(value)


@pytest.mark.parametrize(
    ("value", "text"),
    [
        ("lone \ud800", '"lone \\ud800"'),
        ('q " \\ \n \x01', '"q \\" \\\\ \\n \\u0001"'),
        (2**53, "9007199254740992"),
        (2**53 + 1, "9007199254740992"),
        (-0.0, "0"),
        (1.0, "1"),
        (1e21, "1e+21"),
        (10**400, "null"),
        (True, "true"),
        (None, "null"),
        ({"b": 1, "a": [1.5, "x", None]}, '{"a":[1.5,"x",null],"b":1}'),
    ],
)
def test_canonical_value_writes_the_javascript_text(value: JsonValue, text: str) -> None:
    assert canonical_value(value) == text
