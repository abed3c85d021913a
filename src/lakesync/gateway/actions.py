"""Action dispatch: validate the batch, authorise each action, dedup by actionId and idempotency key, run handlers,
cache final results.

Unlike the original (reference §10.4, §17.15), the whole batch is validated before any action runs, so an invalid
action never leaves earlier ones half-done.

**Authorisation.** A connector's actions are off for clients unless its config's ``actions`` policy enables them
(:mod:`lakesync.core.action_policy`: an allowlist of action types, and of objects for Salesforce, and a required role
or claim); admins (role ``admin``) may always run them. The policy is checked before the cache, for every action of a
connector that has the action type: a refused action gets a non-retryable ``ACTION_FORBIDDEN`` result and is never
run, cached, claimed or recorded (the same client may run it once the policy allows it). Discovery lists only what
the caller may run. Static handlers (``deps.action_handlers``) take their policies from ``deps.action_policies``.

**Records, per client.** A final result (success or non-retryable error) is stored under the actionId and, when
present, ``idem:{idempotencyKey}`` for ``action_ttl_s``, in the caller's own namespace
(:func:`~lakesync.core.actions.action_record_key`: ``{gateway}#{clientId}#{key}``), so one client can neither replay
another's result nor block another's actionId or idempotency key. A retryable error is not stored, so the client's
retry runs the action again. Both keys are checked with the rest of the batch, before anything runs: each must be
valid UTF-8 and its stored key within DynamoDB's partition-key limit, else the batch is refused with a 400. Two
concurrent requests of one client for the same action -- or for two actions sharing an idempotency key -- cannot both
run it: the first claims the actionId and the key, the second gets a retryable ``ACTION_IN_PROGRESS`` result. A batch
runs within the invocation's time: an action after the first starts only while more than ``action_reserve_ms`` is
left, and the rest get a retryable ``ACTION_DEFERRED`` result (not run, not recorded), so a long batch is answered,
not cut off by the timeout.

A handler raising any :class:`~lakesync.core.errors.ActionError` (``ActionNotSupportedError``,
``ActionExecutionError``, ...) produces that error's result: its code, its message and its ``retryable`` (``false``
unless the error says otherwise), cached when not retryable, as the original reports them (reference §10.4). Any
other exception is a handler bug: a retryable ``ACTION_EXECUTION_ERROR`` "Action handler failed", logged.

Handlers are the static ``deps.action_handlers`` and the gateway's registered connectors that execute actions
(``deps.connectors``). Every action a handler ran to a final result is recorded in the gateway table
``_lakesync_provenance`` (row ``action:{actionId}``, client id ``action:{connector}``): who asked, what, with which
parameters, and what came back -- so an agent's effects on external systems can be audited from the lake.
"""

from __future__ import annotations

import logging
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass
from typing import Any

from lakesync.core.action_policy import (
    ActionCaller,
    ActionPolicy,
    check_policy,
    parse_action_policy,
    refusal,
    visible_actions,
)
from lakesync.core.actions import (
    Action,
    ActionContext,
    ActionErrorResult,
    ActionHandler,
    ActionResponse,
    ActionResult,
    AnyActionResult,
    action_record_key,
    is_cacheable,
    no_handler_result,
    parse_action_result,
    supports,
    unsupported_action_result,
)
from lakesync.core.connectors import ConnectorConfig
from lakesync.core.errors import ActionError, ActionValidationError, ForbiddenError, LakeSyncError, ValidationError
from lakesync.core.log import PARTITION_KEY_LIMIT_BYTES
from lakesync.core.messages import SyncPush
from lakesync.gateway import push as push_service
from lakesync.gateway.deps import GatewayDeps

logger = logging.getLogger(__name__)

IN_PROGRESS = "ACTION_IN_PROGRESS"
DEFERRED = "ACTION_DEFERRED"


@dataclass(frozen=True, slots=True)
class Route:
    """A connector's action handler and the policy that says which clients may use it (``None``: admins only)."""

    handler: ActionHandler
    policy: ActionPolicy | None


def dispatch(
    deps: GatewayDeps,
    gateway: str,
    actions: Sequence[Action],
    *,
    client_id: str,
    claims: Mapping[str, str | Sequence[str]],
    role: str = "client",
    time_left_ms: Callable[[], int] | None = None,
) -> ActionResponse:
    """Run a batch of already-validated actions for the authenticated ``client_id`` (token ``role`` and custom
    ``claims``; the role defaults to the least privileged).

    ``time_left_ms``: how long the invocation may still run (a Lambda context's remaining time). The first action
    always runs; a later one starts only while more than ``action_reserve_ms`` is left, and those not started are
    answered with the retryable ``ACTION_DEFERRED`` (neither run nor recorded: the client sends them again)."""
    for action in actions:
        if action.client_id != client_id:
            raise ForbiddenError("Client ID mismatch: action clientId does not match authenticated identity")
    for action in actions:
        _check_keys(gateway, action)
    context = ActionContext(claims=dict(claims))
    caller = ActionCaller(role, dict(claims))
    found = routes(deps, gateway)
    results: list[AnyActionResult] = []
    for action in actions:
        if results and time_left_ms is not None and time_left_ms() <= deps.settings.action_reserve_ms:
            results.append(
                ActionErrorResult(
                    action.action_id, DEFERRED, "Not started: the request ran out of time; retry it", True
                )
            )
            continue
        refused = _refusal(found.get(action.connector), caller, action)
        if refused is not None:
            logger.info(
                "action %s refused: %s %s of %s for client %s (role %s)",
                action.action_id,
                refused.code,
                action.action_type,
                action.connector,
                client_id,
                role,
            )
            results.append(ActionErrorResult.from_error(action.action_id, refused))
            continue
        results.append(_dispatch_one(deps, gateway, action, context, found))
    return ActionResponse(tuple(results), deps.clock.now())


def _check_keys(gateway: str, action: Action) -> None:
    """The action's record keys must be storable: valid UTF-8 and within DynamoDB's partition-key limit."""
    for field_name, key in (("actionId", action.action_id), ("idempotencyKey", action.idempotency_cache_key)):
        if key is None:
            continue
        try:
            size = len(action_record_key(gateway, action.client_id, key).encode())
        except UnicodeEncodeError:
            raise ActionValidationError(f"{field_name} is not valid UTF-8 text (it holds a lone surrogate)") from None
        if size > PARTITION_KEY_LIMIT_BYTES:
            raise ActionValidationError(
                f"{field_name} is too long: its record key (gateway, client id and {field_name}) would be "
                f"{size:,} bytes; the limit is {PARTITION_KEY_LIMIT_BYTES:,}"
            )


def routes(deps: GatewayDeps, gateway: str | None) -> dict[str, Route]:
    """The action handlers of ``gateway`` with their policies: the static ones (``deps.action_policies``), then its
    registered connectors' (by name; the ``actions`` field of their configs)."""
    found = {name: Route(h, deps.action_policies.get(name)) for name, h in deps.action_handlers.items()}
    if deps.connectors is not None and gateway is not None:
        configs = {c.name: c for c in deps.connectors.configs(gateway)}
        for name, handler in deps.connectors.action_handlers(gateway).items():
            if name not in found:
                found[name] = Route(handler, _stored_policy(configs.get(name)))
    return found


def _stored_policy(config: ConnectorConfig | None) -> ActionPolicy | None:
    """A stored config's policy; one that no longer parses (stored before validation) allows no client."""
    if config is None:
        return None
    try:
        return parse_action_policy(config.document)
    except ValidationError:
        logger.warning("connector %s has an invalid action policy: its actions are admin-only", config.name)
        return None


def _refusal(route: Route | None, caller: ActionCaller, action: Action) -> ActionError | None:
    """Why the caller may not run ``action`` (``None``: it may, or the action is not supported, which the
    dispatch reports as the original does)."""
    if route is None:
        return None
    descriptor = next((d for d in route.handler.supported_actions if d.action_type == action.action_type), None)
    if descriptor is None:
        return None
    return refusal(route.policy, caller, action, descriptor.target_param)


def validate_connector_policy(config: ConnectorConfig) -> None:
    """Registration's first check of the connector's ``actions`` policy: its shape.

    Raises:
        ConnectorValidationError: 400 naming the first bad field.
    """
    parse_action_policy(config.document)


def check_connector_policy(config: ConnectorConfig, handler: ActionHandler | None) -> None:
    """Registration's check, once the connector is open, of its ``actions`` policy against the action types of its
    ``handler`` (``None``: the connector runs no actions).

    Raises:
        ConnectorValidationError: 400 naming the first bad field.
    """
    policy = parse_action_policy(config.document)
    if policy is not None:
        check_policy(policy, config.type, handler.supported_actions if handler is not None else None)


def describe(
    deps: GatewayDeps,
    gateway: str | None = None,
    *,
    role: str = "client",
    claims: Mapping[str, str | Sequence[str]] | None = None,
) -> dict[str, Any]:
    """The discovery document for a caller: every connector of ``gateway`` with an action the caller may run, and
    those actions (admins: every connector that executes actions, and all of them)."""
    caller = ActionCaller(role, dict(claims or {}))
    connectors: dict[str, list[dict[str, Any]]] = {}
    for name, route in routes(deps, gateway).items():
        visible = visible_actions(route.policy, caller, route.handler.supported_actions)
        if visible or caller.is_admin:
            connectors[name] = [d.to_json() for d in visible]
    return {"connectors": connectors}


def _dispatch_one(
    deps: GatewayDeps, gateway: str, action: Action, context: ActionContext, found: dict[str, Route]
) -> AnyActionResult:
    client = action.client_id
    now_s = deps.wall_ms() // 1000
    keys = [action.action_id]
    if action.idempotency_cache_key:
        keys.append(action.idempotency_cache_key)
    cached = deps.actions.get(gateway, client, keys, now_s)
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
            gateway, client, key, claim_expires_at, now_s
        ):
            for done in claimed:
                deps.actions.release(gateway, client, done)
            return ActionErrorResult(action.action_id, IN_PROGRESS, "The action is already being executed", True)
        claimed.append(key)
    result, executed = _execute(found, action, context)
    if is_cacheable(result):
        deps.actions.put(gateway, client, keys, {"status": "done", "result": result.to_json()}, expires_at)
        if executed:
            _record(deps, gateway, action, result)
    else:
        for key in claimed:
            deps.actions.release(gateway, client, key)
    return result


def _execute(found: dict[str, Route], action: Action, context: ActionContext) -> tuple[AnyActionResult, bool]:
    """The action's result, and whether a handler ran it."""
    route = found.get(action.connector)
    if route is None:
        return no_handler_result(action), False
    handler = route.handler
    if not supports(handler, action.action_type):
        return unsupported_action_result(action), False
    try:
        result: ActionResult = handler.execute(action, context)
    except ActionError as exc:
        return ActionErrorResult(action.action_id, exc.code, exc.message, bool(getattr(exc, "retryable", False))), True
    except Exception:  # a handler bug must not become a 500 for the whole batch
        logger.exception("action handler %s failed on %s", action.connector, action.action_type)
        return ActionErrorResult(action.action_id, "ACTION_EXECUTION_ERROR", "Action handler failed", True), True
    return result, True


def _record(deps: GatewayDeps, gateway: str, action: Action, result: AnyActionResult) -> None:
    """Write the action's provenance row; a failure is logged, never returned (the action has run)."""
    from lakesync.gateway.poller import provenance_delta

    client_id = f"action:{action.connector}"
    outcome: dict[str, Any] = result.to_json()
    fields: dict[str, Any] = {
        "kind": "action",
        "connector": action.connector,
        "actionType": action.action_type,
        "actionId": action.action_id,
        "requestedBy": action.client_id,
        "params": dict(action.params),
        "idempotencyKey": action.idempotency_key,
        "code": outcome.get("code", "OK"),
        "result": outcome,
        "at": deps.wall_ms(),
    }
    delta = provenance_delta(client_id, f"action:{action.action_id}", fields, deps.clock.now(), salt="action")
    try:
        push_service.push(deps, gateway, SyncPush(client_id, (delta,)), client_id=client_id, trusted=True)
    except LakeSyncError:
        logger.exception("could not record the provenance of action %s", action.action_id)
