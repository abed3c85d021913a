"""Save and restore DynamoDB tables as JSON, so the embedded default keeps its data across restarts.

moto keeps everything in memory; ``lakesync local`` dumps its tables into the data directory on a clean shutdown
and loads them back on start.
"""

from __future__ import annotations

import json
import os
from pathlib import Path
from typing import TYPE_CHECKING, Any, cast

from lakesync.aws.tables import TableNames

if TYPE_CHECKING:
    from mypy_boto3_dynamodb import DynamoDBClient

_FORMAT = 1


def dump_tables(client: DynamoDBClient, names: TableNames, path: Path) -> int:
    """Write every item of every table to ``path`` atomically; returns the item count."""
    tables: dict[str, list[dict[str, Any]]] = {}
    count = 0
    for logical, physical in names.as_dict().items():
        items: list[dict[str, Any]] = []
        for page in client.get_paginator("scan").paginate(TableName=physical, ConsistentRead=True):
            items.extend(page.get("Items", []))
        tables[logical] = items
        count += len(items)
    tmp = path.with_suffix(".tmp")
    tmp.write_text(json.dumps({"format": _FORMAT, "tables": tables}))
    os.replace(tmp, path)
    return count


def load_tables(client: DynamoDBClient, names: TableNames, path: Path) -> int:
    """Load a dump written by :func:`dump_tables` into existing, empty tables; returns the item count."""
    data = json.loads(path.read_text())
    if data.get("format") != _FORMAT:
        raise ValueError(f"{path} is not a LakeSync table snapshot (format {data.get('format')!r})")
    count = 0
    physical = names.as_dict()
    for logical, items in data["tables"].items():
        for start in range(0, len(items), 25):
            request: Any = {physical[logical]: [{"PutRequest": {"Item": i}} for i in items[start : start + 25]]}
            while request:
                out = client.batch_write_item(RequestItems=cast(Any, request))
                request = out.get("UnprocessedItems") or None
        count += len(items)
    return count
