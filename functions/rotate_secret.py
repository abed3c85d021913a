"""Secrets Manager rotation of the JWT signing secret: ``createSecret`` / ``setSecret`` / ``testSecret`` /
``finishSecret`` (:mod:`lakesync.aws.rotation`).

Reads no LakeSync variable: the event names the secret. A bad event or a secret state that does not allow the step
raises :class:`~lakesync.aws.rotation.RotationError` before anything is written; Secrets Manager then marks the
rotation failed and the function's error metrics show it.
"""

from __future__ import annotations

import functools
from typing import TYPE_CHECKING, Any

from aws_lambda_powertools.metrics import MetricUnit
from aws_lambda_powertools.utilities.typing import LambdaContext

from functions._runtime import logger, metrics, one_at_a_time, tracer
from lakesync.aws.rotation import parse_rotation_event

if TYPE_CHECKING:
    from lakesync.aws.rotation import SecretRotator


@functools.lru_cache(maxsize=1)
def get_rotator() -> SecretRotator:
    """The rotator, its Secrets Manager client made on first use (boto3 honours ``AWS_ENDPOINT_URL``)."""
    from lakesync.aws.rotation import SecretRotator
    from lakesync.aws.secrets import secretsmanager_client

    return SecretRotator(secretsmanager_client())


@one_at_a_time
@logger.inject_lambda_context(clear_state=True)
@tracer.capture_lambda_handler(capture_response=False)
@metrics.log_metrics(capture_cold_start_metric=True)
def lambda_handler(event: dict[str, Any], context: LambdaContext) -> None:
    """The Lambda entry point (Secrets Manager ignores the result; an exception fails the step)."""
    metrics.add_metric(name="SecretRotationSteps", unit=MetricUnit.Count, value=1)
    request = parse_rotation_event(event)
    logger.append_keys(secret_id=request.secret_id, version_id=request.token, step=request.step)
    done = get_rotator().rotate(request)
    logger.info(f"Rotation step {request.step}: {done}")
    if done == "finished":
        metrics.add_metric(name="SecretRotations", unit=MetricUnit.Count, value=1)
