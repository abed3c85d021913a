"""The HTTP API's routes and the Lambda function serving each: one table for the local runner and the CDK app."""

from __future__ import annotations

import functools
import re
from dataclasses import dataclass


@dataclass(frozen=True, slots=True)
class Route:
    """One API Gateway route: method, path template and handler module (``lambda_handler`` inside it)."""

    method: str
    path: str
    module: str

    @property
    def route_key(self) -> str:
        """API Gateway's ``routeKey``, e.g. ``POST /v1/sync/{gw}/push``."""
        return f"{self.method} {self.path}"

    @property
    def handler(self) -> str:
        """The Lambda handler string."""
        return f"{self.module}.lambda_handler"

    @property
    def parameters(self) -> tuple[str, ...]:
        """The path parameters' names, in path order."""
        return tuple(re.findall(r"\{(\w+)\}", self.path))

    def match(self, method: str, path: str) -> dict[str, str] | None:
        """Path parameters if ``method path`` hits this route, else ``None``."""
        if method != self.method:
            return None
        return self.match_path(path)

    def match_path(self, path: str) -> dict[str, str] | None:
        """Path parameters if ``path`` fits this route's template (whatever the method), else ``None``."""
        found = _pattern(self.path).fullmatch(path)
        return found.groupdict() if found else None


@functools.cache
def _pattern(template: str) -> re.Pattern[str]:
    return re.compile(re.sub(r"\\\{(\w+)\\\}", r"(?P<\1>[^/]+)", re.escape(template)))


FUNCTIONS = {
    "health": "functions.health",
    "push": "functions.push",
    "pull": "functions.pull",
    "actions": "functions.actions",
    "admin": "functions.admin",
    "checkpoint": "functions.checkpoint",
}

ROUTES = (
    Route("GET", "/health", FUNCTIONS["health"]),
    Route("GET", "/v1/openapi.json", FUNCTIONS["health"]),
    Route("POST", "/v1/sync/{gw}/push", FUNCTIONS["push"]),
    Route("GET", "/v1/sync/{gw}/pull", FUNCTIONS["pull"]),
    Route("GET", "/v1/sync/{gw}/checkpoint", FUNCTIONS["checkpoint"]),
    Route("POST", "/v1/sync/{gw}/subscriptions", FUNCTIONS["pull"]),
    Route("GET", "/v1/sync/{gw}/subscriptions", FUNCTIONS["pull"]),
    Route("DELETE", "/v1/sync/{gw}/subscriptions/{id}", FUNCTIONS["pull"]),
    Route("POST", "/v1/sync/{gw}/action", FUNCTIONS["actions"]),
    Route("GET", "/v1/sync/{gw}/actions", FUNCTIONS["actions"]),
    Route("POST", "/v1/admin/sync-rules/{gw}", FUNCTIONS["admin"]),
    Route("GET", "/v1/admin/sync-rules/{gw}", FUNCTIONS["admin"]),
    Route("POST", "/v1/admin/sync-rules/{gw}/test", FUNCTIONS["admin"]),
    Route("POST", "/v1/admin/schema/{gw}", FUNCTIONS["admin"]),
    Route("GET", "/v1/admin/schema/{gw}", FUNCTIONS["admin"]),
    Route("POST", "/v1/admin/flush/{gw}", FUNCTIONS["admin"]),
    Route("GET", "/v1/admin/metrics/{gw}", FUNCTIONS["admin"]),
    Route("GET", "/v1/admin/explain/{gw}", FUNCTIONS["admin"]),
    Route("GET", "/v1/admin/materialise/{gw}", FUNCTIONS["admin"]),
    Route("POST", "/v1/admin/materialise/{gw}", FUNCTIONS["admin"]),
    Route("DELETE", "/v1/admin/materialise/{gw}/{name}", FUNCTIONS["admin"]),
    Route("POST", "/v1/admin/connectors/{gw}", FUNCTIONS["admin"]),
    Route("GET", "/v1/admin/connectors/{gw}", FUNCTIONS["admin"]),
    Route("DELETE", "/v1/admin/connectors/{gw}/{name}", FUNCTIONS["admin"]),
    Route("GET", "/v1/connectors/types", FUNCTIONS["admin"]),
)


def find_route(method: str, path: str) -> tuple[Route, dict[str, str]] | None:
    """The route serving ``method path`` and its path parameters."""
    for route in ROUTES:
        params = route.match(method, path)
        if params is not None:
            return route, params
    return None


def allowed_methods(path: str) -> tuple[str, ...]:
    """The methods some route serves on ``path``, sorted (empty for an unknown path): the ``Allow`` header of a
    405 answer to any other method."""
    return tuple(sorted({route.method for route in ROUTES if route.match_path(path) is not None}))
