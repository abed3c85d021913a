"""The deltas table's stream as the broadcaster reads it (:mod:`lakesync.aws.log_stream`), on real records: pushes
committed through the DynamoDB adapter on the moto server, the stream read with boto3's ``dynamodbstreams``, each
record put in Lambda's event form and decoded back into the entries the log holds."""

from __future__ import annotations

import base64
import time
import uuid
from typing import Any

import boto3
import pytest
from aws_lambda_powertools.utilities.data_classes import DynamoDBStreamEvent

from lakesync.aws.action_store import DynamoDBActionStore
from lakesync.aws.buffer.log_chunks import FIRST_KEYED
from lakesync.aws.buffer.store import DynamoDBBufferStore
from lakesync.aws.config_store import DynamoDBConfigStore
from lakesync.aws.log_stream import StreamRecordError, decode_record, decode_stream_records
from lakesync.aws.table_setup import create_tables
from lakesync.aws.tables import TableNames
from lakesync.core.log import ShardId
from lakesync.core.messages import SyncPush
from lakesync.gateway import push as push_service
from lakesync.gateway.deps import GatewayDeps, GatewaySettings
from tests.ddb_stream import Stream

FAKE = {"region_name": "us-east-1", "aws_access_key_id": "testing", "aws_secret_access_key": "testing"}


def sync_push(client: str, deltas: list[tuple[str, str, dict[str, Any]]]) -> SyncPush:
    hlc = int(time.time() * 1000) << 16
    return SyncPush.from_json(
        {
            "clientId": client,
            "deltas": [
                {
                    "op": op,
                    "table": "todos",
                    "rowId": row,
                    "clientId": client,
                    "columns": [{"column": k, "value": v} for k, v in cols.items()],
                    "hlc": str(hlc + i),
                    "deltaId": uuid.uuid4().hex,
                }
                for i, (op, row, cols) in enumerate(deltas)
            ],
        }
    )


@pytest.fixture(scope="module")
def log(moto_endpoint: str) -> Any:
    """Tables on the moto server, three gateways' pushes committed, and the stream's records."""
    client = boto3.client("dynamodb", endpoint_url=moto_endpoint, **FAKE)
    names = TableNames.with_prefix(f"ls{uuid.uuid4().hex[:10]}")
    create_tables(client, names)
    stream = Stream(moto_endpoint, client, names.deltas)
    settings = GatewaySettings(gateway_ids=frozenset({"g1", "g2", "g3"}), chunk_deltas=5)
    for gateway in ("g1", "g2", "g3"):
        deps = GatewayDeps(
            buffer=DynamoDBBufferStore(client, names),
            config=DynamoDBConfigStore(client, names),
            actions=DynamoDBActionStore(client, names),
            settings=settings,
        )
        inserts = [("INSERT", f"r{i}", {"title": f"t{i}", "done": False}) for i in range(12)]  # 3 chunks of <= 5
        push_service.push(deps, gateway, sync_push("alice", inserts), client_id="alice")
        push_service.push(
            deps,
            gateway,
            sync_push("bob", [("UPDATE", "r1", {"done": True}), ("DELETE", "r2", {})]),
            client_id="bob",
        )
    records = stream.read()
    return {"client": client, "names": names, "stream": stream, "records": records, "buffer": deps.buffer}


def test_each_commit_chunk_streams_one_insert_in_lambdas_form(log: Any) -> None:
    # Given the stream after three gateways' pushes (12 inserts in chunks of 5, then an update and a delete)
    records = log["records"]
    # Then each chunk is one INSERT, whose image Powertools reads as Lambda delivers it (binary as base64 text)
    assert [r["eventName"] for r in records] == ["INSERT"] * 12
    event = DynamoDBStreamEvent({"Records": records})
    for record in event.records:
        assert record.dynamodb is not None and record.dynamodb.new_image is not None
        assert base64.b64decode(record.dynamodb.new_image["z"], validate=True)[:1] == b"\x78"  # zlib's header
        assert record.event_source_arn == log["stream"].arn


def test_records_decode_to_the_entries_the_log_holds_in_order_by_gateway(log: Any) -> None:
    # When the records are decoded
    by_gateway = decode_stream_records(log["records"])
    # Then each gateway gets exactly its log, in sequence order, row images included
    buffer = log["buffer"]
    assert set(by_gateway) == {"g1", "g2", "g3"}
    for gateway, entries in by_gateway.items():
        stored = buffer.read_log(ShardId(gateway, "todos"), 0, 1000)
        assert entries == stored and [e.seq for e in entries] == list(range(1, 15))
        assert entries[12].before == {"title": "t1", "done": False} and entries[12].after == {
            "title": "t1",
            "done": True,
        }
        assert entries[13].after is None and entries[13].delta.op.value == "DELETE"
        assert {e.delta.client_id for e in entries} == {"alice", "bob"}


def test_removes_modifies_and_items_that_are_not_log_chunks_are_ignored(log: Any) -> None:
    # Given a chunk deleted (as the release and TTL do), an item that is not a chunk put, and then modified
    client, names = log["client"], log["names"]
    key = {"shard": {"S": "g1#todos#0"}, "seq": {"N": str(FIRST_KEYED + 1)}}
    client.delete_item(TableName=names.deltas, Key=key)
    client.put_item(TableName=names.deltas, Item={"shard": {"S": "g9#x#0"}, "seq": {"N": "1"}})
    client.put_item(TableName=names.deltas, Item={"shard": {"S": "g9#x#0"}, "seq": {"N": "1"}, "n": {"N": "1"}})
    records = log["stream"].read()
    assert [r["eventName"] for r in records] == ["REMOVE", "INSERT", "MODIFY"]
    # Then none of them is a new log chunk
    assert [decode_record(r) for r in records] == [None, None, None]
    assert decode_stream_records(records) == {}


def test_a_log_item_that_does_not_decode_is_an_error(log: Any) -> None:
    # Given a chunk's record whose compressed entries are damaged
    record = {**log["records"][0]}
    record["dynamodb"] = {**record["dynamodb"], "NewImage": {**record["dynamodb"]["NewImage"], "z": {"B": "AAAA"}}}
    # Then decoding it fails loudly (the broadcaster reports the record failed)
    with pytest.raises(StreamRecordError):
        decode_record(record)
