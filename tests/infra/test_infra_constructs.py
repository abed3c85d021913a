"""Constructs on bare stacks, for what the session's stack does not show: the materialisation queue's consumer seam,
and what a retained (production) environment keeps when the stack is deleted versus a throwaway one. The apps get
the LakeSync app context (``APP_CONTEXT``), which the constructs assume."""

from __future__ import annotations

import aws_cdk as cdk
import pytest
from aws_cdk import aws_kms as kms
from aws_cdk import aws_lambda as lambda_
from aws_cdk import aws_s3 as s3
from aws_cdk.assertions import Match, Template
from lakesync_infra.buffer import Buffer
from lakesync_infra.common import LAMBDA_RUNTIME
from lakesync_infra.config import LakeSyncConfig
from lakesync_infra.lake import Lake
from lakesync_infra.queues import Queues
from lakesync_infra.secrets import Secrets
from lakesync_infra.stack import APP_CONTEXT


def _queues_stack(consumer_timeout_s: int) -> tuple[cdk.Stack, Queues, lambda_.Function]:
    stack = cdk.Stack(cdk.App(context=dict(APP_CONTEXT)), "Seam")
    config = LakeSyncConfig.from_settings("t", {})
    key = kms.Key(stack, "Key", enable_key_rotation=True)
    queues = Queues(stack, "Queues", config=config, key=key, access_logs=s3.Bucket(stack, "Logs"))
    consumer = lambda_.Function(
        stack,
        "Consumer",
        runtime=LAMBDA_RUNTIME,
        handler="index.handler",
        code=lambda_.Code.from_inline("def handler(event, context):\n    return {}\n"),
        timeout=cdk.Duration.seconds(consumer_timeout_s),
    )
    return stack, queues, consumer


def test_queue_consumer_seam_reports_batch_item_failures_and_reads_payloads():
    # Given the queues and a consumer function
    stack, queues, consumer = _queues_stack(60)
    # When the consumer is attached through the construct's seam
    queues.attach_consumer(consumer, batch_size=5)
    template = Template.from_stack(stack)
    # Then the queue feeds it with partial batch failure reporting
    template.has_resource_properties(
        "AWS::Lambda::EventSourceMapping",
        {
            "EventSourceArn": {"Fn::GetAtt": [stack.get_logical_id(queues.queue.node.default_child), "Arn"]},
            "FunctionResponseTypes": ["ReportBatchItemFailures"],
            "BatchSize": 5,
        },
    )
    # And its role may consume the queue and read claim-check payloads (and decrypt both)
    template.has_resource_properties(
        "AWS::IAM::Policy",
        {
            "PolicyDocument": {
                "Statement": Match.array_with(
                    [
                        Match.object_like({"Action": Match.array_with(["sqs:ReceiveMessage", "sqs:DeleteMessage"])}),
                        Match.object_like({"Action": "s3:GetObject", "Sid": "ClaimCheckPayloads"}),
                    ]
                )
            }
        },
    )


def test_queue_consumer_seam_refuses_a_consumer_slower_than_the_visibility_budget():
    # Given a consumer whose timeout exceeds the queue's visibility budget
    _, queues, consumer = _queues_stack(600)
    # When it is attached
    # Then the construct refuses (messages would reappear while still being processed)
    with pytest.raises(ValueError, match="timeout"):
        queues.attach_consumer(consumer)


def _data_stack(removal: str) -> Template:
    stack = cdk.Stack(cdk.App(context=dict(APP_CONTEXT)), f"Data{removal.capitalize()}")
    config = LakeSyncConfig.from_settings("t", {"removalPolicy": removal})
    key = kms.Key(stack, "Key", enable_key_rotation=True)
    Buffer(stack, "Buffer", config=config, key=key)
    Lake(stack, "Lake", config=config, key=key)
    Secrets(stack, "Secrets", config=config, key=key)
    return Template.from_stack(stack)


def test_retained_environment_keeps_its_data_when_the_stack_is_deleted():
    # Given the data constructs of a retained environment
    template = _data_stack("retain")
    # Then tables, buckets, the Glue database and the secret are retained, tables are protected from deletion,
    # and nothing empties the buckets
    for kind in ("AWS::DynamoDB::Table", "AWS::S3::Bucket", "AWS::Glue::Database", "AWS::SecretsManager::Secret"):
        resources = template.find_resources(kind)
        assert resources and {r["DeletionPolicy"] for r in resources.values()} == {"Retain"}, kind
    tables = template.find_resources("AWS::DynamoDB::Table").values()
    assert all(t["Properties"]["DeletionProtectionEnabled"] is True for t in tables)
    template.resource_count_is("Custom::S3AutoDeleteObjects", 0)


def test_throwaway_environment_is_removed_with_its_stack():
    # Given the data constructs of a throwaway environment
    template = _data_stack("destroy")
    # Then the stores are deleted with the stack and the buckets are emptied first
    for kind in ("AWS::DynamoDB::Table", "AWS::S3::Bucket", "AWS::Glue::Database"):
        resources = template.find_resources(kind)
        assert {r["DeletionPolicy"] for r in resources.values()} == {"Delete"}, kind
    template.resource_count_is("Custom::S3AutoDeleteObjects", 3)
