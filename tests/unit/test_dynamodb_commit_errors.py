"""What a failed write of a commit means (lakesync.aws.buffer.commit.commit_error), from DynamoDB's documented error
shapes: throttling is 503 busy, a full item collection is 503 backpressure naming the remedy, anything else a storage
error at once. (A put whose key is taken is a lost race, retried: the commit maps it to CommitConflict itself.)"""

from __future__ import annotations

import pytest
from botocore.exceptions import ClientError

from lakesync.aws.buffer.commit import commit_error
from lakesync.aws.items import storage_error
from lakesync.core.errors import BackpressureError, StorageBusyError, StorageError
from lakesync.core.log import ShardId

SHARD = ShardId("default", "todos", 0)


def _failed(code: str, operation: str = "PutItem") -> ClientError:
    return ClientError({"Error": {"Code": code, "Message": "no"}}, operation)  # type: ignore[typeddict-item]


@pytest.mark.parametrize(
    ("error", "kind"),
    [
        (_failed("ProvisionedThroughputExceededException"), StorageBusyError),
        (_failed("ThrottlingException"), StorageBusyError),
        (_failed("RequestLimitExceeded", "UpdateItem"), StorageBusyError),
        (_failed("ItemCollectionSizeLimitExceededException"), BackpressureError),
        (_failed("ValidationException"), StorageError),
    ],
)
def test_commit_errors_map_to_what_the_client_can_do(error: ClientError, kind: type[Exception]) -> None:
    mapped = commit_error(SHARD, error)
    assert type(mapped) is kind


def test_a_full_item_collection_is_a_503_naming_the_shard_and_the_remedy() -> None:
    mapped = commit_error(SHARD, _failed("ItemCollectionSizeLimitExceededException"))
    assert isinstance(mapped, BackpressureError)
    body = mapped.to_body()
    assert (mapped.status, body["code"]) == (503, "BACKPRESSURE_ERROR")
    assert SHARD.key in body["error"] and "LAKESYNC_SUB_SHARDS" in body["error"]


@pytest.mark.parametrize(
    ("code", "kind", "status"),
    [
        ("ProvisionedThroughputExceededException", StorageBusyError, 503),
        ("ThrottlingException", StorageBusyError, 503),
        ("RequestLimitExceeded", StorageBusyError, 503),
        ("ValidationException", StorageError, 500),
        ("ResourceNotFoundException", StorageError, 500),
    ],
)
def test_a_throttled_read_or_write_outside_a_commit_is_503_busy_anything_else_500(
    code: str, kind: type[Exception], status: int
) -> None:
    mapped = storage_error(_failed(code), "Query")
    assert type(mapped) is kind and mapped.status == status
    assert code in mapped.message and "Query" in mapped.message
