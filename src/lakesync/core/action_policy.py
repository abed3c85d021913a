"""Action policies: which clients may run which of a connector's actions.

A connector's config document may carry an ``actions`` object::

    "actions": {
        "allow": [
            {"type": "update_issue"},
            {"type": "update_record", "objects": ["Case", "Task"]}
        ],
        "requireRole": "support",
        "requireClaim": {"name": "team", "values": ["support", "ops"]}
    }

Without it, no client may run the connector's actions. Admins (role ``admin``) may always run every action of every
connector, policy or not. A client may run an action when all of these hold:

1. its token's ``role`` is ``requireRole`` (or one of them, when it is an array), if ``requireRole`` is given;
2. its token's claim ``requireClaim.name`` is one of ``requireClaim.values`` (an array claim: has one of them), if
   ``requireClaim`` is given -- a policy must give at least one of the two, so it always says *who*;
3. the action's type is listed in ``allow``;
4. if that entry lists ``objects``: the action names one of them in its target parameter (Salesforce's ``sobject``,
   see :attr:`~lakesync.core.actions.ActionDescriptor.target_param`), compared ignoring ASCII case as Salesforce
   compares API names. An entry without ``objects`` allows any object.

Everything here is pure: :func:`parse_action_policy` reads the document (400 on a bad one), :func:`check_policy`
matches it to the connector's action types at registration, :func:`refusal` decides one action and
:func:`visible_actions` filters discovery.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field, replace
from typing import Any, Final

from lakesync.core.actions import Action, ActionDescriptor
from lakesync.core.canonical import JsonValue
from lakesync.core.connectors import ConnectorValidationError
from lakesync.core.errors import ActionForbiddenError

__all__ = [
    "ADMIN_ROLE",
    "POLICY_FIELD",
    "ActionCaller",
    "ActionGrant",
    "ActionPolicy",
    "ClaimRequirement",
    "check_policy",
    "parse_action_policy",
    "refusal",
    "visible_actions",
]

POLICY_FIELD: Final = "actions"
"""The connector config field that holds the policy."""

ADMIN_ROLE: Final = "admin"
"""The role that may run every action, policy or not."""

_POLICY_FIELDS: Final = ("allow", "requireClaim", "requireRole")
_GRANT_FIELDS: Final = ("objects", "type")
_CLAIM_FIELDS: Final = ("name", "values")
# Claims a token carries outside its custom claims (``sub`` is among them: a policy may name clients).
_NOT_CUSTOM_CLAIMS: Final = frozenset({"gw", "exp", "iat", "iss", "aud", "role"})


def _fold(name: str) -> str:
    """An object name for comparison: ASCII letters in lower case, anything else exact."""
    return name.lower() if name.isascii() else name


@dataclass(frozen=True, slots=True)
class ActionGrant:
    """One ``allow`` entry: an action type, and the objects it may target (``None``: any)."""

    action_type: str
    objects: tuple[str, ...] | None = None

    def covers(self, target: object) -> bool:
        """Whether the action's target (the value of its target parameter) is one of :attr:`objects`."""
        if self.objects is None:
            return True
        return isinstance(target, str) and _fold(target) in {_fold(o) for o in self.objects}


@dataclass(frozen=True, slots=True)
class ClaimRequirement:
    """``requireClaim``: the claim ``name`` must be (or, an array claim, contain) one of ``values``."""

    name: str
    values: tuple[str, ...]

    def met_by(self, claims: Mapping[str, str | Sequence[str]]) -> bool:
        """Whether ``claims`` satisfy the requirement."""
        value = claims.get(self.name)
        held = (value,) if isinstance(value, str) else tuple(value or ())
        return any(v in self.values for v in held)


@dataclass(frozen=True, slots=True)
class ActionPolicy:
    """A connector's parsed ``actions`` policy (see the module docstring)."""

    grants: tuple[ActionGrant, ...]
    roles: tuple[str, ...] = ()
    claim: ClaimRequirement | None = None

    def grant(self, action_type: str) -> ActionGrant | None:
        """The entry allowing ``action_type``, if any."""
        return next((g for g in self.grants if g.action_type == action_type), None)


@dataclass(frozen=True, slots=True)
class ActionCaller:
    """Who asks: the token's role and custom claims."""

    role: str
    claims: Mapping[str, str | Sequence[str]] = field(default_factory=dict)

    @property
    def is_admin(self) -> bool:
        """Admins may run every action."""
        return self.role == ADMIN_ROLE

    def meets(self, policy: ActionPolicy) -> bool:
        """Whether the caller has the policy's required role and claim."""
        if policy.roles and self.role not in policy.roles:
            return False
        return policy.claim is None or policy.claim.met_by(self.claims)


# -- parsing -----------------------------------------------------------------------------------------------------------


def _fail(message: str) -> ConnectorValidationError:
    return ConnectorValidationError(message)


def _shown(text: str) -> str:
    return text if len(text) <= 64 else text[:64] + "..."


def _object(value: object, fields: tuple[str, ...], where: str, shape: str) -> Mapping[str, Any]:
    """``value`` as an object with no field outside ``fields``."""
    if not isinstance(value, Mapping):
        raise _fail(f"{where} must be an object {shape}")
    for key in value:
        if key not in fields:
            raise _fail(f'{where} has an unknown field "{_shown(str(key))}" (allowed: {", ".join(fields)})')
    return value


def _text(doc: Mapping[str, Any], key: str, where: str) -> str:
    value = doc.get(key)
    if not isinstance(value, str) or not value:
        raise _fail(f"{where}.{key} must be a non-empty string")
    return value


def _strings(value: object, where: str, *, single: bool = False) -> tuple[str, ...]:
    """A non-empty array of non-empty strings (or, with ``single``, one non-empty string), duplicates dropped."""
    if single and isinstance(value, str) and value:
        return (value,)
    if not isinstance(value, list) or not value or not all(isinstance(v, str) and v for v in value):
        either = "a non-empty string or " if single else ""
        raise _fail(f"{where} must be {either}a non-empty array of non-empty strings")
    return tuple(dict.fromkeys(value))


def _grant(value: object, where: str) -> ActionGrant:
    entry = _object(value, _GRANT_FIELDS, where, "{type, objects?}")
    action_type = _text(entry, "type", where)
    objects = _strings(entry["objects"], f"{where}.objects") if "objects" in entry else None
    return ActionGrant(action_type, objects)


def _claim(value: object) -> ClaimRequirement:
    where = f"{POLICY_FIELD}.requireClaim"
    doc = _object(value, _CLAIM_FIELDS, where, "{name, values}")
    name = _text(doc, "name", where)
    if name in _NOT_CUSTOM_CLAIMS:
        raise _fail(f'{where}.name "{name}" is not a custom claim (use requireRole for the role)')
    return ClaimRequirement(name, _strings(doc.get("values"), f"{where}.values"))


def parse_action_policy(document: Mapping[str, Any]) -> ActionPolicy | None:
    """The policy in a connector config document's ``actions`` field; ``None`` when there is none (actions off).

    Raises:
        ConnectorValidationError: the field is malformed (HTTP 400, naming the first bad field).
    """
    if POLICY_FIELD not in document:
        return None
    doc = _object(document[POLICY_FIELD], _POLICY_FIELDS, POLICY_FIELD, "{allow, requireRole?, requireClaim?}")
    entries = doc.get("allow")
    if not isinstance(entries, list) or not entries:
        raise _fail(f"{POLICY_FIELD}.allow must be a non-empty array of {{type, objects?}}")
    grants: list[ActionGrant] = []
    for i, entry in enumerate(entries):
        grant = _grant(entry, f"{POLICY_FIELD}.allow[{i}]")
        if any(g.action_type == grant.action_type for g in grants):
            raise _fail(f'{POLICY_FIELD}.allow[{i}].type "{_shown(grant.action_type)}" is listed twice')
        grants.append(grant)
    roles = _strings(doc["requireRole"], f"{POLICY_FIELD}.requireRole", single=True) if "requireRole" in doc else ()
    claim = _claim(doc["requireClaim"]) if "requireClaim" in doc else None
    if not roles and claim is None:
        raise _fail(f"{POLICY_FIELD} needs requireRole or requireClaim: say which clients may run these actions")
    return ActionPolicy(tuple(grants), roles, claim)


def check_policy(policy: ActionPolicy, connector_type: str, descriptors: Sequence[ActionDescriptor] | None) -> None:
    """Check a policy against the actions its connector has (``None``: the connector runs no actions).

    Raises:
        ConnectorValidationError: an ``allow`` entry names a type the connector does not have, or lists ``objects``
            for a type that targets no named object.
    """
    if descriptors is None:
        raise _fail(f'{POLICY_FIELD}: connector type "{connector_type}" runs no actions')
    by_type = {d.action_type: d for d in descriptors}
    for i, grant in enumerate(policy.grants):
        where = f"{POLICY_FIELD}.allow[{i}]"
        descriptor = by_type.get(grant.action_type)
        if descriptor is None:
            known = ", ".join(by_type) or "none"
            raise _fail(
                f'{where}.type "{_shown(grant.action_type)}" is not an action of connector type '
                f'"{connector_type}" (its actions: {known})'
            )
        if grant.objects is not None and descriptor.target_param is None:
            raise _fail(f'{where}.objects: action type "{grant.action_type}" does not target named objects')


# -- evaluation --------------------------------------------------------------------------------------------------------


def refusal(
    policy: ActionPolicy | None, caller: ActionCaller, action: Action, target_param: str | None
) -> ActionForbiddenError | None:
    """Why ``caller`` may not run ``action`` under ``policy``, or ``None`` when it may.

    ``target_param``: the parameter naming the object the action targets (its descriptor's), if any.
    """
    connector = action.connector
    if caller.is_admin:
        return None
    if policy is None:
        return ActionForbiddenError(f'Actions of connector "{connector}" are not enabled for clients')
    if not caller.meets(policy):
        return ActionForbiddenError(f'This token\'s role and claims may not run actions of connector "{connector}"')
    grant = policy.grant(action.action_type)
    if grant is None:
        return ActionForbiddenError(f'Action type "{action.action_type}" of connector "{connector}" is not allowed')
    target = action.params.get(target_param) if target_param is not None else None
    if not grant.covers(target):
        shown = f'"{_shown(target)}"' if isinstance(target, str) else "no object"
        return ActionForbiddenError(
            f'Action type "{action.action_type}" of connector "{connector}" is not allowed on {shown}'
        )
    return None


def visible_actions(
    policy: ActionPolicy | None, caller: ActionCaller, descriptors: Sequence[ActionDescriptor]
) -> list[ActionDescriptor]:
    """The actions ``caller`` may run, for discovery. An entry limited to ``objects`` narrows its target parameter's
    schema to them (an ``enum``)."""
    if caller.is_admin:
        return list(descriptors)
    if policy is None or not caller.meets(policy):
        return []
    visible = []
    for descriptor in descriptors:
        grant = policy.grant(descriptor.action_type)
        if grant is not None:
            visible.append(_narrowed(descriptor, grant.objects))
    return visible


def _narrowed(descriptor: ActionDescriptor, objects: tuple[str, ...] | None) -> ActionDescriptor:
    schema = descriptor.params_schema
    param = descriptor.target_param
    if objects is None or schema is None or param is None:
        return descriptor
    properties = schema.get("properties")
    if not isinstance(properties, Mapping):
        return descriptor
    target = properties.get(param)
    narrowed: dict[str, JsonValue] = {**(target if isinstance(target, Mapping) else {}), "enum": list(objects)}
    return replace(descriptor, params_schema={**schema, "properties": {**properties, param: narrowed}})
