"""What stalled the embedded default's real-time path, each gone: the stream reader waits for a commit, not for its
next poll (:meth:`lakesync.local.moto.MotoServer.on_write` wakes :class:`~lakesync.local.streams.LocalStreamSource`),
and moto keeps no DynamoDB object it no longer needs (its instance tracker held every item a Query copied out, which
made every full garbage collection longer)."""

from __future__ import annotations

import gc
import threading
import time
import uuid
from collections.abc import Iterator
from typing import Any

import boto3
import pytest

from lakesync.local.access import LocalCredentials
from lakesync.local.moto import MotoServer
from lakesync.local.streams import LocalStreamSource

pytestmark = pytest.mark.integration

FAKE = {"region_name": "us-east-1", "aws_access_key_id": "testing", "aws_secret_access_key": "testing"}


@pytest.fixture
def moto() -> Iterator[MotoServer]:
    credentials = LocalCredentials(FAKE["aws_access_key_id"], FAKE["aws_secret_access_key"])
    with MotoServer(credentials=credentials) as server:
        yield server


def _table(client: Any, stream: bool = True) -> str:
    name = f"rt-{uuid.uuid4().hex[:8]}"
    client.create_table(
        TableName=name,
        KeySchema=[{"AttributeName": "pk", "KeyType": "HASH"}],
        AttributeDefinitions=[{"AttributeName": "pk", "AttributeType": "S"}],
        BillingMode="PAY_PER_REQUEST",
        **({"StreamSpecification": {"StreamEnabled": True, "StreamViewType": "NEW_IMAGE"}} if stream else {}),
    )
    return name


def test_a_commit_wakes_the_stream_reader_long_before_its_next_poll(moto: MotoServer) -> None:
    client = boto3.client("dynamodb", endpoint_url=moto.endpoint_url, **FAKE)
    name = _table(client)
    arn = client.describe_table(TableName=name)["Table"]["LatestStreamArn"]
    handed: list[float] = []
    arrived = threading.Event()

    def handler(event: dict[str, Any], _context: Any) -> dict[str, Any]:
        handed.extend(time.monotonic() for _ in event["Records"])
        arrived.set()
        return {"batchItemFailures": []}

    # Given a stream reader that polls an idle stream once a minute, woken by every write to its table
    streams = boto3.client("dynamodbstreams", endpoint_url=moto.endpoint_url, **FAKE)
    source = LocalStreamSource(streams, arn, handler, poll_s=60.0).start()
    remove = moto.on_write(name, source.wake)
    try:
        assert source.drain(timeout_s=10)  # its first idle read is behind it: the next poll is a minute away

        # When a single item and a transaction are written
        written = time.monotonic()
        client.put_item(TableName=name, Item={"pk": {"S": "a"}})
        client.transact_write_items(TransactItems=[{"Put": {"TableName": name, "Item": {"pk": {"S": "b"}}}}])

        # Then both records reach the handler at once, not at the next poll
        assert arrived.wait(10)
        assert source.drain(timeout_s=10)
        assert len(handed) == 2 and max(handed) - written < 5.0
    finally:
        remove()
        source.stop()


def test_a_write_listener_hears_only_its_table_and_only_successful_writes(moto: MotoServer) -> None:
    client = boto3.client("dynamodb", endpoint_url=moto.endpoint_url, **FAKE)
    mine, other = _table(client, stream=False), _table(client, stream=False)
    heard: list[int] = []
    remove = moto.on_write(mine, lambda: heard.append(1))

    # When items are written to both tables in every way, and a conditional write to the listener's table fails
    client.put_item(TableName=mine, Item={"pk": {"S": "a"}})
    client.update_item(
        TableName=mine,
        Key={"pk": {"S": "a"}},
        UpdateExpression="SET n = :n",
        ExpressionAttributeValues={":n": {"N": "1"}},
    )
    client.batch_write_item(RequestItems={mine: [{"PutRequest": {"Item": {"pk": {"S": "b"}}}}]})
    client.delete_item(TableName=mine, Key={"pk": {"S": "b"}})
    client.put_item(TableName=other, Item={"pk": {"S": "a"}})
    client.transact_write_items(
        TransactItems=[
            {
                "ConditionCheck": {
                    "TableName": mine,
                    "Key": {"pk": {"S": "a"}},
                    "ConditionExpression": "attribute_exists(pk)",
                }
            },
            {"Put": {"TableName": other, "Item": {"pk": {"S": "c"}}}},
        ]
    )
    with pytest.raises(client.exceptions.ConditionalCheckFailedException):
        client.put_item(TableName=mine, Item={"pk": {"S": "a"}}, ConditionExpression="attribute_not_exists(pk)")
    client.get_item(TableName=mine, Key={"pk": {"S": "a"}})

    # Then it heard the four writes to its table, not the other table's, the condition check, the failed write or
    # the read; and nothing once removed
    assert len(heard) == 4
    remove()
    client.put_item(TableName=mine, Item={"pk": {"S": "d"}})
    assert len(heard) == 4


def test_moto_keeps_no_dynamodb_item_a_query_copied_out(moto: MotoServer) -> None:
    from moto.dynamodb.models.dynamo_type import Item
    from moto.s3.models import FakeKey

    client = boto3.client("dynamodb", endpoint_url=moto.endpoint_url, **FAKE)
    name = _table(client, stream=False)
    for i in range(20):
        client.put_item(TableName=name, Item={"pk": {"S": f"k{i}"}})

    def alive() -> int:
        gc.collect()
        return sum(1 for o in gc.get_objects() if type(o) is Item)

    # Given a table of 20 items
    before = alive()

    # When it is scanned and its items read a hundred times
    for _ in range(100):
        client.scan(TableName=name)
        client.get_item(TableName=name, Key={"pk": {"S": "k0"}})

    # Then no item more is alive (moto's instance tracker used to keep every copy), and S3's models are still tracked
    assert alive() <= before
    assert not getattr(Item, "instances_tracked", [])
    assert isinstance(FakeKey.instances_tracked, list)


def test_a_sampled_check_runs_off_the_request_and_still_switches_a_wrong_fast_path_off(
    moto: MotoServer, monkeypatch: pytest.MonkeyPatch
) -> None:
    from lakesync.local import moto_requests

    client = boto3.client("dynamodb", endpoint_url=moto.endpoint_url, **FAKE)
    name = _table(client, stream=False)
    client.put_item(TableName=name, Item={"pk": {"S": "a"}})
    # Given every response sampled after the first, and a fast path told to write a member the stock serializer
    # changes (capacity units: 1 becomes 1.0)
    monkeypatch.setattr(moto_requests._State, "disabled", None)
    monkeypatch.setattr(moto_requests._State, "counts", {})
    monkeypatch.setattr(moto_requests, "VERIFY_FIRST", 0)
    monkeypatch.setattr(moto_requests, "VERIFY_EVERY", 1)
    monkeypatch.setattr(
        moto_requests, "ITEM_MEMBERS", {**moto_requests.ITEM_MEMBERS, "BatchGetItem": ("Responses", "ConsumedCapacity")}
    )
    checked = threading.Event()
    same = moto_requests._same

    def slow_same(*args: Any) -> bool:
        assert checked.wait(10)  # the check waits: the answer must not
        return same(*args)

    monkeypatch.setattr(moto_requests, "_same", slow_same)

    # When such a response is written while its check is held back
    answer = client.batch_get_item(RequestItems={name: {"Keys": [{"pk": {"S": "a"}}]}}, ReturnConsumedCapacity="TOTAL")
    assert moto_requests.fast_responses_disabled() is None
    checked.set()
    moto_requests.verified()

    # Then the client had its answer before the check ran, and the check switched the fast path off
    assert answer["Responses"][name] == [{"pk": {"S": "a"}}]
    assert "BatchGetItem" in str(moto_requests.fast_responses_disabled())
    monkeypatch.setattr(moto_requests._State, "disabled", None)
