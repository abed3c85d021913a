"""An open WebSocket session as the gateway keeps it: :class:`Connection` and its frame :class:`Encoding`."""

from __future__ import annotations

import enum
from collections.abc import Mapping
from dataclasses import dataclass, field

from lakesync.core.claims import ClaimValue

__all__ = ["Connection", "Encoding"]


class Encoding(enum.StrEnum):
    """How a session's frames carry the binary messages."""

    BINARY = "binary"
    BASE64 = "base64"


@dataclass(frozen=True, slots=True)
class Connection:
    """An open WebSocket session.

    Attributes:
        connection_id: The transport's id (API Gateway's ``connectionId``).
        gateway: The gateway the token authorises.
        client_id: The token's ``sub``: this client's own changes are not broadcast back to it.
        claims: The token's custom claims, for sync rules.
        encoding: The session's frame encoding.
        expires_at: Epoch seconds after which the session is refused (the token's expiry, at most two hours).
        connected_at: Epoch seconds of the upgrade.
    """

    connection_id: str
    gateway: str
    client_id: str
    claims: Mapping[str, ClaimValue] = field(hash=False)
    encoding: Encoding
    expires_at: int
    connected_at: int

    def expired(self, now_s: float) -> bool:
        """Whether the session outlived its token (or two hours)."""
        return now_s >= self.expires_at
