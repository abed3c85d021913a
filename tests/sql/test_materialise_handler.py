"""The materialise function (functions/materialise.py) on the moto server when one job of a batch cannot be read:
the batch item failures it reports are exactly that job's message, and the other jobs are applied."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest

from lakesync.core.schema import TableSchema
from lakesync.gateway.deps import GatewayDeps
from tests.functions.conftest import aws_env  # noqa: F401 (fixture)
from tests.functions.test_fn_materialise import (  # noqa: F401 (fixtures)
    add_destination,
    deps,
    env,
    expected_rows,
    history,
    invoke,
    publish,
    rows_at,
    schema,
    sqlite_url,
)

pytestmark = pytest.mark.integration


def test_a_payload_s3_will_not_serve_fails_its_message_alone(
    env: None,  # noqa: F811
    deps: GatewayDeps,  # noqa: F811
    schema: TableSchema,  # noqa: F811
    claim_check: Any,
    dynamodb_client: Any,
    dynamodb_tables: Any,
    tmp_path: Path,
) -> None:
    # Given a batch of jobs, one of whose payloads was archived to Glacier (S3 answers InvalidObjectState, not 404)
    url = sqlite_url(tmp_path, "a.db")
    add_destination(deps, "lite", url)
    history(deps, 12)
    messages = publish(deps, claim_check, dynamodb_client, dynamodb_tables, size=6)
    assert len(messages) >= 3
    cold = messages[1]
    bucket, key = claim_check.bucket, _payload_key(cold)
    original = claim_check.s3.get_object(Bucket=bucket, Key=key)["Body"].read()
    claim_check.s3.put_object(Bucket=bucket, Key=key, Body=original, StorageClass="GLACIER")

    # When the function gets the batch
    failed = invoke(messages)

    # Then only that job's message is reported failed (the others are not redelivered with it)
    assert failed == {cold["MessageId"]}
    # And once the payload is readable again, its redelivery completes the fold
    claim_check.s3.put_object(Bucket=bucket, Key=key, Body=original)
    assert invoke([cold]) == set()
    assert rows_at(url, schema) == expected_rows(deps, schema)


def _payload_key(message: dict[str, Any]) -> str:
    return str(json.loads(message["Body"])["payload"]["key"])
