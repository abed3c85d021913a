"""Action errors as the original reports them (reference §10.4, issue 14 part 6): any ActionError a handler raises
becomes that error's result -- its code, its message, its ``retryable`` (false unless the error says so) -- cached
when not retryable; any other exception is a retryable "Action handler failed", not cached."""

from __future__ import annotations

from typing import Any

import pytest

from lakesync.core.action_policy import ActionGrant, ActionPolicy
from lakesync.core.actions import Action, ActionContext, ActionDescriptor, ActionResult, make_action
from lakesync.core.errors import ActionError, ActionExecutionError, ActionNotSupportedError
from lakesync.gateway import actions as service
from lakesync.gateway.deps import GatewayDeps
from lakesync.gateway.memory import InMemoryActionStore, InMemoryBufferStore, InMemoryConfigStore


class QuotaError(ActionError):
    code = "QUOTA_EXCEEDED"


class Handler:
    name = "svc"
    supported_actions = (ActionDescriptor("do", "Do it"),)

    def __init__(self, error: BaseException) -> None:
        self.error = error
        self.calls = 0

    def execute(self, action: Action, context: ActionContext) -> ActionResult:
        self.calls += 1
        raise self.error


def _run(error: BaseException) -> tuple[list[dict[str, Any]], Handler]:
    handler = Handler(error)
    deps = GatewayDeps(
        InMemoryBufferStore(),
        InMemoryConfigStore(),
        InMemoryActionStore(),
        action_handlers={"svc": handler},
        action_policies={"svc": ActionPolicy((ActionGrant("do"),), roles=("client",))},
    )
    action = make_action("c1", 1, "svc", "do", {})
    results = [service.dispatch(deps, "default", [action], client_id="c1", claims={}).results[0] for _ in range(2)]
    return [r.to_json() for r in results], handler


@pytest.mark.parametrize(
    ("error", "code", "message", "retryable"),
    [
        (ActionNotSupportedError("cannot move tickets"), "ACTION_NOT_SUPPORTED", "cannot move tickets", False),
        (ActionExecutionError("archived"), "ACTION_EXECUTION_ERROR", "archived", False),
        (QuotaError("quota used up"), "QUOTA_EXCEEDED", "quota used up", False),
    ],
)
def test_a_non_retryable_action_error_is_its_result_and_is_cached(
    error: ActionError, code: str, message: str, retryable: bool
) -> None:
    results, handler = _run(error)
    assert results[0] == {"actionId": results[0]["actionId"], "code": code, "message": message, "retryable": retryable}
    assert results[1] == results[0] and handler.calls == 1


def test_a_retryable_action_error_runs_again() -> None:
    results, handler = _run(ActionExecutionError("busy", retryable=True))
    assert results[0]["retryable"] is True and results[0]["code"] == "ACTION_EXECUTION_ERROR"
    assert handler.calls == 2


def test_an_action_error_subclass_may_say_it_is_retryable() -> None:
    error = QuotaError("later")
    error.retryable = True
    results, handler = _run(error)
    assert results[0]["code"] == "QUOTA_EXCEEDED" and results[0]["retryable"] is True and handler.calls == 2


def test_any_other_exception_is_a_retryable_generic_failure() -> None:
    results, handler = _run(RuntimeError("bug with a secret inside"))
    assert results[0]["message"] == "Action handler failed" and results[0]["retryable"] is True
    assert handler.calls == 2
