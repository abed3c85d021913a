"""The HTTP API: one route per entry of :data:`lakesync.api_routes.ROUTES`, each to the function it names.

Routes come from the same table the local runner serves, so the two cannot drift. Integrations use payload format
2.0 (what Powertools' ``APIGatewayHttpResolver`` reads); HTTP APIs base64-encode non-text bodies themselves, so
protobuf needs no binary media type setting. The ``$default`` stage auto-deploys, throttles (rate and burst from
the configuration) and writes JSON access logs to a log group with retention.

Every ``/v1/sync/...`` and ``/v1/admin/...`` route has the Lambda authorizer ``functions.authorizer`` (payload 2.0,
simple responses, the ``Authorization`` header as identity source, answers cached per token for
``authorizerCacheSeconds``): a request without the header is refused 401 by API Gateway with nothing invoked, a bad
token 403 after one authorizer invocation per token and cache period, so neither reaches (nor bills) an API function.
The functions still verify every token themselves (the same HS256 JWT code, ``sub``, ``gw``, ``role``, ``exp``) and
apply the per-caller rate limits (429 with ``Retry-After``, :mod:`lakesync.gateway.limits`). The public routes
(health, the API document, the connector types) have their own, lower throttle (``publicThrottleRate``/``Burst``), so
anonymous callers cannot spend the sync routes' throttle. The WebSocket API for real-time sync is its own construct,
:mod:`lakesync_infra.realtime`.
"""

from __future__ import annotations

import json
from collections.abc import Mapping
from typing import Final

import aws_cdk as cdk
import jsii
from aws_cdk import aws_apigateway as apigw
from aws_cdk import aws_apigatewayv2 as apigwv2
from aws_cdk import aws_apigatewayv2_authorizers as authorizers
from aws_cdk import aws_apigatewayv2_integrations as integrations
from aws_cdk import aws_lambda as lambda_
from aws_cdk import aws_logs as logs
from constructs import Construct

from lakesync.api_routes import ROUTES
from lakesync.edge import AUTHORIZED_PREFIXES
from lakesync_infra.common import log_group
from lakesync_infra.config import LakeSyncConfig

ACCESS_LOG_FORMAT: Final = json.dumps(
    {
        "requestId": "$context.requestId",
        "ip": "$context.identity.sourceIp",
        "requestTime": "$context.requestTime",
        "routeKey": "$context.routeKey",
        "status": "$context.status",
        "protocol": "$context.protocol",
        "responseLength": "$context.responseLength",
        "latencyMs": "$context.responseLatency",
        "integrationLatencyMs": "$context.integrationLatency",
        "integrationError": "$context.integrationErrorMessage",
    },
    separators=(",", ":"),
)
CORS_HEADERS: Final = ("Authorization", "Content-Type", "Accept", "X-Request-Id")
CORS_EXPOSED: Final = (
    "X-Request-Id",
    "X-LakeSync-Cursor",
    "X-Checkpoint-Id",
    "X-Checkpoint-Hlc",
    "X-Checkpoint-Chunks",
    "X-Checkpoint-Cursor",
    "Retry-After",
)


class Api(Construct):
    """The HTTP API and its stage.

    Attributes:
        http_api: The API.
        stage: The ``$default`` stage.
        authorizer: The token authorizer of the sync and admin routes.
        url: The API's base URL.
    """

    def __init__(
        self,
        scope: Construct,
        construct_id: str,
        *,
        config: LakeSyncConfig,
        functions: Mapping[str, lambda_.IFunction],
    ) -> None:
        super().__init__(scope, construct_id)
        cors = None
        if config.cors_origins:
            cors = apigwv2.CorsPreflightOptions(
                allow_origins=list(config.cors_origins),
                allow_methods=[apigwv2.CorsHttpMethod(m) for m in sorted({route.method for route in ROUTES})],
                allow_headers=list(CORS_HEADERS),
                expose_headers=list(CORS_EXPOSED),
            )
        self.http_api = apigwv2.HttpApi(
            self,
            "HttpApi",
            description=f"LakeSync {config.name}: the sync gateway",
            create_default_stage=False,
            cors_preflight=cors,
        )
        access_logs = log_group(self, "AccessLogs", config)
        self.stage = apigwv2.HttpStage(
            self,
            "DefaultStage",
            http_api=self.http_api,
            stage_name="$default",
            auto_deploy=True,
            throttle=apigwv2.ThrottleSettings(
                rate_limit=config.api_throttle_rate, burst_limit=config.api_throttle_burst
            ),
            access_log_settings=AccessLogs(access_logs),
        )
        self.authorizer = authorizers.HttpLambdaAuthorizer(
            "TokenAuthorizer",
            functions["authorizer"],
            response_types=[authorizers.HttpLambdaResponseType.SIMPLE],
            identity_source=["$request.header.Authorization"],
            results_cache_ttl=cdk.Duration.seconds(config.authorizer_cache_seconds),
        )
        public_throttle = {
            "ThrottlingRateLimit": config.public_throttle_rate,
            "ThrottlingBurstLimit": config.public_throttle_burst,
        }
        stage = self.stage.node.default_child
        assert isinstance(stage, apigwv2.CfnStage)
        stage.add_property_override(
            "RouteSettings",
            {r.route_key: public_throttle for r in ROUTES if not r.path.startswith(AUTHORIZED_PREFIXES)},
        )
        integration_of: dict[str, integrations.HttpLambdaIntegration] = {}
        for route in ROUTES:
            name = route.module.removeprefix("functions.")
            if name not in integration_of:
                integration_of[name] = integrations.HttpLambdaIntegration(
                    f"{name.capitalize()}Integration",
                    functions[name],
                    payload_format_version=apigwv2.PayloadFormatVersion.VERSION_2_0,
                )
            self.http_api.add_routes(
                path=route.path,
                methods=[apigwv2.HttpMethod(route.method)],
                integration=integration_of[name],
                authorizer=self.authorizer if route.path.startswith(AUTHORIZED_PREFIXES) else None,
            )
        self.url = self.http_api.api_endpoint


@jsii.implements(apigwv2.IAccessLogSettings)
class AccessLogs:
    """A stage's access log settings: JSON lines (``log_format``) into ``group``."""

    def __init__(self, group: logs.ILogGroup, log_format: str = ACCESS_LOG_FORMAT) -> None:
        self._destination = apigwv2.LogGroupLogDestination(group)
        self._format = log_format

    @property
    def destination(self) -> apigwv2.IAccessLogDestination:
        return self._destination

    @property
    def format(self) -> apigw.AccessLogFormat:
        return apigw.AccessLogFormat.custom(self._format)
