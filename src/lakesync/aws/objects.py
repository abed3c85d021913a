"""S3 as the :class:`~lakesync.ports.ObjectStore`: whole objects in one bucket.

S3 is strongly consistent for reads after writes and for listings, so a reader that finds a key written last (a
checkpoint's ``latest.json``) sees every object written before it. Failures other than a missing key become
:class:`~lakesync.core.errors.StorageError` (a 500 at the edge, with the details logged, never sent).
"""

from __future__ import annotations

from typing import TYPE_CHECKING

import boto3
from botocore.exceptions import BotoCoreError, ClientError

from lakesync.aws.clients import CLIENT_CONFIG
from lakesync.aws.errors import error_code
from lakesync.core.errors import StorageError

if TYPE_CHECKING:
    from mypy_boto3_s3 import S3Client

_MISSING = frozenset({"NoSuchKey", "404", "NotFound"})


def s3_client(**kwargs: str) -> S3Client:
    """An S3 client; ``kwargs`` (endpoint_url, region_name, credentials) override the environment."""
    return boto3.client("s3", config=CLIENT_CONFIG, **kwargs)  # type: ignore[call-overload,no-any-return]


class S3ObjectStore:
    """Objects of one bucket; the boto3 client is made on first use unless one is given."""

    def __init__(self, bucket: str, client: S3Client | None = None) -> None:
        self.bucket = bucket
        self._client = client

    @property
    def client(self) -> S3Client:
        """The S3 client (created on first use)."""
        if self._client is None:
            self._client = s3_client()
        return self._client

    def put(self, key: str, data: bytes, content_type: str = "application/octet-stream") -> None:
        """Write the object ``key``.

        Raises:
            StorageError: S3 refused or failed.
        """
        try:
            self.client.put_object(Bucket=self.bucket, Key=key, Body=data, ContentType=content_type)
        except (ClientError, BotoCoreError) as exc:
            raise StorageError(f"S3 PutObject s3://{self.bucket}/{key} failed: {error_code(exc)}") from exc

    def get(self, key: str) -> bytes | None:
        """The object's bytes, or ``None`` if it does not exist.

        Raises:
            StorageError: S3 refused or failed for another reason.
        """
        try:
            response = self.client.get_object(Bucket=self.bucket, Key=key)
            return response["Body"].read()
        except ClientError as exc:
            if error_code(exc) in _MISSING:
                return None
            raise StorageError(f"S3 GetObject s3://{self.bucket}/{key} failed: {error_code(exc)}") from exc
        except BotoCoreError as exc:
            raise StorageError(f"S3 GetObject s3://{self.bucket}/{key} failed: {error_code(exc)}") from exc

    def list_keys(self, prefix: str) -> list[str]:
        """Every key under ``prefix``, in S3's (UTF-8 byte) order.

        Raises:
            StorageError: S3 refused or failed.
        """
        keys: list[str] = []
        try:
            for page in self.client.get_paginator("list_objects_v2").paginate(Bucket=self.bucket, Prefix=prefix):
                keys.extend(obj["Key"] for obj in page.get("Contents", []) if "Key" in obj)
        except (ClientError, BotoCoreError) as exc:
            raise StorageError(f"S3 ListObjectsV2 s3://{self.bucket}/{prefix} failed: {error_code(exc)}") from exc
        return keys


def create_bucket(client: S3Client, bucket: str) -> None:
    """Create ``bucket`` in the client's region unless this account already owns it (local setups and tests)."""
    region = client.meta.region_name
    try:
        if region in (None, "us-east-1"):
            client.create_bucket(Bucket=bucket)
        else:
            client.create_bucket(Bucket=bucket, CreateBucketConfiguration={"LocationConstraint": region})  # type: ignore[typeddict-item]
    except ClientError as exc:
        if error_code(exc) != "BucketAlreadyOwnedByYou":
            raise
