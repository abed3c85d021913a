"""Connector administration (reference §12.2): register, list, unregister, and the type catalogue.

Registration, in order (first failure wins, nothing stored on any failure):

1. the original's validation (:func:`lakesync.core.connectors.validate_connector_config`, 400 with its messages),
   then ours: the name is ``[A-Za-z0-9][A-Za-z0-9_.-]{0,63}`` (it is a storage key, a URL segment and a schedule
   name), the type has a factory (the original answered 500), ingest table names are LakeSync table identifiers;
2. the name is free (409 ``Connector "{name}" already exists``);
3. credentials become Secrets Manager references (:func:`lakesync.connectors.secrets.externalise`);
4. the connector is opened and checked against its source (``check()``: for a database, ``SELECT 1`` and every ingest
   query with ``LIMIT 0``): an unreachable or refusing source is 502 ``ADAPTER_ERROR``;
5. the config (references only) is stored, conditionally on the name (a concurrent registration gets 409);
6. a connector with ``ingest`` gets its schedule (:class:`~lakesync.ports.ConnectorScheduler`).

A failure after step 3 deletes the secrets step 3 created; after step 5, the stored config too.
"""

from __future__ import annotations

import logging
import re
from typing import Any, Final

from lakesync.core.connectors import ConnectorConfig, ConnectorValidationError, validate_connector_config
from lakesync.core.errors import AdapterError, AlreadyExistsError, LakeSyncError, NotFoundError, StorageError
from lakesync.core.schema import is_valid_identifier
from lakesync.gateway.deps import GatewayDeps

__all__ = ["connector_types", "list_connectors", "register_connector", "unregister_connector"]

logger = logging.getLogger(__name__)

NAME_RE: Final = re.compile(r"\A[A-Za-z0-9][A-Za-z0-9_.-]{0,63}\Z")
DEFAULT_INTERVAL_MS: Final = 10_000


# The connector registry (and the SQL and API connectors it holds) loads on the first connector request, not at
# the admin function's INIT.


def connector_types() -> list[dict[str, Any]]:
    """``GET /v1/connectors/types``: every registered type's descriptor, sorted by type."""
    from lakesync.connectors import registry

    return [d.to_json() for d in registry.descriptors()]


def _check_config(config: ConnectorConfig) -> None:
    from lakesync.connectors import registry

    if not NAME_RE.match(config.name):
        raise ConnectorValidationError(
            "Connector name must be 1-64 characters: letters, digits, '_', '.', '-', starting with a letter or digit"
        )
    if registry.get_type(config.type) is None:
        known = ", ".join(d.type for d in registry.descriptors())
        raise ConnectorValidationError(f'Unknown connector type "{config.type}" (known: {known})')
    ingest = config.ingest
    for i, table in enumerate(ingest.get("tables", []) if ingest else []):
        if isinstance(table, dict) and not is_valid_identifier(str(table.get("table", ""))):
            raise ConnectorValidationError(
                f"Ingest table at index {i} table name must be an identifier ([A-Za-z_][A-Za-z0-9_]{{0,63}})"
            )
    from lakesync.gateway import actions as actions_service  # registration only: not loaded at INIT

    actions_service.validate_connector_policy(config)


def interval_ms(config: ConnectorConfig) -> int:
    """The connector's poll interval (``ingest.intervalMs``, default 10 s as the original)."""
    ingest = config.ingest or {}
    value = ingest.get("intervalMs", DEFAULT_INTERVAL_MS)
    return int(value) if isinstance(value, int | float) and value >= 1 else DEFAULT_INTERVAL_MS


def _runtime_parts(deps: GatewayDeps) -> Any:
    if deps.connectors is None:
        raise StorageError("Connectors are not configured in this deployment")
    return deps.connectors


def register_connector(deps: GatewayDeps, gateway: str, document: object) -> dict[str, Any]:
    """Validate, check and register a connector: ``{"registered": true, "name"}`` (see the module docstring).

    Raises:
        ConnectorValidationError: 400. AlreadyExistsError: 409. AdapterError: 502 (source unreachable/refused).
    """
    from lakesync.connectors import registry
    from lakesync.connectors.runtime import open_connector
    from lakesync.connectors.secrets import externalise

    runtime = _runtime_parts(deps)
    config = validate_connector_config(document)
    _check_config(config)
    if deps.config.get_connector(gateway, config.name) is not None:
        raise AlreadyExistsError(f'Connector "{config.name}" already exists')
    found = registry.get_type(config.type)
    assert found is not None
    stored, created = externalise(
        config,
        tuple(found.descriptor.secret_fields),
        runtime.secrets,
        gateway=gateway,
        prefix=deps.connector_secret_prefix,
    )
    added = False
    try:
        connector = open_connector(stored, runtime.secrets, gateway=gateway, prefix=deps.connector_secret_prefix)
        try:
            from lakesync.gateway import actions as actions_service

            actions_service.check_connector_policy(stored, connector.actions)
            for part in (connector.source, connector.ingest, connector.actions):
                check = getattr(part, "check", None)
                if check is not None:
                    check()
                    break
        finally:
            connector.close()
        deps.config.add_connector(gateway, stored)
        added = True
        if stored.has_ingest:
            if deps.connector_scheduler is None:
                raise StorageError("No connector scheduler is configured: ingest connectors cannot be polled")
            deps.connector_scheduler.schedule(gateway, stored.name, interval_ms(stored))
    except BaseException:
        if added:
            deps.config.remove_connector(gateway, stored.name)
        for secret_id in created:
            try:
                runtime.secrets.delete_secret(secret_id)
            except LakeSyncError:
                logger.warning("could not delete secret %s of a failed registration", secret_id, exc_info=True)
        raise
    runtime.invalidate(gateway)
    logger.info("connector %s (%s) registered on %s", stored.name, stored.type, gateway)
    return {"registered": True, "name": stored.name}


def list_connectors(deps: GatewayDeps, gateway: str) -> list[dict[str, Any]]:
    """``[{name, type, hasIngest, isPolling}]`` (no config details, no credentials)."""
    return [{**c.summary(), "isPolling": c.has_ingest} for c in deps.config.list_connectors(gateway)]


def unregister_connector(deps: GatewayDeps, gateway: str, name: str) -> dict[str, Any]:
    """Remove the connector, its schedule, its position and the secrets its registration created:
    ``{"unregistered": true, "name"}``.

    Raises:
        NotFoundError: no connector ``name`` (404 ``Connector "{name}" not found``).
    """
    config = deps.config.get_connector(gateway, name) if NAME_RE.match(name) else None
    if config is None or not deps.config.remove_connector(gateway, name):
        shown = name if len(name) <= 64 else name[:64] + "..."
        raise NotFoundError(f'Connector "{shown}" not found')
    if deps.connector_scheduler is not None:
        deps.connector_scheduler.unschedule(gateway, name)
    if deps.positions is not None:
        deps.positions.delete_position(gateway, name)
    if deps.connectors is not None:
        from lakesync.connectors import registry
        from lakesync.connectors.secrets import stored_secret_ids

        found = registry.get_type(config.type)
        fields = tuple(found.descriptor.secret_fields) if found is not None else ()
        for secret_id in stored_secret_ids(config, fields, gateway=gateway, prefix=deps.connector_secret_prefix):
            try:
                deps.connectors.secrets.delete_secret(secret_id)
            except (AdapterError, StorageError):
                logger.warning("could not delete secret %s of connector %s", secret_id, name, exc_info=True)
        deps.connectors.invalidate(gateway)
    return {"unregistered": True, "name": name}
