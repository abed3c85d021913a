"""The DynamoDB stream event source mappings' filters in the template, run against stream records.

DynamoDB event source mappings filter only on a record's ``dynamodb`` key
(https://docs.aws.amazon.com/lambda/latest/dg/with-ddb-filtering.html): a pattern naming ``eventName`` would never
match, and the broadcaster and the flush trigger would never run. Each synthesized pattern is checked for that, then
run by :func:`matches` -- the part of Lambda's filter rule syntax the patterns use (exact values, ``exists``,
``prefix``; https://docs.aws.amazon.com/lambda/latest/dg/invocation-eventfiltering.html#filtering-syntax), which
refuses any other operator -- and, as a cross-check, by moto's EventBridge pattern matcher, over stream records as
Lambda delivers them: an ``INSERT``, a ``MODIFY``, a ``REMOVE`` by the flush and one by TTL. A record passes the
filter exactly when its handler acts on it, but for a ``MODIFY`` of an item the handler acts on when inserted: with
the ``NEW_IMAGE`` view nothing under ``dynamodb`` tells it from an ``INSERT``, so it passes and the handler, which
checks ``eventName`` itself, drops it (log items and flush requests are never updated).
"""

from __future__ import annotations

import base64
import json
from collections.abc import Mapping
from typing import Any

import pytest
from moto.events.models import EventPattern

from lakesync.aws.buffer.log_chunks import encode_entries
from lakesync.aws.flush_trigger import flush_requests_in
from lakesync.aws.log_stream import decode_record
from lakesync.core.flush_requests import flush_request_key
from lakesync.core.log import LogEntry, ShardId

TTL_DELETE = {"type": "Service", "principalId": "dynamodb.amazonaws.com"}
"""``userIdentity`` of a record DynamoDB's TTL wrote."""


def matches(pattern: Mapping[str, Any], record: Mapping[str, Any]) -> bool:
    """Whether ``record`` passes the Lambda filter ``pattern`` (every field of the pattern matches; a field's rules
    are alternatives)."""
    for name, rule in pattern.items():
        value = record.get(name) if isinstance(record, Mapping) else None
        if isinstance(rule, Mapping):
            if not matches(rule, value if isinstance(value, Mapping) else {}):
                return False
        elif not any(_matches_rule(r, name in record, value) for r in rule):
            return False
    return True


def _matches_rule(rule: Any, present: bool, value: Any) -> bool:
    leaf = present and not isinstance(value, (Mapping, list))  # exists and values match leaves only
    if not isinstance(rule, Mapping):
        return leaf and value == rule
    ((operator, operand),) = rule.items()
    if operator == "exists":
        return leaf is operand
    if operator == "prefix":
        return leaf and isinstance(value, str) and value.startswith(operand)
    raise AssertionError(f"filter operator {operator!r} is not supported by this matcher")


def _stream_mappings(cfn: Any) -> dict[str, dict[str, Any]]:
    """Logical id -> properties of each event source mapping reading a DynamoDB table's stream."""
    tables = cfn.of_type("AWS::DynamoDB::Table")
    return {
        lid: m
        for lid, m in cfn.of_type("AWS::Lambda::EventSourceMapping").items()
        if m["EventSourceArn"].get("Fn::GetAtt", [None])[0] in tables
    }


def _pattern(cfn: Any, function: str) -> dict[str, Any]:
    logical = cfn.functions()[function]["logical"]
    (mapping,) = [m for m in _stream_mappings(cfn).values() if m["FunctionName"] == {"Ref": logical}]
    (flt,) = mapping["FilterCriteria"]["Filters"]
    pattern: dict[str, Any] = json.loads(flt["Pattern"])
    return pattern


def _record(event: str, keys: dict[str, Any], image: dict[str, Any] | None, **extra: Any) -> dict[str, Any]:
    change: dict[str, Any] = {"Keys": keys, "SequenceNumber": "100", "SizeBytes": 64, "StreamViewType": "NEW_IMAGE"}
    if image is not None:
        change["NewImage"] = image
    return {"eventID": "1", "eventName": event, "eventSource": "aws:dynamodb", "dynamodb": change, **extra}


def _log_records() -> dict[str, dict[str, Any]]:
    shard = ShardId("g1", "todos", 0)
    wire = json.dumps({"op": "INSERT", "table": "todos", "rowId": "r1"}, separators=(",", ":"))
    entry = LogEntry(shard, 7, 1 << 16, None, None, {"title": "t"}, len(wire), wire)
    keys = {"shard": {"S": shard.key}, "seq": {"N": "7"}}
    item = {
        **keys,
        "n": {"N": "1"},
        "c": {"N": str(1 << 16)},
        "z": {"B": base64.b64encode(encode_entries([entry])).decode("ascii")},
        "exp": {"N": "1800000000"},
    }
    return {
        "insert": _record("INSERT", keys, item),
        "modify": _record("MODIFY", keys, item),
        "release": _record("REMOVE", keys, None),
        "ttl": _record("REMOVE", keys, None, userIdentity=TTL_DELETE),
    }


def _config_records() -> dict[str, dict[str, Any]]:
    request = {"gw": {"S": "g1"}, "sk": {"S": flush_request_key(1_700_000_000_000, "abc")}}
    lease = {"gw": {"S": "#lakesync"}, "sk": {"S": "flushlease"}}
    rules = {"gw": {"S": "g1"}, "sk": {"S": "rules"}}
    return {
        "insert": _record("INSERT", request, {**request, "doc": {"S": "{}"}}),
        "modify": _record("MODIFY", request, {**request, "doc": {"S": "{}"}}),
        "served": _record("REMOVE", request, None),
        "lease": _record("MODIFY", lease, {**lease, "exp": {"N": "1800000000"}}),
        "rules": _record("INSERT", rules, {**rules, "doc": {"S": "{}"}}),
        "ttl": _record("REMOVE", lease, None, userIdentity=TTL_DELETE),
    }


def _broadcast_acts(record: dict[str, Any]) -> bool:
    return decode_record(record) is not None


def _trigger_acts(record: dict[str, Any]) -> bool:
    return bool(flush_requests_in({"Records": [record]}).requests)


def test_every_dynamodb_stream_filter_uses_only_the_dynamodb_key(cfn):
    # Given every event source mapping on a DynamoDB stream (the broadcaster's and the flush trigger's at least)
    mappings = _stream_mappings(cfn)
    assert len(mappings) >= 2
    for lid, mapping in mappings.items():
        filters = mapping["FilterCriteria"]["Filters"]
        assert filters, lid
        # Then each of its patterns names the dynamodb key and nothing else (not eventName)
        for flt in filters:
            assert set(json.loads(flt["Pattern"])) == {"dynamodb"}, lid


@pytest.mark.parametrize(
    ("function", "records", "acts", "admitted"),
    [
        ("ws_broadcast", _log_records, _broadcast_acts, {"insert", "modify"}),
        ("flush_trigger", _config_records, _trigger_acts, {"insert", "modify"}),
    ],
)
def test_a_stream_filter_admits_the_records_its_handler_acts_on(cfn, function, records, acts, admitted):
    # Given the synthesized filter of the function's stream mapping and records as Lambda delivers them
    pattern = _pattern(cfn, function)
    assert set(pattern) == {"dynamodb"}  # what Lambda filters a DynamoDB record on, all the matcher has to model
    samples = records()
    passed = {name for name, record in samples.items() if matches(pattern, record)}
    # Then the new item passes and its updates (none happen) pass too; removals and other items never do
    assert passed == admitted
    # And moto's EventBridge matcher agrees on every record
    moto_pattern = EventPattern.load(json.dumps(pattern))
    assert {name for name, record in samples.items() if moto_pattern.matches_event(record)} == passed
    # And the handler acts on exactly the inserted item: the filter loses nothing it needs
    assert {name for name, record in samples.items() if acts(record)} == {"insert"}


@pytest.mark.parametrize(
    ("pattern", "record", "expected"),
    [
        ({"a": {"b": [{"exists": True}]}}, {"a": {"b": "x"}}, True),
        ({"a": {"b": [{"exists": True}]}}, {"a": {}}, False),
        ({"a": {"b": [{"exists": True}]}}, {}, False),
        ({"a": [{"exists": True}]}, {"a": {"b": "x"}}, False),
        ({"a": {"b": [{"exists": False}]}}, {}, True),
        ({"a": ["x", "y"]}, {"a": "y"}, True),
        ({"a": ["x"]}, {"a": "xx"}, False),
        ({"a": [{"prefix": "fl"}]}, {"a": "flush"}, True),
        ({"a": [{"prefix": "fl"}]}, {"a": "ef"}, False),
        ({"a": ["x"], "b": ["y"]}, {"a": "x", "b": "z"}, False),
    ],
)
def test_the_matcher_follows_the_filter_rules_it_implements(pattern, record, expected):
    assert matches(pattern, record) is expected
    assert EventPattern.load(json.dumps(pattern)).matches_event(record) is expected
