"""Shared fixtures for the whole suite."""

from __future__ import annotations

import json
from collections import Counter
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pytest

VECTORS = Path(__file__).parent / "vectors"


@pytest.hookimpl(optionalhook=True)
def pytest_xdist_node_collection_finished(node: Any, ids: list[str]) -> None:
    """Refuse to run tests that share a node id on pytest-xdist workers: xdist schedules by node id, so all but one of
    them would silently not run (give each its own id, as the hook below does for schemathesis' tests)."""
    shared = sorted(nodeid for nodeid, n in Counter(ids).items() if n > 1)
    if shared:
        pytest.exit(f"tests sharing a node id cannot run on xdist workers (give each its own): {shared}", returncode=4)


def pytest_collection_modifyitems(items: list[pytest.Item]) -> None:
    """Give each operation's test of a schemathesis ``parametrize`` its own node id, ``test[GET /health]`` as for a
    parametrized test: schemathesis names its items so, but pytest 9 builds their ids from the bare function name, and
    pytest-xdist would schedule one of them. (If pytest's ids change, the check above stops the run.)"""
    for item in items:
        label = getattr(item, "operation_label", None)
        node_id = getattr(item, "_id", None)
        if isinstance(label, str) and node_id is not None and node_id.params is None:
            item._id = node_id.with_params(label)


SHARED_SCOPES = ("tests/infra/",)
"""Directories whose modules share one session fixture that is costly to build (the CDK synth, ~25 s): each runs as
one scope, on one pytest-xdist worker, so the fixture is built once instead of once per worker."""


@pytest.hookimpl(optionalhook=True)
def pytest_xdist_make_scheduler(config: pytest.Config, log: Any) -> Any:
    """``--dist loadscope``, but with each of :data:`SHARED_SCOPES` scheduled as one scope."""
    if config.getoption("dist") != "loadscope":
        return None
    from xdist.scheduler import LoadScopeScheduling

    class SharedScopeScheduling(LoadScopeScheduling):  # type: ignore[misc]
        def _split_scope(self, nodeid: str) -> str:
            shared = next((d for d in SHARED_SCOPES if nodeid.startswith(d)), None)
            return shared if shared is not None else str(super()._split_scope(nodeid))

    return SharedScopeScheduling(config, log)


def load_vectors(name: str) -> dict[str, Any]:
    """One vector file of tests/vectors as a dict."""
    with (VECTORS / name).open(encoding="utf-8") as f:
        data: dict[str, Any] = json.load(f)
    return data


@pytest.fixture
def vectors() -> Any:
    return load_vectors


# -- AWS on a real moto server -----------------------------------------------------------------------------------
# One moto server per test session (server mode: the same HTTP path boto3 takes on AWS). Each test gets its own
# uniquely prefixed DynamoDB tables, so tests never see each other's data and need no reset. The server's credential
# is FAKE_AWS's key pair, which many modules spell out: it refuses requests signed with any other (as every
# MotoServer does with its own), so a client that is not handed the credential fails here too.

FAKE_AWS = {
    "region_name": "us-east-1",
    "aws_access_key_id": "testing",
    "aws_secret_access_key": "testing",
}


_CREDENTIAL_VARS = ("AWS_ACCESS_KEY_ID", "AWS_SECRET_ACCESS_KEY", "AWS_SESSION_TOKEN")
_seen_credentials: list[tuple[str | None, ...]] = []


def _follow_environment_credentials() -> None:
    """Make boto3's default session re-read its credentials when the environment changed them since it last read.

    The session keeps the first credentials it resolves for the life of the process (right on Lambda, where they never
    change); tests set them per test (``monkeypatch``), and a moto server refuses any but its own. Only the cached
    credentials are dropped: the session, its loaded models and its registered event handlers stay.
    """
    import os

    import boto3

    current = tuple(os.environ.get(name) for name in _CREDENTIAL_VARS)
    if _seen_credentials != [current] and boto3.DEFAULT_SESSION is not None:
        boto3.DEFAULT_SESSION._session._credentials = None
    _seen_credentials[:] = [current]


@pytest.hookimpl(tryfirst=True)
def pytest_runtest_setup(item: pytest.Item) -> None:
    _follow_environment_credentials()


@pytest.hookimpl(tryfirst=True)
def pytest_runtest_call(item: pytest.Item) -> None:
    _follow_environment_credentials()


@pytest.fixture(scope="session")
def moto_endpoint() -> Any:
    from lakesync.local.access import LocalCredentials
    from lakesync.local.moto import MotoServer

    credentials = LocalCredentials(FAKE_AWS["aws_access_key_id"], FAKE_AWS["aws_secret_access_key"])
    with MotoServer(credentials=credentials) as server:
        yield server.endpoint_url
    from lakesync.local.moto_requests import fast_responses_disabled

    assert fast_responses_disabled() is None, (
        f"moto's fast responses differed from its own: {fast_responses_disabled()}"
    )


@pytest.fixture
def dynamodb_client(moto_endpoint: str) -> Any:
    import boto3

    return boto3.client("dynamodb", endpoint_url=moto_endpoint, **FAKE_AWS)


@pytest.fixture
def dynamodb_tables(dynamodb_client: Any) -> Any:
    """Fresh LakeSync tables with a unique prefix; yields their TableNames."""
    import uuid

    from lakesync.aws.table_setup import create_tables
    from lakesync.aws.tables import TableNames

    names = TableNames.with_prefix(f"t{uuid.uuid4().hex[:10]}")
    create_tables(dynamodb_client, names)
    return names


@pytest.fixture(scope="module")
def module_dynamodb(moto_endpoint: str) -> Any:
    """``(client, TableNames)`` of fresh LakeSync tables shared by one test module."""
    import uuid

    import boto3

    from lakesync.aws.table_setup import create_tables
    from lakesync.aws.tables import TableNames

    client = boto3.client("dynamodb", endpoint_url=moto_endpoint, **FAKE_AWS)
    names = TableNames.with_prefix(f"c{uuid.uuid4().hex[:10]}")
    create_tables(client, names)
    return client, names


@pytest.fixture
def gw() -> str:
    """A gateway id no other test uses (every port keys its data by gateway, so tests never see each other's data)."""
    import uuid

    return f"gw-{uuid.uuid4().hex[:12]}"


@dataclass
class ClaimCheck:
    """A claim-check bucket and a materialisation queue (with its DLQ, maxReceiveCount 5) on the moto server."""

    endpoint: str
    bucket: str
    queue_url: str
    dead_letter_url: str
    s3: Any
    sqs: Any

    def publish_config(self, *, publish_all: bool = True, attempts: int = 3) -> Any:
        from lakesync.aws.publish import PublishConfig

        return PublishConfig(
            self.bucket,
            self.queue_url,
            publish_all=publish_all,
            endpoint_url=self.endpoint,
            region=FAKE_AWS["region_name"],
            access_key_id=FAKE_AWS["aws_access_key_id"],
            secret_access_key=FAKE_AWS["aws_secret_access_key"],
            attempts=attempts,
        )

    def receive_all(self, queue_url: str | None = None) -> list[dict[str, Any]]:
        """Every message now on the queue (received and deleted)."""
        url = queue_url or self.queue_url
        out: list[dict[str, Any]] = []
        while True:
            got = self.sqs.receive_message(QueueUrl=url, MaxNumberOfMessages=10, WaitTimeSeconds=0).get("Messages", [])
            if not got:
                return out
            out.extend(got)
            self.sqs.delete_message_batch(
                QueueUrl=url, Entries=[{"Id": str(i), "ReceiptHandle": m["ReceiptHandle"]} for i, m in enumerate(got)]
            )


@pytest.fixture
def claim_check(moto_endpoint: str) -> ClaimCheck:
    """A fresh bucket and queue pair for one test."""
    import uuid

    import boto3

    suffix = uuid.uuid4().hex[:10]
    s3 = boto3.client("s3", endpoint_url=moto_endpoint, **FAKE_AWS)
    sqs = boto3.client("sqs", endpoint_url=moto_endpoint, **FAKE_AWS)
    bucket = f"claim-{suffix}"
    s3.create_bucket(Bucket=bucket)
    dlq = sqs.create_queue(QueueName=f"dlq-{suffix}")["QueueUrl"]
    dlq_arn = sqs.get_queue_attributes(QueueUrl=dlq, AttributeNames=["QueueArn"])["Attributes"]["QueueArn"]
    queue = sqs.create_queue(
        QueueName=f"mat-{suffix}",
        Attributes={
            "VisibilityTimeout": "30",
            "RedrivePolicy": json.dumps({"deadLetterTargetArn": dlq_arn, "maxReceiveCount": "5"}),
        },
    )["QueueUrl"]
    return ClaimCheck(moto_endpoint, bucket, queue, dlq, s3, sqs)
