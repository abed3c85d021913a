"""Sync protocol messages: what clients push, how they ask to pull, and what the server answers.

The JSON shapes (:meth:`to_json` / :meth:`from_json`) are the wire's: camelCase keys and every HLC as a decimal string::

    SyncPush     {"clientId": str, "deltas": [RowDelta], "lastSeenHlc": "<decimal>"}
    SyncPull     {"clientId": str, "sinceHlc": "<decimal>", "maxDeltas": int}
    SyncResponse {"deltas": [RowDelta], "serverHlc": "<decimal>", "hasMore": bool}

``from_json`` type-checks the whole object and raises :class:`~lakesync.core.errors.ValidationError` naming the first
bad field (``deltas[2].hlc``…). A field whose dataclass attribute has a default may be omitted in JSON
(``lastSeenHlc`` → 0, ``hasMore`` → false); every other field is required. ``maxDeltas`` is a uint32 on the wire, so it
must be an integer in ``[0, 2**32 - 1]``. Deltas are parsed with :meth:`RowDelta.from_json`.

The binary (protobuf) forms live in :mod:`lakesync.wire`.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

from lakesync.core import hlc as hlc_mod
from lakesync.core.delta import RowDelta
from lakesync.core.errors import ValidationError

MAX_UINT32 = 0xFFFFFFFF


@dataclass(frozen=True, slots=True)
class SyncPush:
    """A client's batch of deltas. ``last_seen_hlc``: the ``serverHlc`` of the last page the client applied (or of its
    last push); the ``since`` session of an original client takes it as confirmed."""

    client_id: str
    deltas: tuple[RowDelta, ...]
    last_seen_hlc: int = 0

    def to_json(self) -> dict[str, Any]:
        """The wire JSON shape."""
        return {
            "clientId": self.client_id,
            "deltas": [d.to_json() for d in self.deltas],
            "lastSeenHlc": str(self.last_seen_hlc),
        }

    @classmethod
    def from_json(cls, obj: object) -> SyncPush:
        """Parse and type-check the wire JSON shape.

        Raises:
            ValidationError: naming the first field that is missing or of the wrong type.
        """
        body = _object(obj, "SyncPush")
        client_id = _client_id(body)
        deltas = _deltas(body)
        last_seen = hlc_mod.parse(body["lastSeenHlc"], field="lastSeenHlc") if "lastSeenHlc" in body else 0
        return cls(client_id=client_id, deltas=deltas, last_seen_hlc=last_seen)


@dataclass(frozen=True, slots=True)
class SyncPull:
    """A request for the deltas after ``since_hlc``, at most ``max_deltas`` of them."""

    client_id: str
    since_hlc: int
    max_deltas: int

    def to_json(self) -> dict[str, Any]:
        """The wire JSON shape."""
        return {"clientId": self.client_id, "sinceHlc": str(self.since_hlc), "maxDeltas": self.max_deltas}

    @classmethod
    def from_json(cls, obj: object) -> SyncPull:
        """Parse and type-check the wire JSON shape.

        Raises:
            ValidationError: naming the first field that is missing or of the wrong type.
        """
        body = _object(obj, "SyncPull")
        client_id = _client_id(body)
        since = hlc_mod.parse(body.get("sinceHlc"), field="sinceHlc")
        max_deltas = body.get("maxDeltas")
        if isinstance(max_deltas, bool) or not isinstance(max_deltas, int) or not 0 <= max_deltas <= MAX_UINT32:
            raise ValidationError(f"maxDeltas must be an integer between 0 and {MAX_UINT32}")
        return cls(client_id=client_id, since_hlc=since, max_deltas=max_deltas)


@dataclass(frozen=True, slots=True)
class SyncResponse:
    """The server's answer to a push (no deltas) or a pull, and the body of broadcasts and checkpoint chunks."""

    deltas: tuple[RowDelta, ...]
    server_hlc: int
    has_more: bool = False

    def to_json(self) -> dict[str, Any]:
        """The wire JSON shape."""
        return {
            "deltas": [d.to_json() for d in self.deltas],
            "serverHlc": str(self.server_hlc),
            "hasMore": self.has_more,
        }

    @classmethod
    def from_json(cls, obj: object) -> SyncResponse:
        """Parse and type-check the wire JSON shape.

        Raises:
            ValidationError: naming the first field that is missing or of the wrong type.
        """
        body = _object(obj, "SyncResponse")
        deltas = _deltas(body)
        server_hlc = hlc_mod.parse(body.get("serverHlc"), field="serverHlc")
        has_more = body.get("hasMore", False)
        if not isinstance(has_more, bool):
            raise ValidationError("hasMore must be a boolean")
        return cls(deltas=deltas, server_hlc=server_hlc, has_more=has_more)


def _object(obj: object, name: str) -> Mapping[str, Any]:
    if not isinstance(obj, Mapping):
        raise ValidationError(f"{name} must be a JSON object")
    return obj


def _client_id(body: Mapping[str, Any]) -> str:
    client_id = body.get("clientId")
    if not isinstance(client_id, str) or not client_id:
        raise ValidationError("clientId must be a non-empty string")
    return client_id


def _deltas(body: Mapping[str, Any]) -> tuple[RowDelta, ...]:
    raw = body.get("deltas")
    if not isinstance(raw, list):
        raise ValidationError("deltas must be an array")
    return tuple(RowDelta.from_json(item, where=f"deltas[{i}]") for i, item in enumerate(raw))


__all__ = ["MAX_UINT32", "SyncPull", "SyncPush", "SyncResponse"]
