"""Encryption and TLS everywhere, and IAM hygiene, across the whole template: every bucket, table, queue, topic,
secret, key, log group and Glue job; no wildcard actions, no managed policies on our roles."""

from __future__ import annotations

import pytest


def _denies_insecure_transport(statements: list[dict]) -> bool:
    return any(
        st["Effect"] == "Deny" and st.get("Condition", {}).get("Bool", {}).get("aws:SecureTransport") == "false"
        for st in statements
    )


def _bucket_policies(cfn) -> dict[str, list[dict]]:
    return {p["Bucket"]["Ref"]: p["PolicyDocument"]["Statement"] for p in cfn.of_type("AWS::S3::BucketPolicy").values()}


def test_every_bucket_is_private_encrypted_versioned_and_tls_only(cfn, ids):
    # Given every bucket of the template
    buckets = cfn.of_type("AWS::S3::Bucket")
    policies = _bucket_policies(cfn)
    assert len(buckets) == 5
    for logical, bucket in buckets.items():
        # Then it blocks every kind of public access, owns its objects, keeps versions
        assert bucket["PublicAccessBlockConfiguration"] == {
            "BlockPublicAcls": True,
            "BlockPublicPolicy": True,
            "IgnorePublicAcls": True,
            "RestrictPublicBuckets": True,
        }, logical
        assert bucket["OwnershipControls"]["Rules"] == [{"ObjectOwnership": "BucketOwnerEnforced"}], logical
        assert bucket["VersioningConfiguration"] == {"Status": "Enabled"}, logical
        # And encrypts at rest: the data key, except the access-log bucket (log delivery writes SSE-S3 only)
        (rule,) = bucket["BucketEncryption"]["ServerSideEncryptionConfiguration"]
        default = rule["ServerSideEncryptionByDefault"]
        if logical == ids["bucket:access_logs"]:
            assert default == {"SSEAlgorithm": "AES256"}
        else:
            assert default["SSEAlgorithm"] == "aws:kms", logical
            assert default["KMSMasterKeyID"] == {"Fn::GetAtt": [ids["key:data"], "Arn"]}, logical
            # And logs its accesses to the access-log bucket
            assert bucket["LoggingConfiguration"]["DestinationBucketName"] == {"Ref": ids["bucket:access_logs"]}
        # And refuses plain HTTP
        assert _denies_insecure_transport(policies[logical]), logical


def test_every_table_is_kms_encrypted_with_point_in_time_recovery(cfn, ids):
    # Given the buffer's tables and the WebSocket sessions table
    tables = cfn.of_type("AWS::DynamoDB::Table")
    assert len(tables) == 7
    for logical, table in tables.items():
        # Then each is encrypted with the data key and recoverable to any point in time
        assert table["SSESpecification"] == {
            "KMSMasterKeyId": {"Fn::GetAtt": [ids["key:data"], "Arn"]},
            "SSEEnabled": True,
            "SSEType": "KMS",
        }, logical
        assert table["PointInTimeRecoverySpecification"] == {"PointInTimeRecoveryEnabled": True}, logical
        assert table["BillingMode"] == "PAY_PER_REQUEST", logical


def test_every_queue_is_encrypted_and_tls_only(cfn, ids):
    # Given the queues and their policies
    queues = cfn.of_type("AWS::SQS::Queue")
    policies = {
        q["Ref"]: p["PolicyDocument"]["Statement"]
        for p in cfn.of_type("AWS::SQS::QueuePolicy").values()
        for q in p["Queues"]
    }
    assert len(queues) == 4
    for logical, queue in queues.items():
        # Then each is encrypted (KMS, or SQS-managed for the two streams' failure metadata) and refuses plain HTTP
        assert queue.get("KmsMasterKeyId") or queue.get("SqsManagedSseEnabled"), logical
        assert _denies_insecure_transport(policies[logical]), logical
    # And the materialisation queue hands poison messages to its DLQ
    redrive = queues[ids["queue:materialise"]]["RedrivePolicy"]
    assert redrive["deadLetterTargetArn"] == {"Fn::GetAtt": [ids["queue:dead_letters"], "Arn"]}
    assert redrive["maxReceiveCount"] == 5


def test_topic_secret_and_keys_are_encrypted_and_rotated(cfn, ids):
    # Given the alarm topic, the JWT secret and the KMS keys
    (topic,) = cfn.of_type("AWS::SNS::Topic").values()
    (topic_policy,) = cfn.of_type("AWS::SNS::TopicPolicy").values()
    secret = cfn.resources[ids["secret:jwt"]]["Properties"]
    keys = cfn.of_type("AWS::KMS::Key")
    # Then the topic is KMS-encrypted and TLS-only, the secret uses the data key, every key rotates
    assert "KmsMasterKeyId" in topic
    assert _denies_insecure_transport(topic_policy["PolicyDocument"]["Statement"])
    assert secret["KmsKeyId"] == {"Fn::GetAtt": [ids["key:data"], "Arn"]}
    assert keys and all(key["EnableKeyRotation"] is True for key in keys.values())


def test_glue_security_configuration_encrypts_s3_logs_and_bookmarks_with_the_data_key(cfn, ids):
    # Given the jobs' security configuration
    (security,) = cfn.of_type("AWS::Glue::SecurityConfiguration").values()
    config = security["EncryptionConfiguration"]
    key = {"Fn::GetAtt": [ids["key:data"], "Arn"]}
    # Then S3 writes, CloudWatch logs and job bookmarks are all encrypted with the data key
    assert config["S3Encryptions"] == [{"KmsKeyArn": key, "S3EncryptionMode": "SSE-KMS"}]
    assert config["CloudWatchEncryption"] == {"KmsKeyArn": key, "CloudWatchEncryptionMode": "SSE-KMS"}
    assert config["JobBookmarksEncryption"] == {"KmsKeyArn": key, "JobBookmarksEncryptionMode": "CSE-KMS"}


def test_every_log_group_has_a_retention(cfn, options):
    # Given every log group of the template
    groups = cfn.of_type("AWS::Logs::LogGroup")
    # Then each keeps logs for the environment's retention, not forever
    assert groups and {g.get("RetentionInDays") for g in groups.values()} == {options["logRetentionDays"]}


@pytest.mark.parametrize("kind", ["AWS::IAM::Policy", "AWS::IAM::Role"])
def test_no_policy_grants_a_whole_service_or_passes_roles(cfn, kind):
    # Given every IAM statement of our policies and roles
    statements = []
    for props in cfn.of_type(kind).values():
        if kind == "AWS::IAM::Policy":
            statements += props["PolicyDocument"]["Statement"]
        else:
            statements += props["AssumeRolePolicyDocument"]["Statement"]
            for policy in props.get("Policies", []):
                statements += policy["PolicyDocument"]["Statement"]
    # Then none allows every action of a service, uses NotAction/NotResource, or passes a role -- but the admin
    # function's one statement passing the connector schedules' role, to EventBridge Scheduler only
    # (tests/infra/test_infra_connectors.py checks it in the stack)
    for st in statements:
        actions = st.get("Action", [])
        actions = actions if isinstance(actions, list) else [actions]
        assert not any(a == "*" or a.endswith(":*") for a in actions), st
        assert "NotAction" not in st and "NotResource" not in st, st
        if "iam:PassRole" in actions:
            assert st.get("Sid") == "PassScheduleRole" and actions == ["iam:PassRole"], st
            assert st["Resource"] == {"Fn::GetAtt": [_schedule_role(cfn), "Arn"]}, st
            assert st["Condition"] == {"StringEquals": {"iam:PassedToService": "scheduler.amazonaws.com"}}, st


def _schedule_role(cfn) -> str:
    (role,) = [k for k in cfn.of_type("AWS::IAM::Role") if k.startswith("ConnectorsScheduleRole")]
    return role


def test_our_roles_use_no_managed_policies(cfn):
    # Given the roles of our functions, jobs, schedules and the bundle deployment
    roles = {k: r for k, r in cfn.of_type("AWS::IAM::Role").items() if k.startswith(("Functions", "Jobs"))}
    assert len(roles) >= 8 + 3 + 3 + 1
    # Then none carries an AWS managed policy: everything they may do is in their own statements
    assert {k: r.get("ManagedPolicyArns") for k, r in roles.items() if r.get("ManagedPolicyArns")} == {}


def test_only_the_api_functions_read_the_jwt_secret(cfn, ids):
    # Given who may read the secret's value
    readers = set()
    for name, fn in cfn.functions().items():
        for action, resource in cfn.allowed(cfn.role_of(fn)):
            if action == "secretsmanager:GetSecretValue" and resource == f"<{ids['secret:jwt']}>":
                readers.add(name)
    # Then it is the API functions that verify tokens (the WebSocket upgrade's and messages' too, and the HTTP API's
    # authorizer), and the rotation function
    assert readers == {
        "push", "pull", "actions", "admin", "checkpoint", "ws_connect", "ws_message", "authorizer", "rotate_secret"
    }  # fmt: skip


def _data_key_statements(cfn, ids):
    key = {"Fn::GetAtt": [ids["key:data"], "Arn"]}
    for props in cfn.of_type("AWS::IAM::Policy").values():
        roles = [r["Ref"] for r in props["Roles"]]
        for st in props["PolicyDocument"]["Statement"]:
            actions = st["Action"] if isinstance(st["Action"], list) else [st["Action"]]
            resources = st["Resource"] if isinstance(st["Resource"], list) else [st["Resource"]]
            if any(a.startswith("kms:") for a in actions):
                yield roles, actions, resources, st.get("Condition"), key


def test_every_data_key_grant_goes_through_the_services_that_use_it(either_engine):
    # Given every role statement allowing KMS actions (with each flush engine)
    cfn, ids = either_engine.cfn, either_engine.ids
    granted = set()
    for roles, actions, resources, condition, key in _data_key_statements(cfn, ids):
        # Then it is on the data key alone, and only through AWS services (kms:ViaService), never direct KMS calls
        assert resources == [key], (roles, actions)
        assert condition is not None and set(condition) == {"StringEquals"}, (roles, actions)
        (via,) = condition["StringEquals"].values()
        assert list(condition["StringEquals"]) == ["kms:ViaService"], (roles, condition)
        services = {cfn.render(v) for v in (via if isinstance(via, list) else [via])}
        # (in the stack's partition: the URL suffix is amazonaws.com.cn in China, so it is never spelt out)
        assert services and all(s.endswith(".<AWS::Region>.<AWS::URLSuffix>") for s in services), services
        granted |= {(role, s.split(".")[0]) for role in roles for s in services}
    # And the services are the ones holding data with the key: tables, buckets, queues, the secret
    assert {s for _, s in granted} == {"dynamodb", "s3", "sqs", "secretsmanager"}
    by_role = {}
    for role, service in granted:
        by_role.setdefault(role, set()).add(service)
    # (the flush -- the function or the Glue job -- reads and writes the buffer and the lake, and publishes)
    for role in either_engine.flush_roles():
        assert by_role[role] == {"dynamodb", "s3", "sqs"}, role
    assert by_role[next(r for r in by_role if r.startswith("JobsCheckpointRole"))] == {"s3"}
    assert by_role[next(r for r in by_role if r.startswith("FunctionsMaterialiseRole"))] == {"dynamodb", "s3", "sqs"}


def test_only_this_secret_may_invoke_the_rotation_function(cfn, ids):
    # Given the permission letting Secrets Manager invoke the rotation function
    rotate = cfn.functions()["rotate_secret"]["logical"]
    (permission,) = [
        p for p in cfn.of_type("AWS::Lambda::Permission").values() if p["Principal"] == "secretsmanager.amazonaws.com"
    ]
    # Then it is for that function and only when the JWT secret's rotation calls (SourceArn)
    assert permission["FunctionName"] == {"Fn::GetAtt": [rotate, "Arn"]}
    assert permission["SourceArn"] == {"Ref": ids["secret:jwt"]}
