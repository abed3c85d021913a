"""Actions: imperative requests a client asks a connector to run against an external system.

Wire shapes (JSON, camelCase, every HLC a decimal string)::

    Action            {actionId, clientId, hlc, connector, actionType, params: {...}, idempotencyKey?}
    ActionPush        {clientId, actions: [Action]}
    ActionResult      {actionId, data: {...}, serverHlc}             (success)
    ActionErrorResult {actionId, code, message, retryable}           (error: has both code and retryable)
    ActionResponse    {results: [ActionResult | ActionErrorResult], serverHlc}
    ActionDescriptor  {actionType, description, paramsSchema?}
    ActionDiscovery   {connectors: {name: [ActionDescriptor]}}

The actionId is ``sha256_hex(stable_stringify({clientId, hlc: decimal string, connector, actionType, params}))`` --
the same canonical JSON as the deltaId, so ``params`` key order does not matter. Servers treat it as an opaque
idempotency key and never recompute it.

:func:`validate_action` checks fields in the original's order with its exact messages. Over JSON the ``hlc`` must
be a decimal *string* (the original revives it to a bigint); a JSON number is refused with ``hlc must be a bigint``.
Unlike the original, which accepted anything ``BigInt()`` parses, the string must be an unsigned 64-bit decimal.

This module holds only the pure pieces of dispatch: the :class:`ActionHandler` protocol, the
``ACTION_NOT_SUPPORTED`` error results and the caching rule. The dispatcher itself lives with the gateway services.
"""

from __future__ import annotations

import hashlib
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any, Protocol, TypeGuard

from lakesync.core import hlc as hlc_mod
from lakesync.core.canonical import JsonValue, stable_stringify
from lakesync.core.errors import (
    ActionError,
    ActionNotSupportedError,
    ActionValidationError,
    ValidationError,
)

IDEMPOTENCY_PREFIX = "idem:"
"""Cache keys for idempotency keys are ``"idem:" + key``; plain actionIds are cached under themselves."""


def _escaped(part: str) -> str:
    return part.replace("%", "%25").replace("#", "%23")


def action_record_key(gateway: str, client_id: str, key: str) -> str:
    """The stored key of an action record: ``{gateway}#{clientId}#{key}``, one namespace per client, so one client
    can neither read nor claim another's actionIds and idempotency keys. ``%`` and ``#`` in the gateway and client id
    are escaped (``%25``, ``%23``): no two (gateway, client, key) triples share a stored key."""
    return f"{_escaped(gateway)}#{_escaped(client_id)}#{key}"


def action_id(client_id: str, hlc: int, connector: str, action_type: str, params: Mapping[str, JsonValue]) -> str:
    """The deterministic actionId: lowercase hex SHA-256 of the canonical JSON of the action's identity.

    Args:
        client_id: The requesting client.
        hlc: The action's HLC (hashed as its decimal string).
        connector: The target connector name.
        action_type: The action type within the connector.
        params: The action parameters.
    """
    payload = stable_stringify(
        {"clientId": client_id, "hlc": str(hlc), "connector": connector, "actionType": action_type, "params": params}
    )
    return hashlib.sha256(payload.encode("utf-8", "surrogatepass")).hexdigest()


@dataclass(frozen=True, slots=True)
class Action:
    """An imperative request to a connector, stamped with the client's HLC."""

    action_id: str
    client_id: str
    hlc: int
    connector: str
    action_type: str
    params: Mapping[str, JsonValue]
    idempotency_key: str | None = None

    @property
    def idempotency_cache_key(self) -> str | None:
        """``"idem:{key}"`` when the action has a non-empty idempotency key (an empty key never dedups)."""
        return IDEMPOTENCY_PREFIX + self.idempotency_key if self.idempotency_key else None

    def to_json(self) -> dict[str, Any]:
        """The wire JSON shape with the HLC as a decimal string."""
        out: dict[str, Any] = {
            "actionId": self.action_id,
            "clientId": self.client_id,
            "hlc": str(self.hlc),
            "connector": self.connector,
            "actionType": self.action_type,
            "params": dict(self.params),
        }
        if self.idempotency_key is not None:
            out["idempotencyKey"] = self.idempotency_key
        return out

    @classmethod
    def from_json(cls, obj: object) -> Action:
        """Same as :func:`validate_action`."""
        return validate_action(obj)


def make_action(
    client_id: str,
    hlc: int,
    connector: str,
    action_type: str,
    params: Mapping[str, JsonValue],
    idempotency_key: str | None = None,
) -> Action:
    """Build an action with its deterministic actionId."""
    aid = action_id(client_id, hlc, connector, action_type, params)
    return Action(aid, client_id, hlc, connector, action_type, dict(params), idempotency_key)


def _non_empty_str(value: object) -> TypeGuard[str]:
    return isinstance(value, str) and value != ""


def validate_action(obj: object) -> Action:
    """Validate an action (parsed wire JSON, or an :class:`Action` to re-check) and build it.

    First failure wins, in the original's order: object, ``actionId``, ``clientId``, ``hlc``, ``connector``,
    ``actionType``, ``params`` (an object, not an array), ``idempotencyKey`` (a string if present; empty is valid).

    Raises:
        ActionValidationError: with the original's exact message (HTTP 400, ``VALIDATION_ERROR``).
    """
    if isinstance(obj, Action):
        obj = obj.to_json()
    if not isinstance(obj, Mapping | list):
        raise ActionValidationError("Action must be a non-null object")
    # A JSON array is a JavaScript object without these fields: it fails on actionId, as in the original.
    doc: Mapping[str, Any] = obj if isinstance(obj, Mapping) else {}
    for key, message in (
        ("actionId", "actionId must be a non-empty string"),
        ("clientId", "clientId must be a non-empty string"),
    ):
        if not _non_empty_str(doc.get(key)):
            raise ActionValidationError(message)
    try:
        stamp = hlc_mod.parse(doc.get("hlc"))
    except ValidationError:
        raise ActionValidationError("hlc must be a bigint") from None
    for key, message in (
        ("connector", "connector must be a non-empty string"),
        ("actionType", "actionType must be a non-empty string"),
    ):
        if not _non_empty_str(doc.get(key)):
            raise ActionValidationError(message)
    params = doc.get("params")
    if not isinstance(params, Mapping):
        raise ActionValidationError("params must be a non-null object")
    idempotency_key = doc.get("idempotencyKey")
    if "idempotencyKey" in doc and not isinstance(idempotency_key, str):
        raise ActionValidationError("idempotencyKey must be a string if provided")
    return Action(
        action_id=doc["actionId"],
        client_id=doc["clientId"],
        hlc=stamp,
        connector=doc["connector"],
        action_type=doc["actionType"],
        params=dict(params),
        idempotency_key=idempotency_key,
    )


@dataclass(frozen=True, slots=True)
class ActionPush:
    """A batch of actions from one client."""

    client_id: str
    actions: tuple[Action, ...]

    def to_json(self) -> dict[str, Any]:
        """The wire JSON shape ``{"clientId", "actions"}``."""
        return {"clientId": self.client_id, "actions": [a.to_json() for a in self.actions]}

    @classmethod
    def from_json(cls, obj: object) -> ActionPush:
        """Same as :func:`parse_action_push`."""
        return parse_action_push(obj)


def parse_action_push(obj: object) -> ActionPush:
    """Validate an action-push body (parsed JSON) and every action in it, before anything runs.

    The original validated each action only when dispatching it, so a bad action aborted the batch after earlier
    actions had run; validating up front means a rejected push runs nothing.

    Raises:
        ValidationError: ``Missing required fields: clientId, actions`` when ``clientId`` is not a non-empty string
            or ``actions`` is not an array.
        ActionValidationError: the first invalid action's message (see :func:`validate_action`).
    """
    doc: Mapping[str, Any] = obj if isinstance(obj, Mapping) else {}
    client_id = doc.get("clientId")
    raw_actions = doc.get("actions")
    if not _non_empty_str(client_id) or not isinstance(raw_actions, list):
        raise ValidationError("Missing required fields: clientId, actions")
    return ActionPush(client_id, tuple(validate_action(a) for a in raw_actions))


def _require_str(doc: Mapping[str, Any], key: str, where: str, *, non_empty: bool = True) -> str:
    value = doc.get(key)
    if not isinstance(value, str) or (non_empty and not value):
        raise ValidationError(f"{where}.{key} must be a {'non-empty ' if non_empty else ''}string")
    return value


def _require_object(obj: object, where: str) -> Mapping[str, Any]:
    if not isinstance(obj, Mapping):
        raise ValidationError(f"{where} must be an object")
    return obj


@dataclass(frozen=True, slots=True)
class ActionResult:
    """A successful action: the connector's data and the HLC the handler chose."""

    action_id: str
    data: Mapping[str, JsonValue]
    server_hlc: int

    def to_json(self) -> dict[str, Any]:
        """The wire JSON shape ``{"actionId", "data", "serverHlc"}``."""
        return {"actionId": self.action_id, "data": dict(self.data), "serverHlc": str(self.server_hlc)}

    @classmethod
    def from_json(cls, obj: object, *, where: str = "result") -> ActionResult:
        """Parse the wire JSON shape.

        Raises:
            ValidationError: naming the first field that is missing or of the wrong type.
        """
        doc = _require_object(obj, where)
        aid = _require_str(doc, "actionId", where)
        data = doc.get("data")
        if not isinstance(data, Mapping):
            raise ValidationError(f"{where}.data must be an object")
        return cls(aid, dict(data), hlc_mod.parse(doc.get("serverHlc"), field=f"{where}.serverHlc"))


@dataclass(frozen=True, slots=True)
class ActionErrorResult:
    """A failed action, reported inside a 200 response."""

    action_id: str
    code: str
    message: str
    retryable: bool

    def to_json(self) -> dict[str, Any]:
        """The wire JSON shape ``{"actionId", "code", "message", "retryable"}``."""
        return {"actionId": self.action_id, "code": self.code, "message": self.message, "retryable": self.retryable}

    @classmethod
    def from_json(cls, obj: object, *, where: str = "result") -> ActionErrorResult:
        """Parse the wire JSON shape.

        Raises:
            ValidationError: naming the first field that is missing or of the wrong type.
        """
        doc = _require_object(obj, where)
        aid = _require_str(doc, "actionId", where)
        code = _require_str(doc, "code", where)
        message = _require_str(doc, "message", where, non_empty=False)
        retryable = doc.get("retryable")
        if not isinstance(retryable, bool):
            raise ValidationError(f"{where}.retryable must be a boolean")
        return cls(aid, code, message, retryable)

    @classmethod
    def from_error(cls, action_id: str, error: ActionError) -> ActionErrorResult:
        """The error result for an action that failed with ``error`` (its code, message and ``retryable``)."""
        return cls(action_id, error.code, error.message, bool(error.retryable))


AnyActionResult = ActionResult | ActionErrorResult


def is_action_error(result: Mapping[str, Any]) -> bool:
    """The original's ``isActionError`` on wire JSON: the result has both ``code`` and ``retryable``."""
    return "code" in result and "retryable" in result


def parse_action_result(obj: object, *, where: str = "result") -> AnyActionResult:
    """Parse one entry of ``ActionResponse.results`` as an error or a success (see :func:`is_action_error`)."""
    doc = _require_object(obj, where)
    if is_action_error(doc):
        return ActionErrorResult.from_json(doc, where=where)
    return ActionResult.from_json(doc, where=where)


@dataclass(frozen=True, slots=True)
class ActionResponse:
    """The response to an action push: one result per action, in order."""

    results: tuple[AnyActionResult, ...]
    server_hlc: int

    def to_json(self) -> dict[str, Any]:
        """The wire JSON shape ``{"results", "serverHlc"}``."""
        return {"results": [r.to_json() for r in self.results], "serverHlc": str(self.server_hlc)}

    @classmethod
    def from_json(cls, obj: object) -> ActionResponse:
        """Parse the wire JSON shape.

        Raises:
            ValidationError: naming the first field that is missing or of the wrong type.
        """
        doc = _require_object(obj, "response")
        raw_results = doc.get("results")
        if not isinstance(raw_results, list):
            raise ValidationError("response.results must be an array")
        results = tuple(parse_action_result(r, where=f"response.results[{i}]") for i, r in enumerate(raw_results))
        return cls(results, hlc_mod.parse(doc.get("serverHlc"), field="response.serverHlc"))


@dataclass(frozen=True, slots=True)
class ActionDescriptor:
    """An action type a connector supports, for discovery.

    ``target_param`` names the parameter that holds the object the action targets (Salesforce's ``sobject``), so an
    action policy may limit the type to some objects (:mod:`lakesync.core.action_policy`); it is not on the wire.
    """

    action_type: str
    description: str
    params_schema: Mapping[str, JsonValue] | None = None
    target_param: str | None = None

    def to_json(self) -> dict[str, Any]:
        """The wire JSON shape ``{"actionType", "description", "paramsSchema"?}``."""
        out: dict[str, Any] = {"actionType": self.action_type, "description": self.description}
        if self.params_schema is not None:
            out["paramsSchema"] = dict(self.params_schema)
        return out

    @classmethod
    def from_json(cls, obj: object, *, where: str = "descriptor") -> ActionDescriptor:
        """Parse the wire JSON shape.

        Raises:
            ValidationError: naming the first field that is missing or of the wrong type.
        """
        doc = _require_object(obj, where)
        action_type = _require_str(doc, "actionType", where)
        description = _require_str(doc, "description", where, non_empty=False)
        schema = doc.get("paramsSchema")
        if schema is not None and not isinstance(schema, Mapping):
            raise ValidationError(f"{where}.paramsSchema must be an object")
        return cls(action_type, description, dict(schema) if schema is not None else None)


@dataclass(frozen=True, slots=True)
class ActionContext:
    """What a handler may know about the caller: the JWT's custom claims (empty when unauthenticated)."""

    claims: Mapping[str, str | Sequence[str]] = field(default_factory=dict)


class ActionHandler(Protocol):
    """A connector that executes actions.

    ``execute`` returns the :class:`ActionResult` to send back as-is, or raises
    :class:`~lakesync.core.errors.ActionExecutionError` (with ``retryable``) when the external system refuses or
    fails.
    """

    @property
    def name(self) -> str:
        """The connector name actions address."""
        ...

    @property
    def supported_actions(self) -> Sequence[ActionDescriptor]:
        """The action types this handler executes."""
        ...

    def execute(self, action: Action, context: ActionContext) -> ActionResult:
        """Run ``action`` against the external system."""
        ...


def supports(handler: ActionHandler, action_type: str) -> bool:
    """Whether ``handler`` declares ``action_type`` among its supported actions."""
    return any(d.action_type == action_type for d in handler.supported_actions)


def no_handler_error(connector: str) -> ActionNotSupportedError:
    """The error for an action addressed to a connector that has no handler."""
    return ActionNotSupportedError(f'No action handler registered for connector "{connector}"')


def unsupported_action_error(connector: str, action_type: str) -> ActionNotSupportedError:
    """The error for an action type the connector's handler does not support."""
    return ActionNotSupportedError(f'Action type "{action_type}" not supported by connector "{connector}"')


def no_handler_result(action: Action) -> ActionErrorResult:
    """``ACTION_NOT_SUPPORTED`` result: no handler registered for ``action.connector``."""
    return ActionErrorResult.from_error(action.action_id, no_handler_error(action.connector))


def unsupported_action_result(action: Action) -> ActionErrorResult:
    """``ACTION_NOT_SUPPORTED`` result: the handler does not support ``action.action_type``."""
    return ActionErrorResult.from_error(
        action.action_id, unsupported_action_error(action.connector, action.action_type)
    )


def is_cacheable(result: AnyActionResult) -> bool:
    """Whether the idempotency cache keeps ``result``: successes and non-retryable errors, not retryable errors."""
    return not (isinstance(result, ActionErrorResult) and result.retryable)


def discovery_json(handlers: Iterable[ActionHandler]) -> dict[str, Any]:
    """The ``ActionDiscovery`` body: ``{"connectors": {name: [descriptor, ...]}}`` in the given order."""
    return {"connectors": {h.name: [d.to_json() for d in h.supported_actions] for h in handlers}}
