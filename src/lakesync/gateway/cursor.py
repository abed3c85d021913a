"""Pull cursors: opaque per-shard log positions (see :mod:`lakesync.gateway.pull`).

A module of its own so that checkpoint serving (which hands out the cursor of a checkpoint's positions) and the pull
service (which the ``since`` resync makes read checkpoints) need not import each other.
"""

from __future__ import annotations

import base64
import binascii
import json
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any, Final

from lakesync.core.errors import ValidationError
from lakesync.core.log import ShardId

_CURSOR_VERSION = 1
_FINGERPRINT_CHARS: Final = 64
_MAX_MAYBE: Final = 8


@dataclass(frozen=True, slots=True)
class CursorScope:
    """The scope a cursor was served under (:attr:`~lakesync.core.scope.Scope.fingerprint`) and, while a change of
    scope is being served (:mod:`lakesync.gateway.scope_change`), where that difference stands.

    Attributes:
        fingerprint: The scope whose rows the client holds up to the cursor's positions.
        target: The scope the difference in progress moves to; ``None``: none in progress.
        maybe: Scopes of earlier differences left unfinished, whose rows the client may hold.
        checkpoint: The checkpoint the difference reads (``""``: the log from its start).
        chunk: The next checkpoint chunk to read.
        row: The next row of that chunk.
        tail: Rows of the log after the checkpoint already served.
    """

    fingerprint: str
    target: str | None = None
    maybe: tuple[str, ...] = ()
    checkpoint: str = ""
    chunk: int = 0
    row: int = 0
    tail: int = 0

    def to_json(self) -> dict[str, Any]:
        """The cursor's ``s`` field."""
        doc: dict[str, Any] = {"f": self.fingerprint}
        if self.target is not None:
            doc.update(t=self.target, m=list(self.maybe), k=self.checkpoint, c=self.chunk, r=self.row, i=self.tail)
        return doc

    @classmethod
    def from_json(cls, doc: object) -> CursorScope:
        """The scope of a cursor's ``s`` field.

        Raises:
            ValidationError: malformed.
        """
        if not isinstance(doc, dict) or not _is_fingerprint(doc.get("f")):
            raise ValidationError("Invalid 'cursor' parameter")
        if "t" not in doc:
            return cls(doc["f"])
        target, maybe, checkpoint = doc.get("t"), doc.get("m"), doc.get("k")
        counts = [doc.get(k) for k in ("c", "r", "i")]
        if (
            not _is_fingerprint(target)
            or not isinstance(maybe, list)
            or len(maybe) > _MAX_MAYBE
            or not all(_is_fingerprint(m) for m in maybe)
            or not isinstance(checkpoint, str)
            or len(checkpoint) > 128
            or not all(type(n) is int and n >= 0 for n in counts)
        ):
            raise ValidationError("Invalid 'cursor' parameter")
        chunk, row, tail = counts
        assert isinstance(chunk, int) and isinstance(row, int) and isinstance(tail, int)
        return cls(doc["f"], target, tuple(maybe), checkpoint, chunk, row, tail)


def _is_fingerprint(value: object) -> bool:
    return isinstance(value, str) and 0 < len(value) <= _FINGERPRINT_CHARS


def encode_cursor(
    positions: Mapping[str, int], marks: Mapping[str, int] | None = None, scope: CursorScope | None = None
) -> str:
    """Opaque cursor text for per-shard positions, with the commit HLC of the entry at each position (``marks``)
    where known, so a later pull can tell the log it resumes is the log it left, and the ``scope`` it was served
    under when the rules have streams."""
    doc: dict[str, object] = {"v": _CURSOR_VERSION, "p": dict(sorted(positions.items()))}
    if marks:
        doc["h"] = {k: marks[k] for k in sorted(marks) if k in positions}
    if scope is not None:
        doc["s"] = scope.to_json()
    raw = json.dumps(doc, separators=(",", ":"))
    return base64.urlsafe_b64encode(raw.encode()).decode().rstrip("=")


def cursor_scope(cursor: str) -> CursorScope | None:
    """The scope of a cursor decoded by :func:`decode_cursor`; ``None`` for a cursor without one (a checkpoint's,
    or one served under rules without streams: the scope of the buckets alone).

    Raises:
        ValidationError: the scope is malformed.
    """
    data = json.loads(base64.urlsafe_b64decode(cursor + "=" * (-len(cursor) % 4)))
    doc = data.get("s") if isinstance(data, dict) else None
    return None if doc is None else CursorScope.from_json(doc)


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


__all__ = ["CursorScope", "cursor_marks", "cursor_scope", "decode_cursor", "encode_cursor"]
