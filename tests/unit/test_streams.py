"""Streams in the rules document and membership filters: the shape, its round trip, every refusal message (naming the
stream or bucket and the field), the limits, and the check of a subscription's parameters against the token and the
membership tables (issue 43)."""

from __future__ import annotations

import re
from typing import Any

import pytest

from lakesync.core.errors import SyncRuleError
from lakesync.core.filters import Filter, FilterOp, InMemoryMemberships, Membership
from lakesync.core.rules import check_sync_rules_limits, parse_sync_rules
from lakesync.core.scope import check_subscription
from lakesync.core.streams import (
    INVALID_PARAM,
    MAX_PARAM_CHARS,
    MISSING_PARAM,
    NOT_ALLOWED,
    UNEXPECTED_PARAM,
    UNKNOWN_STREAM,
    Stream,
    StreamParam,
    StreamTtl,
    Subscription,
)
from lakesync.core.write_policy import WriteOp

MEMBER_OF = {
    "table": "memberships",
    "column": "project",
    "where": [{"column": "user", "op": "eq", "value": "jwt:sub"}],
}
PROJECT_TASKS = {
    "name": "project_tasks",
    "table": "tasks",
    "filters": [{"column": "project_id", "op": "eq", "value": "param:project"}],
    "params": {"project": {"subscription": {"membership": MEMBER_OF}}},
}


def _doc(*streams: Any, buckets: list[Any] | None = None, **extra: Any) -> dict[str, Any]:
    return {"version": 1, "buckets": buckets or [], "streams": list(streams), **extra}


def _stream(**fields: Any) -> dict[str, Any]:
    return {**PROJECT_TASKS, **fields}


def refused(message: str) -> Any:
    return pytest.raises(SyncRuleError, match=f"^{re.escape(message)}$")


# --- the shape --------------------------------------------------------------------------------------------------


def test_a_stream_parses_into_the_typed_model_and_round_trips():
    # Given a stream over tasks by project membership, with a write policy and lifetimes
    raw = _stream(write={"ops": ["insert", "update"]}, ttlSeconds={"default": 60, "max": 3600})
    # When the document is parsed
    rules = parse_sync_rules(_doc(raw))
    # Then the stream is typed, findable by name, and its JSON parses back to the same model
    (stream,) = rules.streams
    membership = Membership("memberships", "project", (Filter("user", FilterOp.EQ, "jwt:sub"),))
    assert stream == Stream(
        "project_tasks",
        "tasks",
        (Filter("project_id", FilterOp.EQ, "param:project"),),
        (StreamParam("project", membership=membership),),
        stream.write,
        StreamTtl(60, 3600),
    )
    assert stream.write.ops == frozenset({WriteOp.INSERT, WriteOp.UPDATE})
    assert rules.stream("project_tasks") is stream
    assert rules.stream("other") is None
    assert parse_sync_rules(rules.to_json()) == rules
    assert rules.to_json()["streams"][0]["params"] == {"project": {"subscription": {"membership": MEMBER_OF}}}


def test_every_parameter_source_round_trips():
    raw = _stream(
        filters=[
            {"column": "project_id", "op": "eq", "value": "param:project"},
            {"column": "owner", "op": "eq", "value": "param:me"},
            {"column": "prio", "op": "in", "value": "param:prio"},
            {"column": "team", "op": "eq", "value": "param:team"},
        ],
        params={
            "project": {"subscription": {"membership": MEMBER_OF}},
            "me": {"claim": "sub"},
            "prio": {"subscription": {"allowed": ["low", "high", "jwt:extra"]}},
            "team": {"subscription": {"allowed": "jwt:teams"}},
        },
    )
    rules = parse_sync_rules(_doc(raw))
    params = {p.name: p for p in rules.streams[0].params}
    assert params["me"] == StreamParam("me", claim="sub")
    assert params["prio"].allowed == ("low", "high", "jwt:extra")
    assert params["team"].allowed == ("jwt:teams",)
    assert not params["me"].from_subscription and params["team"].from_subscription
    assert parse_sync_rules(rules.to_json()) == rules


def test_documents_without_streams_parse_and_print_as_before():
    doc = {"version": 2, "buckets": [{"name": "all", "tables": [], "filters": []}]}
    rules = parse_sync_rules(doc)
    assert rules.streams == ()
    assert rules.to_json() == doc


def test_a_stream_without_filters_or_params_is_the_whole_table_with_the_engine_lifetimes():
    rules = parse_sync_rules(_doc({"name": "all_tasks", "table": "tasks"}))
    (stream,) = rules.streams
    assert stream.filters == () and stream.params == () and stream.ttl is None
    assert stream.lifetime == StreamTtl(86_400, 30 * 86_400)
    assert stream.lifetime.seconds(None) == 86_400
    assert stream.lifetime.seconds(10**9) == 30 * 86_400
    assert stream.lifetime.seconds(0) == 1


def test_ttl_with_only_a_max_below_the_engine_default_defaults_to_the_max():
    (stream,) = parse_sync_rules(_doc(_stream(ttlSeconds={"max": 600}))).streams
    assert stream.ttl == StreamTtl(600, 600)


def test_param_prefix_is_a_literal_in_a_bucket_and_a_parameter_in_a_stream():
    bucket = {"name": "b", "tables": ["t"], "filters": [{"column": "c", "op": "eq", "value": "param:x"}]}
    rules = parse_sync_rules(_doc(buckets=[bucket]))
    assert rules.buckets[0].filters == (Filter("c", FilterOp.EQ, "param:x"),)
    with refused('Stream "s" filter at index 0 uses undeclared parameter "x"'):
        parse_sync_rules(_doc({"name": "s", "table": "t", "filters": bucket["filters"]}))


def test_a_bucket_filter_may_take_its_values_from_a_membership():
    bucket = {
        "name": "mine",
        "tables": ["tasks"],
        "filters": [{"column": "project_id", "op": "in", "membership": MEMBER_OF}],
    }
    rules = parse_sync_rules({"version": 1, "buckets": [bucket]})
    (flt,) = rules.buckets[0].filters
    assert flt.membership is not None and flt.membership.table == "memberships"
    assert rules.to_json()["buckets"][0] == bucket


# --- refusals ---------------------------------------------------------------------------------------------------


def _filter(**fields: Any) -> dict[str, Any]:
    return {"column": "project_id", "op": "in", **fields}


BUCKET_FILTER_REFUSALS = [
    (_filter(value="v", membership=MEMBER_OF), "must have a value or a membership, not both"),
    (_filter(op="gt", membership=MEMBER_OF), "op must be one of: eq, in, neq with a membership"),
    (_filter(membership=None), "membership must be an object"),
    (_filter(membership={**MEMBER_OF, "z": 1, "a": 2}), "membership has unknown fields: a, z"),
    (_filter(membership={**MEMBER_OF, "table": ""}), "membership must name a table"),
    (_filter(membership={**MEMBER_OF, "table": "_lakesync_x"}), 'membership table "_lakesync_x" is the engine\'s own'),
    (_filter(membership={**MEMBER_OF, "column": 3}), "membership must name a column"),
    (_filter(membership={**MEMBER_OF, "where": {}}), "membership where must be an array"),
    (
        _filter(membership={**MEMBER_OF, "where": [{"column": "u", "op": "eq", "value": ""}]}),
        "membership where at index 0 must have a non-empty value",
    ),
    (
        _filter(membership={**MEMBER_OF, "where": [_filter(membership=MEMBER_OF)]}),
        "membership where at index 0 cannot have a membership",
    ),
]


@pytest.mark.parametrize(("flt", "message"), BUCKET_FILTER_REFUSALS, ids=[m for _, m in BUCKET_FILTER_REFUSALS])
def test_membership_filters_are_refused_with_the_bucket_filter_and_field_named(flt, message):
    doc = {"version": 1, "buckets": [{"name": "b", "tables": [], "filters": [flt]}]}
    with refused(f'Bucket "b" filter at index 0 {message}'):
        parse_sync_rules(doc)


STREAM_REFUSALS = [
    (_doc(streams=None), "Sync rules streams must be an array"),
    ({"version": 1, "buckets": [], "streams": {}}, "Sync rules streams must be an array"),
    (_doc(7), "Stream at index 0 must be an object"),
    (
        _doc(_stream(name="_x")),
        "Stream at index 0 must have a name of letters, digits, '_', '.' or '-' (at most 64, not '_' first)",
    ),
    (
        _doc(_stream(name="x" * 65)),
        "Stream at index 0 must have a name of letters, digits, '_', '.' or '-' (at most 64, not '_' first)",
    ),
    (_doc(_stream(), _stream()), 'Duplicate stream name: "project_tasks"'),
    (_doc(_stream(tables=["t"], extra=1)), 'Stream "project_tasks" has unknown fields: extra, tables'),
    (_doc(_stream(table="")), 'Stream "project_tasks" must name a table'),
    (_doc(_stream(table="_LakeSync_state")), 'Stream "project_tasks" table "_LakeSync_state" is the engine\'s own'),
    (
        _doc(_stream(table="billing"), tables={"billing": {"adminOnly": True}}),
        'Stream "project_tasks" table "billing" is admin-only',
    ),
    (_doc(_stream(filters={})), 'Stream "project_tasks" filters must be an array'),
    (_doc(_stream(filters=[None])), 'Stream "project_tasks" filter at index 0 must be an object'),
    (
        _doc(_stream(filters=[{"column": "c", "op": "like", "value": "v"}])),
        'Stream "project_tasks" filter at index 0 op must be one of: eq, in, neq, gt, lt, gte, lte',
    ),
    (_doc(_stream(params=[])), 'Stream "project_tasks" params must be an object of parameter name to source'),
    (
        _doc(_stream(params={"1x": {"claim": "sub"}})),
        "Stream \"project_tasks\" parameter names must be letters, digits or '_' (at most 64, not a digit first)",
    ),
    (
        _doc(_stream(params={"project": {}})),
        'Stream "project_tasks" parameter "project" must be an object with one of: claim, subscription',
    ),
    (
        _doc(_stream(params={"project": {"claim": "sub", "subscription": {}}})),
        'Stream "project_tasks" parameter "project" must be an object with one of: claim, subscription',
    ),
    (
        _doc(_stream(params={"project": {"claim": ""}})),
        'Stream "project_tasks" parameter "project" claim must be a non-empty string',
    ),
    (
        _doc(_stream(params={"project": {"subscription": {"any": True}}})),
        'Stream "project_tasks" parameter "project" subscription must be an object with one of: allowed, membership',
    ),
    (
        _doc(_stream(params={"project": {"subscription": {"allowed": []}}})),
        'Stream "project_tasks" parameter "project" allowed must be a non-empty string or a non-empty array of them',
    ),
    (
        _doc(_stream(params={"project": {"subscription": {"allowed": ["a", ""]}}})),
        'Stream "project_tasks" parameter "project" allowed must be a non-empty string or a non-empty array of them',
    ),
    (
        _doc(
            _stream(
                params={
                    "project": {
                        "subscription": {
                            "membership": {
                                **MEMBER_OF,
                                "where": [{"column": "user", "op": "eq", "value": "param:project"}],
                            }
                        }
                    }
                }
            )
        ),
        'Stream "project_tasks" parameter "project" membership where at index 0 uses undeclared parameter "project"',
    ),
    (
        _doc(_stream(params={**PROJECT_TASKS["params"], "spare": {"claim": "sub"}})),
        'Stream "project_tasks" parameter "spare" is not used by any filter',
    ),
    (
        _doc(_stream(write={"ops": ["read"]})),
        'Stream "project_tasks" write ops must be an array of: insert, update, delete',
    ),
    (_doc(_stream(ttlSeconds=60)), 'Stream "project_tasks" ttlSeconds must be an object with default and/or max'),
    (_doc(_stream(ttlSeconds={})), 'Stream "project_tasks" ttlSeconds must be an object with default and/or max'),
    (
        _doc(_stream(ttlSeconds={"default": 1, "min": 1})),
        'Stream "project_tasks" ttlSeconds must be an object with default and/or max',
    ),
    (_doc(_stream(ttlSeconds={"default": 0})), 'Stream "project_tasks" ttlSeconds default must be a positive integer'),
    (_doc(_stream(ttlSeconds={"max": True})), 'Stream "project_tasks" ttlSeconds max must be a positive integer'),
    (_doc(_stream(ttlSeconds={"max": 1.5})), 'Stream "project_tasks" ttlSeconds max must be a positive integer'),
    (
        _doc(_stream(ttlSeconds={"max": 30 * 86_400 + 1})),
        'Stream "project_tasks" ttlSeconds max may be at most 2,592,000',
    ),
    (
        _doc(_stream(ttlSeconds={"default": 100, "max": 10})),
        'Stream "project_tasks" ttlSeconds default must not exceed max',
    ),
]


@pytest.mark.parametrize(("doc", "message"), STREAM_REFUSALS, ids=[m for _, m in STREAM_REFUSALS])
def test_malformed_streams_are_refused_naming_the_stream_and_the_field(doc, message):
    with refused(message):
        parse_sync_rules(doc)


def test_bucket_checks_run_before_stream_checks():
    doc = _doc(7, buckets=[{"name": "", "tables": [], "filters": []}])
    with refused("Bucket at index 0 must have a non-empty name"):
        parse_sync_rules(doc)


# --- limits -----------------------------------------------------------------------------------------------------


def _many_params(n: int) -> dict[str, Any]:
    names = [f"p{i}" for i in range(n)]
    return _stream(
        filters=[{"column": name, "op": "eq", "value": f"param:{name}"} for name in names],
        params={name: {"subscription": {"allowed": "jwt:x"}} for name in names},
    )


def _memberships(n: int, where: int = 1) -> list[dict[str, Any]]:
    membership = {**MEMBER_OF, "where": [{"column": "user", "op": "eq", "value": "jwt:sub"}] * where}
    return [_filter(membership=membership) for _ in range(n)]


def test_limits_accept_documents_at_the_bounds():
    doc = _doc(
        _many_params(8),
        *[{"name": f"s{i}", "table": "t"} for i in range(63)],
        buckets=[{"name": "b", "tables": [], "filters": _memberships(4, where=8)}],
    )
    check_sync_rules_limits(parse_sync_rules(doc))


LIMIT_REFUSALS = [
    (_doc(*[{"name": f"s{i}", "table": "t"} for i in range(65)]), "Sync rules may have at most 64 streams; got 65"),
    (_doc(_many_params(9)), 'Stream "project_tasks" may declare at most 8 parameters'),
    (
        _doc({"name": "s", "table": "t", "filters": [{"column": "c", "op": "eq", "value": "v"}] * 65}),
        'Stream "s" may have at most 64 filters',
    ),
    (
        _doc(_stream(filters=[*PROJECT_TASKS["filters"], *_memberships(4)])),
        'Stream "project_tasks" may read at most 4 memberships',
    ),
    (
        _doc(buckets=[{"name": "b", "tables": [], "filters": _memberships(5)}]),
        'Bucket "b" may read at most 4 memberships',
    ),
    (
        _doc(buckets=[{"name": "b", "tables": [], "filters": _memberships(1, where=9)}]),
        'Bucket "b" membership may have at most 8 filters',
    ),
]


@pytest.mark.parametrize(("doc", "message"), LIMIT_REFUSALS, ids=[m for _, m in LIMIT_REFUSALS])
def test_limits_refuse_documents_over_the_bounds(doc, message):
    rules = parse_sync_rules(doc)
    with refused(message):
        check_sync_rules_limits(rules)


# --- subscriptions ----------------------------------------------------------------------------------------------

RULES = parse_sync_rules(
    _doc(
        PROJECT_TASKS,
        _stream(
            name="team_tasks",
            filters=[
                {"column": "team", "op": "eq", "value": "param:team"},
                {"column": "owner", "op": "eq", "value": "param:me"},
            ],
            params={"team": {"subscription": {"allowed": ["jwt:teams", "public"]}}, "me": {"claim": "sub"}},
        ),
    )
)
MEMBERSHIPS = InMemoryMemberships({"memberships": [{"user": "u1", "project": 42}, {"user": "u2", "project": 7}]})
U1 = {"sub": "u1", "teams": ["red", "blue"]}


@pytest.mark.parametrize(
    ("stream", "params", "claims"),
    [
        ("project_tasks", {"project": "42"}, U1),
        ("team_tasks", {"team": "blue"}, U1),
        ("team_tasks", {"team": "public"}, {"sub": "u9"}),
    ],
)
def test_allowed_subscriptions_pass(stream, params, claims):
    assert check_subscription(RULES, claims, Subscription.of(stream, params), MEMBERSHIPS) is None


INVALID_REASON = (
    f'Stream "project_tasks" parameter "project" must be a non-empty string of at most {MAX_PARAM_CHARS} characters'
)
SUBSCRIPTION_REFUSALS = [
    ("nope", {}, U1, UNKNOWN_STREAM, 'The sync rules have no stream "nope"'),
    ("project_tasks", {}, U1, MISSING_PARAM, 'Stream "project_tasks" parameter "project" is required'),
    (
        "project_tasks",
        {"project": "42", "extra": "1"},
        U1,
        UNEXPECTED_PARAM,
        'Stream "project_tasks" has no parameter "extra"',
    ),
    (
        "team_tasks",
        {"team": "red", "me": "u2"},
        U1,
        UNEXPECTED_PARAM,
        'Stream "team_tasks" parameter "me" comes from the token\'s claim "sub"',
    ),
    (
        "project_tasks",
        {"project": ""},
        U1,
        INVALID_PARAM,
        INVALID_REASON,
    ),
    (
        "project_tasks",
        {"project": "4" * (MAX_PARAM_CHARS + 1)},
        U1,
        INVALID_PARAM,
        INVALID_REASON,
    ),
    (
        "project_tasks",
        {"project": "7"},
        U1,
        NOT_ALLOWED,
        'Stream "project_tasks" parameter "project": the value is not allowed for this client',
    ),
    (
        "team_tasks",
        {"team": "green"},
        U1,
        NOT_ALLOWED,
        'Stream "team_tasks" parameter "team": the value is not allowed for this client',
    ),
    (
        "team_tasks",
        {"team": "public"},
        {},
        NOT_ALLOWED,
        'Stream "team_tasks" parameter "me" needs the token\'s claim "sub"',
    ),
]


@pytest.mark.parametrize(
    ("stream", "params", "claims", "code", "reason"), SUBSCRIPTION_REFUSALS, ids=[r[4] for r in SUBSCRIPTION_REFUSALS]
)
def test_refused_subscriptions_say_why_with_a_stable_code(stream, params, claims, code, reason):
    refusal = check_subscription(RULES, claims, Subscription.of(stream, params), MEMBERSHIPS)
    assert refusal is not None
    assert (refusal.code, refusal.reason) == (code, reason)


def test_a_non_string_parameter_is_invalid():
    refusal = check_subscription(RULES, U1, Subscription("project_tasks", (("project", 42),)), MEMBERSHIPS)  # type: ignore[arg-type]
    assert refusal is not None and refusal.code == INVALID_PARAM


def test_without_a_membership_source_no_membership_parameter_is_allowed():
    refusal = check_subscription(RULES, U1, Subscription.of("project_tasks", {"project": "42"}))
    assert refusal is not None and refusal.code == NOT_ALLOWED


def test_without_rules_every_stream_is_unknown():
    refusal = check_subscription(None, U1, Subscription.of("project_tasks", {"project": "42"}), MEMBERSHIPS)
    assert refusal is not None and refusal.code == UNKNOWN_STREAM


def test_a_subscription_is_identified_by_stream_and_sorted_params_not_by_expiry():
    a = Subscription.of("s", {"b": "2", "a": "1"}, expires_at=5)
    b = Subscription.of("s", {"a": "1", "b": "2"}, expires_at=9)
    assert a == b and hash(a) == hash(b)
    assert a.params == (("a", "1"), ("b", "2"))
    assert a.label() == 'Stream "s" (a=1, b=2)'
    assert a.to_json() == {"stream": "s", "params": {"a": "1", "b": "2"}, "expiresAt": 5}
    assert a.expired(5) and not a.expired(4) and not a.expired(None)
    assert not Subscription.of("s").expired(10**15)


def test_a_stream_says_when_a_subscription_runs_out_and_which_membership_tables_it_reads():
    rules = parse_sync_rules(
        _doc(
            _stream(ttlSeconds={"default": 60, "max": 600}),
            {"name": "plain", "table": "t"},
            buckets=[{"name": "b", "tables": [], "filters": [_filter(membership={**MEMBER_OF, "table": "teams"})]}],
        )
    )
    stream = rules.streams[0]
    assert stream.expires_at(1_000) == 61_000
    assert stream.expires_at(1_000, 10**6) == 601_000
    assert rules.streams[1].expires_at(0) == 86_400_000
    assert stream.membership_tables() == {"memberships"}
    assert rules.streams[1].membership_tables() == frozenset()
    assert rules.membership_tables() == {"memberships", "teams"}
    assert parse_sync_rules({"version": 1, "buckets": []}).membership_tables() == frozenset()
