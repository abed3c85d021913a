"""Real-time delivery: the WebSocket API, its sessions table, and the broadcaster on the ``deltas`` table's stream.

* **The API.** A WebSocket API with routes ``$connect`` (``ws_connect``: authenticates and records the session) and
  ``$default`` (``ws_message``, two-way: a route response returns the reply) on Lambda proxy integrations, and no
  ``$disconnect`` route: a closed session's item is deleted by the table's TTL, or sooner by the broadcaster, which
  forgets a session it finds gone or expired (a function and a write for every closed socket would cost more than the
  connection minutes leave room for: ``docs/realtime.md``); messages are text (the sessions' base64 frames), passed
  through untouched. The stage auto-deploys, is created after the ``$connect`` route its route settings name, and writes
  JSON access logs, which need API Gateway's account-wide CloudWatch Logs role: a prerequisite, or created here
  (``apiGatewayLogsRole``).
  **Throttling**: API Gateway throttles per stage and route for all clients
  together (a token bucket per account and Region), never per client, so the original's limit of 50 messages per
  second *per client* cannot be expressed. The closest: ``$default`` gets the HTTP API's rate and burst
  (``apiThrottleRate``/``apiThrottleBurst``: the same functions' capacity), and ``$connect`` at most
  :data:`CONNECT_RATE` per second (API Gateway's default account quota for new WebSocket connections). A client
  sending faster than the original allowed is not closed; the functions' concurrency and the stage limits bound it.
* **The sessions table** (:func:`lakesync.aws.tables.connections_table_spec`): on demand, the stack's key,
  point-in-time recovery like the other tables, TTL on ``exp``, removed with the stack (sessions are ephemeral).
* **The broadcaster.** ``ws_broadcast`` reads the ``deltas`` table's stream (new images) through an event source
  mapping whose filter lets only new images of log items through (:data:`LOG_ITEM_FILTER`), so releases, TTL
  deletes and anything else cost no invocation; it reports batch item failures, bisects a failing batch, retries
  :data:`BROADCAST_RETRY_ATTEMPTS` times within :data:`BROADCAST_MAX_RECORD_AGE` (a broadcast is an optimisation:
  clients pull, so old records are not worth sending) and records what still fails in an SQS queue (alarmed).
* **Least privilege.** Each function gets exactly its calls on the sessions table (and the key);
  ``execute-api:ManageConnections`` only on this API's stage, ``@connections/*``, for the methods it uses
  (``ws_message``: ``DELETE`` to close; ``ws_broadcast``: ``POST`` to send and ``DELETE`` to close). What they read of
  the buffer (the broadcaster: the sync rules, the subscriptions, the membership tables and their checkpoint objects)
  is :mod:`lakesync_infra.function_access`'s.
"""

from __future__ import annotations

import json
from collections.abc import Mapping
from typing import Final

import aws_cdk as cdk
from aws_cdk import aws_apigateway as apigw
from aws_cdk import aws_apigatewayv2 as apigwv2
from aws_cdk import aws_apigatewayv2_integrations as integrations
from aws_cdk import aws_dynamodb as dynamodb
from aws_cdk import aws_iam as iam
from aws_cdk import aws_kms as kms
from aws_cdk import aws_lambda as lambda_
from aws_cdk import aws_lambda_event_sources as sources
from aws_cdk import aws_sqs as sqs
from constructs import Construct

from lakesync.aws.settings.variables import CONNECTIONS_TABLE, WS_CALLBACK_URL
from lakesync.aws.tables import CONNECTIONS_INDEX, TTL_ATTRIBUTE, connections_table_spec
from lakesync_infra.api import AccessLogs
from lakesync_infra.buffer import Buffer, key_attribute
from lakesync_infra.common import acknowledge, acknowledge_wildcards, allow, allow_key, log_group, stream_source
from lakesync_infra.config import LakeSyncConfig

STAGE: Final = "prod"
LOG_TABLE: Final = "deltas"
CONNECT_RATE: Final = 500
"""API Gateway's default quota of new WebSocket connections per second per account and Region."""
BROADCAST_BATCH_SIZE: Final = 100
BROADCAST_RETRY_ATTEMPTS: Final = 5
BROADCAST_MAX_RECORD_AGE: Final = cdk.Duration.minutes(10)
"""A change older than API Gateway's idle timeout is not worth pushing: the clients it was for have pulled since."""
LOG_ITEM_FILTER: Final = {
    "dynamodb": {
        "NewImage": {
            "shard": {"S": lambda_.FilterRule.exists()},
            "seq": {"N": lambda_.FilterRule.exists()},
            "n": {"N": lambda_.FilterRule.exists()},
            "c": {"N": lambda_.FilterRule.exists()},
            "z": {"B": lambda_.FilterRule.exists()},
        }
    }
}
"""Only new log chunks (``lakesync.aws.buffer.log_chunks``: every attribute
:func:`lakesync.aws.log_stream.decode_record` reads) invoke the broadcaster. DynamoDB event source mappings filter only
on the ``dynamodb`` key (https://docs.aws.amazon.com/lambda/latest/dg/with-ddb-filtering.html), so ``eventName``
cannot be matched: a removal (the flush's release, a TTL delete) carries no ``NewImage`` and fails every ``exists``; a
``MODIFY`` would pass, but log items are never changed once put, and the handler drops anything but an ``INSERT``
itself."""
ACCESS_LOG_FORMAT: Final = json.dumps(
    {
        "requestId": "$context.requestId",
        "ip": "$context.identity.sourceIp",
        "requestTime": "$context.requestTime",
        "eventType": "$context.eventType",
        "routeKey": "$context.routeKey",
        "connectionId": "$context.connectionId",
        "status": "$context.status",
        "integrationLatencyMs": "$context.integrationLatency",
        "integrationError": "$context.integrationErrorMessage",
        "disconnectStatus": "$context.disconnectStatusCode",
    },
    separators=(",", ":"),
)
SESSION_ACTIONS: Final[Mapping[str, tuple[str, ...]]] = {
    "ws_connect": ("dynamodb:PutItem",),
    "ws_message": ("dynamodb:GetItem", "dynamodb:DeleteItem"),
    "ws_broadcast": ("dynamodb:DeleteItem",),
}
"""What each function does to the sessions table (:class:`lakesync.aws.connections.DynamoDBConnectionStore`); the
broadcaster also queries the ``by_gateway`` index."""
MANAGE_METHODS: Final[Mapping[str, tuple[str, ...]]] = {"ws_message": ("DELETE",), "ws_broadcast": ("POST", "DELETE")}
"""The management API calls each function makes: ``DeleteConnection`` closes, ``PostToConnection`` sends."""


class Realtime(Construct):
    """The WebSocket API, the sessions table and the broadcaster's stream mapping.

    Attributes:
        api: The WebSocket API.
        stage: Its stage.
        url: The ``wss://`` URL clients connect to (with ``?gateway=``).
        connections: The sessions table.
        failures: Where the broadcaster's exhausted stream batches are recorded.
        broadcast_source: The broadcaster's event source on the ``deltas`` stream.
    """

    def __init__(
        self,
        scope: Construct,
        construct_id: str,
        *,
        config: LakeSyncConfig,
        key: kms.IKey,
        buffer: Buffer,
        functions: Mapping[str, lambda_.Function],
    ) -> None:
        super().__init__(scope, construct_id)
        self.connections = self._sessions_table(key)
        self.api = apigwv2.WebSocketApi(
            self,
            "WebSocketApi",
            description=f"LakeSync {config.name}: real-time sync (WebSocket)",
            connect_route_options=apigwv2.WebSocketRouteOptions(
                integration=integrations.WebSocketLambdaIntegration("Connect", functions["ws_connect"])
            ),
            default_route_options=apigwv2.WebSocketRouteOptions(
                integration=integrations.WebSocketLambdaIntegration("Message", functions["ws_message"]),
                return_response=True,
            ),
        )
        self.stage = apigwv2.WebSocketStage(
            self,
            "Stage",
            web_socket_api=self.api,
            stage_name=STAGE,
            auto_deploy=True,
            throttle=apigwv2.ThrottleSettings(
                rate_limit=config.api_throttle_rate, burst_limit=config.api_throttle_burst
            ),
            access_log_settings=AccessLogs(log_group(self, "AccessLogs", config), ACCESS_LOG_FORMAT),
        )
        stage = self.stage.node.default_child
        assert isinstance(stage, apigwv2.CfnStage)
        connect_rate = min(CONNECT_RATE, config.api_throttle_rate)
        stage.route_settings = {
            "$connect": {"ThrottlingRateLimit": connect_rate, "ThrottlingBurstLimit": 2 * connect_rate}
        }
        # RouteSettings name $connect: without the dependency CloudFormation may create the stage before the route
        # and fail ("Unable to find Route by key $connect within the provided RouteSettings").
        (connect,) = [
            c for c in self.api.node.children if isinstance(c, apigwv2.WebSocketRoute) and c.route_key == "$connect"
        ]
        stage.add_dependency(connect.node.default_child)  # type: ignore[arg-type]
        if config.api_gateway_logs_role == "create":
            stage.add_dependency(self._logs_role())
        self.url = self.stage.url
        acknowledge(
            self.api,
            "AwsSolutions-APIG4",
            "$connect verifies the caller's HS256 JWT itself (Bearer header or ?token=, gw, exp), as the original "
            "gateway's upgrade does, and refuses the upgrade with 401/403/404; the other routes serve only sessions "
            "it recorded. An API Gateway authorizer would duplicate that check.",
        )

        for name, fn in functions.items():
            fn.add_environment(CONNECTIONS_TABLE, self.connections.table_name)
            if name in MANAGE_METHODS:
                fn.add_environment(WS_CALLBACK_URL, self.stage.callback_url)
            self._grant(name, fn, key)

        # Only batch metadata lands here (shard, sequence numbers): SQS-managed encryption is enough.
        self.failures = sqs.Queue(
            self,
            "BroadcastFailures",
            encryption=sqs.QueueEncryption.SQS_MANAGED,
            enforce_ssl=True,
            retention_period=cdk.Duration.days(14),
        )
        acknowledge(
            self.failures,
            "AwsSolutions-SQS3",
            "This queue is itself a dead-letter destination: the broadcaster's stream event source mapping's "
            "on-failure queue.",
        )
        self.broadcast_source = sources.DynamoEventSource(
            stream_source(self, "DeltasStream", buffer.tables[LOG_TABLE]),
            starting_position=lambda_.StartingPosition.LATEST,
            batch_size=BROADCAST_BATCH_SIZE,
            filters=[lambda_.FilterCriteria.filter(LOG_ITEM_FILTER)],
            report_batch_item_failures=True,
            bisect_batch_on_error=True,
            retry_attempts=BROADCAST_RETRY_ATTEMPTS,
            max_record_age=BROADCAST_MAX_RECORD_AGE,
            on_failure=sources.SqsDlq(self.failures),
        )
        functions["ws_broadcast"].add_event_source(self.broadcast_source)  # CDK grants the stream reads
        allow_key(functions["ws_broadcast"].role, key, ["kms:Decrypt"], ["dynamodb"], sid="StreamKey")  # type: ignore[arg-type]

    def _logs_role(self) -> apigw.CfnAccount:
        """API Gateway's account-wide CloudWatch Logs role, which access logging on a WebSocket (or REST) stage
        needs (https://docs.aws.amazon.com/apigateway/latest/developerguide/websocket-api-logging.html). One
        setting per account and region
        (https://docs.aws.amazon.com/AWSCloudFormation/latest/TemplateReference/aws-resource-apigateway-account.html):
        the role and the setting are retained when the stack is deleted, because every API of the account and region
        logs through it, and a deleted role would stop their logs."""
        role = iam.Role(
            self,
            "ApiGatewayLogsRole",
            assumed_by=iam.ServicePrincipal("apigateway.amazonaws.com"),
            managed_policies=[
                iam.ManagedPolicy.from_aws_managed_policy_name("service-role/AmazonAPIGatewayPushToCloudWatchLogs")
            ],
        )
        role.apply_removal_policy(cdk.RemovalPolicy.RETAIN)
        acknowledge(
            role,
            "AwsSolutions-IAM4[Policy::arn:<AWS::Partition>:iam::aws:policy/service-role/"
            "AmazonAPIGatewayPushToCloudWatchLogs]",
            "API Gateway's account-wide logging role: AWS's managed policy for it, which covers the log groups every "
            "API of the account and region may log to (API Gateway creates the execution log groups itself).",
        )
        account = apigw.CfnAccount(self, "ApiGatewayAccount", cloud_watch_role_arn=role.role_arn)
        account.apply_removal_policy(cdk.RemovalPolicy.RETAIN)
        return account

    def _sessions_table(self, key: kms.IKey) -> dynamodb.Table:
        spec = connections_table_spec("connections")
        partition_key = key_attribute(spec, spec["KeySchema"], "HASH")
        assert partition_key is not None
        table = dynamodb.Table(
            self,
            "Connections",
            partition_key=partition_key,
            billing_mode=dynamodb.BillingMode.PAY_PER_REQUEST,
            encryption=dynamodb.TableEncryption.CUSTOMER_MANAGED,
            encryption_key=key,
            point_in_time_recovery_specification=dynamodb.PointInTimeRecoverySpecification(
                point_in_time_recovery_enabled=True
            ),
            time_to_live_attribute=TTL_ATTRIBUTE,
            removal_policy=cdk.RemovalPolicy.DESTROY,
        )
        for index in spec["GlobalSecondaryIndexes"]:
            index_key = key_attribute(spec, index["KeySchema"], "HASH")
            assert index_key is not None
            table.add_global_secondary_index(
                index_name=index["IndexName"],
                partition_key=index_key,
                sort_key=key_attribute(spec, index["KeySchema"], "RANGE"),
                projection_type=dynamodb.ProjectionType(index["Projection"]["ProjectionType"]),
            )
        return table

    def _grant(self, name: str, fn: lambda_.Function, key: kms.IKey) -> None:
        role = fn.role
        assert role is not None
        table = self.connections
        allow(role, SESSION_ACTIONS[name], [table.table_arn], sid="Sessions")
        if name == "ws_broadcast":
            allow(role, ["dynamodb:Query"], [f"{table.table_arn}/index/{CONNECTIONS_INDEX}"], sid="SessionsByGateway")
        writes = any(not a.endswith(("GetItem", "Query")) for a in SESSION_ACTIONS[name])
        kms_actions = ["kms:Decrypt", "kms:DescribeKey", *(["kms:Encrypt", "kms:GenerateDataKey"] if writes else [])]
        allow_key(role, key, kms_actions, ["dynamodb"], sid="SessionsKey")
        methods = MANAGE_METHODS.get(name, ())
        if methods:
            resources = [
                cdk.Stack.of(self).format_arn(
                    service="execute-api",
                    resource=self.api.api_id,
                    resource_name=f"{STAGE}/{method}/@connections/*",
                )
                for method in methods
            ]
            allow(role, ["execute-api:ManageConnections"], resources, sid="ManageConnections")
            findings = {
                f"Resource::arn:<AWS::Partition>:execute-api:<AWS::Region>:<AWS::AccountId>:<{_logical(self.api)}>/"
                f"{STAGE}/{method}/@connections/*": "Connection ids are API Gateway's, made at run time: the grant "
                "is scoped to this API's stage, the @connections resource and the one method the function calls."
                for method in methods
            }
            acknowledge_wildcards(role, findings)


def _logical(construct: Construct) -> str:
    resource = construct.node.default_child
    assert isinstance(resource, cdk.CfnElement)
    return cdk.Stack.of(construct).get_logical_id(resource)
