"""The registered connectors of each gateway, opened on demand and kept open between requests.

:class:`ConnectorRuntime` reads a gateway's connector configs from the config store (re-read at most every
``config_ttl_s``), resolves their ``secret://`` references through the secret store (only those under the gateway's
``{secret_prefix}/{gateway}/``) and opens each connector with its
type's factory (:mod:`lakesync.connectors.registry`). The pull service asks it for ``source=`` adapters, the action
dispatcher for handlers, the poller for ingest sources. A connector whose config changed or vanished is closed.
"""

from __future__ import annotations

import hashlib
import logging
import threading
import time
from collections.abc import Callable
from typing import TYPE_CHECKING

from lakesync.connectors import registry
from lakesync.connectors.base import Connector
from lakesync.connectors.secrets import SecretStore, resolve, store_scope
from lakesync.core.canonical import stable_stringify
from lakesync.core.connectors import ConnectorConfig

if TYPE_CHECKING:
    from lakesync.core.actions import ActionHandler
    from lakesync.ports import ConfigStore, SourceAdapter

logger = logging.getLogger(__name__)


def open_connector(config: ConnectorConfig, secrets: SecretStore, *, gateway: str, prefix: str) -> Connector:
    """Resolve the config's secrets (only those under ``{prefix}/{gateway}/``) and open it with its type's factory.

    Raises:
        SecretScopeError: a reference outside the gateway's secrets (400; nothing read).
        AdapterError: no factory for the type, a secret cannot be read, or the factory refused.
    """
    found = registry.get_type(config.type)
    fields = tuple(found.descriptor.secret_fields) if found is not None else ()
    scope = store_scope(secrets, prefix=prefix, gateway=gateway)
    resolved, values = resolve(config, fields, secrets, scope)
    return registry.build(resolved, values)


def _fingerprint(config: ConnectorConfig) -> str:
    return hashlib.sha256(stable_stringify(dict(config.document)).encode("utf-8", "surrogatepass")).hexdigest()


class ConnectorRuntime:
    """See the module docstring. Thread-safe."""

    def __init__(
        self,
        config: ConfigStore,
        secrets: SecretStore,
        *,
        secret_prefix: str = "lakesync/connectors",
        config_ttl_s: float = 30.0,
        clock: Callable[[], float] = time.monotonic,
    ) -> None:
        self._config = config
        self._secrets = secrets
        self.secret_prefix = secret_prefix
        self._ttl = config_ttl_s
        self._clock = clock
        self._lock = threading.RLock()
        self._configs: dict[str, tuple[float, list[ConnectorConfig]]] = {}
        self._open: dict[tuple[str, str], tuple[str, Connector]] = {}

    @property
    def secrets(self) -> SecretStore:
        """The secret store."""
        return self._secrets

    def configs(self, gateway: str) -> list[ConnectorConfig]:
        """The gateway's connector configs (cached for ``config_ttl_s``)."""
        with self._lock:
            cached = self._configs.get(gateway)
            if cached is None or cached[0] <= self._clock():
                configs = self._config.list_connectors(gateway)
                self._configs[gateway] = (self._clock() + self._ttl, configs)
                self._close_stale(gateway, configs)
                return configs
            return cached[1]

    def invalidate(self, gateway: str) -> None:
        """Forget the gateway's cached configs (registration changed them) and close its connectors."""
        with self._lock:
            self._configs.pop(gateway, None)
            for key in [k for k in self._open if k[0] == gateway]:
                self._close(key)

    def connector(self, gateway: str, name: str, *, fresh: bool = False) -> Connector | None:
        """The open connector ``name`` of ``gateway`` (opened on first use), or ``None`` when not registered.

        ``fresh`` re-reads the gateway's configs first, so a registration made by another process moments ago is
        seen (the poller's read: its answer ``gone`` removes the schedule).

        Raises:
            AdapterError: it cannot be opened (type unknown, secret unreadable, config refused).
        """
        with self._lock:
            if fresh:
                self._configs.pop(gateway, None)
            config = next((c for c in self.configs(gateway) if c.name == name), None)
            if config is None:
                return None
            fingerprint = _fingerprint(config)
            opened = self._open.get((gateway, name))
            if opened is not None and opened[0] == fingerprint:
                return opened[1]
            if opened is not None:
                self._close((gateway, name))
            connector = open_connector(config, self._secrets, gateway=gateway, prefix=self.secret_prefix)
            self._open[(gateway, name)] = (fingerprint, connector)
            return connector

    def source(self, gateway: str, name: str) -> SourceAdapter | None:
        """The ``source=`` adapter of connector ``name``, or ``None``."""
        connector = self.connector(gateway, name)
        return connector.source if connector is not None else None

    def action_handlers(self, gateway: str) -> dict[str, ActionHandler]:
        """Every registered connector of the gateway that executes actions, by name (in name order). A connector
        that cannot be opened is left out (and logged): its actions get ``ACTION_NOT_SUPPORTED``."""
        handlers: dict[str, ActionHandler] = {}
        for config in self.configs(gateway):
            try:
                connector = self.connector(gateway, config.name)
            except Exception:  # one broken connector must not hide the others
                logger.warning("connector %s of %s cannot be opened", config.name, gateway, exc_info=True)
                continue
            if connector is not None and connector.actions is not None:
                handlers[config.name] = connector.actions
        return handlers

    def _close_stale(self, gateway: str, configs: list[ConnectorConfig]) -> None:
        live = {c.name: _fingerprint(c) for c in configs}
        for key, (fingerprint, _) in list(self._open.items()):
            if key[0] == gateway and live.get(key[1]) != fingerprint:
                self._close(key)

    def _close(self, key: tuple[str, str]) -> None:
        _, connector = self._open.pop(key)
        try:
            connector.close()
        except Exception:  # closing a broken connection must not fail the caller
            logger.warning("closing connector %s failed", key[1], exc_info=True)

    def close(self) -> None:
        """Close every open connector."""
        with self._lock:
            for key in list(self._open):
                self._close(key)
            self._configs.clear()
