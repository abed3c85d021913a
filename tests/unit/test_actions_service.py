"""Action dispatch (lakesync.gateway.actions) on the in-memory adapters: results cached by actionId and idempotency
key, retryable errors not cached, one execution under concurrency (ACTION_IN_PROGRESS), handler crashes as retryable
error results, client identity checked before anything runs, and discovery."""

from __future__ import annotations

import threading
from collections.abc import Callable
from typing import Any

import pytest

from lakesync.core.action_policy import ActionGrant, ActionPolicy
from lakesync.core.actions import (
    Action,
    ActionContext,
    ActionDescriptor,
    ActionErrorResult,
    ActionResult,
    make_action,
)
from lakesync.core.errors import ActionExecutionError, ForbiddenError
from lakesync.core.hlc import HLC, encode
from lakesync.gateway.actions import IN_PROGRESS, describe, dispatch
from lakesync.gateway.deps import GatewayDeps, GatewaySettings
from lakesync.gateway.memory import InMemoryActionStore, InMemoryBufferStore, InMemoryConfigStore

GW = "default"
T0 = 1_700_000_000_000

Behaviour = Callable[[Action, ActionContext], ActionResult]


class Handler:
    """A connector whose behaviour per call is scripted."""

    def __init__(self, name: str = "jira", behaviour: Behaviour | None = None) -> None:
        self.name = name
        self.supported_actions = (
            ActionDescriptor("create", "Create an issue"),
            ActionDescriptor("close", "Close an issue", {"type": "object", "required": ["id"]}),
        )
        self.behaviour = behaviour or (lambda action, _: ActionResult(action.action_id, {"n": len(self.calls)}, 7))
        self.calls: list[tuple[Action, ActionContext]] = []

    def execute(self, action: Action, context: ActionContext) -> ActionResult:
        self.calls.append((action, context))
        return self.behaviour(action, context)


# What these tests' clients may run: every action type of the scripted connectors (actions are off by default)
POLICY = ActionPolicy((ActionGrant("create"), ActionGrant("close")), roles=("client",))


class Env:
    def __init__(self, *handlers: Handler, **settings: Any) -> None:
        self.wall = T0
        self.store = InMemoryActionStore()
        self.deps = GatewayDeps(
            buffer=InMemoryBufferStore(),
            config=InMemoryConfigStore(),
            actions=self.store,
            settings=GatewaySettings(**settings),
            clock=HLC(lambda: self.wall),
            wall_ms=lambda: self.wall,
            action_handlers={h.name: h for h in handlers},
            action_policies={h.name: POLICY for h in handlers},
        )

    def dispatch(self, *actions: Action, client: str = "c1", claims: dict[str, Any] | None = None) -> list[Any]:
        return list(dispatch(self.deps, GW, actions, client_id=client, claims=claims or {}).results)


def act(
    hlc_ms: int = 0, action_type: str = "create", key: str | None = None, client: str = "c1", **params: Any
) -> Action:
    return make_action(client, encode(T0 + hlc_ms, 0), "jira", action_type, params or {"title": "t"}, key)


def test_dispatch_success_is_cached_by_action_id_and_not_run_again() -> None:
    handler = Handler()
    env = Env(handler)
    action = act()

    first = env.dispatch(action)
    second = env.dispatch(action)

    assert len(handler.calls) == 1
    assert first == second == [ActionResult(action.action_id, {"n": 1}, 7)]


def test_dispatch_same_idempotency_key_returns_the_first_result_verbatim() -> None:
    # Given an action with an idempotency key that ran
    handler = Handler()
    env = Env(handler)
    first = act(0, key="order-42")
    (r1,) = env.dispatch(first)

    # When a different action (new HLC, new actionId) carries the same key
    retry = act(1, key="order-42")
    assert retry.action_id != first.action_id
    (r2,) = env.dispatch(retry)

    # Then it is not executed and gets the first result, with the first action's id (as the original does)
    assert len(handler.calls) == 1
    assert r2 == r1 and r2.action_id == first.action_id


def test_dispatch_empty_idempotency_key_never_dedups() -> None:
    handler = Handler()
    env = Env(handler)
    env.dispatch(act(0, key=""))
    env.dispatch(act(1, key=""))
    assert len(handler.calls) == 2


def test_dispatch_retryable_error_is_not_cached_so_a_retry_runs_again() -> None:
    outcomes: list[Any] = [ActionExecutionError("rate limited", retryable=True), None]

    def behaviour(action: Action, _: ActionContext) -> ActionResult:
        outcome = outcomes.pop(0)
        if outcome is not None:
            raise outcome
        return ActionResult(action.action_id, {"ok": True}, 1)

    handler = Handler(behaviour=behaviour)
    env = Env(handler)
    action = act(key="k")

    (first,) = env.dispatch(action)
    assert first == ActionErrorResult(action.action_id, "ACTION_EXECUTION_ERROR", "rate limited", True)
    assert env.store.get(GW, "c1", [action.action_id, "idem:k"], T0 // 1000) == {}

    (second,) = env.dispatch(action)
    assert second == ActionResult(action.action_id, {"ok": True}, 1)
    assert len(handler.calls) == 2
    (third,) = env.dispatch(action)
    assert third == second and len(handler.calls) == 2


def test_dispatch_non_retryable_error_is_cached() -> None:
    def behaviour(action: Action, _: ActionContext) -> ActionResult:
        raise ActionExecutionError("issue is locked", retryable=False)

    handler = Handler(behaviour=behaviour)
    env = Env(handler)
    action = act(key="k2")

    results = env.dispatch(action) + env.dispatch(action) + env.dispatch(act(5, key="k2"))

    assert len(handler.calls) == 1
    assert results == [ActionErrorResult(action.action_id, "ACTION_EXECUTION_ERROR", "issue is locked", False)] * 3


def test_dispatch_unknown_connector_or_action_type_is_not_supported_and_cached() -> None:
    handler = Handler()
    env = Env(handler)
    no_handler = make_action("c1", encode(T0, 0), "salesforce", "create", {})
    unsupported = act(action_type="delete")

    results = env.dispatch(no_handler, unsupported)

    assert [(r.code, r.retryable) for r in results] == [("ACTION_NOT_SUPPORTED", False)] * 2
    assert results[0].message == 'No action handler registered for connector "salesforce"'
    assert results[1].message == 'Action type "delete" not supported by connector "jira"'
    assert set(env.store.get(GW, "c1", [no_handler.action_id, unsupported.action_id], T0 // 1000)) == {
        no_handler.action_id,
        unsupported.action_id,
    }
    assert handler.calls == []


def test_dispatch_handler_crash_is_a_retryable_error_result_not_a_500(caplog: pytest.LogCaptureFixture) -> None:
    def behaviour(action: Action, _: ActionContext) -> ActionResult:
        raise KeyError("secret-internal-detail")

    handler = Handler(behaviour=behaviour)
    env = Env(handler)
    crashing, fine = act(0), act(1, action_type="close", id=3)
    handler.behaviour = lambda a, c: behaviour(a, c) if a is crashing else ActionResult(a.action_id, {}, 1)

    results = env.dispatch(crashing, fine)

    assert results[0] == ActionErrorResult(crashing.action_id, "ACTION_EXECUTION_ERROR", "Action handler failed", True)
    assert "secret-internal-detail" not in results[0].message
    assert results[1] == ActionResult(fine.action_id, {}, 1)
    assert "handler jira failed" in caplog.text
    # Not cached: a retry runs the handler again
    env.dispatch(crashing)
    assert [a for a, _ in handler.calls].count(crashing) == 2


def test_dispatch_concurrent_requests_for_one_action_run_it_once() -> None:
    # Given a handler that blocks until released
    entered, release = threading.Event(), threading.Event()

    def behaviour(action: Action, _: ActionContext) -> ActionResult:
        entered.set()
        assert release.wait(5)
        return ActionResult(action.action_id, {"done": True}, 1)

    handler = Handler(behaviour=behaviour)
    env = Env(handler)
    action = act()
    results: dict[str, Any] = {}
    first = threading.Thread(target=lambda: results.setdefault("first", env.dispatch(action)))
    first.start()
    assert entered.wait(5)

    # When the same action arrives while the first request runs it
    (second,) = env.dispatch(action)
    release.set()
    first.join(5)

    # Then the second gets a retryable ACTION_IN_PROGRESS and the action ran once
    assert second == ActionErrorResult(action.action_id, IN_PROGRESS, "The action is already being executed", True)
    assert results["first"] == [ActionResult(action.action_id, {"done": True}, 1)]
    assert len(handler.calls) == 1
    # And once it finished, the retry gets the cached result
    assert env.dispatch(action) == results["first"]


def test_dispatch_pending_idempotency_key_blocks_another_action_with_that_key() -> None:
    handler = Handler()
    env = Env(handler)
    env.store.claim(GW, "c1", "idem:k", T0 // 1000 + 60, T0 // 1000)
    (result,) = env.dispatch(act(key="k"))
    assert result.code == IN_PROGRESS and result.retryable
    assert handler.calls == []


def test_dispatch_concurrent_actions_sharing_an_idempotency_key_run_once() -> None:
    entered, release = threading.Event(), threading.Event()

    def behaviour(action: Action, _: ActionContext) -> ActionResult:
        if len(handler.calls) == 1:
            entered.set()
            assert release.wait(5)
        return ActionResult(action.action_id, {"first": len(handler.calls) == 1}, 1)

    handler = Handler(behaviour=behaviour)
    env = Env(handler)
    first = threading.Thread(target=env.dispatch, args=(act(0, key="pay-1"),))
    first.start()
    assert entered.wait(5)
    entered.clear()
    try:
        (second,) = env.dispatch(act(1, key="pay-1"))
    finally:
        release.set()
        first.join(5)
    # Then the second is told to retry, and the retry gets the first result without running again
    assert len(handler.calls) == 1
    assert second.code == IN_PROGRESS and second.retryable
    (retried,) = env.dispatch(act(1, key="pay-1"))
    assert retried.data == {"first": True} and len(handler.calls) == 1


def test_dispatch_in_progress_leaves_no_claim_behind() -> None:
    # Given the idempotency key claimed by a running action
    handler = Handler()
    env = Env(handler)
    env.store.claim(GW, "c1", "idem:k", T0 // 1000 + 60, T0 // 1000)
    action = act(key="k")
    # When another action with that key is refused, its own actionId stays unclaimed
    (result,) = env.dispatch(action)
    assert result.code == IN_PROGRESS
    assert env.store.get(GW, "c1", [action.action_id], T0 // 1000) == {}
    env.store.release(GW, "c1", "idem:k")
    assert isinstance(env.dispatch(action)[0], ActionResult)


def test_dispatch_retryable_error_releases_the_idempotency_key_claim_too() -> None:
    def behaviour(action: Action, _: ActionContext) -> ActionResult:
        raise ActionExecutionError("busy", retryable=True)

    handler = Handler(behaviour=behaviour)
    env = Env(handler)
    env.dispatch(act(0, key="k"))
    handler.behaviour = lambda a, _: ActionResult(a.action_id, {}, 1)
    (result,) = env.dispatch(act(1, key="k"))
    assert isinstance(result, ActionResult) and len(handler.calls) == 2


def test_dispatch_cached_result_expires_after_the_action_ttl() -> None:
    handler = Handler()
    env = Env(handler, action_ttl_s=60)
    action = act()
    env.dispatch(action)
    env.wall += 59_000
    env.dispatch(action)
    assert len(handler.calls) == 1
    env.wall += 2_000
    env.dispatch(action)
    assert len(handler.calls) == 2


def test_dispatch_client_id_mismatch_is_forbidden_before_any_action_runs() -> None:
    handler = Handler()
    env = Env(handler)
    with pytest.raises(ForbiddenError) as err:
        env.dispatch(act(0), act(1, client="mallory"), client="c1")
    assert err.value.status == 403
    assert handler.calls == []
    assert env.store.get(GW, "c1", [act(0).action_id], T0 // 1000) == {}


def test_dispatch_passes_claims_to_the_handler_and_stamps_the_response() -> None:
    handler = Handler()
    env = Env(handler)
    response = dispatch(env.deps, GW, [act()], client_id="c1", claims={"org": "acme", "roles": ["a", "b"]})
    assert handler.calls[0][1].claims == {"org": "acme", "roles": ["a", "b"]}
    assert response.server_hlc >> 16 == T0


def test_dispatch_results_are_per_gateway() -> None:
    handler = Handler()
    env = Env(handler)
    action = act()
    dispatch(env.deps, "gw-a", [action], client_id="c1", claims={})
    dispatch(env.deps, "gw-b", [action], client_id="c1", claims={})
    assert len(handler.calls) == 2


def test_describe_lists_every_connector_and_its_action_types_in_order() -> None:
    env = Env(Handler("jira"), Handler("github"))
    body = describe(env.deps, role="client")
    assert list(body["connectors"]) == ["jira", "github"]
    assert body["connectors"]["jira"] == [
        {"actionType": "create", "description": "Create an issue"},
        {
            "actionType": "close",
            "description": "Close an issue",
            "paramsSchema": {"type": "object", "required": ["id"]},
        },
    ]
    assert describe(Env().deps) == {"connectors": {}}
