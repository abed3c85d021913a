"""The HTTP API in the template: every route of lakesync.api_routes reaches the function its handler module names,
with payload format 2.0 and an invoke permission; the stage throttles, logs access and answers CORS preflight."""

from __future__ import annotations

import json

import pytest

from lakesync.api_routes import ROUTES


def _http_api(cfn) -> str:
    """The HTTP API's logical id (the WebSocket API is tests/infra/test_infra_realtime.py's)."""
    (http_api,) = [k for k, p in cfn.of_type("AWS::ApiGatewayV2::Api").items() if p["ProtocolType"] == "HTTP"]
    return http_api


def _routes(cfn) -> dict[str, dict]:
    routes = cfn.of_type("AWS::ApiGatewayV2::Route").values()
    return {r["RouteKey"]: r for r in routes if r["ApiId"] == {"Ref": _http_api(cfn)}}


def test_template_routes_are_exactly_the_route_table(cfn):
    # Given the API's routes in the template
    # Then they are the route table's, no more and no fewer
    assert sorted(_routes(cfn)) == sorted(route.route_key for route in ROUTES)


@pytest.mark.parametrize("route", ROUTES, ids=[r.route_key for r in ROUTES])
def test_route_reaches_the_function_of_its_handler_module(cfn, route):
    # Given the template route for this entry of the route table
    target = _routes(cfn)[route.route_key]["Target"]
    integration_id = target["Fn::Join"][1][1]["Ref"]
    integration = cfn.resources[integration_id]["Properties"]
    # When the integration is followed to its function
    function_logical = integration["IntegrationUri"]["Fn::GetAtt"][0]
    function = cfn.resources[function_logical]["Properties"]
    # Then that function's handler is the one the route table names, invoked with payload format 2.0
    assert function["Handler"] == route.handler
    assert integration["IntegrationType"] == "AWS_PROXY"
    assert integration["PayloadFormatVersion"] == "2.0"


@pytest.mark.parametrize("route", ROUTES, ids=[r.route_key for r in ROUTES])
def test_api_may_invoke_the_routes_function_for_that_route_path_only(cfn, route):
    # Given the function serving the route
    function = next(fn for fn in cfn.functions().values() if fn["Handler"] == route.handler)
    # When the invoke permissions granted to API Gateway on it are listed
    sources = [
        cfn.render(p["SourceArn"])
        for p in cfn.of_type("AWS::Lambda::Permission").values()
        if p["Principal"] == "apigateway.amazonaws.com"
        and p["FunctionName"] == {"Fn::GetAtt": [function["logical"], "Arn"]}
    ]
    # Then one of them is scoped to this API and this route's path template (any stage and method: CDK shares
    # one permission between the methods of a path)
    api = next(iter(cfn.of_type("AWS::ApiGatewayV2::Api")))
    expected = f"arn:<AWS::Partition>:execute-api:<AWS::Region>:<AWS::AccountId>:<{api}>/*/*{route.path}"
    assert expected in sources


def test_stage_auto_deploys_throttles_and_logs_access_as_json(cfn, options):
    # Given the API's only stage
    (stage,) = [s for s in cfn.of_type("AWS::ApiGatewayV2::Stage").values() if s["ApiId"] == {"Ref": _http_api(cfn)}]
    # Then it is the auto-deployed $default stage with the configured throttling
    assert stage["StageName"] == "$default"
    assert stage["AutoDeploy"] is True
    assert stage["DefaultRouteSettings"] == {"ThrottlingBurstLimit": 400, "ThrottlingRateLimit": 200}
    # And access logs are JSON lines carrying the request id and status, into a log group with retention
    fields = json.loads(stage["AccessLogSettings"]["Format"])
    assert {"requestId", "status", "routeKey"} <= set(fields)
    group = stage["AccessLogSettings"]["DestinationArn"]["Fn::GetAtt"][0]
    assert cfn.resources[group]["Properties"]["RetentionInDays"] == options["logRetentionDays"]


def test_cors_preflight_allows_the_configured_origins(cfn, options):
    # Given the API
    api = cfn.resources[_http_api(cfn)]["Properties"]
    # Then CORS preflight answers for the configured origins, methods and the headers clients send and read
    cors = api["CorsConfiguration"]
    assert cors["AllowOrigins"] == options["corsOrigins"]
    assert set(cors["AllowMethods"]) == {route.method for route in ROUTES}
    assert {"Authorization", "Content-Type"} <= set(cors["AllowHeaders"])
    assert "X-LakeSync-Cursor" in cors["ExposeHeaders"]
