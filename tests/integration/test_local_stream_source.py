"""The embedded default's stream event source on the moto server: what it hands the handler, and ``drain``, which
returns once every record written before it has been handed on (what the demo waits for before opening sockets)."""

from __future__ import annotations

import threading
import time
import uuid
from collections.abc import Iterator
from typing import Any

import boto3
import pytest

from lakesync.local.streams import LocalStreamSource

pytestmark = pytest.mark.integration

FAKE = {"region_name": "us-east-1", "aws_access_key_id": "testing", "aws_secret_access_key": "testing"}


class SlowHandler:
    """Records the keys of the records it is handed, taking ``delay_s`` per batch."""

    def __init__(self, delay_s: float) -> None:
        self.delay_s = delay_s
        self.keys: list[str] = []
        self.release = threading.Event()
        self.release.set()

    def __call__(self, event: dict[str, Any], context: Any) -> dict[str, Any]:
        self.release.wait()
        time.sleep(self.delay_s)
        self.keys.extend(r["dynamodb"]["Keys"]["pk"]["S"] for r in event["Records"])
        return {"batchItemFailures": []}


@pytest.fixture
def table(moto_endpoint: str) -> Iterator[tuple[Any, str, str]]:
    client = boto3.client("dynamodb", endpoint_url=moto_endpoint, **FAKE)
    name = f"stream-{uuid.uuid4().hex[:8]}"
    client.create_table(
        TableName=name,
        KeySchema=[{"AttributeName": "pk", "KeyType": "HASH"}],
        AttributeDefinitions=[{"AttributeName": "pk", "AttributeType": "S"}],
        BillingMode="PAY_PER_REQUEST",
        StreamSpecification={"StreamEnabled": True, "StreamViewType": "NEW_IMAGE"},
    )
    arn = client.describe_table(TableName=name)["Table"]["LatestStreamArn"]
    yield client, name, arn
    client.delete_table(TableName=name)


def _source(moto_endpoint: str, arn: str, handler: SlowHandler) -> LocalStreamSource:
    streams = boto3.client("dynamodbstreams", endpoint_url=moto_endpoint, **FAKE)
    return LocalStreamSource(streams, arn, handler, batch_size=2).start()


def test_drain_returns_once_every_record_written_before_it_was_handed_on(
    moto_endpoint: str, table: tuple[Any, str, str]
) -> None:
    client, name, arn = table
    handler = SlowHandler(delay_s=0.2)
    source = _source(moto_endpoint, arn, handler)
    try:
        written = [f"k{i}" for i in range(5)]
        for key in written:
            client.put_item(TableName=name, Item={"pk": {"S": key}})
        assert source.drain(timeout_s=30)
        assert handler.keys == written  # three slow batches, all handed on before drain returned
        assert source.delivered == len(written)
    finally:
        source.stop()


def test_drain_reports_a_stream_it_could_not_catch_up_with(moto_endpoint: str, table: tuple[Any, str, str]) -> None:
    client, name, arn = table
    handler = SlowHandler(delay_s=0)
    handler.release.clear()
    source = _source(moto_endpoint, arn, handler)
    try:
        client.put_item(TableName=name, Item={"pk": {"S": "held"}})
        assert not source.drain(timeout_s=0.5)  # the handler is holding the batch
        handler.release.set()
        assert source.drain(timeout_s=30)
        assert handler.keys == ["held"]
    finally:
        handler.release.set()
        source.stop()
