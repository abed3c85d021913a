"""API Gateway's routing in ``lakesync local``: an HTTP API event to the function serving its route."""

from __future__ import annotations

import importlib
from typing import Any

from lakesync.api_routes import allowed_methods, find_route

__all__ = ["route_request"]


def route_request(event: dict[str, Any], context: Any) -> dict[str, Any]:
    """Dispatch one API Gateway v2 event to the function serving its route, as API Gateway does."""
    method = event["requestContext"]["http"]["method"]
    path = event["rawPath"]
    found = find_route(method, path)
    route_key = found[0].route_key if found else "$default"
    allowed = allowed_methods(path)
    if found is None and allowed:
        # A known path asked with another method: the function serving the path answers (its router's route miss:
        # 405 with ``Allow``). API Gateway itself would answer 404 here (docs/api.md).
        found = find_route(allowed[0], path)
    if found is None:
        return {
            "statusCode": 404,
            "headers": {"content-type": "application/json"},
            "body": '{"error":"Not found","code":"NOT_FOUND"}',
        }
    route, params = found
    event = {**event, "routeKey": route_key, "pathParameters": params or None}
    module = importlib.import_module(route.module)
    result: dict[str, Any] = module.lambda_handler(event, context)
    return result
