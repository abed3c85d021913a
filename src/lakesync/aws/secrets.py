"""The JWT signing secret in AWS Secrets Manager.

The secret's ``SecretString`` is the HMAC secret itself (plain text, as a generated secret is). Rotation follows
Secrets Manager's version stages: tokens signed with the ``AWSCURRENT`` or the ``AWSPREVIOUS`` value verify, so a
rotation never invalidates tokens minted just before it.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

from botocore.exceptions import ClientError

from lakesync.core.errors import StorageError

if TYPE_CHECKING:
    from mypy_boto3_secretsmanager import SecretsManagerClient

CURRENT = "AWSCURRENT"
PREVIOUS = "AWSPREVIOUS"


def secretsmanager_client(**kwargs: str) -> SecretsManagerClient:
    """A Secrets Manager client; ``kwargs`` (endpoint_url, region_name, credentials) override the environment."""
    import boto3

    from lakesync.aws.clients import CLIENT_CONFIG

    return boto3.client("secretsmanager", config=CLIENT_CONFIG, **kwargs)  # type: ignore[call-overload,no-any-return]


def fetch_jwt_secrets(client: SecretsManagerClient, secret_id: str) -> tuple[str, ...]:
    """The JWT secrets to verify with: ``(current,)`` or ``(current, previous)``.

    Args:
        client: A Secrets Manager client.
        secret_id: The secret's ARN or name.

    Raises:
        StorageError: the secret cannot be read, or its current version has no ``SecretString``.
    """
    current = _stage(client, secret_id, CURRENT)
    if current is None:
        raise StorageError(f"Secret {secret_id} has no {CURRENT} string value")
    previous = _stage(client, secret_id, PREVIOUS)
    return (current,) if previous is None or previous == current else (current, previous)


def _stage(client: SecretsManagerClient, secret_id: str, stage: str) -> str | None:
    try:
        response = client.get_secret_value(SecretId=secret_id, VersionStage=stage)
    except ClientError as exc:
        code = exc.response.get("Error", {}).get("Code", "Unknown")
        if stage == PREVIOUS and code == "ResourceNotFoundException":
            return None
        raise StorageError(f"Secrets Manager GetSecretValue ({stage}) failed: {code}") from exc
    return response.get("SecretString") or None
