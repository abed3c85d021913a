"""The admin API (role ``admin``): which service each route calls, given the request, so that the Lambda handler
(``functions/admin.py``) only authenticates the caller and reads the body.

Sync rules, table schemas, flush requests and buffer metrics are :mod:`lakesync.gateway.admin`; a rules backtest
:mod:`lakesync.gateway.backtest`; connectors are :mod:`lakesync.gateway.connectors`. The route table itself (method,
path, function) is :mod:`lakesync.api_routes`.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping
from dataclasses import dataclass, field

from lakesync.gateway import admin, backtest, connectors, explain
from lakesync.gateway.deps import GatewayDeps

__all__ = ["OPERATIONS", "AdminOperation", "AdminRequest"]


@dataclass(frozen=True, slots=True)
class AdminRequest:
    """An authenticated admin request.

    Attributes:
        deps: The services' dependencies.
        gateway: The gateway of the path.
        caller: The admin's clientId.
        name: The ``{name}`` of the path, for routes that have one.
        document: Reads the request's JSON document (400 when it is not JSON, 413 over the size limit); only routes
            that take a body call it, after the caller was authenticated.
        query: The query string's parameters.
    """

    deps: GatewayDeps
    gateway: str
    caller: str
    name: str
    document: Callable[[], object]
    query: Mapping[str, str] = field(default_factory=dict)


@dataclass(frozen=True, slots=True)
class AdminOperation:
    """One admin route and what it answers (a JSON document, 200)."""

    method: str
    path: str
    run: Callable[[AdminRequest], object]
    summary: str


OPERATIONS: tuple[AdminOperation, ...] = (
    AdminOperation(
        "POST",
        "/v1/admin/sync-rules/{gw}",
        lambda r: admin.save_sync_rules(r.deps, r.gateway, r.document()),
        'Validate and store the sync rules; 200 ``{"saved": true}``.',
    ),
    AdminOperation(
        "GET",
        "/v1/admin/sync-rules/{gw}",
        lambda r: admin.get_sync_rules(r.deps, r.gateway),
        "The stored sync rules (an empty rule set when none).",
    ),
    AdminOperation(
        "POST",
        "/v1/admin/sync-rules/{gw}/test",
        lambda r: backtest.backtest_request(r.deps, r.gateway, r.document()),
        "Backtest candidate rules against the current rows (read-only); 200 the report, 400 invalid.",
    ),
    AdminOperation(
        "POST",
        "/v1/admin/schema/{gw}",
        lambda r: admin.save_schema(r.deps, r.gateway, r.document()),
        'Store a table schema (safe evolution only); 200 ``{"saved": true, "table", "version"}``.',
    ),
    AdminOperation(
        "GET",
        "/v1/admin/schema/{gw}",
        lambda r: admin.list_schemas(r.deps, r.gateway),
        "Every table schema with its version.",
    ),
    AdminOperation(
        "POST",
        "/v1/admin/flush/{gw}",
        lambda r: admin.request_flush(r.deps, r.gateway, requested_by=r.caller),
        'Record a flush request for the flush job; 200 ``{"flushed": true, "requestId"}``.',
    ),
    AdminOperation(
        "GET",
        "/v1/admin/metrics/{gw}",
        lambda r: admin.metrics(r.deps, r.gateway),
        "Buffer figures, in total and per table.",
    ),
    AdminOperation(
        "GET",
        "/v1/admin/explain/{gw}",
        lambda r: explain.explain_request(r.deps, r.gateway, r.query),
        "Why a client has (or has not) a row, from the live buffer; 200 the explanation, 400 a bad parameter.",
    ),
    AdminOperation(
        "GET",
        "/v1/admin/materialise/{gw}",
        lambda r: admin.list_destinations(r.deps, r.gateway),
        'The materialisation destinations, by name: 200 ``{"destinations": [...]}``.',
    ),
    AdminOperation(
        "POST",
        "/v1/admin/materialise/{gw}",
        lambda r: admin.register_destination(r.deps, r.gateway, r.document()),
        'Validate and register a destination; 200 ``{"registered": true, "name"}``, 400 invalid, 409 name taken.',
    ),
    AdminOperation(
        "DELETE",
        "/v1/admin/materialise/{gw}/{name}",
        lambda r: admin.unregister_destination(r.deps, r.gateway, r.name),
        'Remove a destination; 200 ``{"unregistered": true, "name"}``, 404 unknown.',
    ),
    AdminOperation(
        "POST",
        "/v1/admin/connectors/{gw}",
        lambda r: connectors.register_connector(r.deps, r.gateway, r.document()),
        'Validate, check and register a connector; 200 ``{"registered": true, "name"}``, 400 invalid, 409 name '
        "taken, 502 source unreachable.",
    ),
    AdminOperation(
        "GET",
        "/v1/admin/connectors/{gw}",
        lambda r: connectors.list_connectors(r.deps, r.gateway),
        "200 ``[{name, type, hasIngest, isPolling}]``.",
    ),
    AdminOperation(
        "DELETE",
        "/v1/admin/connectors/{gw}/{name}",
        lambda r: connectors.unregister_connector(r.deps, r.gateway, r.name),
        'Remove a connector; 200 ``{"unregistered": true, "name"}``, 404 unknown.',
    ),
)
