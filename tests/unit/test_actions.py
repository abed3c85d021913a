"""Actions: actionId bytes, validateAction order and messages, wire JSON shapes, the pure pieces of dispatch."""

from __future__ import annotations

import json
from dataclasses import dataclass, field
from pathlib import Path

import pytest
from hypothesis import given
from hypothesis import strategies as st

from lakesync.core.actions import (
    Action,
    ActionContext,
    ActionDescriptor,
    ActionErrorResult,
    ActionHandler,
    ActionPush,
    ActionResponse,
    ActionResult,
    action_id,
    discovery_json,
    is_action_error,
    is_cacheable,
    make_action,
    no_handler_result,
    parse_action_push,
    parse_action_result,
    supports,
    unsupported_action_result,
    validate_action,
)
from lakesync.core.canonical import stable_stringify
from lakesync.core.errors import (
    ActionExecutionError,
    ActionValidationError,
    ValidationError,
)

VECTORS = Path(__file__).parent.parent / "vectors"
ACTION_VECTORS = json.loads((VECTORS / "actions.json").read_text(encoding="utf-8"))
ID_CASES = ACTION_VECTORS["actionId"]
VALIDATE_CASES = ACTION_VECTORS["validateAction"]
DISPATCH_CASES = ACTION_VECTORS["dispatcher"]
HTTP_ACTION_CASES = json.loads((VECTORS / "http_handlers.json").read_text(encoding="utf-8"))["action"]

VALID = {
    "actionId": "a1",
    "clientId": "client-1",
    "hlc": "100",
    "connector": "github",
    "actionType": "create_pr",
    "params": {"title": "Fix bug"},
}


def _wire_action(case_action):
    """A vector action as wire JSON: ``hlc_is_bigint`` true means the hlc travelled as a decimal string."""
    if not isinstance(case_action, dict):
        return case_action
    doc = dict(case_action)
    is_bigint = doc.pop("hlc_is_bigint", True)
    if not is_bigint and isinstance(doc.get("hlc"), str) and doc["hlc"].isdecimal():
        doc["hlc"] = int(doc["hlc"])  # not a bigint in the original = a JSON number here
    return doc


# --- actionId --------------------------------------------------------------------------------------------------


@pytest.mark.parametrize("case", ID_CASES, ids=[c["name"] for c in ID_CASES])
def test_action_id_matches_original_bytes(case):
    given_ = case["input"]
    payload = stable_stringify(
        {k: given_[k] for k in ("clientId", "hlc", "connector", "actionType", "params")},
    )
    assert payload == case["canonical_payload"]
    args = (given_["clientId"], int(given_["hlc"]), given_["connector"], given_["actionType"], given_["params"])
    assert action_id(*args) == case["expected_actionId"]
    assert make_action(*args).action_id == case["expected_actionId"]


params_strategy = st.dictionaries(
    st.text(max_size=5), st.one_of(st.integers(-(2**40), 2**40), st.text(max_size=5), st.booleans()), max_size=6
)


@given(params_strategy)
def test_action_id_ignores_params_key_order(params):
    reordered = dict(reversed(list(params.items())))
    assert action_id("c", 5, "gh", "t", params) == action_id("c", 5, "gh", "t", reordered)


@given(params_strategy, st.text(min_size=1, max_size=5))
def test_action_id_changes_with_params(params, extra_key):
    changed = {**params, extra_key: "different-value-" + str(params.get(extra_key))}
    assert action_id("c", 5, "gh", "t", params) != action_id("c", 5, "gh", "t", changed)


def test_action_id_depends_on_every_identity_field():
    base = ("c", 5, "gh", "t", {"a": 1})
    ids = {
        action_id(*base),
        action_id("d", 5, "gh", "t", {"a": 1}),
        action_id("c", 6, "gh", "t", {"a": 1}),
        action_id("c", 5, "gl", "t", {"a": 1}),
        action_id("c", 5, "gh", "u", {"a": 1}),
    }
    assert len(ids) == 5
    assert all(len(i) == 64 and int(i, 16) >= 0 for i in ids)


# --- validateAction --------------------------------------------------------------------------------------------


@pytest.mark.parametrize("case", VALIDATE_CASES, ids=[c["name"] for c in VALIDATE_CASES])
def test_validate_action_matches_vectors(case):
    doc = _wire_action(case["action"])
    expected = case["expected"]
    if expected["ok"]:
        action = validate_action(doc)
        assert action.to_json() == doc
        return
    with pytest.raises(ActionValidationError) as info:
        validate_action(doc)
    assert info.value.message == expected["message"]
    assert info.value.code == expected["error_code"]
    assert (info.value.status, info.value.api_code) == (400, "VALIDATION_ERROR")


@pytest.mark.parametrize(
    ("changes", "message"),
    [
        ({"hlc": 100}, "hlc must be a bigint"),
        ({"hlc": 100.0}, "hlc must be a bigint"),
        ({"hlc": None}, "hlc must be a bigint"),
        ({"hlc": True}, "hlc must be a bigint"),
        ({"hlc": "abc"}, "hlc must be a bigint"),
        ({"hlc": "-1"}, "hlc must be a bigint"),
        ({"hlc": "1.5"}, "hlc must be a bigint"),
        ({"hlc": str(2**64)}, "hlc must be a bigint"),
        ({"actionId": ""}, "actionId must be a non-empty string"),
        ({"actionId": 1, "clientId": ""}, "actionId must be a non-empty string"),
        ({"clientId": None, "hlc": 1}, "clientId must be a non-empty string"),
        ({"hlc": 1, "connector": ""}, "hlc must be a bigint"),
        ({"connector": 5}, "connector must be a non-empty string"),
        ({"actionType": "", "params": None}, "actionType must be a non-empty string"),
        ({"params": None}, "params must be a non-null object"),
        ({"params": "x"}, "params must be a non-null object"),
        ({"params": [], "idempotencyKey": 1}, "params must be a non-null object"),
        ({"idempotencyKey": None}, "idempotencyKey must be a string if provided"),
        ({"idempotencyKey": ["k"]}, "idempotencyKey must be a string if provided"),
    ],
)
def test_validate_action_reports_first_failure_in_original_order(changes, message):
    with pytest.raises(ActionValidationError) as info:
        validate_action({**VALID, **changes})
    assert info.value.message == message


@pytest.mark.parametrize("value", [None, 5, "action", True])
def test_validate_action_rejects_non_objects(value):
    with pytest.raises(ActionValidationError) as info:
        validate_action(value)
    assert info.value.message == "Action must be a non-null object"


def test_validate_action_treats_array_as_object_without_fields():
    with pytest.raises(ActionValidationError) as info:
        validate_action([VALID])
    assert info.value.message == "actionId must be a non-empty string"


def test_validate_action_builds_typed_action():
    action = validate_action({**VALID, "hlc": "18446744073709551615", "idempotencyKey": "k-1", "extra": 1})
    assert action == Action("a1", "client-1", 2**64 - 1, "github", "create_pr", {"title": "Fix bug"}, "k-1")
    assert action.idempotency_cache_key == "idem:k-1"


def test_validate_action_accepts_empty_idempotency_key_that_never_dedups():
    action = validate_action({**VALID, "idempotencyKey": ""})
    assert action.idempotency_key == ""
    assert action.idempotency_cache_key is None
    assert action.to_json()["idempotencyKey"] == ""


def test_validate_action_rechecks_a_typed_action():
    good = make_action("c", 7, "gh", "t", {"x": [1, {"y": None}]})
    assert validate_action(good) == good
    bad = Action("id", "c", 7, "", "t", {})
    with pytest.raises(ActionValidationError) as info:
        validate_action(bad)
    assert info.value.message == "connector must be a non-empty string"


def test_action_json_round_trip_keeps_hlc_as_decimal_string():
    action = make_action("c", (1_700_000_000_000 << 16) | 3, "gh", "t", {"b": 1, "a": 2}, "key")
    doc = action.to_json()
    assert doc["hlc"] == str(action.hlc)
    assert list(doc) == ["actionId", "clientId", "hlc", "connector", "actionType", "params", "idempotencyKey"]
    assert Action.from_json(json.loads(json.dumps(doc))) == action
    assert "idempotencyKey" not in make_action("c", 1, "gh", "t", {}).to_json()


# --- ActionPush ------------------------------------------------------------------------------------------------


@pytest.mark.parametrize("case", HTTP_ACTION_CASES, ids=[c["name"] for c in HTTP_ACTION_CASES])
def test_parse_action_push_matches_http_vectors(case):
    body = json.loads(case["raw_body"])
    expected = case["expected"]
    if expected["status"] != 200:
        with pytest.raises(ValidationError) as info:
            parse_action_push(body)
        assert info.value.to_body() == expected["body"]
        assert info.value.status == expected["status"]
        return
    push = parse_action_push(body)
    assert push.to_json() == body
    response = ActionResponse.from_json(expected["body"])
    assert response.to_json() == expected["body"]
    for action, result in zip(push.actions, response.results, strict=True):
        if isinstance(result, ActionErrorResult) and result.code == "ACTION_NOT_SUPPORTED":
            assert no_handler_result(action) == result


@pytest.mark.parametrize(
    "body",
    [None, [], {"clientId": "c"}, {"actions": []}, {"clientId": "", "actions": []}, {"clientId": 5, "actions": []}],
)
def test_parse_action_push_requires_client_id_and_actions(body):
    with pytest.raises(ValidationError) as info:
        parse_action_push(body)
    assert info.value.message == "Missing required fields: clientId, actions"
    assert not isinstance(info.value, ActionValidationError)


def test_parse_action_push_validates_every_action_before_returning():
    body = {"clientId": "c", "actions": [VALID, {**VALID, "actionId": "a2", "hlc": 5}]}
    with pytest.raises(ActionValidationError) as info:
        parse_action_push(body)
    assert info.value.message == "hlc must be a bigint"


def test_action_push_round_trip():
    push = ActionPush("c", (make_action("c", 1, "gh", "t", {}), make_action("c", 2, "gh", "u", {"k": "v"}, "i")))
    assert ActionPush.from_json(push.to_json()) == push
    assert parse_action_push({"clientId": "c", "actions": []}) == ActionPush("c", ())


# --- results and responses -------------------------------------------------------------------------------------


def _dispatch_steps():
    for case in DISPATCH_CASES:
        for i, step in enumerate(case["steps"]):
            yield pytest.param(case, step, id=f"{case['name']}#{i}")


@pytest.mark.parametrize(("case", "step"), list(_dispatch_steps()))
def test_action_response_wire_shape_round_trips_dispatcher_vectors(case, step):
    value = step["expected"]["value"]
    response = ActionResponse.from_json(value)
    assert response.to_json() == value
    assert response.server_hlc == int(case["hlcNow"])
    for raw, result in zip(value["results"], response.results, strict=True):
        assert isinstance(result, ActionErrorResult) is is_action_error(raw)
        assert parse_action_result(raw) == result


@pytest.mark.parametrize(("case", "step"), list(_dispatch_steps()))
def test_not_supported_results_match_dispatcher_vectors(case, step):
    actions = [validate_action(a) for a in step["actions"]]
    results = ActionResponse.from_json(step["expected"]["value"]).results
    for action, result in zip(actions, results, strict=True):
        if not isinstance(result, ActionErrorResult) or result.code != "ACTION_NOT_SUPPORTED":
            continue
        handler = case["handlers"].get(action.connector)
        built = no_handler_result(action) if handler is None else unsupported_action_result(action)
        assert built == result
        assert built.to_json() == result.to_json()


def test_error_result_from_execution_error_keeps_retryable():
    retry = ActionErrorResult.from_error("a1", ActionExecutionError("Rate limited", retryable=True))
    final = ActionErrorResult.from_error("a2", ActionExecutionError("Forbidden"))
    assert retry == ActionErrorResult("a1", "ACTION_EXECUTION_ERROR", "Rate limited", True)
    assert final == ActionErrorResult("a2", "ACTION_EXECUTION_ERROR", "Forbidden", False)
    assert not is_cacheable(retry)
    assert is_cacheable(final)
    assert is_cacheable(ActionResult("a3", {}, 0))


@pytest.mark.parametrize(
    ("doc", "message"),
    [
        ({"results": {}, "serverHlc": "1"}, "response.results must be an array"),
        ({"results": [], "serverHlc": 1}, "response.serverHlc"),
        ({"results": [5], "serverHlc": "1"}, "response.results[0] must be an object"),
        (
            {"results": [{"actionId": "a", "data": [], "serverHlc": "1"}], "serverHlc": "1"},
            "response.results[0].data must be an object",
        ),
        (
            {"results": [{"actionId": "a", "code": "X", "message": "m", "retryable": "no"}], "serverHlc": "1"},
            "response.results[0].retryable must be a boolean",
        ),
        (
            {"results": [{"actionId": "", "data": {}, "serverHlc": "1"}], "serverHlc": "1"},
            "response.results[0].actionId must be a non-empty string",
        ),
    ],
)
def test_action_response_from_json_names_the_bad_field(doc, message):
    with pytest.raises(ValidationError) as info:
        ActionResponse.from_json(doc)
    assert message in info.value.message


def test_action_result_json_shape():
    result = ActionResult("a1", {"url": "https://x"}, 42)
    assert result.to_json() == {"actionId": "a1", "data": {"url": "https://x"}, "serverHlc": "42"}
    assert ActionResult.from_json(result.to_json()) == result


@pytest.mark.parametrize("schema", [None, {"type": "object", "properties": {"title": {"type": "string"}}}])
def test_action_descriptor_round_trip(schema):
    descriptor = ActionDescriptor("create_pr", "Open a pull request", schema)
    doc = descriptor.to_json()
    assert ("paramsSchema" in doc) is (schema is not None)
    assert ActionDescriptor.from_json(doc) == descriptor


def test_action_descriptor_from_json_rejects_bad_fields():
    with pytest.raises(ValidationError):
        ActionDescriptor.from_json({"actionType": "", "description": "d"})
    with pytest.raises(ValidationError):
        ActionDescriptor.from_json({"actionType": "t", "description": "d", "paramsSchema": []})


# --- handler protocol ------------------------------------------------------------------------------------------


@dataclass
class _EchoHandler:
    name: str
    supported_actions: tuple[ActionDescriptor, ...]
    calls: list[Action] = field(default_factory=list)

    def execute(self, action: Action, context: ActionContext) -> ActionResult:
        self.calls.append(action)
        if action.params.get("fail"):
            raise ActionExecutionError("upstream down", retryable=True)
        return ActionResult(action.action_id, {"echo": dict(action.params), "claims": dict(context.claims)}, 9)


def _as_handler(handler: ActionHandler) -> ActionHandler:
    return handler


def test_action_handler_protocol_supports_and_discovery():
    github = _as_handler(_EchoHandler("github", (ActionDescriptor("create_pr", "Open a PR"),)))
    slack = _as_handler(_EchoHandler("slack", (ActionDescriptor("send", "Post", {"type": "object"}),)))
    assert supports(github, "create_pr")
    assert not supports(github, "send")
    assert discovery_json([slack, github]) == {
        "connectors": {
            "slack": [{"actionType": "send", "description": "Post", "paramsSchema": {"type": "object"}}],
            "github": [{"actionType": "create_pr", "description": "Open a PR"}],
        }
    }


def test_action_handler_execute_result_and_error_become_wire_results():
    handler = _EchoHandler("github", (ActionDescriptor("create_pr", "Open a PR"),))
    ok_action = make_action("c", 1, "github", "create_pr", {"title": "t"})
    result = handler.execute(ok_action, ActionContext({"org": "acme"}))
    assert result.to_json() == {
        "actionId": ok_action.action_id,
        "data": {"echo": {"title": "t"}, "claims": {"org": "acme"}},
        "serverHlc": "9",
    }
    failing = make_action("c", 2, "github", "create_pr", {"fail": True})
    with pytest.raises(ActionExecutionError) as info:
        handler.execute(failing, ActionContext())
    error = ActionErrorResult.from_error(failing.action_id, info.value)
    assert error.to_json() == {
        "actionId": failing.action_id,
        "code": "ACTION_EXECUTION_ERROR",
        "message": "upstream down",
        "retryable": True,
    }
    assert len(handler.calls) == 2
