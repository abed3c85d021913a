"""What the server remembers of each original (``since``) client: its :class:`SinceSession` (the ``serverHlc`` values
handed to it with the log positions each stands for, the rows owed to it, a resync in progress), stored as JSON.

How the sessions are used to serve ``since`` pulls: :mod:`lakesync.gateway.since`.
"""

from __future__ import annotations

import json
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, replace
from typing import Any

__all__ = [
    "HANDOUTS_KEPT",
    "MAX_PUSHED",
    "MAX_REDELIVER",
    "SESSION_TTL_S",
    "Handout",
    "Positions",
    "ResyncMark",
    "RowKey",
    "SinceSession",
]

HANDOUTS_KEPT = 4
"""``serverHlc`` values remembered per client (a client only ever sends back its latest)."""
MAX_REDELIVER = 1000
"""Rows a session holds for redelivery; beyond it the oldest are dropped (see :func:`note_push`)."""
MAX_PUSHED = 256
"""Rows a session remembers the client wrote (so a later ``INSERT`` of them by another client is sent as ``UPDATE``);
a small bound keeps the session item, written on every pull and push of the client, to a few KB."""
SESSION_TTL_S = 30 * 24 * 3600
"""An idle session expires after this; the client is then served as a new one."""

RowKey = tuple[str, str]
"""``(table, row_id)``."""
Positions = Mapping[str, int]
"""Per shard key, the last log sequence a client has been handed."""


@dataclass(frozen=True, slots=True)
class ResyncMark:
    """Where a resync from a checkpoint stands (:mod:`lakesync.gateway.resync`): the checkpoint, and the next row to
    serve -- row ``row`` (0-based, in stored order) of chunk ``chunk``."""

    checkpoint_id: str
    chunk: int = 0
    row: int = 0

    def to_json(self) -> list[Any]:
        """``["checkpointId", chunk, row]``."""
        return [self.checkpoint_id, self.chunk, self.row]

    @classmethod
    def from_json(cls, raw: Sequence[Any] | None) -> ResyncMark | None:
        """Inverse of :meth:`to_json` (``None`` for ``None``)."""
        return None if raw is None else cls(str(raw[0]), int(raw[1]), int(raw[2]))


@dataclass(frozen=True, slots=True)
class Handout:
    """A ``serverHlc`` handed to a client: where it resumes, and up to where entries may already be at the client.

    With ``resync``, the client is being resynced from a checkpoint: it resumes with the checkpoint's rows from that
    mark, then with the log from ``positions`` (the checkpoint's)."""

    server_hlc: int
    positions: Positions
    uncertain: Positions | None = None
    resync: ResyncMark | None = None

    def to_json(self) -> list[Any]:
        """``["hlc", positions, uncertain]``, plus the resync mark when there is one."""
        out: list[Any] = [
            str(self.server_hlc),
            dict(self.positions),
            None if self.uncertain is None else dict(self.uncertain),
        ]
        if self.resync is not None:
            out.append(self.resync.to_json())
        return out

    @classmethod
    def from_json(cls, raw: Sequence[Any]) -> Handout:
        """Inverse of :meth:`to_json`."""
        uncertain = None if len(raw) < 3 or raw[2] is None else dict(raw[2])
        return cls(int(raw[0]), dict(raw[1]), uncertain, ResyncMark.from_json(raw[3] if len(raw) > 3 else None))


@dataclass(frozen=True, slots=True)
class SinceSession:
    """What the server remembers of one ``since`` client.

    Attributes:
        handouts: Handed out, oldest first (at most :data:`HANDOUTS_KEPT`).
        confirmed: The positions of the latest known ``since`` the client sent (it applied everything before them).
        redeliver: Rows whose current state the client must be sent.
        pushed: Rows the client wrote most recently (it holds them locally).
        resync: The resync mark of the latest known ``since`` the client sent (with ``confirmed``: where it stands
            in a resync), or ``None``.
        resynced: The client was resynced from a checkpoint, so it may hold rows the server cannot name (deleted or
            moved out of its buckets while it was behind): a row it cannot see before a change may still be there,
            so such rows always go out in row form, never as a plain ``INSERT``.
        version: The stored version (optimistic concurrency).
    """

    handouts: tuple[Handout, ...] = ()
    confirmed: Positions | None = None
    redeliver: tuple[RowKey, ...] = ()
    pushed: tuple[RowKey, ...] = ()
    resync: ResyncMark | None = None
    resynced: bool = False
    version: int = 0

    def handout(self, since: int) -> Handout | None:
        """The handout of ``since``, or ``None`` if this session never handed it out."""
        for handout in reversed(self.handouts):
            if handout.server_hlc == since:
                return handout
        return None

    def handed(self, handout: Handout) -> SinceSession:
        """This session with one more handout (replacing one of the same ``serverHlc``; the oldest forgotten beyond
        :data:`HANDOUTS_KEPT`)."""
        kept = tuple(h for h in self.handouts if h.server_hlc != handout.server_hlc)
        return replace(self, handouts=(*kept, handout)[-HANDOUTS_KEPT:])

    def to_json(self) -> dict[str, Any]:
        """The stored JSON shape (HLCs as decimal strings)."""
        out: dict[str, Any] = {
            "h": [h.to_json() for h in self.handouts],
            "c": None if self.confirmed is None else dict(self.confirmed),
            "r": [list(row) for row in self.redeliver],
            "p": [list(row) for row in self.pushed],
        }
        if self.resync is not None:
            out["m"] = self.resync.to_json()
        if self.resynced:
            out["x"] = 1
        return out

    @classmethod
    def from_json(cls, doc: Mapping[str, Any], version: int) -> SinceSession:
        """Inverse of :meth:`to_json`."""
        return cls(
            handouts=tuple(Handout.from_json(h) for h in doc.get("h", [])),
            confirmed=None if doc.get("c") is None else dict(doc["c"]),
            redeliver=tuple((str(t), str(r)) for t, r in doc.get("r", [])),
            pushed=tuple((str(t), str(r)) for t, r in doc.get("p", [])),
            resync=ResyncMark.from_json(doc.get("m")),
            resynced=bool(doc.get("x")),
            version=version,
        )

    def encode(self) -> str:
        """The stored text."""
        return json.dumps(self.to_json(), separators=(",", ":"), ensure_ascii=False)
