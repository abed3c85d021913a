"""The stack's log-keys marker, a CloudFormation custom resource (:mod:`lakesync.aws.deployment_marker`).

Reads no LakeSync variable: the request names the config table and the grace. CloudFormation creates the resource once
every function and Glue job of the deploy is updated, so from the marker on no code of a release before first keys
starts; writers set to ``auto`` start first keys one grace later (:mod:`lakesync.aws.log_keys`).
"""

from __future__ import annotations

import functools
from typing import TYPE_CHECKING, Any

from aws_lambda_powertools.utilities.typing import LambdaContext

from functions._runtime import logger, one_at_a_time, tracer
from lakesync.aws.deployment_marker import handle_marker_event

if TYPE_CHECKING:
    from mypy_boto3_dynamodb import DynamoDBClient


@functools.lru_cache(maxsize=1)
def dynamodb() -> DynamoDBClient:
    """The DynamoDB client, made on first use (boto3 honours ``AWS_ENDPOINT_URL``)."""
    from lakesync.aws.clients import dynamodb_client

    return dynamodb_client()


@one_at_a_time
@logger.inject_lambda_context(clear_state=True)
@tracer.capture_lambda_handler(capture_response=False)
def lambda_handler(event: dict[str, Any], context: LambdaContext) -> None:
    """The Lambda entry point: CloudFormation reads the answer sent to the request's ``ResponseURL``."""
    logger.append_keys(request_type=event.get("RequestType"), logical_id=event.get("LogicalResourceId"))
    status = handle_marker_event(event, dynamodb)
    logger.info(f"log-keys marker {event.get('RequestType')}: {status}")
