"""What the document says of the flush lag (:class:`lakesync.core.flush_lag.FlushLag`), the ``flushLag`` of the admin
metrics route: what is committed and not yet in the lake, which a restore from the lake would lose."""

from __future__ import annotations

from typing import Final

from lakesync.openapi.model import Schema, ref

_COUNT: Final = {"type": "integer", "minimum": 0}
_OLDEST: Final[Schema] = {
    "oldestCommitHlc": {
        "anyOf": [ref("Hlc"), {"type": "null"}],
        "description": "The commit HLC of the oldest unflushed entry (null: none waits, or the log did not give it).",
    },
    "oldestCommitAt": {
        "type": ["string", "null"],
        "format": "date-time",
        "description": "Its commit time (the HLC's wall clock), UTC.",
    },
    "oldestCommitAgeSeconds": {
        "type": ["integer", "null"],
        "minimum": 0,
        "description": "Whole seconds since that commit when the figures were read.",
    },
}
_FIGURES: Final = ("unflushedDeltas", "unflushedBytes", *_OLDEST)

FLUSH_LAG_SCHEMA: Final[Schema] = {
    "type": "object",
    "description": "The flush lag: entries committed and not yet flushed to the lake, over the gateway's shards, and "
    "the oldest of them. A restore from the lake would lose them, so this bounds what it can lose.",
    "required": [*_FIGURES, "shards"],
    "properties": {
        "unflushedDeltas": _COUNT,
        "unflushedBytes": _COUNT,
        **_OLDEST,
        "shards": {
            "type": "array",
            "description": "Each shard with unflushed entries, sorted by table and sub-shard.",
            "items": {
                "type": "object",
                "required": ["shard", "table", "sub", *_FIGURES],
                "properties": {
                    "shard": {"type": "string"},
                    "table": {"type": "string"},
                    "sub": _COUNT,
                    "unflushedDeltas": _COUNT,
                    "unflushedBytes": _COUNT,
                    **_OLDEST,
                },
            },
        },
    },
}
"""The schema of ``flushLag`` (:meth:`lakesync.core.flush_lag.FlushLag.to_json`)."""
