"""Snapshots of the embedded default's state: DynamoDB items and S3 objects as one JSON file.

Format 2 (``{"format": 2, "generation": g, "tables": {logical: [item, ...]}, "objects": {bucket: {key: {"body":
base64, "contentType": ...}}}}``) holds items in DynamoDB's JSON wire form, exactly as moto stores them, and the
journal generation it starts (:mod:`lakesync.local.journal`). Format 1 (the tables only, written on clean shutdowns
by earlier versions) is read as generation 0 without objects.

:func:`write_snapshot` is atomic and durable: a temporary file created 0600, fsync'd, renamed over the old one, and
the directory fsync'd, so a crash leaves either the old snapshot or the new one, never a mix.
"""

from __future__ import annotations

import base64
import json
import os
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

__all__ = ["Snapshot", "read_snapshot", "write_snapshot"]

_FORMAT = 2


@dataclass(frozen=True, slots=True)
class Snapshot:
    """The state a snapshot file holds.

    Attributes:
        generation: The first journal generation to replay on top of it.
        tables: Logical table name to its items (DynamoDB JSON).
        objects: Bucket to key to ``(body, content type)``.
    """

    generation: int
    tables: dict[str, list[dict[str, Any]]]
    objects: dict[str, dict[str, tuple[bytes, str]]] = field(default_factory=dict)

    @property
    def item_count(self) -> int:
        """Items plus objects."""
        return sum(map(len, self.tables.values())) + sum(map(len, self.objects.values()))


def write_snapshot(path: Path, snapshot: Snapshot) -> None:
    """Write ``snapshot`` to ``path`` atomically and durably (file mode 0600)."""
    doc = {
        "format": _FORMAT,
        "generation": snapshot.generation,
        "tables": snapshot.tables,
        "objects": {
            bucket: {
                key: {"body": base64.b64encode(body).decode(), "contentType": ct} for key, (body, ct) in objs.items()
            }
            for bucket, objs in snapshot.objects.items()
        },
    }
    data = json.dumps(doc, separators=(",", ":")).encode()
    tmp = path.with_name(path.name + ".tmp")
    fd = os.open(tmp, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o600)
    try:
        view = memoryview(data)
        while view:
            view = view[os.write(fd, view) :]
        os.fsync(fd)
    finally:
        os.close(fd)
    os.replace(tmp, path)
    directory = os.open(path.parent, os.O_RDONLY)
    try:
        os.fsync(directory)
    finally:
        os.close(directory)


def read_snapshot(path: Path) -> Snapshot:
    """Read a snapshot written by :func:`write_snapshot` (or a format 1 table dump).

    Raises:
        ValueError: ``path`` is not a LakeSync snapshot.
    """
    data = json.loads(path.read_bytes())
    version = data.get("format") if isinstance(data, dict) else None
    if version == 1:
        return Snapshot(0, data["tables"])
    if version != _FORMAT:
        raise ValueError(f"{path} is not a LakeSync snapshot (format {version!r})")
    objects = {
        bucket: {key: (base64.b64decode(o["body"]), str(o["contentType"])) for key, o in objs.items()}
        for bucket, objs in data.get("objects", {}).items()
    }
    return Snapshot(int(data["generation"]), data["tables"], objects)
