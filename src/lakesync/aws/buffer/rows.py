"""The row index on DynamoDB: the latest state of each row, a cache of the log (docs/buffer.md).

A row lives at its main key, or, while an in-doubt run holding it lasts, at that run's alternate key
(:mod:`lakesync.aws.buffer.row_doubts`); readers take the newest of the keys a row may live at. Every write is
conditional on the stored row being older (``v``: never backwards), except the unconditional batches a chunk's
writer sends on its chunk's turn, before its deadline.
"""

from __future__ import annotations

from collections.abc import Callable, Iterable, Mapping, Sequence
from typing import TYPE_CHECKING

from botocore.exceptions import ClientError

from lakesync.aws.buffer.doubt_records import DoubtRecords
from lakesync.aws.buffer.items import RowAttr, row_from_item, row_item, row_item_key
from lakesync.aws.buffer.row_doubts import Doubt, alt_key
from lakesync.aws.errors import condition_failed
from lakesync.aws.items import Item, batch_get_all, batch_write
from lakesync.aws.tables import TableNames
from lakesync.core.log import ROW_RECENT_KEYS, LogEntry, ShardId, StoredRow, dedup_key, recent_key, row_key
from lakesync.core.merge import merge
from lakesync.io_pool import awaited, results_of, submit

if TYPE_CHECKING:
    from mypy_boto3_dynamodb import DynamoDBClient

__all__ = ["RowIndex", "fold"]

_NEWER_ROW = f"attribute_not_exists({RowAttr.KEY}) OR {RowAttr.VERSION} < :v"
"""A row put that never goes backwards."""

SendBatch = Callable[[list[Item], int], None]
"""Sends one batch of up to 25 row items, none after the deadline given (ms)."""


class RowIndex:
    """The rows table. ``records``: the in-doubt runs' records (which rows live at alternate keys); ``send_batch``:
    what sends each batch of rows on a chunk's turn (:meth:`send_batch` unless the store routes it elsewhere)."""

    def __init__(
        self,
        client: DynamoDBClient,
        names: TableNames,
        records: DoubtRecords,
        *,
        clock_ms: Callable[[], int],
        send_batch: SendBatch | None = None,
    ) -> None:
        self._db = client
        self._t = names
        self._records = records
        self._clock_ms = clock_ms
        self._send_batch: SendBatch = send_batch or self.send_batch

    # -- reads ----------------------------------------------------------------------------------------------------
    def get_rows(self, gateway: str, rows: Sequence[tuple[str, str]]) -> dict[tuple[str, str], StoredRow]:
        """The stored rows ``(table, row id)`` of ``gateway``, each the newest of its main key and its alternate keys
        for every in-doubt run of the gateway."""
        by_pk = _row_keys(gateway, rows)
        if not by_pk:
            return {}
        # The gateway's in-doubt chunks first: one retired meanwhile has its rows back at their main keys.
        alternates: dict[str, tuple[str, str]] = {}
        for doubt, pks in self._records.of_gateway(gateway):
            alternates.update((alt_key(doubt, pk), by_pk[pk]) for pk in pks if pk in by_pk)
        return self.newest_rows({**by_pk, **alternates})

    def read_rows(
        self, gateway: str, rows: Iterable[tuple[str, str]], doubts: Sequence[Doubt]
    ) -> dict[tuple[str, str], StoredRow]:
        """The rows as a shard whose head lists ``doubts`` holds them: the newest of each row's main key and its
        alternate keys."""
        by_pk = _row_keys(gateway, list(rows))
        keys = dict(by_pk)
        for doubt in doubts:
            keys.update((alt_key(doubt, pk), row) for pk, row in by_pk.items())
        return self.newest_rows(keys)

    def newest_rows(self, keys: Mapping[str, tuple[str, str]]) -> dict[tuple[str, str], StoredRow]:
        """The newest row item of each row among the keys ``keys`` maps to it."""
        if not keys:
            return {}
        found: dict[tuple[str, str], StoredRow] = {}
        for item in self.items_at(keys):
            key = keys[item[RowAttr.KEY]["S"]]
            row = row_from_item(key, item)
            if key not in found or found[key].version < row.version:
                found[key] = row
        return found

    def items_at(self, pks: Iterable[str]) -> list[Item]:
        """The row items stored at the keys ``pks`` (consistent reads)."""
        return batch_get_all(self._db, self._t.rows, [row_item_key(pk) for pk in pks])

    # -- writes ---------------------------------------------------------------------------------------------------
    def write_home(
        self, shard: ShardId, rows: Sequence[StoredRow], doubts: Sequence[Doubt], *, batch_until: int | None
    ) -> None:
        """Write each row where it lives: at its alternate key for the newest in-doubt run holding it (a conditional
        put), else at its main key: in batches while the wall clock is before ``batch_until`` (only on the chunk's
        turn), else by conditional puts."""
        main: list[StoredRow] = []
        alternate: list[Item] = []
        for row in rows:
            pk = row_key(shard.gateway, row.state.table, row.state.row_id)
            home = next((d for d in reversed(doubts) if pk in self._records.pks(shard, d)), None)
            if home is None:
                main.append(row)
            else:
                alternate.append({**row_item(shard.gateway, row), **row_item_key(alt_key(home, pk))})
        puts = [submit(self.put_row_item, item) for item in alternate]
        with awaited(*puts):
            if batch_until is not None:
                self.batch_rows(shard.gateway, main, batch_until)
            else:
                self.put_rows(shard.gateway, main)
        results_of(puts)

    def batch_rows(self, gateway: str, rows: Sequence[StoredRow], until: int) -> None:
        """Unconditional ``BatchWriteItem``s of rows (on their chunk's turn), none sent after ``until`` (the rest by
        conditional puts)."""
        items = [row_item(gateway, row) for row in rows]
        results_of([submit(self._send_batch, items[start : start + 25], until) for start in range(0, len(items), 25)])

    def send_batch(self, items: list[Item], until: int) -> None:
        """One ``BatchWriteItem`` of up to 25 row items, sent only before ``until``; the items it leaves unsent are
        put one by one, conditionally."""
        requests = [{"PutRequest": {"Item": item}} for item in items]
        unsent = batch_write(self._db, self._t.rows, requests, sending=lambda: self._clock_ms() < until)
        for put in unsent:
            self.put_row_item(put["PutRequest"]["Item"])

    def put_rows(self, gateway: str, puts: Sequence[StoredRow]) -> None:
        """Write each row unless the stored one is at or past its position (``v``): never backwards."""
        if not puts:
            return
        if len(puts) == 1:
            self.put_row(gateway, puts[0])
            return
        results_of([submit(self.put_row, gateway, row) for row in puts])

    def put_row(self, gateway: str, row: StoredRow) -> None:
        """Write the row at its main key unless the stored one is at or past its position."""
        self.put_row_item(row_item(gateway, row))

    def put_row_item(self, item: Item) -> None:
        """Put a row item unless the stored one is at or past its position (``v``): never backwards."""
        try:
            self._db.put_item(
                TableName=self._t.rows,
                Item=item,
                ConditionExpression=_NEWER_ROW,
                ExpressionAttributeValues={":v": item[RowAttr.VERSION]},
            )
        except ClientError as exc:
            if not condition_failed(exc):
                raise

    def copy_home(self, alternates: Mapping[str, str]) -> None:
        """Copy the row items at the alternate keys of ``alternates`` to the main keys it maps them to (never
        backwards)."""
        items = self.items_at(alternates)
        results_of(
            [submit(self.put_row_item, {**item, **row_item_key(alternates[item[RowAttr.KEY]["S"]])}) for item in items]
        )

    def delete(self, pks: Sequence[str]) -> None:
        """One ``BatchWriteItem`` deleting the row items at up to 25 keys."""
        batch_write(self._db, self._t.rows, [{"DeleteRequest": {"Key": row_item_key(pk)}} for pk in pks])


def fold(
    stored: dict[tuple[str, str], StoredRow], entries: Iterable[LogEntry], *, wanted: set[tuple[str, str]]
) -> set[tuple[str, str]]:
    """Merge the log entries a stored row does not hold yet (``seq`` past its ``v``) into it, in order, and keep
    their dedup keys; returns the rows that changed. The effective deltas of the log fold to the states their
    commits wrote (per-column LWW is a join)."""
    changed: set[tuple[str, str]] = set()
    for entry in entries:
        delta = entry.delta
        key = (delta.table, delta.row_id)
        if key not in wanted:
            continue
        row = stored.get(key)
        if row is not None and row.version >= entry.seq:
            continue
        state = merge(row.state if row is not None else None, delta).state
        recent = (*(row.recent if row is not None else ()), recent_key(dedup_key(delta.client_id, delta.delta_id)))
        stored[key] = StoredRow(state, entry.seq, recent[-ROW_RECENT_KEYS:])
        changed.add(key)
    return changed


def _row_keys(gateway: str, rows: Sequence[tuple[str, str]]) -> dict[str, tuple[str, str]]:
    return {row_key(gateway, table, row_id): (table, row_id) for table, row_id in dict.fromkeys(rows)}
