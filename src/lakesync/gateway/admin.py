"""Admin services: sync rules, table schemas (safe evolution only), flush requests, buffer metrics and
materialisation destinations.

Destinations hold no credential (:mod:`lakesync.core.destinations`): the responses here return the stored configs,
which name a Secrets Manager ARN at most, and no message echoes a destination's url.
"""

from __future__ import annotations

import uuid
from typing import Any

from lakesync.core.destinations import NAME_RE, check_secret_scope, parse_destination
from lakesync.core.errors import CommitConflictError, NotFoundError, SchemaDefinitionError
from lakesync.core.log import CommitConflict
from lakesync.core.rules import check_sync_rules_limits, parse_sync_rules
from lakesync.core.schema import TableSchema, check_schema_limits, evolve_schema, parse_table_schema
from lakesync.core.write_policy import is_reserved_table
from lakesync.gateway.basis_cache import forget_basis
from lakesync.gateway.deps import GatewayDeps
from lakesync.gateway.flush_lag import flush_lag_of


def save_sync_rules(deps: GatewayDeps, gateway: str, document: object) -> dict[str, Any]:
    """Validate and store the gateway's sync rules (``SyncRuleError`` → 400; a document beyond the bounds of
    :func:`~lakesync.core.rules.check_sync_rules_limits` → 400 or 413)."""
    rules = parse_sync_rules(document)
    check_sync_rules_limits(rules)
    deps.config.put_sync_rules(gateway, rules)
    forget_basis(deps.pull_basis, gateway)
    return {"saved": True}


def get_sync_rules(deps: GatewayDeps, gateway: str) -> dict[str, Any]:
    """The stored sync rules, or an empty rule set."""
    rules = deps.config.get_sync_rules(gateway)
    return rules.to_json() if rules is not None else {"version": 1, "buckets": []}


def save_schema(deps: GatewayDeps, gateway: str, document: object) -> dict[str, Any]:
    """Validate a table schema and store it as the next version, allowing only safe evolution.

    Concurrent saves of the same table are serialised by the stored version; a save that loses the race re-reads
    and re-checks the evolution against the schema that won. A schema beyond the bounds of
    :func:`~lakesync.core.schema.check_schema_limits` is refused (400 or 413).
    """
    proposed = parse_table_schema(document)
    check_schema_limits(proposed)
    for name in (proposed.table, proposed.delta_table):
        if is_reserved_table(name):
            raise SchemaDefinitionError(f"Table {name!r} is the engine's own; it cannot be given a schema")
    for _ in range(5):
        current = deps.config.get_schemas(gateway).get(proposed.table)
        schema, version, expected = _next_version(current, proposed)
        if version == expected:
            return {"saved": True, "table": schema.table, "version": version}
        try:
            deps.config.put_schema(gateway, schema, version, expected)
        except CommitConflict:
            continue
        return {"saved": True, "table": schema.table, "version": version}
    raise CommitConflictError(f"Schema of {proposed.table!r} is being changed concurrently; retry")


def _next_version(current: tuple[TableSchema, int] | None, proposed: TableSchema) -> tuple[TableSchema, int, int]:
    if current is None:
        return proposed, 1, 0
    schema, version = current
    evolved, new_version = evolve_schema(schema, proposed, version)
    return evolved, new_version, version


def list_schemas(deps: GatewayDeps, gateway: str) -> dict[str, Any]:
    """Every table schema of the gateway with its version."""
    return {
        "schemas": [
            {"version": version, "schema": schema.to_json()}
            for schema, version in sorted(deps.config.get_schemas(gateway).values(), key=lambda sv: sv[0].table)
        ]
    }


def request_flush(deps: GatewayDeps, gateway: str, *, requested_by: str) -> dict[str, Any]:
    """Record a flush request; the flush job picks it up on its next run."""
    request_id = uuid.uuid4().hex
    deps.config.request_flush(
        gateway,
        {"id": request_id, "reason": "admin", "requestedBy": requested_by, "atMs": deps.wall_ms()},
    )
    return {"flushed": True, "requestId": request_id}


def metrics(deps: GatewayDeps, gateway: str) -> dict[str, Any]:
    """Buffer figures for the gateway, in total and per table, and its flush lag (``flushLag``: what a restore from
    the lake would lose, :func:`lakesync.gateway.flush_lag.flush_lag_of`)."""
    shards = deps.buffer.list_shards(gateway)
    heads = deps.buffer.get_heads(shards)
    tables: dict[str, dict[str, int]] = {}
    for shard in shards:
        head = heads.get(shard)
        if head is None:
            continue
        stats = tables.setdefault(
            shard.table,
            {"shards": 0, "committed": 0, "unflushedDeltas": 0, "unflushedBytes": 0, "flushedDeltas": 0},
        )
        stats["shards"] += 1
        stats["committed"] += head.deltas_total
        stats["unflushedDeltas"] += head.unflushed_deltas
        stats["unflushedBytes"] += head.unflushed_bytes
        stats["flushedDeltas"] += head.flushed_deltas
    return {
        "logSize": sum(t["unflushedDeltas"] for t in tables.values()),
        "byteSize": sum(t["unflushedBytes"] for t in tables.values()),
        "committed": sum(t["committed"] for t in tables.values()),
        "tables": [{"table": name, **stats} for name, stats in sorted(tables.items())],
        "pendingFlushRequests": len(deps.config.list_flush_requests(gateway)),
        "backpressureLimitBytes": deps.settings.backpressure_limit,
        "flushThresholdBytes": deps.settings.flush_threshold_bytes,
        "flushLag": flush_lag_of(deps.buffer, heads.values(), deps.wall_ms()).to_json(),
    }


def list_destinations(deps: GatewayDeps, gateway: str) -> dict[str, Any]:
    """The gateway's materialisation destinations, by name: ``{"destinations": [config, ...]}``."""
    return {"destinations": [config.to_json() for config in deps.config.list_destinations(gateway)]}


def register_destination(deps: GatewayDeps, gateway: str, document: object) -> dict[str, Any]:
    """Validate a destination document and register it: ``{"registered": true, "name"}``.

    Raises:
        ValidationError: the document is invalid (400). AlreadyExistsError: the name is taken (409).
    """
    config = parse_destination(document)
    if deps.destination_secret_prefix is not None:
        check_secret_scope(config, prefix=deps.destination_secret_prefix, gateway=gateway)
    deps.config.add_destination(gateway, config)
    return {"registered": True, "name": config.name}


def unregister_destination(deps: GatewayDeps, gateway: str, name: str) -> dict[str, Any]:
    """Remove the destination ``name``: ``{"unregistered": true, "name"}``.

    Raises:
        NotFoundError: the gateway has no destination ``name`` (404).
    """
    # A name no destination can have is not looked up (and never reaches a storage key).
    if not NAME_RE.match(name) or not deps.config.remove_destination(gateway, name):
        shown = name if len(name) <= 64 else name[:64] + "..."
        raise NotFoundError(f'Destination "{shown}" not found')
    return {"unregistered": True, "name": name}
