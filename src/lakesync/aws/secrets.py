"""The JWT signing secret in AWS Secrets Manager.

The secret's ``SecretString`` is the HMAC secret itself (plain text, as a generated secret is). Rotation follows
Secrets Manager's version stages: tokens signed with the ``AWSCURRENT`` or the ``AWSPREVIOUS`` value verify, so a
rotation never invalidates tokens minted just before it.
"""

from __future__ import annotations

import threading
import time
from collections.abc import Callable
from typing import TYPE_CHECKING

from botocore.exceptions import ClientError

from lakesync.auth import check_signing_key
from lakesync.aws.errors import error_code
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
        code = error_code(exc)
        if stage == PREVIOUS and code == "ResourceNotFoundException":
            return None
        raise StorageError(f"Secrets Manager GetSecretValue ({stage}) failed: {code}") from exc
    return response.get("SecretString") or None


def load_jwt_secrets(secret_id: str) -> tuple[str, ...]:
    """:func:`fetch_jwt_secrets` with a client made from the environment; every value must be a usable HS256 key.

    Raises:
        StorageError: unreadable, or a value shorter than :data:`~lakesync.auth.MIN_KEY_BYTES` (32).
    """
    secrets = fetch_jwt_secrets(secretsmanager_client(), secret_id)
    for stage, secret in zip((CURRENT, PREVIOUS), secrets, strict=False):
        try:
            check_signing_key(secret, f"JWT secret {secret_id} ({stage})")
        except ValueError as exc:
            raise StorageError(str(exc)) from None
    return secrets


class CachedSecrets:
    """Secrets re-read at most every ``ttl_s`` seconds, so a rotation reaches warm functions; thread-safe.

    A failed refresh keeps the last value (``on_stale`` is told) when there is one, and raises when there is none.
    """

    def __init__(
        self,
        load: Callable[[], tuple[str, ...]],
        *,
        ttl_s: float,
        clock: Callable[[], float] = time.monotonic,
        on_stale: Callable[[], None] | None = None,
    ) -> None:
        self._load = load
        self._ttl_s = ttl_s
        self._clock = clock
        self._on_stale = on_stale
        self._lock = threading.Lock()
        self._value: tuple[str, ...] | None = None
        self._until = 0.0

    def get(self) -> tuple[str, ...]:
        """The secrets, primary first.

        Raises:
            StorageError: they cannot be read and no earlier value is cached.
        """
        with self._lock:
            if self._value is not None and self._until > self._clock():
                return self._value
            try:
                self._value = self._load()
            except StorageError:
                if self._value is None:
                    raise
                if self._on_stale is not None:
                    self._on_stale()
            self._until = self._clock() + self._ttl_s
            return self._value
