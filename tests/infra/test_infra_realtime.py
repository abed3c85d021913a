"""Real-time delivery in the template (lakesync_infra.realtime): the deltas stream and the broadcaster's mapping
(filtered to inserted log items, partial batch failures, bounded retries, a failure queue), the WebSocket API's
routes and stage, the sessions table, what each WebSocket function may do, their configuration, alarms and the
output clients connect to."""

from __future__ import annotations

import json
from typing import Any

import pytest
from lakesync_infra.realtime import CONNECT_RATE, STAGE

from lakesync.aws.settings import variables as settings_vars
from lakesync.aws.settings.api import Settings
from lakesync.aws.settings.realtime import BroadcastSettings, RealtimeSettings
from lakesync.aws.tables import CONNECTIONS_INDEX, TTL_ATTRIBUTE

WS_FUNCTIONS = ("ws_connect", "ws_message", "ws_broadcast")


def _lid(synth: Any, construct: Any) -> str:
    import aws_cdk as cdk

    resource = construct if isinstance(construct, cdk.CfnElement) else construct.node.default_child
    return str(synth.stack.get_logical_id(resource))


@pytest.fixture(scope="module")
def rt(synth: Any) -> dict[str, str]:
    """Logical ids of the real-time resources."""
    realtime = synth.stack.realtime
    return {
        "api": _lid(synth, realtime.api),
        "stage": _lid(synth, realtime.stage),
        "table": _lid(synth, realtime.connections),
        "failures": _lid(synth, realtime.failures),
    }


def _mapping(cfn: Any, function: str) -> dict[str, Any]:
    fn = cfn.functions()[function]
    (mapping,) = [
        m
        for m in cfn.of_type("AWS::Lambda::EventSourceMapping").values()
        if m["FunctionName"] == {"Ref": fn["logical"]}
    ]
    return mapping


def test_the_deltas_table_streams_new_images_to_the_broadcaster(cfn, ids):
    # Given the deltas table and the broadcaster's event source mapping
    deltas = cfn.resources[ids["table:deltas"]]["Properties"]
    mapping = _mapping(cfn, "ws_broadcast")
    # Then the table streams whole new items, and the broadcaster reads that stream from its tip
    assert deltas["StreamSpecification"] == {"StreamViewType": "NEW_IMAGE"}
    assert mapping["EventSourceArn"] == {"Fn::GetAtt": [ids["table:deltas"], "StreamArn"]}
    assert mapping["StartingPosition"] == "LATEST"


def test_only_new_log_items_invoke_the_broadcaster(cfn):
    # Given the mapping's filter
    (flt,) = _mapping(cfn, "ws_broadcast")["FilterCriteria"]["Filters"]
    # Then it asks, under the dynamodb key alone, for a new image with every attribute of a log chunk: releases and
    # TTL deletes (no new image) cost no invocation (run against records in test_infra_streams)
    assert json.loads(flt["Pattern"]) == {
        "dynamodb": {
            "NewImage": {
                "shard": {"S": [{"exists": True}]},
                "seq": {"N": [{"exists": True}]},
                "n": {"N": [{"exists": True}]},
                "c": {"N": [{"exists": True}]},
                "z": {"B": [{"exists": True}]},
            }
        }
    }


def test_broadcaster_reports_partial_failures_bisects_retries_boundedly_and_keeps_what_fails(cfn, rt):
    mapping = _mapping(cfn, "ws_broadcast")
    assert mapping["FunctionResponseTypes"] == ["ReportBatchItemFailures"]
    assert mapping["BisectBatchOnFunctionError"] is True
    assert 0 < mapping["MaximumRetryAttempts"] <= 10
    assert 60 <= mapping["MaximumRecordAgeInSeconds"] <= 900
    assert mapping["DestinationConfig"]["OnFailure"]["Destination"] == {"Fn::GetAtt": [rt["failures"], "Arn"]}


def test_websocket_routes_reach_their_functions_and_default_answers(cfn, rt):
    # Given the WebSocket API's routes
    api = cfn.resources[rt["api"]]["Properties"]
    assert api["ProtocolType"] == "WEBSOCKET"
    routes = {
        r["RouteKey"]: r for r in cfn.of_type("AWS::ApiGatewayV2::Route").values() if r["ApiId"] == {"Ref": rt["api"]}
    }
    # Then they are $connect and $default, each a Lambda proxy integration of its function (no $disconnect: a closed
    # session's item goes by TTL or by the broadcast that finds it gone, with no function or write per socket)
    expected = {"$connect": "ws_connect", "$default": "ws_message"}
    assert set(routes) == set(expected)
    functions = cfn.functions()
    for key, name in expected.items():
        integration = cfn.resources[routes[key]["Target"]["Fn::Join"][1][1]["Ref"]]["Properties"]
        assert integration["IntegrationType"] == "AWS_PROXY"
        assert {"Fn::GetAtt": [functions[name]["logical"], "Arn"]} in integration["IntegrationUri"]["Fn::Join"][1]
    # And $default is two-way: its route response returns the function's reply to the client
    responses = [
        r for r in cfn.of_type("AWS::ApiGatewayV2::RouteResponse").values() if r["ApiId"] == {"Ref": rt["api"]}
    ]
    assert [(r["RouteResponseKey"], r["RouteId"]) for r in responses] == [("$default", {"Ref": _route_id(cfn, rt)})]
    assert routes["$default"]["RouteResponseSelectionExpression"] == "$default"


def _route_id(cfn: Any, rt: dict[str, str]) -> str:
    return next(
        k
        for k, r in cfn.of_type("AWS::ApiGatewayV2::Route").items()
        if r["ApiId"] == {"Ref": rt["api"]} and r["RouteKey"] == "$default"
    )


def test_stage_throttles_its_routes_and_logs_access(cfn, rt, options):
    stage = cfn.resources[rt["stage"]]["Properties"]
    assert stage["StageName"] == STAGE and stage["AutoDeploy"] is True
    # API Gateway throttles all clients together: the HTTP API's budget for messages, connections at most 500/s
    assert stage["DefaultRouteSettings"] == {"ThrottlingBurstLimit": 400, "ThrottlingRateLimit": 200}
    rate = min(CONNECT_RATE, 200)
    assert stage["RouteSettings"] == {"$connect": {"ThrottlingRateLimit": rate, "ThrottlingBurstLimit": 2 * rate}}
    fields = json.loads(stage["AccessLogSettings"]["Format"])
    assert {"connectionId", "eventType", "routeKey", "status"} <= set(fields)
    group = stage["AccessLogSettings"]["DestinationArn"]["Fn::GetAtt"][0]
    assert cfn.resources[group]["Properties"]["RetentionInDays"] == options["logRetentionDays"]


def test_stage_is_created_after_every_route_its_route_settings_name(cfn, rt):
    # Given the stage's per-route settings and the API's routes by key
    stage = cfn.resources[rt["stage"]]
    routes = {
        r["RouteKey"]: k for k, r in cfn.of_type("AWS::ApiGatewayV2::Route").items() if r["ApiId"] == {"Ref": rt["api"]}
    }
    # Then the stage depends on each route it names, so CloudFormation never creates it first ("Unable to find Route
    # by key $connect within the provided RouteSettings")
    assert set(stage["Properties"]["RouteSettings"]) == {"$connect"}
    for key in stage["Properties"]["RouteSettings"]:
        assert routes[key] in stage.get("DependsOn", [])


def test_the_stack_sets_api_gateways_logs_role_before_the_stage_when_asked_and_keeps_it(cfn, rt, options):
    # Given an environment saying its account and region have no API Gateway CloudWatch Logs role
    assert options["apiGatewayLogsRole"] == "create"
    ((account_id, account),) = [(k, r) for k, r in cfn.resources.items() if r["Type"] == "AWS::ApiGateway::Account"]
    # Then the stack sets it to a role API Gateway may assume, with AWS's managed policy for pushing logs
    role_id = account["Properties"]["CloudWatchRoleArn"]["Fn::GetAtt"][0]
    role = cfn.resources[role_id]
    (trust,) = role["Properties"]["AssumeRolePolicyDocument"]["Statement"]
    assert trust["Principal"] == {"Service": "apigateway.amazonaws.com"} and trust["Action"] == "sts:AssumeRole"
    (policy,) = role["Properties"]["ManagedPolicyArns"]
    assert cfn.render(policy).endswith(":iam::aws:policy/service-role/AmazonAPIGatewayPushToCloudWatchLogs")
    # And keeps both when the stack goes: every API of the account and region logs through them
    assert account["DeletionPolicy"] == role["DeletionPolicy"] == "Retain"
    # And the stage, whose access logs need the role, is created after it
    assert account_id in cfn.resources[rt["stage"]]["DependsOn"]


def test_the_logs_role_is_an_existing_prerequisite_unless_one_environment_per_region_creates_it():
    from lakesync_infra.config import ConfigError, LakeSyncConfig, environments

    # Given environments that leave the setting alone, then ones asking to create the role
    assert LakeSyncConfig.from_settings("dev", {}).api_gateway_logs_role == "existing"
    with pytest.raises(ConfigError, match="apiGatewayLogsRole must be one of"):
        LakeSyncConfig.from_settings("dev", {"apiGatewayLogsRole": "yes"})
    create = {"gatewayIds": ["default"], "apiGatewayLogsRole": "create"}

    def context(a: dict[str, Any], b: dict[str, Any]) -> dict[str, Any]:
        return {"lakesync:environments": "a,b", "lakesync:env:a": a, "lakesync:env:b": b}

    # Then one environment per account and region may create it
    assert len(environments(context(create, {"gatewayIds": ["default"]}))) == 2
    assert len(environments(context({**create, "region": "eu-west-1"}, {**create, "region": "us-east-1"}))) == 2
    # And two in the same account and region (the CLI's, when neither names one) are refused at synth, saying why
    for a, b in ((create, create), ({**create, "region": "eu-west-1"}, {**create, "region": "eu-west-1"})):
        with pytest.raises(ConfigError, match=r"environments \['a', 'b'\] all set apiGatewayLogsRole: create"):
            environments(context(a, b))


def test_sessions_table_is_on_demand_encrypted_with_ttl_and_a_gateway_index(cfn, rt, ids):
    table = cfn.resources[rt["table"]]["Properties"]
    assert table["BillingMode"] == "PAY_PER_REQUEST"
    assert table["SSESpecification"]["KMSMasterKeyId"] == {"Fn::GetAtt": [ids["key:data"], "Arn"]}
    assert table["TimeToLiveSpecification"] == {"AttributeName": TTL_ATTRIBUTE, "Enabled": True}
    assert table["KeySchema"] == [{"AttributeName": "id", "KeyType": "HASH"}]
    (index,) = table["GlobalSecondaryIndexes"]
    assert index["IndexName"] == CONNECTIONS_INDEX and index["Projection"] == {"ProjectionType": "ALL"}


def _manage(cfn: Any, name: str) -> set[str]:
    fn = cfn.functions()[name]
    return {r for a, r in cfn.allowed(cfn.role_of(fn)) if a == "execute-api:ManageConnections"}


def test_only_the_senders_manage_connections_and_only_on_this_stage(cfn, rt):
    # Given who may call the management API
    base = f"arn:<AWS::Partition>:execute-api:<AWS::Region>:<AWS::AccountId>:<{rt['api']}>/{STAGE}"
    # Then the broadcaster may send and close, $default may close, both only on this API's stage's @connections
    assert _manage(cfn, "ws_broadcast") == {f"{base}/POST/@connections/*", f"{base}/DELETE/@connections/*"}
    assert _manage(cfn, "ws_message") == {f"{base}/DELETE/@connections/*"}
    # And no other function may
    assert [n for n in cfn.functions() if n not in ("ws_broadcast", "ws_message") and _manage(cfn, n)] == []


def test_each_websocket_function_gets_exactly_its_session_calls(cfn, rt):
    table = f"<{rt['table']}.Arn>"
    expected = {
        "ws_connect": {"dynamodb:PutItem"},
        "ws_message": {"dynamodb:GetItem", "dynamodb:DeleteItem"},
        "ws_broadcast": {"dynamodb:DeleteItem"},
    }
    for name, fn in cfn.functions().items():
        granted = {(a, r) for a, r in cfn.allowed(cfn.role_of(fn)) if r.startswith(table)}
        assert {a for a, r in granted if r == table} == expected.get(name, set()), name
        index = {a for a, r in granted if r == f"{table}/index/{CONNECTIONS_INDEX}"}
        assert index == ({"dynamodb:Query"} if name == "ws_broadcast" else set()), name


@pytest.mark.parametrize("name", WS_FUNCTIONS)
def test_websocket_function_configuration_is_valid_for_its_code(cfn, rt, name):
    # Given the function's environment, tokens rendered as stand-ins
    variables = cfn.functions()[name]["Environment"]["Variables"]
    env = {k: cfn.render(v, lambda logical: f"tok-{logical.lower()}") for k, v in variables.items()}
    # Then the senders get the stage's callback URL
    sends = name in ("ws_message", "ws_broadcast")
    expected = f"https://tok-{rt['api'].lower()}.execute-api.<AWS::Region>.<AWS::URLSuffix>/{STAGE}"
    assert env.get(settings_vars.WS_CALLBACK_URL) == (expected if sends else None)
    if sends:  # (pseudo parameters rendered as a deployment would)
        env[settings_vars.WS_CALLBACK_URL] = expected.replace("<AWS::Region>", "eu-west-1").replace(
            "<AWS::URLSuffix>", "amazonaws.com"
        )
    # And each names the sessions table, in a configuration its own settings parser accepts
    parsed = RealtimeSettings.from_env(env, sends=sends)
    assert parsed.connections_table == f"tok-{rt['table'].lower()}"
    if name == "ws_broadcast":
        assert BroadcastSettings.from_env(env).tables.deltas.startswith("tok-")
    # And only the broadcaster, of the WebSocket functions, is given the checkpoint bucket (ws_message reads the API
    # settings, which leave it unset)
    assert (settings_vars.CHECKPOINT_BUCKET in env) == (name == "ws_broadcast"), name
    if name in ("ws_connect", "ws_message"):
        assert Settings.from_env(env).jwt_secret_arn


MEMBERSHIP_TABLES = ("config", "heads", "deltas")
"""The buffer tables a membership table is read from (the rules and shard registry, the heads, the log)."""


def _table_grants(cfn: Any, name: str, ids: dict[str, str]) -> dict[str, set[tuple[str, str]]]:
    """Function ``name``'s DynamoDB grants on each buffer table (its indexes' as ``<table>/index``)."""
    grants: dict[str, set[tuple[str, str]]] = {}
    for action, resource in cfn.allowed(cfn.role_of(cfn.functions()[name])):
        for kind in ("config", "heads", "deltas", "rows", "dedup", "actions"):
            arn = f"<{ids[f'table:{kind}']}.Arn>"
            if resource == arn:
                grants.setdefault(kind, set()).add((action, "table"))
            elif resource.startswith(f"{arn}/index/"):
                grants.setdefault(kind, set()).add((action, "index"))
    return grants


def test_broadcaster_reads_membership_tables_with_the_pulls_reads_and_writes_no_buffer_table(cfn, ids):
    # Given the broadcaster's and the pull's grants on the buffer tables
    broadcaster, pull = _table_grants(cfn, "ws_broadcast", ids), _table_grants(cfn, "pull", ids)
    # Then on the tables a membership table is read from, the broadcaster holds the pull's reads of the tables
    # themselves (the rules and registry Query, the heads' BatchGetItem, the log's Query), and the rules' GetItem
    # it held before; no index (the membership view reads the log by sequence, not by commit HLC)
    for kind in MEMBERSHIP_TABLES:
        pulls = {grant for grant in pull[kind] if grant[1] == "table"}
        assert broadcaster[kind] - {("dynamodb:GetItem", "table")} == pulls, kind
    assert broadcaster == {
        "config": {("dynamodb:GetItem", "table"), ("dynamodb:Query", "table")},
        "heads": {("dynamodb:BatchGetItem", "table")},
        "deltas": {("dynamodb:Query", "table")},
        "dedup": {("dynamodb:GetItem", "table")},  # the clients' subscriptions
    }
    # And no write on any buffer table
    writes = {a for grants in broadcaster.values() for a, _ in grants if not a.endswith(("GetItem", "Query"))}
    assert writes == set()


def test_broadcaster_reads_checkpoint_objects_by_key_under_their_prefix_only(cfn, ids):
    # Given the broadcaster's role
    role = cfn.role_of(cfn.functions()["ws_broadcast"])
    checkpoints = f"<{ids['bucket:checkpoints']}.Arn>"
    # Then its only S3 permission is reading the objects under the checkpoints prefix: no listing, no write, no
    # other bucket
    s3 = {(a, r) for a, r in cfn.allowed(role) if a.startswith("s3:")}
    assert s3 == {("s3:GetObject", f"{checkpoints}/checkpoints/*")}
    # And it may decrypt them with the data key, through S3 (and DynamoDB: its tables and the stream) only
    via: dict[str, set[str]] = {}
    for st in cfn.role_statements(role):
        actions = st["Action"] if isinstance(st["Action"], list) else [st["Action"]]
        if any(a.startswith("kms:") for a in actions):
            assert st["Resource"] == {"Fn::GetAtt": [ids["key:data"], "Arn"]}
            for service in st["Condition"]["StringEquals"]["kms:ViaService"]:
                via.setdefault(cfn.render(service).split(".")[0], set()).update(actions)
    assert via["s3"] == {"kms:Decrypt"}
    assert set(via) == {"s3", "dynamodb"}


def test_broadcaster_environment_names_the_checkpoint_bucket_and_the_sub_shards(cfn, ids, options):
    # Given the broadcaster's environment, tokens rendered as stand-ins
    variables = cfn.functions()["ws_broadcast"]["Environment"]["Variables"]
    env = {k: cfn.render(v, lambda logical: f"tok-{logical.lower()}") for k, v in variables.items()}
    env[settings_vars.WS_CALLBACK_URL] = "https://abc.execute-api.eu-west-1.amazonaws.com/prod"
    # When its settings parser reads it
    parsed = BroadcastSettings.from_env(env)
    # Then the membership tables are read from the stack's checkpoint bucket and the configured sub-shards
    assert parsed.checkpoint_bucket == f"tok-{ids['bucket:checkpoints'].lower()}"
    assert dict(parsed.sub_shards) == options["subShards"]


def test_broadcaster_is_alarmed_on_errors_lag_and_exhausted_batches(cfn, rt):
    alarms = {k.removeprefix("Monitoring")[:-8]: a for k, a in cfn.of_type("AWS::CloudWatch::Alarm").items()}
    broadcaster = {"Ref": cfn.functions()["ws_broadcast"]["logical"]}
    assert alarms["WsBroadcastErrors"]["Dimensions"] == [{"Name": "FunctionName", "Value": broadcaster}]
    age = alarms["BroadcastIteratorAge"]
    assert (age["MetricName"], age["Statistic"], age["Dimensions"][0]["Value"]) == (
        "IteratorAge",
        "Maximum",
        broadcaster,
    )
    assert 0 < age["Threshold"] <= 5 * 60_000
    depth = alarms["BroadcastFailuresDepth"]
    assert depth["Dimensions"] == [{"Name": "QueueName", "Value": {"Fn::GetAtt": [rt["failures"], "QueueName"]}}]


def test_stack_outputs_the_socket_url(synth, rt):
    output = synth.cfn.template["Outputs"]["WebSocketUrl"]
    assert (
        synth.cfn.render(output["Value"]) == f"wss://<{rt['api']}>.execute-api.<AWS::Region>.<AWS::URLSuffix>/{STAGE}"
    )
