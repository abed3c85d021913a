"""The delta log as a restore reads it, on pyiceberg (:class:`lakesync.gateway.restore.LakeReader`): the flush
watermarks as the flush reads them, and a gateway's entries streamed in Arrow batches (docs/lake.md, "Rebuild the
gateway from the lake")."""

from __future__ import annotations

import json
from collections.abc import Iterator
from typing import TYPE_CHECKING, Any

from lakesync.aws.flush_store import DynamoConfig
from lakesync.aws.tables import TableNames
from lakesync.core.canonical import js_stringify
from lakesync.core.delta import ColumnDelta, DeltaOp, RowDelta
from lakesync.core.log import ShardId
from lakesync.core.restore import LakeEntry
from lakesync.lake.flush import FlushConfig
from lakesync.lake.iceberg_flush import IcebergDeltaLog, column_equals
from lakesync.lake.tables import DELTA_LOG, NAMESPACE

if TYPE_CHECKING:
    from pyiceberg.catalog import Catalog

__all__ = ["FIELDS", "IcebergLakeReader", "lake_entry"]

FIELDS = ("tbl", "row_id", "op", "client_id", "hlc", "delta_id", "columns", "shard", "seq", "commit_hlc")
"""The delta-log columns an entry is made of (:func:`lake_entry`)."""


def lake_entry(record: dict[str, Any]) -> LakeEntry:
    """A delta-log record (its columns as Arrow gives them to Python) as the entry it was in the buffer: column values
    parsed from their canonical JSON, the stored bytes counted as the push counted them (the wire JSON's UTF-8)."""
    delta = RowDelta(
        op=DeltaOp(record["op"]),
        table=record["tbl"],
        row_id=record["row_id"],
        client_id=record["client_id"],
        columns=tuple(ColumnDelta(c["name"], json.loads(c["value"])) for c in record["columns"]),
        hlc=int(record["hlc"]),
        delta_id=record["delta_id"],
    )
    size = len(js_stringify(delta.to_json()).encode("utf-8", "surrogatepass"))
    return LakeEntry(ShardId.parse(record["shard"]), int(record["seq"]), int(record["commit_hlc"]), delta, size)


class IcebergLakeReader:
    """The delta log ``<namespace>.deltas`` of ``catalog`` (read only)."""

    def __init__(self, catalog: Catalog, namespace: str = NAMESPACE) -> None:
        self._catalog = catalog
        self._identifier = (namespace, DELTA_LOG)
        # The flush's own reading of the watermarks; its buffer configuration is never used to read them.
        config = FlushConfig(DynamoConfig(TableNames.with_prefix("unused")), namespace=namespace)
        self._log = IcebergDeltaLog(catalog, config)

    def _exists(self) -> bool:
        return bool(self._catalog.table_exists(self._identifier))

    def watermarks(self) -> dict[str, int]:
        """``{shard: seq}`` of every shard flushed (empty when there is no delta log)."""
        return self._log.read_watermarks()[0] if self._exists() else {}

    def entries(self, gateway: str) -> Iterator[LakeEntry]:
        """Every entry of ``gateway``, streamed batch by batch."""
        if not self._exists():
            return
        scan = self._catalog.load_table(self._identifier).scan(
            row_filter=column_equals("gateway", gateway), selected_fields=FIELDS
        )
        for batch in scan.to_arrow_batch_reader():
            for record in batch.to_pylist():
                yield lake_entry(record)
