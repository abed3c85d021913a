"""Gateway dependencies in memory with a connector runtime over a given secret store (the security tests' own)."""

from __future__ import annotations

from lakesync.connectors.runtime import ConnectorRuntime
from lakesync.connectors.secrets import SecretStore
from lakesync.core.hlc import HLC
from lakesync.gateway.deps import GatewayDeps
from lakesync.gateway.memory import InMemoryActionStore, InMemoryBufferStore, InMemoryConfigStore, RecordingScheduler

PREFIX = "lakesync/connectors"


def connector_deps(store: SecretStore) -> GatewayDeps:
    """Deps whose connectors keep secrets in ``store`` under :data:`PREFIX` (configs re-read on every use)."""
    config = InMemoryConfigStore()
    return GatewayDeps(
        buffer=InMemoryBufferStore(),
        config=config,
        actions=InMemoryActionStore(),
        clock=HLC(),
        connectors=ConnectorRuntime(config, store, secret_prefix=PREFIX, config_ttl_s=0.0),
        connector_scheduler=RecordingScheduler(),
        connector_secret_prefix=PREFIX,
    )
