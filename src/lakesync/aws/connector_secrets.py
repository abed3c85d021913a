"""Connector credentials in AWS Secrets Manager (:class:`lakesync.connectors.secrets.SecretStore`).

Registration stores a plaintext credential as the secret ``{prefix}/{gateway}/{connector}/{field}`` (tagged
``lakesync:gateway`` and ``lakesync:connector``) and keeps its ARN; unregistration deletes it at once
(``ForceDeleteWithoutRecovery``, so the name can be registered again). Errors name the secret, never its value.
"""

from __future__ import annotations

import threading
from collections.abc import Callable
from typing import TYPE_CHECKING

from botocore.exceptions import ClientError

from lakesync.aws.errors import error_code
from lakesync.connectors.secrets import SecretNotFoundError
from lakesync.core.errors import AdapterError

if TYPE_CHECKING:
    from mypy_boto3_secretsmanager import SecretsManagerClient


class SecretsManagerSecretStore:
    """See the module docstring. ``client`` makes the Secrets Manager client on first use."""

    def __init__(
        self, client: Callable[[], SecretsManagerClient], *, kms_key_id: str | None = None, account: str | None = None
    ) -> None:
        self._factory = client
        self._client: SecretsManagerClient | None = None
        self._lock = threading.Lock()
        self._kms = kms_key_id
        self._account = account

    def home(self) -> tuple[str | None, str | None]:
        """``(region, account)`` a referenced ARN must belong to: the client's region, and the account when known."""
        return self._sm().meta.region_name, self._account

    def _sm(self) -> SecretsManagerClient:
        with self._lock:
            if self._client is None:
                self._client = self._factory()
            return self._client

    def put_secret(self, name: str, value: str) -> str:
        parts = name.split("/")
        tags = [{"Key": "lakesync:connector", "Value": parts[-2] if len(parts) >= 2 else name}]
        if len(parts) >= 3:
            tags.append({"Key": "lakesync:gateway", "Value": parts[-3]})
        client = self._sm()
        try:
            kwargs = {"KmsKeyId": self._kms} if self._kms else {}
            return client.create_secret(Name=name, SecretString=value, Tags=tags, **kwargs)["ARN"]  # type: ignore[arg-type]
        except ClientError as exc:
            if error_code(exc) != "ResourceExistsException":
                raise AdapterError(f"Secrets Manager could not create secret {name!r}: {error_code(exc)}") from exc
        try:
            return client.put_secret_value(SecretId=name, SecretString=value)["ARN"]
        except ClientError as exc:
            raise AdapterError(f"Secrets Manager could not update secret {name!r}: {error_code(exc)}") from exc

    def get_secret(self, secret_id: str) -> str:
        try:
            out = self._sm().get_secret_value(SecretId=secret_id)
        except ClientError as exc:
            if error_code(exc) == "ResourceNotFoundException":
                raise SecretNotFoundError(f"Secret {secret_id!r} not found") from exc
            raise AdapterError(f"Secret {secret_id!r} cannot be read: {error_code(exc)}") from exc
        value = out.get("SecretString")
        if value is None:
            raise AdapterError(f"Secret {secret_id!r} has no string value")
        return value

    def delete_secret(self, secret_id: str) -> None:
        try:
            self._sm().delete_secret(SecretId=secret_id, ForceDeleteWithoutRecovery=True)
        except ClientError as exc:
            if error_code(exc) != "ResourceNotFoundException":
                raise AdapterError(f"Secrets Manager could not delete secret {secret_id!r}: {error_code(exc)}") from exc
