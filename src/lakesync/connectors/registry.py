"""The connector types this deployment knows: ``type -> (descriptor, factory)``.

A factory turns a validated config into a :class:`~lakesync.connectors.base.Connector`::

    def open_jira(config: ConnectorConfig, secrets: Mapping[str, str]) -> Connector: ...

    register(JIRA_DESCRIPTOR, open_jira)

``config`` has its credential fields already resolved (plain values in ``config.settings``), and ``secrets`` holds
the same values by field name (``{"apiToken": "..."}``); a factory must not connect (the first poll, pull or action
does, and reports an unreachable system as :class:`~lakesync.core.errors.AdapterError`). The registry is
process-wide: :data:`BUILTIN_TYPES` holds the built-in types, :func:`register` adds or replaces one (a plugin, a
test's), :func:`descriptors` lists them for ``GET /v1/connectors/types`` sorted by type.
"""

from __future__ import annotations

import dataclasses
import importlib
import logging
import threading
from collections.abc import Callable, Mapping
from dataclasses import dataclass

from lakesync.connectors.base import Connector, ConnectorTypeDescriptor
from lakesync.connectors.sql.registration import BIGQUERY, MYSQL, POSTGRES, open_bigquery_connector, open_sql_connector
from lakesync.core.connectors import ConnectorConfig
from lakesync.core.errors import AdapterError

__all__ = ["BUILTIN_TYPES", "ConnectorFactory", "ConnectorType", "descriptors", "get_type", "register", "unregister"]

logger = logging.getLogger(__name__)

ConnectorFactory = Callable[[ConnectorConfig, Mapping[str, str]], Connector]
"""``factory(config with resolved secrets, secrets by field) -> Connector`` (must not connect)."""


@dataclass(frozen=True, slots=True)
class ConnectorType:
    """A registered connector type."""

    descriptor: ConnectorTypeDescriptor
    factory: ConnectorFactory


BUILTIN_TYPES: dict[str, ConnectorType] = {
    POSTGRES.type: ConnectorType(POSTGRES, open_sql_connector),
    MYSQL.type: ConnectorType(MYSQL, open_sql_connector),
    BIGQUERY.type: ConnectorType(BIGQUERY, open_bigquery_connector),
}
"""The built-in types. The API connectors of :data:`API_MODULES` join on first use."""

API_MODULES: dict[str, tuple[str, ...]] = {
    "lakesync.connectors.jira": ("apiToken",),
    "lakesync.connectors.salesforce": ("clientSecret", "password", "privateKey"),
}
"""The API connector modules (each with ``DESCRIPTOR`` and ``create(config, secrets)``), registered on first use with
their credential fields (a missing module is skipped)."""

_lock = threading.Lock()
_loaded = False


def _load_optional() -> None:
    global _loaded
    with _lock:
        if _loaded:
            return
        _loaded = True
    for module, secret_fields in API_MODULES.items():
        try:
            loaded = importlib.import_module(module)
        except ModuleNotFoundError as exc:
            if exc.name != module:
                raise
            logger.debug("connector module %s is not installed", module)
            continue
        descriptor = getattr(loaded, "DESCRIPTOR", None)
        factory = getattr(loaded, "create", None)
        if isinstance(descriptor, ConnectorTypeDescriptor) and callable(factory):
            if not descriptor.secret_fields:
                descriptor = dataclasses.replace(descriptor, secret_fields=secret_fields)
            with _lock:
                BUILTIN_TYPES.setdefault(descriptor.type, ConnectorType(descriptor, factory))


def register(descriptor: ConnectorTypeDescriptor, factory: ConnectorFactory) -> None:
    """Add (or replace) the connector type ``descriptor.type``."""
    with _lock:
        BUILTIN_TYPES[descriptor.type] = ConnectorType(descriptor, factory)


def unregister(connector_type: str) -> None:
    """Remove a type (tests)."""
    with _lock:
        BUILTIN_TYPES.pop(connector_type, None)


def get_type(connector_type: str) -> ConnectorType | None:
    """The registered type, or ``None``."""
    _load_optional()
    return BUILTIN_TYPES.get(connector_type)


def descriptors() -> list[ConnectorTypeDescriptor]:
    """Every registered type's descriptor, sorted by type."""
    _load_optional()
    return [BUILTIN_TYPES[t].descriptor for t in sorted(BUILTIN_TYPES)]


def build(config: ConnectorConfig, secrets: Mapping[str, str]) -> Connector:
    """Open the connector of ``config`` with its type's factory.

    Raises:
        AdapterError: no factory for the type, or the factory refused the config.
    """
    found = get_type(config.type)
    if found is None:
        raise AdapterError(f'No connector factory for type "{config.type}"')
    return found.factory(config, secrets)
