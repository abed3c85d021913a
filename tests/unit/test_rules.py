"""Sync rules: the original's vectors (validation, claims, sparse-delta matching, filterDeltas, client buckets), our
comparison rule (full decimal numbers compare exactly, everything else in UTF-16 order) and row-level delivery
(a change reaches a client whose bucket held the row before or after it)."""

from __future__ import annotations

import json
import re
from fractions import Fraction
from pathlib import Path
from typing import Any

import pytest
from hypothesis import given
from hypothesis import strategies as st

from lakesync.core.canonical import js_string_coerce
from lakesync.core.delta import RowDelta, make_delta
from lakesync.core.errors import PayloadTooLargeError, SyncRuleError, ValidationError
from lakesync.core.rules import (
    Bucket,
    Filter,
    FilterOp,
    SyncRules,
    bucket_matches_row,
    change_visible,
    check_sync_rules_limits,
    compare_filter_values,
    delta_matches_bucket,
    filter_deltas,
    matches_bucket,
    parse_sync_rules,
    pass_all_rules,
    resolve_client_buckets,
    resolve_filter_value,
    row_matches,
    rules_apply,
    user_scoped_rules,
)

VECTORS = json.loads((Path(__file__).parent.parent / "vectors" / "sync_rules.json").read_text(encoding="utf-8"))
RESOLVE_CASES = VECTORS["resolveFilterValue"]
MATCH_CASES = VECTORS["deltaMatchesBucket"]
FILTER_CASES = VECTORS["filterDeltas"]
CLIENT_BUCKET_CASES = VECTORS["resolveClientBuckets"]
VALIDATE_CASES = VECTORS["validateSyncRules"]

# Non-flagged vectors whose expectation rests on the original's parseFloat-prefix quirk (reference §17 item 8): both
# ISO dates parse to 2024 there. Our full-number rule compares them as strings instead.
PARSEFLOAT_QUIRK_CASES = frozenset(
    {
        "ISO dates fall into numeric mode (parseFloat('2024-01-02')=2024): '2024-12-31' gt '2024-01-01' is FALSE",
    }
)
OUR_RULE_CASES = [c for c in MATCH_CASES if c.get("locale_dependent") or c["name"] in PARSEFLOAT_QUIRK_CASES]
EXACT_MATCH_CASES = [c for c in MATCH_CASES if c not in OUR_RULE_CASES]

# The comparison rule written down independently of the implementation: exact rationals and UTF-16 byte strings.
FULL_NUMBER = re.compile(r"-?[0-9]+(\.[0-9]+)?([eE][+-]?[0-9]+)?")


def our_rule_order(left: str, right: str) -> int:
    if FULL_NUMBER.fullmatch(left) and FULL_NUMBER.fullmatch(right):
        a: Any = Fraction(left)
        b: Any = Fraction(right)
    else:
        a = left.encode("utf-16-be", "surrogatepass")
        b = right.encode("utf-16-be", "surrogatepass")
    return (a > b) - (a < b)


def our_rule_holds(op: str, left: str, right: str) -> bool:
    order = our_rule_order(left, right)
    return {"gt": order > 0, "lt": order < 0, "gte": order >= 0, "lte": order <= 0}[op]


def holds(op: str, row_value: Any, filter_value: str, claims: dict[str, Any] | None = None) -> bool:
    bucket = Bucket("b", (), (Filter("c", FilterOp(op), filter_value),))
    return bucket_matches_row(bucket, "t", {"c": row_value}, claims or {})


def raises_exactly(message: str) -> Any:
    return pytest.raises(SyncRuleError, match=f"^{re.escape(message)}$")


USER_RULES = user_scoped_rules(["todos"])
U1 = {"sub": "u1"}


# --- vectors ----------------------------------------------------------------------------------------------------


@pytest.mark.parametrize("case", RESOLVE_CASES, ids=[repr(c["value"]) for c in RESOLVE_CASES])
def test_resolve_filter_value_matches_vectors(case):
    assert resolve_filter_value(case["value"], case["claims"]) == case["expected"]


@pytest.mark.parametrize("case", EXACT_MATCH_CASES, ids=[c["name"] for c in EXACT_MATCH_CASES])
def test_delta_matches_bucket_matches_vectors(case):
    assert delta_matches_bucket(case["delta"], case["bucket"], case["claims"]) is case["expected"]


@pytest.mark.parametrize("case", OUR_RULE_CASES, ids=[c["name"] for c in OUR_RULE_CASES])
def test_delta_matches_bucket_follows_our_comparison_rule_where_the_original_used_parsefloat_or_locale(case):
    # Given a one-filter comparison bucket whose vector result depends on localeCompare or parseFloat prefixes
    (flt,) = case["bucket"]["filters"]
    (column,) = [c for c in case["delta"]["columns"] if c["column"] == flt["column"]]
    (right,) = resolve_filter_value(flt["value"], case["claims"])
    expected = our_rule_holds(flt["op"], js_string_coerce(column["value"]), right)
    # When it is evaluated / Then the result is the one our documented rule defines
    assert delta_matches_bucket(case["delta"], case["bucket"], case["claims"]) is expected
    if case["name"] in PARSEFLOAT_QUIRK_CASES:
        assert expected is not case["expected"], "listed as a deviation but our rule agrees with the original"


def test_parsefloat_quirk_cases_exist_in_the_vectors():
    assert PARSEFLOAT_QUIRK_CASES <= {c["name"] for c in MATCH_CASES}


@pytest.mark.parametrize("case", FILTER_CASES, ids=[c["name"] for c in FILTER_CASES])
def test_filter_deltas_matches_vectors(case):
    rules = parse_sync_rules(case["rules"])
    deltas = [RowDelta.from_json(d) for d in case["deltas"]]
    assert [d.delta_id for d in filter_deltas(rules, case["claims"], deltas)] == case["expected_deltaIds"]


@pytest.mark.parametrize(
    "case", CLIENT_BUCKET_CASES, ids=[f"claims={sorted(c['claims'])}" for c in CLIENT_BUCKET_CASES]
)
def test_resolve_client_buckets_matches_vectors(case):
    assert resolve_client_buckets(parse_sync_rules(case["rules"]), case["claims"]) == case["expected"]


@pytest.mark.parametrize("case", VALIDATE_CASES, ids=[c["name"] for c in VALIDATE_CASES])
def test_parse_sync_rules_matches_vectors(case):
    expected = case["expected"]
    if expected["ok"]:
        rules = parse_sync_rules(case["config"])
        assert parse_sync_rules(rules.to_json()) == rules
        assert [b.name for b in rules.buckets] == [b["name"] for b in case["config"]["buckets"]]
    else:
        with pytest.raises(SyncRuleError) as info:
            parse_sync_rules(case["config"])
        assert info.value.message == expected["message"]
        assert info.value.code == expected["error_code"]


# --- validation details -----------------------------------------------------------------------------------------


def _rules(*buckets: Any, version: Any = 1) -> dict[str, Any]:
    return {"version": version, "buckets": list(buckets)}


@pytest.mark.parametrize("version", [True, 0, -1, "1", None, 1.5, float("inf"), float("nan")])
def test_parse_sync_rules_rejects_versions_that_are_not_positive_js_integers(version):
    with raises_exactly("Sync rules version must be a positive integer"):
        parse_sync_rules(_rules(version=version))


def test_parse_sync_rules_accepts_an_integral_float_version_as_an_int():
    rules = parse_sync_rules(_rules(version=3.0))
    assert rules.version == 3
    assert isinstance(rules.version, int)


def test_parse_sync_rules_treats_a_json_array_as_an_object_without_fields_like_javascript():
    with raises_exactly("Sync rules version must be a positive integer"):
        parse_sync_rules([])
    with raises_exactly("Bucket at index 0 must have a non-empty name"):
        parse_sync_rules(_rules([]))
    with raises_exactly('Bucket "b" filter at index 0 must have a non-empty column'):
        parse_sync_rules(_rules({"name": "b", "tables": [], "filters": [[]]}))


@pytest.mark.parametrize("config", [None, 1, "x", True])
def test_parse_sync_rules_rejects_non_objects(config):
    with raises_exactly("Sync rules config must be an object"):
        parse_sync_rules(config)


@pytest.mark.parametrize(
    ("buckets", "message"),
    [
        ([{"name": "", "tables": [], "filters": []}], "Bucket at index 0 must have a non-empty name"),
        ([{"name": 7, "tables": [], "filters": []}], "Bucket at index 0 must have a non-empty name"),
        (
            [{"name": "a", "tables": [], "filters": []}, {"name": "a", "tables": "x"}],
            'Duplicate bucket name: "a"',
        ),
        ([{"name": "a", "tables": ["t", ""], "filters": []}], 'Bucket "a" tables must contain non-empty strings'),
        ([{"name": "a", "tables": [1], "filters": []}], 'Bucket "a" tables must contain non-empty strings'),
        ([{"name": "a", "tables": [], "filters": [None]}], 'Bucket "a" filter at index 0 must be an object'),
        (
            [{"name": "a", "tables": [], "filters": [{"column": "c", "op": "eq", "value": ""}]}],
            'Bucket "a" filter at index 0 must have a non-empty value',
        ),
        (
            [{"name": "a", "tables": [], "filters": [{"column": "c", "op": "EQ", "value": "v"}]}],
            'Bucket "a" filter at index 0 op must be one of: eq, in, neq, gt, lt, gte, lte',
        ),
        (
            [{"name": "a", "tables": [], "filters": [{"column": "c", "op": "eq", "value": "v"}, {"column": "c"}]}],
            'Bucket "a" filter at index 1 op must be one of: eq, in, neq, gt, lt, gte, lte',
        ),
    ],
)
def test_parse_sync_rules_reports_each_bucket_and_filter_failure(buckets, message):
    with pytest.raises(SyncRuleError) as info:
        parse_sync_rules(_rules(*buckets))
    assert info.value.message == message


def test_parse_sync_rules_reports_the_first_failure_in_check_order():
    # Given a filter that is bad in op AND value, followed by a bucket with no name
    bad_filter = {"column": "c", "op": "like", "value": ""}
    config = _rules({"name": "a", "tables": [], "filters": [bad_filter]}, {"tables": []})
    # Then the op failure of the first bucket wins
    with pytest.raises(SyncRuleError, match="op must be one of"):
        parse_sync_rules(config)


def test_parse_sync_rules_builds_the_typed_model_and_drops_unknown_fields():
    config = _rules(
        {"name": "b", "tables": ["todos"], "filters": [{"column": "c", "op": "gte", "value": "jwt:x", "z": 1}], "n": 2}
    )
    config["extra"] = True
    rules = parse_sync_rules(config)
    assert rules == SyncRules(1, (Bucket("b", ("todos",), (Filter("c", FilterOp.GTE, "jwt:x"),)),))
    assert rules.to_json() == {
        "version": 1,
        "buckets": [{"name": "b", "tables": ["todos"], "filters": [{"column": "c", "op": "gte", "value": "jwt:x"}]}],
    }


def test_rule_helpers_produce_valid_documents():
    for rules in (pass_all_rules(), user_scoped_rules(["todos"], "owner")):
        assert parse_sync_rules(rules.to_json()) == rules
    assert user_scoped_rules(["todos"], "owner").buckets[0].filters == (Filter("owner", FilterOp.EQ, "jwt:sub"),)


# --- claims and equality operators ------------------------------------------------------------------------------


def test_resolve_filter_value_prefix_is_exact_and_case_sensitive():
    claims = {"sub": "u1"}
    assert resolve_filter_value("JWT:sub", claims) == ["JWT:sub"]
    assert resolve_filter_value(" jwt:sub", claims) == [" jwt:sub"]
    assert resolve_filter_value("jwt:Sub", claims) == []
    assert resolve_filter_value("jwt:sub", claims) == ["u1"]


def test_resolve_filter_value_empty_array_claim_is_missing():
    assert resolve_filter_value("jwt:orgs", {"orgs": []}) == []
    assert resolve_filter_value("jwt:orgs", {"orgs": ("o1",)}) == ["o1"]


def test_neq_fails_when_the_claim_is_missing_or_empty():
    assert holds("neq", "x", "jwt:orgs", {"orgs": ["y"]})
    assert not holds("neq", "x", "jwt:orgs", {"orgs": ["x", "y"]})
    assert not holds("neq", "x", "jwt:orgs", {})
    assert not holds("neq", "x", "jwt:orgs", {"orgs": []})


def test_eq_compares_the_js_string_of_the_value():
    assert holds("eq", None, "null")
    assert holds("in", 1.0, "1")
    assert holds("eq", ["a", "b"], "a,b")
    assert not holds("eq", 42, "42.0")


def test_comparison_against_an_array_claim_uses_its_first_element():
    assert holds("gt", 50, "jwt:levels", {"levels": ["5", "100"]})
    assert not holds("gt", 50, "jwt:levels", {"levels": ["100", "5"]})


def test_delta_matches_bucket_first_of_repeated_columns_wins():
    delta = make_delta("INSERT", table="t", row_id="r", client_id="c", hlc=1 << 16, columns=[]).to_json() | {
        "columns": [{"column": "x", "value": "a"}, {"column": "x", "value": "b"}]
    }
    bucket = {"name": "b", "tables": [], "filters": [{"column": "x", "op": "eq", "value": "a"}]}
    assert delta_matches_bucket(delta, bucket, {})
    bucket["filters"][0]["value"] = "b"
    assert not delta_matches_bucket(delta, bucket, {})


def test_delta_matches_bucket_rejects_malformed_input():
    delta = MATCH_CASES[0]["delta"]
    with raises_exactly("Bucket at index 0 must have a non-empty name"):
        delta_matches_bucket(delta, {"tables": [], "filters": []}, {})
    with raises_exactly('Bucket "b" tables must be an array'):
        delta_matches_bucket(delta, {"name": "b", "filters": [{"column": "x", "op": "like", "value": "1"}]}, {})
    with pytest.raises(ValidationError):
        delta_matches_bucket({"op": "INSERT"}, MATCH_CASES[0]["bucket"], {})


# --- our comparison rule ----------------------------------------------------------------------------------------


def test_comparison_numbers_compare_as_numbers_not_strings():
    assert holds("lt", "9", "10")
    assert holds("gt", 10, "9")
    assert not holds("gt", "9", "10")


def test_comparison_big_integers_compare_exactly():
    big, bigger = "12345678901234567890", "12345678901234567891"
    assert float(big) == float(bigger)
    assert holds("gt", bigger, big)
    assert not holds("gte", big, bigger)
    assert holds("lt", "-" + bigger, "-" + big)


def test_comparison_negative_numbers_and_negative_zero():
    assert holds("lt", -10, "-9")
    assert holds("gt", "-1", "-2")
    assert holds("lt", "-0.5", "-0.05")
    assert holds("gte", "-0", "0")
    assert holds("lte", "-0", "0")


def test_comparison_exponents_and_fractions_are_exact_values():
    assert holds("gte", "1e3", "1000") and holds("lte", "1e3", "1000")
    assert not holds("gt", "1.000", "1")
    assert holds("gt", "1.5E+2", "149.99")
    assert holds("lt", "25e-1", "3")
    assert holds("gt", 1e21, "999999999999999999999")  # String(1e21) is "1e+21"


def test_comparison_handles_exponents_longer_than_the_int_digit_limit():
    huge = "1" * 5000
    assert compare_filter_values("1e" + huge, "2e" + huge) == -1
    assert compare_filter_values("1e" + huge, "9" * 100) == 1
    assert compare_filter_values("1e-" + huge, "0") == 1
    assert compare_filter_values("1e-" + huge, "1e-" + huge[1:]) == -1
    assert compare_filter_values("-1e" + huge, "-1e" + huge[1:]) == -1


@pytest.mark.parametrize("text", ["12abc", " 42", "42 ", "0x10", "Infinity", "+1", ".5", "1.", "1e", "1_000", "١٢"])
def test_comparison_partial_or_non_json_numbers_are_strings(text):
    # Given a string parseFloat would (partly) read as a number, against a full number
    # Then it is ordered as a string in UTF-16 order
    expected = (text.encode("utf-16-be") > b"\x009") - (text.encode("utf-16-be") < b"\x009")
    assert compare_filter_values(text, "9") == expected


def test_comparison_12abc_is_a_string_so_it_sorts_before_9():
    assert holds("lt", "12abc", "9")
    assert not holds("gt", "12abc", "9")


def test_comparison_a_number_against_a_non_number_is_a_string_comparison():
    assert holds("lt", "10", "9a")
    assert holds("gt", "2024-12-31", "2024-01-01")


def test_comparison_strings_use_utf16_code_units_without_locale_or_case_folding():
    assert holds("lt", "B", "a")
    assert holds("lt", "A", "a") and not holds("gte", "A", "a")
    assert holds("gt", "é", "f")
    # U+1F600 is the surrogate pair D83D DE00, below the single unit FFFF (code-point order says the opposite)
    assert holds("lt", "\U0001f600", "\uffff")


_digits = st.text(alphabet="0123456789", min_size=1, max_size=25)
_exponents = st.builds(
    lambda e, sign, zeros, n: f"{e}{sign}{'0' * zeros}{n}",
    st.sampled_from(["e", "E"]),
    st.sampled_from(["", "+", "-"]),
    st.integers(0, 3),
    st.integers(0, 40),
)
_numbers = st.builds(
    lambda minus, whole, frac, exp: minus + whole + (f".{frac}" if frac is not None else "") + exp,
    st.sampled_from(["", "-"]),
    _digits,
    st.one_of(st.none(), _digits),
    st.one_of(st.just(""), _exponents),
)
_values = st.one_of(_numbers, st.text(max_size=8), st.sampled_from(["12abc", " 1", "1.", ".5", "+1", "0x1", "-"]))


@given(_values, _values)
def test_comparison_agrees_with_the_rule_definition(left, right):
    assert compare_filter_values(left, right) == our_rule_order(left, right)
    assert compare_filter_values(right, left) == -our_rule_order(left, right)


# --- row-level delivery -----------------------------------------------------------------------------------------


def test_rules_apply_only_with_at_least_one_bucket():
    assert not rules_apply(None)
    assert not rules_apply(SyncRules(1, ()))
    assert rules_apply(pass_all_rules())


@pytest.mark.parametrize("rules", [None, SyncRules(1, ())])
def test_without_rules_everything_is_visible(rules):
    delete = make_delta("DELETE", table="todos", row_id="r", client_id="c", hlc=1 << 16)
    assert row_matches(rules, {}, "todos", None)
    assert change_visible(rules, {}, "todos", {"user_id": "u2"}, None)
    assert filter_deltas(rules, {}, [delete]) == [delete]


def test_row_matches_an_absent_row_never_matches_a_filtered_bucket():
    assert not row_matches(USER_RULES, U1, "todos", None)
    assert row_matches(USER_RULES, U1, "todos", {"user_id": "u1"})
    assert not row_matches(USER_RULES, U1, "todos", {"owner": "u1"})
    assert not row_matches(USER_RULES, U1, "notes", {"user_id": "u1"})


def test_row_matches_a_bucket_without_filters_matches_any_row_of_its_tables():
    rules = SyncRules(1, (Bucket("public", ("news",)),))
    assert row_matches(rules, {}, "news", None)
    assert row_matches(rules, {}, "news", {"anything": 1})
    assert not row_matches(rules, {}, "todos", None)


def test_change_visible_delete_reaches_the_bucket_that_held_the_row():
    before = {"id": "r", "user_id": "u1"}
    assert change_visible(USER_RULES, U1, "todos", before, None)
    assert not change_visible(USER_RULES, {"sub": "u2"}, "todos", before, None)


def test_change_visible_row_moving_out_of_the_bucket_is_delivered_to_both_sides():
    before, after = {"user_id": "u1", "t": "x"}, {"user_id": "u2", "t": "x"}
    assert change_visible(USER_RULES, U1, "todos", before, after)
    assert change_visible(USER_RULES, {"sub": "u2"}, "todos", before, after)
    assert not change_visible(USER_RULES, {"sub": "u3"}, "todos", before, after)


def test_change_visible_row_never_in_the_bucket_is_not_delivered():
    assert not change_visible(USER_RULES, U1, "todos", {"user_id": "u2", "t": 1}, {"user_id": "u2", "t": 2})
    assert not change_visible(USER_RULES, U1, "todos", None, {"user_id": "u2"})
    assert not change_visible(USER_RULES, U1, "todos", {"user_id": "u2"}, None)


def test_change_visible_insert_into_the_bucket_is_delivered():
    assert change_visible(USER_RULES, U1, "todos", None, {"user_id": "u1"})


def test_change_visible_is_a_union_over_buckets():
    rules = SyncRules(
        1,
        (
            Bucket("mine", ("todos",), (Filter("user_id", FilterOp.EQ, "jwt:sub"),)),
            Bucket("urgent", ("todos",), (Filter("priority", FilterOp.GTE, "9"),)),
        ),
    )
    assert change_visible(rules, U1, "todos", {"user_id": "u2", "priority": 10}, None)
    assert not change_visible(rules, U1, "todos", {"user_id": "u2", "priority": 8}, None)


def test_filter_deltas_keeps_the_originals_sparse_delta_semantics():
    # Given user-scoped rules, a DELETE (no columns) and a sparse UPDATE lacking user_id are not delivered
    delete = make_delta("DELETE", table="todos", row_id="r", client_id="c", hlc=1 << 16)
    sparse = make_delta("UPDATE", table="todos", row_id="r", client_id="c", hlc=2 << 16, columns={"t": "x"})
    full = make_delta("UPDATE", table="todos", row_id="r", client_id="c", hlc=3 << 16, columns={"user_id": "u1"})
    assert filter_deltas(USER_RULES, U1, [delete, sparse, full]) == [full]
    assert not matches_bucket(delete, USER_RULES.buckets[0], U1)


# --- bounds of a stored document (ours) ------------------------------------------------------------------------


def _bounded_rules(buckets: int = 1, tables: int = 0, filters: int = 0, value: str = "v") -> SyncRules:
    return parse_sync_rules(
        {
            "version": 1,
            "buckets": [
                {
                    "name": f"b{b}",
                    "tables": [f"t{t}" for t in range(tables)],
                    "filters": [{"column": "c", "op": "eq", "value": value} for _ in range(filters)],
                }
                for b in range(buckets)
            ],
        }
    )


def test_check_sync_rules_limits_accepts_documents_at_the_bounds():
    check_sync_rules_limits(_bounded_rules(buckets=256))
    check_sync_rules_limits(_bounded_rules(tables=256, filters=64))


@pytest.mark.parametrize(
    ("rules", "message"),
    [
        (lambda: _bounded_rules(buckets=257), "Sync rules may have at most 256 buckets; got 257"),
        (lambda: _bounded_rules(tables=257), 'Bucket "b0" may list at most 256 tables'),
        (lambda: _bounded_rules(filters=65), 'Bucket "b0" may have at most 64 filters'),
    ],
    ids=["buckets", "tables", "filters"],
)
def test_check_sync_rules_limits_refuses_too_many_buckets_tables_or_filters(rules, message):
    with pytest.raises(SyncRuleError) as info:
        check_sync_rules_limits(rules())
    assert (info.value.message, info.value.status) == (message, 400)


def test_check_sync_rules_limits_refuses_a_document_too_large_to_store():
    # Given 200 buckets of 10 filters whose values are 200 bytes each (about 420 KB stored)
    rules = _bounded_rules(buckets=200, filters=10, value="x" * 200)
    with pytest.raises(PayloadTooLargeError) as info:
        check_sync_rules_limits(rules)
    assert info.value.status == 413 and info.value.message.endswith("bytes; the limit is 307,200")
