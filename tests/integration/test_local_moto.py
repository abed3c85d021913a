"""MotoServer: moto in server mode inside the test process, reached over real HTTP by boto3 clients built from
the endpoint it hands out, reset through its HTTP API, and never touching os.environ.
"""

from __future__ import annotations

import os
import socket
import time
import uuid
from typing import Any

import boto3
import pytest

from lakesync.local.moto import AwsEndpoint, MotoServer

pytestmark = pytest.mark.integration


@pytest.fixture(scope="module")
def running_server():
    with MotoServer() as server:
        yield server


@pytest.fixture
def moto_server(running_server):
    yield running_server
    running_server.reset()


def _create_table(client, name: str) -> None:
    client.create_table(
        TableName=name,
        KeySchema=[{"AttributeName": "pk", "KeyType": "HASH"}],
        AttributeDefinitions=[{"AttributeName": "pk", "AttributeType": "S"}],
        BillingMode="PAY_PER_REQUEST",
    )


def test_moto_server_given_port_zero_then_boto3_creates_and_uses_a_table_over_http(moto_server):
    environ_before = dict(os.environ)
    dynamodb = boto3.client("dynamodb", **moto_server.aws().client_kwargs())

    _create_table(dynamodb, "deltas")
    dynamodb.put_item(TableName="deltas", Item={"pk": {"S": "a"}, "v": {"N": "1"}})
    item = dynamodb.get_item(TableName="deltas", Key={"pk": {"S": "a"}}, ConsistentRead=True)["Item"]

    assert moto_server.port > 0
    assert moto_server.endpoint_url == f"http://127.0.0.1:{moto_server.port}"
    assert item == {"pk": {"S": "a"}, "v": {"N": "1"}}
    assert dict(os.environ) == environ_before


def test_moto_server_given_reset_then_tables_are_gone(moto_server):
    dynamodb = boto3.client("dynamodb", **moto_server.aws().client_kwargs())
    _create_table(dynamodb, "to-be-reset")
    assert "to-be-reset" in dynamodb.list_tables()["TableNames"]

    moto_server.reset()

    assert dynamodb.list_tables()["TableNames"] == []


def test_moto_server_given_env_then_a_child_style_session_reaches_the_server(moto_server):
    env = moto_server.aws().env()
    session = boto3.session.Session(
        aws_access_key_id=env["AWS_ACCESS_KEY_ID"],
        aws_secret_access_key=env["AWS_SECRET_ACCESS_KEY"],
        region_name=env["AWS_DEFAULT_REGION"],
    )
    sqs = session.client("sqs", endpoint_url=env["AWS_ENDPOINT_URL"])

    url = sqs.create_queue(QueueName="materialise")["QueueUrl"]

    assert env["AWS_REGION"] == env["AWS_DEFAULT_REGION"] == "us-east-1"
    assert env["AWS_ACCOUNT_ID_ENDPOINT_MODE"] == "disabled"
    assert url.endswith("/materialise")
    assert sqs.list_queues()["QueueUrls"] == [url]


def test_aws_endpoint_given_defaults_then_fake_credentials_and_us_east_1():
    endpoint = AwsEndpoint("http://127.0.0.1:1")

    assert endpoint.client_kwargs() == {
        "endpoint_url": "http://127.0.0.1:1",
        "region_name": "us-east-1",
        "aws_access_key_id": "testing",
        "aws_secret_access_key": "testing",
    }


def test_moto_server_given_taken_port_then_start_fails_fast_instead_of_hanging():
    with socket.socket() as holder:
        holder.bind(("127.0.0.1", 0))
        holder.listen()
        server = MotoServer(port=holder.getsockname()[1])

        started = time.monotonic()
        with pytest.raises(OSError):
            server.start()

    assert time.monotonic() - started < 5
    with pytest.raises(RuntimeError):
        _ = server.endpoint_url


def test_moto_server_given_stop_then_port_is_released():
    server = MotoServer().start()
    port = server.port

    server.stop()
    server.stop()

    with pytest.raises(ConnectionRefusedError), socket.create_connection(("127.0.0.1", port), timeout=2):
        pass


def _items(client: Any, table: str) -> list[dict[str, Any]]:
    return sorted(client.scan(TableName=table, ConsistentRead=True)["Items"], key=repr)


def test_moto_server_cancelled_transaction_leaves_every_table_as_it_was(moto_server):
    # Given a table with a hash key, one with a hash and range key, and items in both, on the patched server
    client = boto3.client("dynamodb", **moto_server.aws().client_kwargs())
    suffix = uuid.uuid4().hex[:8]
    heads, log = f"heads-{suffix}", f"log-{suffix}"
    client.create_table(
        TableName=heads,
        KeySchema=[{"AttributeName": "k", "KeyType": "HASH"}],
        AttributeDefinitions=[{"AttributeName": "k", "AttributeType": "S"}],
        BillingMode="PAY_PER_REQUEST",
    )
    client.create_table(
        TableName=log,
        KeySchema=[{"AttributeName": "p", "KeyType": "HASH"}, {"AttributeName": "s", "KeyType": "RANGE"}],
        AttributeDefinitions=[
            {"AttributeName": "p", "AttributeType": "S"},
            {"AttributeName": "s", "AttributeType": "N"},
        ],
        BillingMode="PAY_PER_REQUEST",
    )
    client.put_item(TableName=heads, Item={"k": {"S": "a"}, "n": {"N": "1"}, "m": {"M": {"x": {"L": []}}}})
    client.put_item(TableName=heads, Item={"k": {"S": "taken"}})
    client.put_item(TableName=log, Item={"p": {"S": "a"}, "s": {"N": "1"}, "d": {"S": "one"}})
    before = _items(client, heads), _items(client, log)

    # When a transaction updates an item in place, puts new items and replaces one, then fails its last condition
    with pytest.raises(client.exceptions.TransactionCanceledException):
        client.transact_write_items(
            TransactItems=[
                {
                    "Update": {
                        "TableName": heads,
                        "Key": {"k": {"S": "a"}},
                        "UpdateExpression": "SET n = :n, m.x = list_append(m.x, :l)",
                        "ExpressionAttributeValues": {":n": {"N": "2"}, ":l": {"L": [{"S": "y"}]}},
                    }
                },
                {"Put": {"TableName": log, "Item": {"p": {"S": "a"}, "s": {"N": "2"}, "d": {"S": "two"}}}},
                {"Put": {"TableName": log, "Item": {"p": {"S": "a"}, "s": {"N": "1"}, "d": {"S": "changed"}}}},
                {
                    "Put": {
                        "TableName": heads,
                        "Item": {"k": {"S": "taken"}, "v": {"N": "9"}},
                        "ConditionExpression": "attribute_not_exists(k)",
                    }
                },
            ]
        )

    # Then both tables hold exactly what they held before
    assert (_items(client, heads), _items(client, log)) == before
    # And the same transaction without the failing item applies in full
    client.transact_write_items(
        TransactItems=[
            {
                "Update": {
                    "TableName": heads,
                    "Key": {"k": {"S": "a"}},
                    "UpdateExpression": "SET n = :n",
                    "ExpressionAttributeValues": {":n": {"N": "2"}},
                }
            },
            {"Put": {"TableName": log, "Item": {"p": {"S": "a"}, "s": {"N": "2"}, "d": {"S": "two"}}}},
        ]
    )
    assert client.get_item(TableName=heads, Key={"k": {"S": "a"}})["Item"]["n"] == {"N": "2"}
    assert len(_items(client, log)) == 2


def test_moto_fast_transactions_are_installed_by_the_server(moto_server):
    from moto.dynamodb import models

    from lakesync.local.moto_fast import install_fast_transactions

    assert install_fast_transactions() is True
    assert models.DynamoDBBackend.transact_write_items.__module__ == "lakesync.local.moto_fast"


def test_moto_server_cancelled_transaction_leaves_no_stream_record_and_the_stream_goes_on(moto_server):
    # Given a streamed table (as the deltas table is: the broadcaster reads it) read from its end
    client = boto3.client("dynamodb", **moto_server.aws().client_kwargs())
    streams = boto3.client("dynamodbstreams", **moto_server.aws().client_kwargs())
    table, arn = _streamed_table(client)
    client.put_item(TableName=table, Item={"k": {"S": "taken"}})
    shard = streams.describe_stream(StreamArn=arn)["StreamDescription"]["Shards"][0]["ShardId"]
    iterator = streams.get_shard_iterator(StreamArn=arn, ShardId=shard, ShardIteratorType="LATEST")["ShardIterator"]

    # When a transaction puts an item, then fails its condition (a push losing its commit race)
    with pytest.raises(client.exceptions.TransactionCanceledException):
        client.transact_write_items(
            TransactItems=[
                {"Put": {"TableName": table, "Item": {"k": {"S": "phantom"}}}},
                {
                    "Put": {
                        "TableName": table,
                        "Item": {"k": {"S": "taken"}},
                        "ConditionExpression": "attribute_not_exists(k)",
                    }
                },
            ]
        )
    # and a later write commits
    client.put_item(TableName=table, Item={"k": {"S": "committed"}})

    # Then the stream carries the committed write only, to the iterator taken before the cancelled transaction
    page = streams.get_records(ShardIterator=iterator)
    keys = [r["dynamodb"]["Keys"]["k"]["S"] for r in page["Records"]]
    assert keys == ["committed"]


def _streamed_table(client: Any) -> tuple[str, str]:
    table = f"streamed-{uuid.uuid4().hex[:8]}"
    arn = client.create_table(
        TableName=table,
        KeySchema=[{"AttributeName": "k", "KeyType": "HASH"}],
        AttributeDefinitions=[{"AttributeName": "k", "AttributeType": "S"}],
        BillingMode="PAY_PER_REQUEST",
        StreamSpecification={"StreamEnabled": True, "StreamViewType": "NEW_IMAGE"},
    )["TableDescription"]["LatestStreamArn"]
    return table, arn


def test_moto_server_stream_keeps_bounded_records_and_iterators(moto_server, monkeypatch):
    from moto.dynamodbstreams.models import dynamodbstreams_backends

    from lakesync.local import moto_fast
    from lakesync.local.events import DEFAULT_ACCOUNT_ID

    # Given a streamed table whose stream keeps only the last 40 records (20,000 in use), and a reader at its start
    monkeypatch.setattr(moto_fast, "STREAM_RECORDS_KEPT", 40)
    client = boto3.client("dynamodb", **moto_server.aws().client_kwargs())
    streams = boto3.client("dynamodbstreams", **moto_server.aws().client_kwargs())
    table, arn = _streamed_table(client)
    shard = streams.describe_stream(StreamArn=arn)["StreamDescription"]["Shards"][0]["ShardId"]
    behind = streams.get_shard_iterator(StreamArn=arn, ShardId=shard, ShardIteratorType="TRIM_HORIZON")
    backend = dynamodbstreams_backends[DEFAULT_ACCOUNT_ID]["us-east-1"]

    # When 100 items are written and the stream is polled 50 times from the end
    for i in range(100):
        client.put_item(TableName=table, Item={"k": {"S": f"i{i:03d}"}})
    iterator = streams.get_shard_iterator(StreamArn=arn, ShardId=shard, ShardIteratorType="LATEST")["ShardIterator"]
    before = len(backend.shard_iterators)
    for _ in range(50):
        iterator = streams.get_records(ShardIterator=iterator)["NextShardIterator"]

    # Then polling leaves no iterators behind, and the reader that fell behind skips to the records still kept
    assert len(backend.shard_iterators) <= before
    page = streams.get_records(ShardIterator=behind["ShardIterator"], Limit=1000)
    keys = [r["dynamodb"]["Keys"]["k"]["S"] for r in page["Records"]]
    assert 40 <= len(keys) < 100 and keys == sorted(keys) and keys[-1] == "i099"
