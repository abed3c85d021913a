"""Action policies (lakesync.core.action_policy) and their enforcement by the dispatcher on the in-memory adapters:
the ``actions`` field parsed and refused with clear messages, matched to the connector's action types; actions off
for clients without a policy, allowed by type, object, role and claim, always allowed to admins; a refused action
never run, cached, claimed or recorded; discovery showing each caller only what it may run; results, claims and
idempotency keys kept per client."""

from __future__ import annotations

from typing import Any

import pytest

from lakesync.core.action_policy import (
    ActionCaller,
    ActionGrant,
    ActionPolicy,
    ClaimRequirement,
    check_policy,
    parse_action_policy,
    refusal,
    visible_actions,
)
from lakesync.core.actions import (
    Action,
    ActionContext,
    ActionDescriptor,
    ActionErrorResult,
    ActionResult,
    action_record_key,
    make_action,
)
from lakesync.core.connectors import ConnectorValidationError
from lakesync.core.hlc import HLC, encode
from lakesync.gateway.actions import IN_PROGRESS, describe, dispatch
from lakesync.gateway.deps import GatewayDeps
from lakesync.gateway.memory import InMemoryActionStore, InMemoryBufferStore, InMemoryConfigStore

GW = "default"
T0 = 1_700_000_000_000
SOBJECT = {"type": "string"}
CRM_ACTIONS = (
    ActionDescriptor(
        "update_record",
        "Update a record",
        {"type": "object", "properties": {"sobject": SOBJECT, "id": {"type": "string"}}},
        target_param="sobject",
    ),
    ActionDescriptor("create_record", "Create a record", {"type": "object"}, target_param="sobject"),
    ActionDescriptor("ping", "No object"),
)


def policy_doc(**fields: Any) -> dict[str, Any]:
    return {"name": "crm", "type": "salesforce", "actions": fields}


SUPPORT = {
    "allow": [{"type": "update_record", "objects": ["Case", "Task"]}, {"type": "ping"}],
    "requireClaim": {"name": "team", "values": ["support", "ops"]},
}


# -- parsing -----------------------------------------------------------------------------------------------------------


def test_parse_a_full_policy() -> None:
    policy = parse_action_policy(policy_doc(**SUPPORT, requireRole=["agent", "client"]))
    assert policy == ActionPolicy(
        (ActionGrant("update_record", ("Case", "Task")), ActionGrant("ping")),
        ("agent", "client"),
        ClaimRequirement("team", ("support", "ops")),
    )


def test_no_actions_field_is_no_policy() -> None:
    assert parse_action_policy({"name": "crm", "type": "salesforce"}) is None


@pytest.mark.parametrize(
    ("actions", "message"),
    [
        (None, "actions must be an object {allow, requireRole?, requireClaim?}"),
        ([], "actions must be an object {allow, requireRole?, requireClaim?}"),
        ({"alow": [], "requireRole": "x"}, 'actions has an unknown field "alow" (allowed: allow, requireClaim, '),
        ({"requireRole": "x"}, "actions.allow must be a non-empty array of {type, objects?}"),
        ({"allow": [], "requireRole": "x"}, "actions.allow must be a non-empty array"),
        ({"allow": ["update_record"], "requireRole": "x"}, "actions.allow[0] must be an object {type, objects?}"),
        ({"allow": [{"type": ""}], "requireRole": "x"}, "actions.allow[0].type must be a non-empty string"),
        ({"allow": [{"type": "a", "object": ["Case"]}], "requireRole": "x"}, "actions.allow[0] has an unknown field"),
        ({"allow": [{"type": "a", "objects": []}], "requireRole": "x"}, "actions.allow[0].objects must be a non-empty"),
        ({"allow": [{"type": "a", "objects": "Case"}], "requireRole": "x"}, "actions.allow[0].objects must be"),
        ({"allow": [{"type": "a"}, {"type": "a"}], "requireRole": "x"}, 'actions.allow[1].type "a" is listed twice'),
        ({"allow": [{"type": "a"}]}, "actions needs requireRole or requireClaim: say which clients may run"),
        (
            {"allow": [{"type": "a"}], "requireRole": ""},
            "actions.requireRole must be a non-empty string or a non-empty",
        ),
        ({"allow": [{"type": "a"}], "requireRole": [1]}, "actions.requireRole must be"),
        ({"allow": [{"type": "a"}], "requireClaim": "team"}, "actions.requireClaim must be an object {name, values}"),
        (
            {"allow": [{"type": "a"}], "requireClaim": {"values": ["x"]}},
            "actions.requireClaim.name must be a non-empty",
        ),
        (
            {"allow": [{"type": "a"}], "requireClaim": {"name": "role", "values": ["admin"]}},
            'actions.requireClaim.name "role" is not a custom claim (use requireRole for the role)',
        ),
        ({"allow": [{"type": "a"}], "requireClaim": {"name": "team"}}, "actions.requireClaim.values must be"),
        ({"allow": [{"type": "a"}], "requireClaim": {"name": "t", "values": [""]}}, "actions.requireClaim.values"),
    ],
)
def test_a_malformed_policy_is_a_validation_error_naming_the_field(actions: Any, message: str) -> None:
    with pytest.raises(ConnectorValidationError) as err:
        parse_action_policy({"actions": actions})
    assert err.value.message.startswith(message) and err.value.status == 400


def test_policy_against_the_connector_actions() -> None:
    policy = parse_action_policy(policy_doc(**SUPPORT))
    assert policy is not None
    check_policy(policy, "salesforce", CRM_ACTIONS)
    with pytest.raises(ConnectorValidationError, match='connector type "postgres" runs no actions'):
        check_policy(policy, "postgres", None)
    typo = ActionPolicy((ActionGrant("update_recrod"),), ("client",))
    with pytest.raises(ConnectorValidationError) as err:
        check_policy(typo, "salesforce", CRM_ACTIONS)
    assert err.value.message == (
        'actions.allow[0].type "update_recrod" is not an action of connector type "salesforce" '
        "(its actions: update_record, create_record, ping)"
    )
    untargeted = ActionPolicy((ActionGrant("ping", ("Case",)),), ("client",))
    with pytest.raises(ConnectorValidationError, match='"ping" does not target named objects'):
        check_policy(untargeted, "salesforce", CRM_ACTIONS)


# -- evaluation --------------------------------------------------------------------------------------------------------


def _act(action_type: str = "update_record", **params: Any) -> Action:
    return make_action("c1", encode(T0, 0), "crm", action_type, params)


SUPPORT_POLICY = parse_action_policy(policy_doc(**SUPPORT))


@pytest.mark.parametrize(
    ("caller", "action", "code_or_none"),
    [
        (ActionCaller("admin"), _act("create_record", sobject="User"), None),
        (ActionCaller("client", {"team": "support"}), _act(sobject="Case"), None),
        (ActionCaller("client", {"team": "support"}), _act(sobject="cASE"), None),
        (ActionCaller("client", {"team": ("sales", "ops")}), _act(sobject="Task"), None),
        (ActionCaller("client", {"team": "support"}), _act("ping"), None),
        (ActionCaller("client", {"team": "support"}), _act(sobject="User"), 'on "User"'),
        (ActionCaller("client", {"team": "support"}), _act(), "on no object"),
        (ActionCaller("client", {"team": "support"}), _act(sobject=["Case"]), "on no object"),
        (ActionCaller("client", {"team": "support"}), _act("create_record", sobject="Case"), "is not allowed"),
        (ActionCaller("client", {"team": "sales"}), _act(sobject="Case"), "role and claims may not"),
        (ActionCaller("client", {"team": ("sales",)}), _act(sobject="Case"), "role and claims may not"),
        (ActionCaller("client", {}), _act(sobject="Case"), "role and claims may not"),
        (ActionCaller("client", {"Team": "support"}), _act(sobject="Case"), "role and claims may not"),
    ],
)
def test_refusal_by_claim_type_and_object(caller: ActionCaller, action: Action, code_or_none: str | None) -> None:
    refused = refusal(SUPPORT_POLICY, caller, action, "sobject")
    if code_or_none is None:
        assert refused is None
    else:
        assert refused is not None and refused.code == "ACTION_FORBIDDEN" and code_or_none in refused.message
        assert refused.retryable is False


def test_refusal_without_a_policy_and_by_role() -> None:
    action = _act(sobject="Case")
    refused = refusal(None, ActionCaller("client", {"team": "support"}), action, "sobject")
    assert refused is not None and refused.message == 'Actions of connector "crm" are not enabled for clients'
    assert refusal(None, ActionCaller("admin"), action, "sobject") is None
    by_role = ActionPolicy((ActionGrant("update_record"),), ("agent",))
    assert refusal(by_role, ActionCaller("agent"), action, "sobject") is None
    assert refusal(by_role, ActionCaller("client"), action, "sobject") is not None
    both = ActionPolicy((ActionGrant("update_record"),), ("agent",), ClaimRequirement("team", ("support",)))
    assert refusal(both, ActionCaller("agent", {"team": "support"}), action, "sobject") is None
    assert refusal(both, ActionCaller("agent", {"team": "sales"}), action, "sobject") is not None
    assert refusal(both, ActionCaller("client", {"team": "support"}), action, "sobject") is not None


def test_an_entry_with_objects_on_an_untargeted_action_allows_nothing() -> None:
    # (registration refuses such a policy; a handler without a target parameter fails closed all the same)
    policy = ActionPolicy((ActionGrant("ping", ("Case",)),), ("client",))
    assert refusal(policy, ActionCaller("client"), _act("ping", sobject="Case"), None) is not None


def test_visible_actions_narrow_the_target_to_the_allowed_objects() -> None:
    visible = visible_actions(SUPPORT_POLICY, ActionCaller("client", {"team": "ops"}), CRM_ACTIONS)
    assert [d.action_type for d in visible] == ["update_record", "ping"]
    assert visible[0].to_json()["paramsSchema"] == {
        "type": "object",
        "properties": {"sobject": {"type": "string", "enum": ["Case", "Task"]}, "id": {"type": "string"}},
    }
    assert visible[1] == CRM_ACTIONS[2]
    assert visible_actions(SUPPORT_POLICY, ActionCaller("client", {"team": "sales"}), CRM_ACTIONS) == []
    assert visible_actions(None, ActionCaller("client", {"team": "ops"}), CRM_ACTIONS) == []
    assert visible_actions(None, ActionCaller("admin"), CRM_ACTIONS) == list(CRM_ACTIONS)


# -- the dispatcher ----------------------------------------------------------------------------------------------------


class Crm:
    """A connector whose executions are counted; each result says which run it was."""

    name = "crm"
    supported_actions = CRM_ACTIONS

    def __init__(self) -> None:
        self.calls: list[Action] = []

    def execute(self, action: Action, context: ActionContext) -> ActionResult:
        self.calls.append(action)
        return ActionResult(action.action_id, {"run": len(self.calls), "by": action.client_id}, 7)


class Env:
    def __init__(self, policy: ActionPolicy | None) -> None:
        self.handler = Crm()
        self.store = InMemoryActionStore()
        self.buffer = InMemoryBufferStore()
        self.deps = GatewayDeps(
            self.buffer,
            InMemoryConfigStore(),
            self.store,
            clock=HLC(lambda: T0),
            wall_ms=lambda: T0,
            action_handlers={"crm": self.handler},
            action_policies={"crm": policy} if policy is not None else {},
        )

    def run(self, action: Action, *, role: str = "client", **claims: Any) -> Any:
        (result,) = dispatch(self.deps, GW, [action], client_id=action.client_id, claims=claims, role=role).results
        return result

    def provenance_rows(self) -> int:
        return sum(len(self.buffer.read_log(s, 0, 1000)) for s in self.buffer.list_shards(GW))


def action(client: str = "c1", hlc: int = 0, action_type: str = "update_record", key: str | None = None) -> Action:
    return make_action(client, encode(T0 + hlc, 0), "crm", action_type, {"sobject": "Case", "id": "x"}, key)


def test_without_a_policy_a_client_is_refused_and_nothing_is_run_cached_or_recorded() -> None:
    env = Env(None)
    refused = action()
    result = env.run(refused, team="support")
    assert result == ActionErrorResult(
        refused.action_id, "ACTION_FORBIDDEN", 'Actions of connector "crm" are not enabled for clients', False
    )
    assert env.handler.calls == [] and env.provenance_rows() == 0
    assert env.store.get(GW, "c1", [refused.action_id], T0 // 1000) == {}
    # And an admin runs it, recorded in provenance
    assert isinstance(env.run(refused, role="admin"), ActionResult) and len(env.handler.calls) == 1
    assert env.provenance_rows() == 1


def test_a_refusal_is_not_cached_so_the_same_action_runs_once_the_caller_may() -> None:
    env = Env(SUPPORT_POLICY)
    wanted = action(key="k")
    assert env.run(wanted, team="sales").code == "ACTION_FORBIDDEN"
    assert env.store.get(GW, "c1", [wanted.action_id, "idem:k"], T0 // 1000) == {}
    result = env.run(wanted, team="support")
    assert isinstance(result, ActionResult) and len(env.handler.calls) == 1


def test_a_cached_result_is_not_replayed_to_a_caller_who_lost_the_right() -> None:
    env = Env(SUPPORT_POLICY)
    done = action()
    assert isinstance(env.run(done, team="support"), ActionResult)
    assert env.run(done, team="sales").code == "ACTION_FORBIDDEN"


def test_a_refused_action_in_a_batch_does_not_stop_the_others() -> None:
    env = Env(SUPPORT_POLICY)
    batch = [action(hlc=0), action(hlc=1, action_type="create_record"), action(hlc=2)]
    results = dispatch(env.deps, GW, batch, client_id="c1", claims={"team": "ops"}).results
    assert [getattr(r, "code", "OK") for r in results] == ["OK", "ACTION_FORBIDDEN", "OK"]
    assert env.handler.calls == [batch[0], batch[2]]


def test_unknown_connector_and_type_stay_not_supported_for_clients() -> None:
    env = Env(SUPPORT_POLICY)
    nowhere = make_action("c1", encode(T0, 0), "nowhere", "x", {})
    unknown = make_action("c1", encode(T0, 0), "crm", "delete_record", {})
    assert env.run(nowhere, team="ops").code == "ACTION_NOT_SUPPORTED"
    assert env.run(unknown, team="ops").code == "ACTION_NOT_SUPPORTED"


def test_client_b_cannot_replay_client_a_action_id_or_idempotency_key() -> None:
    env = Env(ActionPolicy((ActionGrant("update_record"),), ("client",)))
    ours = action("alice", key="order-1")
    first = env.run(ours)
    assert first.data == {"run": 1, "by": "alice"}
    # When bob sends alice's actionId and idempotency key as his own
    theirs = Action(ours.action_id, "bob", ours.hlc, "crm", "update_record", dict(ours.params), "order-1")
    replay = env.run(theirs)
    # Then he does not get alice's result: his action is his, run for him
    assert replay.data == {"run": 2, "by": "bob"}
    # And alice still gets her own result, not bob's
    assert env.run(ours) == first and len(env.handler.calls) == 2


def test_client_b_cannot_block_client_a_action_id_or_idempotency_key() -> None:
    env = Env(ActionPolicy((ActionGrant("update_record"),), ("client",)))
    ours = action("alice", key="order-1")
    # Given bob holds claims on alice's actionId and idempotency key (his requests in flight)
    assert env.store.claim(GW, "bob", ours.action_id, T0 // 1000 + 60, T0 // 1000)
    assert env.store.claim(GW, "bob", "idem:order-1", T0 // 1000 + 60, T0 // 1000)
    # Then alice's action runs all the same
    assert env.run(ours).data == {"run": 1, "by": "alice"}
    # While alice's own claim on the key still stops her second action with that key
    assert env.store.claim(GW, "alice", "idem:order-2", T0 // 1000 + 60, T0 // 1000)
    assert env.run(action("alice", hlc=1, key="order-2")).code == IN_PROGRESS


def test_discovery_shows_each_caller_what_it_may_run() -> None:
    env = Env(SUPPORT_POLICY)
    assert describe(env.deps, GW, role="client", claims={"team": "sales"}) == {"connectors": {}}
    support = describe(env.deps, GW, role="client", claims={"team": "support"})
    assert [d["actionType"] for d in support["connectors"]["crm"]] == ["update_record", "ping"]
    admin = describe(env.deps, GW, role="admin")
    assert [d["actionType"] for d in admin["connectors"]["crm"]] == ["update_record", "create_record", "ping"]
    assert describe(Env(None).deps, GW, role="client", claims={"team": "support"}) == {"connectors": {}}


def test_record_keys_are_per_client_and_unambiguous() -> None:
    assert action_record_key("gw", "alice", "a1") == "gw#alice#a1"
    assert action_record_key("gw", "a#b", "c") == "gw#a%23b#c" != action_record_key("gw", "a", "b#c")
    assert action_record_key("gw", "a%23b", "c") == "gw#a%2523b#c"
