"""A fix for one moto artifact that makes the embedded default slow down as its tables grow.

Stock moto 5.x backs up every table a ``TransactWriteItems`` touches with ``copy.deepcopy`` -- once per *item* of
the transaction -- so one commit costs O(items in the transaction x items in the tables), and a push gets slower
with every push before it (DynamoDB's own cost does not depend on table size). :func:`install_fast_transactions`
makes moto back each touched table up once per transaction instead: the table's item index is copied (the items are
shared: a Put or Delete replaces or drops an item, it never changes one) and only the items an ``Update`` may change
in place are deep-copied. A cancelled transaction still restores exactly the state before it, stream records
included (a cancelled commit must not reach the broadcaster), and open stream iterators keep working (the buffer
contract tests and dedicated tests check this on the moto server).

The patch is process-wide (moto keeps its backends in module globals) and idempotent. It applies to the moto line
the project pins (5.x); if moto's internals are not the ones it expects, it leaves moto alone and says so.
"""

from __future__ import annotations

import contextvars
import copy
import logging
import threading
from typing import Any

logger = logging.getLogger(__name__)

_LOCK = threading.Lock()
_installed = False


class _Transaction:
    """Backups taken during one ``TransactWriteItems``: by table object id, plus the keys each ``Update`` targets."""

    def __init__(self, update_keys: dict[str, list[dict[str, Any]]]) -> None:
        self.update_keys = update_keys
        self.backups: dict[int, Any] = {}


_ACTIVE: contextvars.ContextVar[_Transaction | None] = contextvars.ContextVar("lakesync_moto_tx", default=None)


def install_fast_transactions() -> bool:
    """Patch moto's DynamoDB backend (see the module docstring). Returns whether the patch is in place."""
    global _installed
    with _LOCK:
        if _installed:
            return True
        try:
            from moto.dynamodb import models
            from moto.dynamodb.models.dynamo_type import DynamoType
            from moto.dynamodb.models.table import Table
        except ImportError:  # pragma: no cover - moto is a dependency of the local extra
            return False
        if getattr(models, "copy", None) is not copy or not hasattr(models.DynamoDBBackend, "transact_write_items"):
            logger.warning("moto's DynamoDB internals changed; transactions stay on stock moto (slower)")
            return False
        from moto.dynamodb.models import table as table_module

        _patch(models, DynamoType, Table, table_module)
        _installed = True
        return True


def _patch(models: Any, dynamo_type: Any, table_class: Any, table_module: Any) -> None:
    stock_deepcopy = copy.deepcopy
    stock_transact = models.DynamoDBBackend.transact_write_items

    class _Copy:
        """Stands in for the ``copy`` module inside moto's backend: Table backups go through ``snapshot``."""

        def __getattr__(self, name: str) -> Any:
            return getattr(copy, name)

        @staticmethod
        def deepcopy(value: Any, memo: Any = None) -> Any:
            active = _ACTIVE.get()
            if active is None or not isinstance(value, table_class):
                return stock_deepcopy(value, memo)
            if id(value) not in active.backups:
                active.backups[id(value)] = _snapshot(
                    value, active.update_keys.get(value.name, []), dynamo_type, stock_deepcopy
                )
            return active.backups[id(value)]

    def transact_write_items(self: Any, transact_items: list[dict[str, Any]]) -> Any:
        updates = _updated_keys(transact_items)
        # A cancelled transaction restores each table's items from its backup, but the stream shard is shared with
        # the backup (and must stay the same object: open shard iterators hold it): drop the records its writes added.
        shards = {name: table.stream_shard for name, table in self.tables.items() if table.stream_shard is not None}
        stream_lengths = {name: len(shard.items) for name, shard in shards.items()}
        token = _ACTIVE.set(_Transaction(updates))
        try:
            return stock_transact(self, transact_items)
        except BaseException:
            for name, shard in shards.items():
                del shard.items[stream_lengths[name] :]
            raise
        finally:
            _ACTIVE.reset(token)

    models.copy = _Copy()
    models.DynamoDBBackend.transact_write_items = transact_write_items
    from moto.dynamodbstreams import models as streams_module

    _bound_streams(table_module, streams_module)


def _snapshot(table: Any, update_keys: list[dict[str, Any]], dynamo_type: Any, deepcopy: Any) -> Any:
    """A backup of ``table`` for a transaction: its item maps copied, only the items it updates deep-copied."""
    backup = copy.copy(table)
    backup.items = copy.copy(table.items)
    if table.range_key_attr is not None:
        for hash_value, by_range in table.items.items():
            backup.items[hash_value] = dict(by_range)
    for key in update_keys:
        item = table.get_item(
            dynamo_type(key[table.hash_key_attr]),
            dynamo_type(key[table.range_key_attr]) if table.range_key_attr else None,
        )
        if item is None:
            continue
        fresh = deepcopy(item)
        if table.range_key_attr is None:
            backup.items[item.hash_key] = fresh
        else:
            backup.items[item.hash_key][item.range_key] = fresh
    return backup


def _updated_keys(transact_items: list[dict[str, Any]]) -> dict[str, list[dict[str, Any]]]:
    """Per table, the keys a transaction's ``Update`` operations name."""
    updates: dict[str, list[dict[str, Any]]] = {}
    for entry in transact_items:
        for op_type, op in entry.items():
            if op_type == "Update":
                updates.setdefault(op["TableName"], []).append(op["Key"])
    return updates


STREAM_RECORDS_KEPT = 20_000
"""Stream records moto keeps per table; older ones are dropped (DynamoDB keeps 24 hours of them)."""


def _bound_streams(table_module: Any, streams_module: Any) -> None:
    """moto keeps every stream record of a table for ever (its sequence numbers are list positions), so a long-running
    ``lakesync local`` would grow by every item written. Keep the positions, drop the records: a record older than
    the last :data:`STREAM_RECORDS_KEPT` becomes ``None`` and reads skip it, as reads past DynamoDB's retention find
    nothing."""
    shard_class = table_module.StreamShard
    stock_add = shard_class.add

    def add(self: Any, old: Any, new: Any) -> None:
        stock_add(self, old, new)
        kept_from = len(self.items) - STREAM_RECORDS_KEPT
        dropped = getattr(self, "_lakesync_dropped", 0)
        if kept_from - dropped >= STREAM_RECORDS_KEPT // 10:  # in steps, not one record at a time
            for index in range(dropped, kept_from):
                self.items[index] = None
            self._lakesync_dropped = kept_from

    def get(self: Any, start: int, quantity: int) -> list[dict[str, Any]]:
        start -= self.starting_sequence_number
        assert start >= 0
        start = max(start, getattr(self, "_lakesync_dropped", 0))  # a reader behind the kept records skips ahead
        return [record.to_json() for record in self.items[start : start + quantity]]

    shard_class.add = add
    shard_class.get = get

    # Every GetRecords makes a new shard iterator and moto keeps them all; a poller reading every few milliseconds
    # would fill memory. An iterator a read has consumed is forgotten (its reader goes on with the one it was given).
    iterator_class = streams_module.ShardIterator
    stock_iterator_get = iterator_class.get

    def iterator_get(self: Any, limit: int = 1000) -> dict[str, Any]:
        page: dict[str, Any] = stock_iterator_get(self, limit)
        self.streams_backend.shard_iterators.pop(self.arn, None)
        return page

    iterator_class.get = iterator_get
