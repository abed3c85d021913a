"""Materialisation in the template: the consumer's event source (partial batch failures, bounded concurrency, a
visibility timeout six times the function's, poison messages to the DLQ after five receives), exactly the consumer's
and the producer's permissions (replayed against moto, as in test_infra_access), the alarms and dashboard, and the
``materialiseVpc`` variant -- a second synth with the option set, checked by cdk-nag and cfn-lint too."""

from __future__ import annotations

import json
import re
import subprocess
import sys
import uuid
from pathlib import Path
from typing import Any

import boto3
import pytest

from tests.infra.conftest import CDK_JSON, ENV, Cfn
from tests.infra.test_infra_access import FAKE, GW, REGION, _allows, _check, _invoke, _names, aws, recorder  # noqa: F401 (fixtures)

MATERIALISE = "materialise"
VPC = {
    "vpcId": "vpc-0123456789abcdef0",
    "availabilityZones": ["eu-west-1a", "eu-west-1b"],
    "privateSubnetIds": ["subnet-0aaaaaaaaaaaaaaa1", "subnet-0bbbbbbbbbbbbbbb2"],
    "privateSubnetRouteTableIds": ["rtb-0aaaaaaaaaaaaaaa1", "rtb-0bbbbbbbbbbbbbbb2"],
    "securityGroupIds": ["sg-0ccccccccccccccc3"],
}


VPC_CONNECTOR_FUNCTIONS = ("connector_poll",)
"""The connector functions the VPC variant places in the VPC too (``materialiseVpc.connectorFunctions``)."""


def _mapping(cfn: Cfn) -> dict[str, Any]:
    fn = cfn.functions()[MATERIALISE]
    (mapping,) = [
        m
        for m in cfn.of_type("AWS::Lambda::EventSourceMapping").values()
        if m["FunctionName"] == {"Ref": fn["logical"]}
    ]
    return mapping


def _role(cfn: Cfn) -> str:
    return cfn.role_of(cfn.functions()[MATERIALISE])


def _secret_pattern(synth: Any) -> str:
    prefix = synth.stack.config.destination_secrets
    return f"arn:<AWS::Partition>:secretsmanager:<AWS::Region>:<AWS::AccountId>:secret:{prefix}*"


# -- the consumer -------------------------------------------------------------------------------------------------


def test_materialise_consumes_the_queue_with_partial_failures_and_bounded_concurrency(cfn, ids, synth):
    # Given the materialise function's event source mapping
    mapping = _mapping(cfn)
    # Then it reads the materialisation queue, reports partial batch failures and runs at most the configured
    # number of invocations at once (each holds its own database connection)
    assert mapping["EventSourceArn"] == {"Fn::GetAtt": [ids["queue:materialise"], "Arn"]}
    assert mapping["FunctionResponseTypes"] == ["ReportBatchItemFailures"]
    assert mapping["ScalingConfig"] == {"MaximumConcurrency": synth.stack.config.materialise_concurrency}
    assert 1 <= mapping["BatchSize"] <= 10


def test_queue_hides_a_message_for_six_consumer_timeouts_and_dead_letters_it_after_five_receives(cfn, ids):
    # Given the queue and its consumer
    queue = cfn.resources[ids["queue:materialise"]]["Properties"]
    timeout = cfn.functions()[MATERIALISE]["Timeout"]
    # Then a message stays hidden while six invocations could time out on it (AWS's guidance), and a poison
    # message reaches the DLQ after at least five receives
    assert timeout <= 120
    assert queue["VisibilityTimeout"] >= 6 * timeout
    assert queue["RedrivePolicy"]["maxReceiveCount"] >= 5
    assert queue["RedrivePolicy"]["deadLetterTargetArn"] == {"Fn::GetAtt": [ids["queue:dead_letters"], "Arn"]}


def test_materialise_environment_names_the_claim_check_bucket_and_the_tables(cfn, ids):
    # Given the function's environment, read by its own settings parser
    from lakesync.aws.settings.materialise import MaterialiseSettings

    variables = cfn.functions()[MATERIALISE]["Environment"]["Variables"]
    env = {k: cfn.render(v, lambda logical: f"tok-{logical.lower()}") for k, v in variables.items()}
    settings = MaterialiseSettings.from_env(env)
    # Then it is the stack's claim-check bucket and buffer tables
    assert settings.claim_check_bucket == f"tok-{ids['bucket:claim_check'].lower()}"
    assert settings.tables.config == f"tok-{ids['table:config'].lower()}"


def test_materialise_role_may_do_exactly_its_calls(cfn, ids, synth):
    # Given everything the materialise role allows
    granted = set(cfn.allowed(_role(cfn)))
    claim_check = f"<{ids['bucket:claim_check']}.Arn>"
    by_service: dict[str, set[tuple[str, str]]] = {}
    for action, resource in granted:
        by_service.setdefault(action.split(":")[0], set()).add((action, resource))
    # Then it logs, traces, consumes the queue, decrypts with the data key, and nothing else besides its calls:
    assert set(by_service) == {"logs", "xray", "sqs", "kms", "dynamodb", "s3", "secretsmanager"}
    assert {r for _, r in by_service["sqs"]} == {f"<{ids['queue:materialise']}.Arn>"}
    assert not {a for a, _ in by_service["sqs"]} & {"sqs:SendMessage", "sqs:PurgeQueue", "sqs:SetQueueAttributes"}
    assert {(a, r) for a, r in by_service["kms"]} <= {
        (a, f"<{ids['key:data']}.Arn>") for a in ("kms:Decrypt", "kms:DescribeKey")
    }
    # the gateway's destinations and table schemas (one Query each on the config table)
    assert by_service["dynamodb"] == {("dynamodb:Query", f"<{ids['table:config']}.Arn>")}
    # the payloads, only under the prefix the flush writes them to (ListBucket: a missing one is a 404)
    assert by_service["s3"] == {("s3:GetObject", f"{claim_check}/materialise/*"), ("s3:ListBucket", claim_check)}
    # the destinations' secrets: any secret named under the environment's prefix, and no other
    assert by_service["secretsmanager"] == {("secretsmanager:GetSecretValue", _secret_pattern(synth))}
    assert not _allows(list(granted), "secretsmanager:GetSecretValue", f"<{ids['secret:jwt']}>")


def test_only_the_flush_may_publish_to_the_queue(either_engine):
    # Given every role that may send to the materialisation queue (with each flush engine)
    cfn, ids = either_engine.cfn, either_engine.ids
    senders = []
    for logical in cfn.of_type("AWS::IAM::Role"):
        if _allows(cfn.allowed(logical), "sqs:SendMessage", f"<{ids['queue:materialise']}.Arn>"):
            senders.append(logical)
    # Then they are the flush's roles alone: the flush function's and/or the Glue flush job's
    assert sorted(senders) == either_engine.flush_roles()


# -- the producer -------------------------------------------------------------------------------------------------


@pytest.mark.parametrize("engine", ["function", "glue"])
def test_flush_publishes_payloads_messages_and_only_lakesync_metrics(synth, engine):
    # Given an engine's flush role (the flush function's, or the Glue flush job's; the default deploys both)
    cfn, ids = synth.cfn, synth.ids
    role = synth.flush_role(engine)
    granted = cfn.allowed(role)
    claim_check = f"<{ids['bucket:claim_check']}.Arn>"
    # Then it may write payloads under materialise/ only, send to the queue, and use the data key both are
    # encrypted with
    assert ("s3:PutObject", f"{claim_check}/materialise/*") in granted
    assert not _allows(granted, "s3:PutObject", f"{claim_check}/other")
    assert ("sqs:SendMessage", f"<{ids['queue:materialise']}.Arn>") in granted
    for action in ("kms:GenerateDataKey", "kms:Decrypt"):
        assert (action, f"<{ids['key:data']}.Arn>") in granted
    # And it lists destinations and moves the heads' published position (config Query, heads UpdateItem)
    assert ("dynamodb:Query", f"<{ids['table:config']}.Arn>") in granted
    assert ("dynamodb:UpdateItem", f"<{ids['table:heads']}.Arn>") in granted
    # And it may put metrics only into the LakeSync namespace (and the job into Glue's)
    metric_statements = [s for s in cfn.role_statements(role) if s["Action"] == "cloudwatch:PutMetricData"]
    namespaces = {s["Condition"]["StringEquals"]["cloudwatch:namespace"] for s in metric_statements}
    assert namespaces == ({"LakeSync"} if engine == "function" else {"Glue", "LakeSync"})
    # And its configuration names the claim-check bucket and the queue
    if engine == "function":
        env = cfn.functions()["flush"]["Environment"]["Variables"]
        bucket, queue = env["LAKESYNC_CLAIM_CHECK_BUCKET"], env["LAKESYNC_MATERIALISE_QUEUE_URL"]
    else:
        args = cfn.resources[ids["job:flush"]]["Properties"]["DefaultArguments"]
        bucket, queue = args["--claim_check_bucket"], args["--materialise_queue_url"]
    assert bucket == {"Ref": ids["bucket:claim_check"]}
    assert queue == {"Ref": ids["queue:materialise"]}


def test_flush_job_arguments_parse_into_the_publish_configuration(glue_cfn, glue_ids):
    # Given the flush job's arguments (flushEngine glue), tokens replaced by stand-ins, as the job's own parser reads
    # them (the flush function's environment: test_infra_flush)
    import importlib.util

    cfn, ids = glue_cfn, glue_ids
    from lakesync.spark.glue import resolved_options

    path = Path(__file__).resolve().parents[2] / "glue_jobs" / "flush.py"
    spec = importlib.util.spec_from_file_location("glue_job_flush_publish", path)
    assert spec is not None and spec.loader is not None
    script = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(script)
    arguments = cfn.resources[ids["job:flush"]]["Properties"]["DefaultArguments"]
    argv = [t for k, v in arguments.items() for t in (k, cfn.render(v, lambda logical: f"tok-{logical.lower()}"))]
    parsed = script.FlushJobArgs.parse(resolved_options(script.JOB_OPTIONS, argv))
    # Then the job publishes to the stack's claim-check bucket and queue
    publish = parsed.config.publish
    assert publish is not None
    assert publish.bucket == f"tok-{ids['bucket:claim_check'].lower()}"
    assert publish.queue_url == f"tok-{ids['queue:materialise'].lower()}"


# -- least privilege, replayed ------------------------------------------------------------------------------------


class _Destination:
    """Stands in for a database: the AWS calls are what is under test, not SQL."""

    name = "pg"

    def apply(self, schema: Any, deltas: Any) -> Any:
        from lakesync.ports import ApplyStats

        return ApplyStats(deltas=len(deltas), upserted=len(deltas))

    def rows(self, schema: Any) -> dict[str, dict[str, Any]]:
        return {}

    def close(self) -> None:
        return None


def _sqs_event(message: dict[str, Any], queue_arn: str) -> dict[str, Any]:
    return {
        "Records": [
            {
                "messageId": message["MessageId"],
                "receiptHandle": message["ReceiptHandle"],
                "body": message["Body"],
                "attributes": {
                    "ApproximateReceiveCount": "1",
                    "SentTimestamp": "1763000000000",
                    "SenderId": "AIDAEXAMPLE",
                    "ApproximateFirstReceiveTimestamp": "1763000000001",
                },
                "messageAttributes": {},
                "md5OfBody": message["MD5OfBody"],
                "eventSource": "aws:sqs",
                "eventSourceARN": queue_arn,
                "awsRegion": REGION,
            }
        ]
    }


def test_flush_publish_and_materialise_roles_allow_what_their_code_calls(cfn, ids, synth, glue_synth, aws, recorder):  # noqa: F811
    # Given a schema, a pushed delta, a claim-check bucket, a queue, and a postgres destination whose secret is named
    # under the environment's destination prefix
    from lakesync.aws.config_store import DynamoDBConfigStore
    from lakesync.aws.destinations import ConfiguredDestinations
    from lakesync.aws.flush_store import DynamoConfig, FlushStore
    from lakesync.aws.objects import S3ObjectStore, create_bucket
    from lakesync.aws.publish import ClaimCheckSink, PublishConfig, publish_flushed
    from lakesync.aws.secrets import secretsmanager_client
    from lakesync.core.destinations import parse_destination
    from lakesync.gateway.materialise import MaterialiseDeps

    assert _invoke("admin", "admin_schema_post", role="admin") < 300
    assert _invoke("push", "push_json") < 300
    endpoint = aws["endpoint"]
    bucket = f"claims-{uuid.uuid4().hex[:12]}"
    create_bucket(boto3.client("s3", endpoint_url=endpoint, **FAKE), bucket)
    sqs = boto3.client("sqs", endpoint_url=endpoint, **FAKE)
    queue_url = sqs.create_queue(QueueName=f"mat-{uuid.uuid4().hex[:8]}")["QueueUrl"]
    queue_arn = sqs.get_queue_attributes(QueueUrl=queue_url, AttributeNames=["QueueArn"])["Attributes"]["QueueArn"]
    secret_name = f"{synth.stack.config.destination_secrets}pg"
    secret_arn = boto3.client("secretsmanager", endpoint_url=endpoint, **FAKE).create_secret(
        Name=secret_name, SecretString=json.dumps({"url": "postgresql://db.internal/app"})
    )["ARN"]
    config = DynamoDBConfigStore(boto3.client("dynamodb", endpoint_url=endpoint, **FAKE), aws["tables"])
    config.add_destination(
        GW, parse_destination({"name": "pg", "type": "postgres", "secretArn": secret_arn, "tables": ["todos"]})
    )
    names = _names(aws, ids)
    names[bucket] = f"<{ids['bucket:claim_check']}.Arn>"
    names[queue_url] = f"<{ids['queue:materialise']}.Arn>"
    names[secret_arn] = secret_arn.replace(
        f"arn:aws:secretsmanager:{REGION}:123456789012:",
        "arn:<AWS::Partition>:secretsmanager:<AWS::Region>:<AWS::AccountId>:",
    )
    store = FlushStore.from_config(DynamoConfig(aws["tables"], endpoint_url=endpoint, region=REGION))
    _, heads = store.shards([GW])
    watermarks = {shard.key: head.seq for shard, head in heads.items()}
    recorder.calls.clear()
    # When the flush publishes what it flushed (and records a publish failure)
    sink = ClaimCheckSink(PublishConfig(bucket, queue_url, endpoint_url=endpoint, region=REGION))
    report = publish_flushed(store, sink, heads, watermarks, run_id="run-1", bucket=bucket)
    assert report.jobs == 1 and report.failed == 0
    sink.report_failures(1)
    publish_calls = list(recorder.calls)
    # And the materialise handler consumes the message (its own wiring, with a stand-in database)
    import importlib

    from functions._runtime import use_materialise_deps
    from lakesync.local.front import LambdaContext

    use_materialise_deps(
        MaterialiseDeps(
            payloads=S3ObjectStore(bucket),
            bucket=bucket,
            config=DynamoDBConfigStore(boto3.client("dynamodb"), aws["tables"]),
            destinations=ConfiguredDestinations(config, secretsmanager_client, connect=lambda cfg, s: _Destination()),
        )
    )
    (message,) = sqs.receive_message(QueueUrl=queue_url, MaxNumberOfMessages=1)["Messages"]
    recorder.calls.clear()
    context = LambdaContext(
        function_name="lakesync-materialise",
        aws_request_id=str(uuid.uuid4()),
        invoked_function_arn=f"arn:aws:lambda:{REGION}:123456789012:function:lakesync-materialise",
        memory_limit_in_mb=1024,
    )
    reply = importlib.import_module("functions.materialise").lambda_handler(_sqs_event(message, queue_arn), context)
    consume_calls = list(recorder.calls)
    # Then the job was applied, and each role allows every call its code made
    assert reply == {"batchItemFailures": []}
    assert {op for _, op, _ in consume_calls} >= {"GetObject", "GetSecretValue", "Query"}
    for deploying in (synth, glue_synth):  # the flush function's role and the Glue flush job's, in each template
        engine_names = _names(aws, deploying.ids) | {
            bucket: f"<{deploying.ids['bucket:claim_check']}.Arn>",
            queue_url: f"<{deploying.ids['queue:materialise']}.Arn>",
        }
        for role in deploying.flush_roles():
            _, missing = _check(deploying.cfn, role, publish_calls, engine_names)
            assert not missing, f"flush ({deploying.engine}, {role}): used but not granted: {missing}"
    assert {op for _, op, _ in publish_calls} >= {"PutObject", "SendMessage", "PutMetricData", "UpdateItem"}
    namespaces = {p["Namespace"] for _, op, p in publish_calls if op == "PutMetricData"}
    assert namespaces == {"LakeSync"}  # the namespace the role's condition allows
    _, missing = _check(cfn, _role(cfn), consume_calls, names)
    assert not missing, f"materialise: used but not granted: {missing}"


# -- monitoring ---------------------------------------------------------------------------------------------------


def _alarm(cfn: Cfn, suffix: str) -> dict[str, Any]:
    (alarm,) = [a for k, a in cfn.of_type("AWS::CloudWatch::Alarm").items() if k.startswith(f"Monitoring{suffix}")]
    return alarm


def test_publish_failures_queue_age_and_dead_letters_are_alarmed_and_on_the_dashboard(cfn, ids):
    # Given the materialisation alarms
    publish = _alarm(cfn, "MaterialisePublishFailures")
    age = _alarm(cfn, "MaterialiseQueueAge")
    dead = _alarm(cfn, "MaterialiseDeadLettersDepth")
    topic = {"Ref": ids["topic:alarms"]}
    # Then any range the flush could not publish alarms (the flush job's metric, namespace and dimension exact)
    assert (publish["Namespace"], publish["MetricName"]) == ("LakeSync", "MaterialisePublishFailures")
    assert publish["Dimensions"] == [{"Name": "service", "Value": "flush"}]
    assert (publish["Threshold"], publish["ComparisonOperator"]) == (1, "GreaterThanOrEqualToThreshold")
    # And a message waiting for more than an hour alarms
    assert (age["MetricName"], age["Statistic"], age["Threshold"]) == ("ApproximateAgeOfOldestMessage", "Maximum", 3600)
    assert age["Dimensions"] == [
        {"Name": "QueueName", "Value": {"Fn::GetAtt": [ids["queue:materialise"], "QueueName"]}}
    ]
    # And so does any message in the DLQ; all three notify the alarm topic
    assert dead["Dimensions"] == [
        {"Name": "QueueName", "Value": {"Fn::GetAtt": [ids["queue:dead_letters"], "QueueName"]}}
    ]
    assert all(a["AlarmActions"] == [topic] for a in (publish, age, dead))
    # And the dashboard shows the consumer (errors, duration, queue depth and age) and the alarms
    (dashboard,) = cfn.of_type("AWS::CloudWatch::Dashboard").values()
    body = cfn.render(dashboard["DashboardBody"])
    for fragment in ("Materialise: errors", "Materialise: consumer duration", "ApproximateAgeOfOldestMessage"):
        assert fragment in body
    fn_logical = cfn.functions()[MATERIALISE]["logical"]
    assert f'"FunctionName","<{fn_logical}>"' in body


# -- the VPC variant ----------------------------------------------------------------------------------------------


@pytest.fixture(scope="module")
def vpc_synth(synth: Any, tmp_path_factory: pytest.TempPathFactory) -> tuple[Cfn, Path, list[dict[str, Any]]]:
    """A second synth with ``materialiseVpc`` set (same artifacts), its template file and cdk-nag findings. It also
    turns ``tracing`` off, so that variant is synthesized (and nag-checked) without a third synth."""
    from lakesync_infra.stack import build_app

    outdir = tmp_path_factory.mktemp("cdk.out.vpc")
    context = json.loads(CDK_JSON.read_text(encoding="utf-8"))["context"]
    post = {
        "lakesync:environments": ENV,
        f"lakesync:env:{ENV}": {
            "materialiseVpc": {**VPC, "connectorFunctions": list(VPC_CONNECTOR_FUNCTIONS)},
            "tracing": False,
        },
    }
    app, (stack,) = build_app(context, synth.artifacts, outdir=str(outdir), post_cli_context=post)
    violations: list[dict[str, Any]] = []
    try:
        app.synth()
    except RuntimeError as exc:  # a failed validation: the report below says which
        violations.append({"ruleName": str(exc)[:500]})
    report = outdir / "validation-report.json"
    if report.exists():
        for plugin in json.loads(report.read_text(encoding="utf-8"))["pluginReports"]:
            violations.extend(plugin.get("violations", []))
    path = outdir / stack.template_file
    return Cfn(json.loads(path.read_text(encoding="utf-8"))), path, violations


def test_vpc_variant_runs_the_consumer_in_the_configured_subnets_and_groups(vpc_synth):
    # Given the template with materialiseVpc set
    cfn, _, _ = vpc_synth
    functions = cfn.functions()
    # Then the materialise function and the named connector functions run in those subnets with those security
    # groups, and no other function does
    in_vpc = (MATERIALISE, *VPC_CONNECTOR_FUNCTIONS)
    for name in in_vpc:
        assert functions[name]["VpcConfig"] == {
            "SubnetIds": VPC["privateSubnetIds"],
            "SecurityGroupIds": VPC["securityGroupIds"],
        }
    assert sorted(n for n, fn in functions.items() if "VpcConfig" in fn) == sorted(in_vpc)
    # And their roles may manage the network interfaces Lambda creates for them (before the function is created);
    # the others' may not
    for name, fn in functions.items():
        role = cfn.role_of(fn)
        granted = cfn.allowed(role)
        eni = ("ec2:CreateNetworkInterface", "ec2:DescribeNetworkInterfaces", "ec2:DeleteNetworkInterface")
        assert all((action, "*") in granted for action in eni) == (name in in_vpc), name
        assert not any(a.startswith("ec2:") for a, _ in granted) or name in in_vpc, name
        if name in in_vpc:
            policies = [k for k, p in cfn.of_type("AWS::IAM::Policy").items() if {"Ref": role} in p["Roles"]]
            assert set(policies) <= set(cfn.resources[fn["logical"]]["DependsOn"])


def test_tracing_off_leaves_no_function_traced_nor_allowed_to_send_traces(cfn, vpc_synth):
    # Given the default template (tracing on) and the variant with tracing off
    variant, _, _ = vpc_synth
    for name, fn in cfn.functions().items():
        # Then by default every function traces actively and may send traces, and builds its tracer
        assert fn["TracingConfig"] == {"Mode": "Active"}, name
        assert any(a.startswith("xray:") for a, _ in cfn.allowed(cfn.role_of(fn))), name
        assert "POWERTOOLS_TRACE_DISABLED" not in fn.get("Environment", {}).get("Variables", {}), name
    for name, fn in variant.functions().items():
        # And with tracing off none traces, none may send traces, and none builds a tracer (no X-Ray SDK import)
        assert "TracingConfig" not in fn, name
        assert not any(a.startswith("xray:") for a, _ in variant.allowed(variant.role_of(fn))), name
        assert fn["Environment"]["Variables"]["POWERTOOLS_TRACE_DISABLED"] == "true", name


def test_vpc_variant_creates_the_endpoints_the_consumer_needs(vpc_synth):
    # Given the endpoints of the VPC variant
    cfn, _, _ = vpc_synth
    endpoints = cfn.of_type("AWS::EC2::VPCEndpoint").values()
    by_service = {cfn.render(e["ServiceName"]).rsplit(".", 1)[-1]: e for e in endpoints}
    # Then S3 and DynamoDB are gateway endpoints on the subnets' route tables, Secrets Manager an interface endpoint,
    # and there is no KMS endpoint ($0.01 per AZ-hour): no function or job makes a KMS call of its own (S3, DynamoDB,
    # SQS and Secrets Manager use the key on the service side); a KMS client in the code would need it back
    assert set(by_service) == {"s3", "dynamodb", "secretsmanager"}
    root = Path(__file__).resolve().parents[2]
    sources = [p for d in ("src", "functions", "glue_jobs") for p in root.joinpath(d).rglob("*.py")]
    kms_client = re.compile(r"""client\(\s*["']kms["']""")
    assert len(sources) > 50
    assert [str(p) for p in sources if kms_client.search(p.read_text(encoding="utf-8"))] == []
    for name in ("s3", "dynamodb"):
        assert by_service[name]["VpcEndpointType"] == "Gateway"
        assert by_service[name]["RouteTableIds"] == VPC["privateSubnetRouteTableIds"]
        assert by_service[name]["VpcId"] == VPC["vpcId"]
    # And Secrets Manager is a private-DNS interface endpoint in the subnets
    for name in ("secretsmanager",):
        endpoint = by_service[name]
        assert endpoint["VpcEndpointType"] == "Interface"
        assert endpoint["PrivateDnsEnabled"] is True
        assert endpoint["SubnetIds"] == VPC["privateSubnetIds"]
    # And their security group admits HTTPS from the function's security groups only
    (group,) = cfn.of_type("AWS::EC2::SecurityGroup").values()
    ingress = list(cfn.of_type("AWS::EC2::SecurityGroupIngress").values()) + group.get("SecurityGroupIngress", [])
    assert [(r["SourceSecurityGroupId"], r["FromPort"], r["ToPort"]) for r in ingress] == [
        (VPC["securityGroupIds"][0], 443, 443)
    ]
    assert all("CidrIp" not in r for r in ingress)


def test_gateway_endpoints_name_a_route_table_shared_by_the_subnets_once():
    # Given one NAT gateway's layout: both private subnets use one route table
    import aws_cdk as cdk
    from lakesync_infra.config import LakeSyncConfig
    from lakesync_infra.network import MaterialiseNetwork

    shared = "rtb-0aaaaaaaaaaaaaaa1"
    config = LakeSyncConfig.from_settings(
        "t", {"materialiseVpc": {**VPC, "privateSubnetRouteTableIds": [shared, shared]}}
    )
    assert config.materialise_vpc is not None
    stack = cdk.Stack(cdk.App(), "SharedRouteTable")
    MaterialiseNetwork(stack, "Network", settings=config.materialise_vpc)
    endpoints = cdk.assertions.Template.from_stack(stack).find_resources("AWS::EC2::VPCEndpoint").values()
    # Then the S3 and DynamoDB gateway endpoints route through it once (a route table listed twice fails the deploy)
    gateways = [e["Properties"] for e in endpoints if e["Properties"]["VpcEndpointType"] == "Gateway"]
    assert len(gateways) == 2
    assert all(g["RouteTableIds"] == [shared] for g in gateways)
    # And the interface endpoint still spans both subnets
    (interface,) = [e["Properties"] for e in endpoints if e["Properties"]["VpcEndpointType"] == "Interface"]
    assert interface["SubnetIds"] == VPC["privateSubnetIds"]


def test_vpc_variant_without_endpoints_creates_none(synth, tmp_path_factory):
    # Given a VPC that already routes to AWS (createEndpoints false, no route tables needed)
    import aws_cdk as cdk
    from lakesync_infra.config import LakeSyncConfig
    from lakesync_infra.network import MaterialiseNetwork

    settings = {k: v for k, v in VPC.items() if k != "privateSubnetRouteTableIds"}
    config = LakeSyncConfig.from_settings("t", {"materialiseVpc": {**settings, "createEndpoints": False}})
    stack = cdk.Stack(cdk.App(), "NoEndpoints")
    assert config.materialise_vpc is not None
    network = MaterialiseNetwork(stack, "Network", settings=config.materialise_vpc)
    # Then the network imports the VPC and creates nothing
    assert network.endpoints == {} and network.endpoint_security_group is None
    assert cdk.assertions.Template.from_stack(stack).to_json().get("Resources", {}) == {}


def test_vpc_variant_passes_cdk_nag_and_cfn_lint(vpc_synth):
    # Given the VPC variant's validation report and template
    _, path, violations = vpc_synth
    # Then cdk-nag reports nothing unacknowledged
    assert [v["ruleName"] for v in violations] == []
    # And cfn-lint is clean
    done = subprocess.run(
        [sys.executable, "-c", "import sys; from cfnlint.runner import main; sys.exit(main())",
         "--ignore-checks", "W3005", "--", str(path)],
        capture_output=True, text=True, check=False,
    )  # fmt: skip
    assert done.returncode == 0, done.stdout + done.stderr
