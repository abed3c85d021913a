"""Connector configuration documents and their validation.

A connector config is ``{name, type, ingest?, <type>: {...}}``. The built-in types (:data:`CONNECTOR_TYPES`) each
require their own settings object; unknown types pass type validation (a plugin may handle them). ``ingest``, when
present, describes what to poll: API connectors (``jira``, ``salesforce``) define their tables themselves and only
``intervalMs`` is checked; every other type needs a non-empty ``tables`` array whose entries have a ``table``, a
``query`` and a ``cursor`` (with ``cursorColumn``) or ``diff`` strategy.

:func:`validate_connector_config` checks in the original's order with its exact messages. It reads the document the
way JavaScript did: a JSON array counts as an object without fields, and a key present with ``null`` is not absent.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any, TypeGuard

from lakesync.core.errors import ValidationError

CONNECTOR_TYPES = ("postgres", "mysql", "bigquery", "jira", "salesforce")
"""Connector types with built-in settings validation."""

API_CONNECTOR_TYPES = frozenset({"jira", "salesforce"})
"""Types whose ingest tables are defined by the connector, not the config."""

INGEST_STRATEGIES = ("cursor", "diff")

_REQUIRED_SETTINGS: dict[str, tuple[str, tuple[str, ...]]] = {
    "postgres": ("Postgres", ("connectionString",)),
    "mysql": ("MySQL", ("connectionString",)),
    "bigquery": ("BigQuery", ("projectId", "dataset")),
    "jira": ("Jira", ("domain", "email", "apiToken")),
    "salesforce": ("Salesforce", ("instanceUrl", "clientId", "clientSecret", "username", "password")),
}

_MISSING: Any = object()


class ConnectorValidationError(ValidationError):
    """A connector configuration document is invalid."""

    code = "CONNECTOR_VALIDATION"


@dataclass(frozen=True, slots=True)
class ConnectorConfig:
    """A validated connector configuration.

    Attributes:
        name: The connector's unique name (also its action-handler name and ``ingest:{name}`` client id).
        type: The connector type.
        document: The whole configuration document, as given.
    """

    name: str
    type: str
    document: Mapping[str, Any]

    @property
    def settings(self) -> Mapping[str, Any] | None:
        """The type-specific settings object (``document[type]``), if it is an object."""
        value = self.document.get(self.type)
        return value if isinstance(value, Mapping) else None

    @property
    def ingest(self) -> Mapping[str, Any] | None:
        """The ingest section, if any."""
        value = self.document.get("ingest")
        return value if isinstance(value, Mapping) else None

    @property
    def has_ingest(self) -> bool:
        """Whether the connector polls its source."""
        return self.document.get("ingest") is not None

    def summary(self) -> dict[str, Any]:
        """The sanitised listing entry ``{"name", "type", "hasIngest"}`` (no credentials)."""
        return {"name": self.name, "type": self.type, "hasIngest": self.has_ingest}

    def to_json(self) -> dict[str, Any]:
        """The configuration document."""
        return dict(self.document)


def _is_object(value: object) -> bool:
    """JavaScript ``typeof value === "object" && value !== null`` for a JSON value."""
    return isinstance(value, Mapping | list)


def _get(value: object, key: str) -> Any:
    """Property access on a JSON value; :data:`_MISSING` plays ``undefined``."""
    return value.get(key, _MISSING) if isinstance(value, Mapping) else _MISSING


def _non_empty_str(value: object) -> TypeGuard[str]:
    return isinstance(value, str) and value != ""


def _positive_number(value: object) -> bool:
    return isinstance(value, int | float) and not isinstance(value, bool) and value >= 1


def _fail(message: str) -> ConnectorValidationError:
    return ConnectorValidationError(message)


SALESFORCE_AUTH_FLOWS: dict[str, tuple[str, ...]] = {
    "password": ("instanceUrl", "clientId", "clientSecret", "username", "password"),
    "client_credentials": ("instanceUrl", "clientId", "clientSecret"),
    "jwt_bearer": ("instanceUrl", "clientId", "username", "privateKey"),
}
"""Salesforce OAuth flows and the settings each requires. Without ``authFlow`` a config is validated as the
original's (the username-password flow, which Salesforce deprecates); ``client_credentials`` authenticates against
the org's My Domain URL (``instanceUrl``) and ``jwt_bearer`` signs an assertion with ``privateKey``."""


def _validate_settings(doc: object, connector_type: str) -> None:
    label, required = _REQUIRED_SETTINGS[connector_type]
    settings = _get(doc, connector_type)
    if not _is_object(settings):
        raise _fail(f'Connector type "{connector_type}" requires a {connector_type} config object')
    if connector_type == "salesforce":
        flow = _get(settings, "authFlow")
        if flow is not _MISSING:
            if not isinstance(flow, str) or flow not in SALESFORCE_AUTH_FLOWS:
                raise _fail('Salesforce authFlow must be "password", "client_credentials" or "jwt_bearer"')
            required = SALESFORCE_AUTH_FLOWS[flow]
    for key in required:
        if not _non_empty_str(_get(settings, key)):
            raise _fail(f"{label} connector requires a non-empty {key}")


def _validate_ingest(doc: object, connector_type: str) -> None:
    ingest = _get(doc, "ingest")
    if ingest is _MISSING:
        return
    if not _is_object(ingest):
        raise _fail("Ingest config must be an object")
    if connector_type not in API_CONNECTOR_TYPES:
        tables = _get(ingest, "tables")
        if not isinstance(tables, list) or not tables:
            raise _fail("Ingest config must have a non-empty tables array")
        for i, table in enumerate(tables):
            where = f"Ingest table at index {i}"
            if not _is_object(table):
                raise _fail(f"{where} must be an object")
            if not _non_empty_str(_get(table, "table")):
                raise _fail(f"{where} must have a non-empty table name")
            if not _non_empty_str(_get(table, "query")):
                raise _fail(f"{where} must have a non-empty query")
            strategy = _get(table, "strategy")
            if not _is_object(strategy):
                raise _fail(f"{where} must have a strategy object")
            strategy_type = _get(strategy, "type")
            if not isinstance(strategy_type, str) or strategy_type not in INGEST_STRATEGIES:
                raise _fail(f'{where} strategy type must be "cursor" or "diff"')
            if strategy_type == "cursor" and not _non_empty_str(_get(strategy, "cursorColumn")):
                raise _fail(f"{where} cursor strategy requires a non-empty cursorColumn")
    interval = _get(ingest, "intervalMs")
    if interval is not _MISSING and not _positive_number(interval):
        raise _fail("Ingest intervalMs must be a positive number")


def validate_connector_config(obj: object) -> ConnectorConfig:
    """Validate a connector configuration document (parsed JSON).

    First failure wins: the document is an object, ``name`` and ``type`` are non-empty strings, a built-in type's
    settings object and its required non-empty string fields, then the optional ``ingest`` section.

    Raises:
        ConnectorValidationError: with the original's exact message (HTTP 400, ``VALIDATION_ERROR``).
    """
    if not _is_object(obj):
        raise _fail("Connector config must be an object")
    name = _get(obj, "name")
    if not _non_empty_str(name):
        raise _fail("Connector name must be a non-empty string")
    connector_type = _get(obj, "type")
    if not _non_empty_str(connector_type):
        raise _fail("Connector type must be a non-empty string")
    if connector_type in _REQUIRED_SETTINGS:
        _validate_settings(obj, connector_type)
    _validate_ingest(obj, connector_type)
    assert isinstance(obj, Mapping)  # a name was read from it
    return ConnectorConfig(name, connector_type, dict(obj))
