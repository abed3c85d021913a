"""The records of in-doubt runs (config table): each lists the main keys of its rows, so that a writer knows which
rows live at the run's alternate keys (:mod:`lakesync.aws.buffer.row_doubts`). A record is written before any head
lists its run and deleted after the head stops listing it; a process reads each record once."""

from __future__ import annotations

import logging
from collections.abc import Iterator, Sequence
from typing import TYPE_CHECKING

from botocore.exceptions import ClientError

from lakesync.aws.buffer.items import (
    DOUBT_PREFIX,
    doubt_from_record,
    doubt_record_item,
    doubt_record_key,
    record_pks,
)
from lakesync.aws.buffer.row_doubts import Doubt
from lakesync.aws.items import config_items, storage_error
from lakesync.aws.tables import TableNames
from lakesync.core.errors import StorageError
from lakesync.core.log import ShardId

if TYPE_CHECKING:
    from mypy_boto3_dynamodb import DynamoDBClient

__all__ = ["DoubtRecords", "RunRetired"]

logger = logging.getLogger(__name__)


class RunRetired(StorageError):
    """The record of an in-doubt run the head listed is gone: a turn retired it since the head was read."""


class DoubtRecords:
    """The in-doubt runs' records of the buffer's shards, with their rows' main keys cached by run."""

    def __init__(self, client: DynamoDBClient, names: TableNames) -> None:
        self._db = client
        self._t = names
        # The rows of in-doubt runs, by (shard, first and last position): their main keys.
        self._doubt_rows: dict[tuple[str, int, int], frozenset[str]] = {}

    def declare(self, shard: ShardId, doubt: Doubt, pks: Sequence[str]) -> None:
        """Write the record of ``shard``'s in-doubt run ``doubt``, whose rows' main keys are ``pks``."""
        try:
            self._db.put_item(TableName=self._t.config, Item=doubt_record_item(shard, doubt, pks))
        except ClientError as exc:
            raise storage_error(exc, "PutItem") from exc
        self._doubt_rows[(shard.key, doubt.first, doubt.last)] = frozenset(pks)

    def pks(self, shard: ShardId, doubt: Doubt) -> frozenset[str]:
        """The main keys of the rows of an in-doubt run (its record, read once per process); :class:`RunRetired`
        when the record is gone."""
        cached = self._doubt_rows.get((shard.key, doubt.first, doubt.last))
        if cached is not None:
            return cached
        try:
            out = self._db.get_item(TableName=self._t.config, Key=doubt_record_key(shard, doubt), ConsistentRead=True)
        except ClientError as exc:
            raise storage_error(exc, "GetItem") from exc
        if "Item" not in out:
            raise RunRetired(f"the record of the in-doubt run {doubt.first}..{doubt.last} of {shard.key!r} is gone")
        pks = frozenset(record_pks(out["Item"]))
        self._doubt_rows[(shard.key, doubt.first, doubt.last)] = pks
        return pks

    def forget(self, shard: ShardId, doubt: Doubt) -> None:
        """Delete the record of a retired run (a failure is logged: the record is then only left over)."""
        try:
            self._db.delete_item(TableName=self._t.config, Key=doubt_record_key(shard, doubt))
        except ClientError as exc:
            logger.warning("record of the in-doubt chunks %s of %s not deleted: %s", doubt.first, shard.key, exc)
        self._doubt_rows.pop((shard.key, doubt.first, doubt.last), None)

    def of_gateway(self, gateway: str) -> Iterator[tuple[Doubt, list[str]]]:
        """Every in-doubt run of the gateway's shards, with its rows' main keys (consistent reads)."""
        for item in config_items(self._db, self._t.config, gateway, DOUBT_PREFIX):
            yield doubt_from_record(item), record_pks(item)
