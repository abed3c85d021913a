"""Reading a table's DynamoDB stream on the moto server the way Lambda's poller does, for the broadcaster's tests:
records after the previous read, in Lambda's event form (:func:`lakesync.aws.log_stream.lambda_record`)."""

from __future__ import annotations

from typing import Any

import boto3

from lakesync.aws.log_stream import lambda_record

FAKE = {"region_name": "us-east-1", "aws_access_key_id": "testing", "aws_secret_access_key": "testing"}


class Stream:
    """A table's stream (one shard on moto), read from the start, each read continuing where the last stopped."""

    def __init__(self, endpoint: str, table_client: Any, table: str) -> None:
        self.client = boto3.client("dynamodbstreams", endpoint_url=endpoint, **FAKE)
        self.arn = table_client.describe_table(TableName=table)["Table"]["LatestStreamArn"]
        shard = self.client.describe_stream(StreamArn=self.arn)["StreamDescription"]["Shards"][0]["ShardId"]
        self.iterator = self.client.get_shard_iterator(
            StreamArn=self.arn, ShardId=shard, ShardIteratorType="TRIM_HORIZON"
        )["ShardIterator"]

    def read(self) -> list[dict[str, Any]]:
        """The records since the last read, as Lambda delivers them."""
        out = self.client.get_records(ShardIterator=self.iterator)
        self.iterator = out["NextShardIterator"]
        return [lambda_record(r, self.arn) for r in out["Records"]]

    def event(self) -> dict[str, Any]:
        """The records since the last read as one Lambda DynamoDB-stream event."""
        return {"Records": self.read()}
