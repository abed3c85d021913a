"""Limits per caller in the template: the token authorizer in front of every sync and admin route (cached, simple
responses, the Authorization header as identity source), a lower throttle on the public routes, and the rate limit
counters' grant (UpdateItem on their keys of the dedup table, nothing else)."""

from __future__ import annotations

from typing import Any

import pytest
from lakesync_infra.config import ConfigError, LakeSyncConfig
from lakesync_infra.function_access import RATE_LIMITED

from lakesync.api_routes import ROUTES
from lakesync.aws.rate_limits import KEY_PREFIX
from lakesync.edge import AUTHORIZED_PREFIXES


def _http_api(cfn: Any) -> str:
    (http_api,) = [k for k, p in cfn.of_type("AWS::ApiGatewayV2::Api").items() if p["ProtocolType"] == "HTTP"]
    return http_api


def _authorizer(cfn: Any) -> tuple[str, dict[str, Any]]:
    (found,) = [(k, p) for k, p in cfn.of_type("AWS::ApiGatewayV2::Authorizer").items()
                if p["ApiId"] == {"Ref": _http_api(cfn)}]  # fmt: skip
    return found


def test_the_authorizer_is_the_cached_simple_token_authorizer_function(cfn: Any) -> None:
    _, authorizer = _authorizer(cfn)
    assert authorizer["AuthorizerType"] == "REQUEST"
    assert authorizer["IdentitySource"] == ["$request.header.Authorization"]
    assert authorizer["EnableSimpleResponses"] is True
    assert authorizer["AuthorizerPayloadFormatVersion"] == "2.0"
    assert authorizer["AuthorizerResultTtlInSeconds"] == 300
    function = cfn.functions()["authorizer"]
    assert function["logical"] in cfn.render(authorizer["AuthorizerUri"])
    assert function["Timeout"] == 10 and function["MemorySize"] == 512


@pytest.mark.parametrize("route", ROUTES, ids=[r.route_key for r in ROUTES])
def test_every_route_that_needs_a_token_has_the_authorizer_and_only_those(cfn: Any, route: Any) -> None:
    logical, _ = _authorizer(cfn)
    (props,) = [p for p in cfn.of_type("AWS::ApiGatewayV2::Route").values()
                if p["ApiId"] == {"Ref": _http_api(cfn)} and p["RouteKey"] == route.route_key]  # fmt: skip
    if route.path.startswith(AUTHORIZED_PREFIXES):
        assert props["AuthorizationType"] == "CUSTOM"
        assert props["AuthorizerId"] == {"Ref": logical}
    else:
        assert props.get("AuthorizationType", "NONE") == "NONE" and "AuthorizerId" not in props


def test_api_gateway_may_invoke_the_authorizer_for_this_api_only(cfn: Any) -> None:
    logical, _ = _authorizer(cfn)
    function = cfn.functions()["authorizer"]
    sources = [
        cfn.render(p["SourceArn"])
        for p in cfn.of_type("AWS::Lambda::Permission").values()
        if p["Principal"] == "apigateway.amazonaws.com"
        and p["FunctionName"] == {"Fn::GetAtt": [function["logical"], "Arn"]}
    ]
    api = _http_api(cfn)
    prefix = "arn:<AWS::Partition>:execute-api:<AWS::Region>:<AWS::AccountId>"
    assert sources == [f"{prefix}:<{api}>/authorizers/<{logical}>"]


def test_public_routes_have_their_own_lower_throttle(cfn: Any) -> None:
    (stage,) = [s for s in cfn.of_type("AWS::ApiGatewayV2::Stage").values() if s["ApiId"] == {"Ref": _http_api(cfn)}]
    public = {r.route_key for r in ROUTES if not r.path.startswith(AUTHORIZED_PREFIXES)}
    assert public == {"GET /health", "GET /v1/openapi.json", "GET /v1/connectors/types"}
    assert stage["RouteSettings"] == {key: {"ThrottlingRateLimit": 20, "ThrottlingBurstLimit": 40} for key in public}


def _dedup_updates(cfn: Any, name: str) -> list[dict[str, Any]]:
    role = cfn.role_of(cfn.functions()[name])
    return [
        st
        for st in cfn.role_statements(role)
        if "dynamodb:UpdateItem" in (st["Action"] if isinstance(st["Action"], list) else [st["Action"]])
        and "Dedup" in cfn.render(st["Resource"])
    ]


@pytest.mark.parametrize("name", sorted(RATE_LIMITED))
def test_rate_limited_functions_may_update_only_the_counters_keys_of_the_dedup_table(cfn: Any, name: str) -> None:
    (statement,) = _dedup_updates(cfn, name)
    assert statement["Action"] == "dynamodb:UpdateItem"
    assert statement["Condition"] == {"ForAllValues:StringLike": {"dynamodb:LeadingKeys": [f"{KEY_PREFIX}*"]}}


def test_the_authorizer_reads_the_jwt_secret_and_no_table(cfn: Any) -> None:
    role = cfn.role_of(cfn.functions()["authorizer"])
    actions = {a for a, _ in cfn.allowed(role)}
    assert "secretsmanager:GetSecretValue" in actions
    assert not any(a.startswith("dynamodb:") for a in actions)
    assert not _dedup_updates(cfn, "admin")  # and a function that is not limited holds no counter grant


def test_rate_limits_and_authorizer_cache_settings_are_validated() -> None:
    config = LakeSyncConfig.from_settings("dev", {"rateLimits": "push=100/60,socket=off", "authorizerCacheSeconds": 0})
    assert config.rate_limits == "push=100/60,socket=off" and config.authorizer_cache_seconds == 0
    for bad in ({"rateLimits": "pushes=1/60"}, {"authorizerCacheSeconds": 3601}, {"publicThrottleRate": 0}):
        with pytest.raises(ConfigError):
            LakeSyncConfig.from_settings("dev", bad)


def test_every_function_that_verifies_tokens_gets_the_maximum_token_lifetime(cfn: Any) -> None:
    # Given the functions whose code verifies tokens (they read the JWT secret) and their environments
    from lakesync.aws.settings.api import Settings
    from lakesync.aws.settings.variables import MAX_TOKEN_LIFETIME_S

    verifying = {
        name: props["Environment"]["Variables"]
        for name, props in cfn.functions().items()
        if "LAKESYNC_JWT_SECRET_ARN" in props["Environment"]["Variables"]
    }
    assert {"push", "pull", "authorizer", "ws_connect", "ws_message"} <= set(verifying)
    # Then each gets the stack's maximum lifetime (the default: a day), in a form its settings parser accepts
    for name, variables in verifying.items():
        assert variables.get(MAX_TOKEN_LIFETIME_S) == "86400", name
    env = {MAX_TOKEN_LIFETIME_S: "86400", "LAKESYNC_JWT_SECRET": "k" * 32, "LAKESYNC_TABLE_PREFIX": "t"}
    assert Settings.from_env(env).max_token_lifetime_s == 86_400


def test_the_maximum_token_lifetime_setting_is_validated() -> None:
    assert LakeSyncConfig.from_settings("dev", {"maxTokenLifetimeSeconds": 3600}).max_token_lifetime_seconds == 3600
    for bad in (59, 30 * 86_400 + 1, "1h"):
        with pytest.raises(ConfigError):
            LakeSyncConfig.from_settings("dev", {"maxTokenLifetimeSeconds": bad})
