"""Route lookup by method and path: a known path asked with a method it has no route for is 405 with ``Allow``
(through the local runner's ``route_request`` as through a function's router), an unknown path is 404."""

from __future__ import annotations

import json

import pytest

from lakesync.api_routes import ROUTES, Route, allowed_methods, find_route
from lakesync.local.dispatch import route_request
from lakesync.local.events import http_event
from lakesync.local.front import LambdaContext


def _call(method: str, path: str) -> dict:
    context = LambdaContext(function_name="lakesync-local", aws_request_id="r", invoked_function_arn="arn")
    return route_request(http_event(method, path, request_id="req-1"), context)


def test_allowed_methods_of_known_paths():
    assert allowed_methods("/v1/sync/default/push") == ("POST",)
    assert allowed_methods("/v1/admin/materialise/default") == ("GET", "POST")
    assert allowed_methods("/v1/admin/materialise/default/dest") == ("DELETE",)
    assert allowed_methods("/v1/openapi.json") == ("GET",)


@pytest.mark.parametrize("path", ["/nope", "/v1/sync/default", "/v1/sync/default/push/", "/v1/sync//push", "/v1"])
def test_unknown_paths_allow_nothing(path):
    assert allowed_methods(path) == ()


def test_route_parameters_and_path_match():
    route = Route("DELETE", "/v1/admin/materialise/{gw}/{name}", "functions.admin")
    assert route.parameters == ("gw", "name")
    assert route.match_path("/v1/admin/materialise/g/n") == {"gw": "g", "name": "n"}
    assert route.match("GET", "/v1/admin/materialise/g/n") is None


def test_every_route_is_found_by_its_own_method_only():
    for route in ROUTES:
        path = route.path.replace("{gw}", "g").replace("{name}", "n")
        found = find_route(route.method, path)
        assert found is not None and found[0] == route
        assert route.method in allowed_methods(path)


@pytest.mark.parametrize(
    ("method", "path", "allow"),
    [
        ("PUT", "/v1/sync/default/push", "POST"),
        ("GET", "/v1/sync/default/push", "POST"),
        ("DELETE", "/v1/sync/default/pull", "GET"),
        ("PATCH", "/v1/admin/materialise/default", "GET, POST"),
        ("GET", "/v1/admin/materialise/default/dest", "DELETE"),
        ("POST", "/health", "GET"),
        ("OPTIONS", "/v1/openapi.json", "GET"),
    ],
)
def test_local_route_request_answers_405_with_allow(method, path, allow):
    # When a known path is asked with a method it has no route for
    result = _call(method, path)
    # Then the function serving the path answers 405 with Allow, before any auth, with the API's headers
    assert result["statusCode"] == 405
    assert result["headers"]["Allow"] == allow
    assert result["headers"]["API-Version"] == "v1"
    assert result["headers"]["X-Request-Id"] == "req-1"
    assert json.loads(result["body"]) == {"error": "Method not allowed", "code": "VALIDATION_ERROR"}


def test_local_route_request_answers_404_for_an_unknown_path():
    result = _call("GET", "/v1/nothing/here")
    assert result["statusCode"] == 404
    assert json.loads(result["body"]) == {"error": "Not found", "code": "NOT_FOUND"}
