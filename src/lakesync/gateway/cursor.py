"""Pull cursors: opaque per-shard log positions (see :mod:`lakesync.gateway.pull`).

A module of its own so that checkpoint serving (which hands out the cursor of a checkpoint's positions) and the pull
service (which the ``since`` resync makes read checkpoints) need not import each other.
"""

from __future__ import annotations

import base64
import binascii
import json
from collections.abc import Mapping

from lakesync.core.errors import ValidationError
from lakesync.core.log import ShardId

_CURSOR_VERSION = 1


def encode_cursor(positions: Mapping[str, int], marks: Mapping[str, int] | None = None) -> str:
    """Opaque cursor text for per-shard positions, with the commit HLC of the entry at each position (``marks``)
    where known, so a later pull can tell the log it resumes is the log it left."""
    doc: dict[str, object] = {"v": _CURSOR_VERSION, "p": dict(sorted(positions.items()))}
    if marks:
        doc["h"] = {k: marks[k] for k in sorted(marks) if k in positions}
    raw = json.dumps(doc, separators=(",", ":"))
    return base64.urlsafe_b64encode(raw.encode()).decode().rstrip("=")


def cursor_marks(cursor: str) -> dict[str, int]:
    """The commit HLC of the entry at each position of a cursor decoded by :func:`decode_cursor` (cursors from
    checkpoints and older cursors carry none)."""
    data = json.loads(base64.urlsafe_b64decode(cursor + "=" * (-len(cursor) % 4)))
    marks = data.get("h") if isinstance(data, dict) else None
    if not isinstance(marks, dict):
        return {}
    if any(not isinstance(k, str) or type(v) is not int or v < 0 for k, v in marks.items()):
        raise ValidationError("Invalid 'cursor' parameter")
    return dict(marks)


def decode_cursor(cursor: str, gateway: str) -> dict[str, int]:
    """Per-shard positions from a cursor; rejects malformed cursors and cursors of another gateway."""
    try:
        raw = base64.urlsafe_b64decode(cursor + "=" * (-len(cursor) % 4))
        data = json.loads(raw)
    except (binascii.Error, ValueError, UnicodeDecodeError):
        raise ValidationError("Invalid 'cursor' parameter") from None
    if not isinstance(data, dict) or data.get("v") != _CURSOR_VERSION or not isinstance(data.get("p"), dict):
        raise ValidationError("Invalid 'cursor' parameter")
    positions: dict[str, int] = {}
    for key, value in data["p"].items():
        if not isinstance(key, str) or type(value) is not int or value < 0:
            raise ValidationError("Invalid 'cursor' parameter")
        try:
            shard = ShardId.parse(key)
        except ValueError:
            raise ValidationError("Invalid 'cursor' parameter") from None
        if shard.gateway != gateway:
            raise ValidationError("The cursor belongs to another gateway")
        positions[key] = value
    return positions


__all__ = ["cursor_marks", "decode_cursor", "encode_cursor"]
