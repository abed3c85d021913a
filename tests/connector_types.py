"""Helpers of the connector tests: a test connector type's descriptor, and every delta a gateway's pull serves."""

from __future__ import annotations

from lakesync.connectors.base import ConnectorTypeDescriptor
from lakesync.core.delta import RowDelta
from lakesync.gateway import pull as pull_service
from lakesync.gateway.deps import GatewayDeps


def descriptor(type_name: str, display_name: str, description: str, *secret_fields: str) -> ConnectorTypeDescriptor:
    """The descriptor of a connector type a test registers (an API type: any config object, any ingest object)."""
    return ConnectorTypeDescriptor(
        type=type_name,
        display_name=display_name,
        description=description,
        category="api",
        config_schema={"type": "object"},
        ingest_schema={"type": "object"},
        secret_fields=secret_fields,
    )


def pull_all(deps: GatewayDeps, gateway: str) -> list[RowDelta]:
    """Every delta of ``gateway``'s log, paged through cursor pulls without claims."""
    out: list[RowDelta] = []
    cursor = None
    while True:
        page = pull_service.pull(deps, gateway, limit=1000, claims={}, cursor=cursor)
        out.extend(page.deltas)
        cursor = page.cursor
        if not page.has_more:
            return out
