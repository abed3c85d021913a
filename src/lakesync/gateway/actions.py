"""Action dispatch: validate the batch, dedup by actionId and idempotency key, run handlers, cache final results.

Unlike the original (reference §10.4, §17.15), the whole batch is validated before any action runs, so an invalid
action never leaves earlier ones half-done. A final result (success or non-retryable error) is stored under the
actionId and, when present, ``idem:{idempotencyKey}`` for ``action_ttl_s``; a retryable error is not stored, so the
client's retry runs the action again. Two concurrent requests for the same action -- or for two actions sharing an
idempotency key -- cannot both run it: the first claims the actionId and the key, the second gets a retryable
``ACTION_IN_PROGRESS`` result.
"""

from __future__ import annotations

import logging
from collections.abc import Mapping, Sequence
from typing import Any

from lakesync.core.actions import (
    Action,
    ActionContext,
    ActionErrorResult,
    ActionResponse,
    ActionResult,
    AnyActionResult,
    discovery_json,
    is_cacheable,
    no_handler_result,
    parse_action_result,
    supports,
    unsupported_action_result,
)
from lakesync.core.errors import ActionExecutionError, ForbiddenError
from lakesync.gateway.deps import GatewayDeps

logger = logging.getLogger(__name__)

IN_PROGRESS = "ACTION_IN_PROGRESS"


def dispatch(
    deps: GatewayDeps,
    gateway: str,
    actions: Sequence[Action],
    *,
    client_id: str,
    claims: Mapping[str, str | Sequence[str]],
) -> ActionResponse:
    """Run a batch of already-validated actions for the authenticated ``client_id``."""
    for action in actions:
        if action.client_id != client_id:
            raise ForbiddenError("Client ID mismatch: action clientId does not match authenticated identity")
    context = ActionContext(claims=dict(claims))
    results = [_dispatch_one(deps, gateway, action, context) for action in actions]
    return ActionResponse(tuple(results), deps.clock.now())


def describe(deps: GatewayDeps) -> dict[str, Any]:
    """The discovery document: every registered connector and its action types."""
    return discovery_json(deps.action_handlers.values())


def _dispatch_one(deps: GatewayDeps, gateway: str, action: Action, context: ActionContext) -> AnyActionResult:
    now_s = deps.wall_ms() // 1000
    keys = [action.action_id]
    if action.idempotency_cache_key:
        keys.append(action.idempotency_cache_key)
    cached = deps.actions.get(gateway, keys, now_s)
    for key in keys:
        record = cached.get(key)
        if record is not None and record.get("status") == "done":
            return parse_action_result(record["result"])
    expires_at = now_s + deps.settings.action_ttl_s
    # A claim outlives any execution (Lambda timeout) but not much more: a crashed run frees the action soon.
    claim_expires_at = now_s + deps.settings.action_claim_ttl_s
    # Claim the actionId and the idempotency key: another action with the same key must not run concurrently.
    claimed: list[str] = []
    for key in keys:
        if cached.get(key, {}).get("status") == "pending" or not deps.actions.claim(
            gateway, key, claim_expires_at, now_s
        ):
            for done in claimed:
                deps.actions.release(gateway, done)
            return ActionErrorResult(action.action_id, IN_PROGRESS, "The action is already being executed", True)
        claimed.append(key)
    result = _execute(deps, action, context)
    if is_cacheable(result):
        deps.actions.put(gateway, keys, {"status": "done", "result": result.to_json()}, expires_at)
    else:
        for key in claimed:
            deps.actions.release(gateway, key)
    return result


def _execute(deps: GatewayDeps, action: Action, context: ActionContext) -> AnyActionResult:
    handler = deps.action_handlers.get(action.connector)
    if handler is None:
        return no_handler_result(action)
    if not supports(handler, action.action_type):
        return unsupported_action_result(action)
    try:
        result: ActionResult = handler.execute(action, context)
    except ActionExecutionError as exc:
        return ActionErrorResult(action.action_id, exc.code, exc.message, exc.retryable)
    except Exception:  # a handler bug must not become a 500 for the whole batch
        logger.exception("action handler %s failed on %s", action.connector, action.action_type)
        return ActionErrorResult(action.action_id, "ACTION_EXECUTION_ERROR", "Action handler failed", True)
    return result
