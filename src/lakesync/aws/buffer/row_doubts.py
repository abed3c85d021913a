"""In-doubt chunks: where the rows of a chunk live whose writer may still write them late
(docs/design/row-writes-in-batches.md).

A chunk's writer writes its rows with unconditional ``BatchWriteItem`` on its turn (the head at ``seq = ra`` = the
position before the chunk), and signs no such batch after its *deadline*: the wall time of the chunk's last commit
HLC plus :data:`BATCH_DEADLINE_MS`. AWS refuses a request that reaches it more than 15 minutes after the time stamp
of its signature, so no batch of that writer lands after :func:`until_ms`. A writer that takes the turn from a
writer that has not finished *declares* its chunks in doubt on the head (``dq``) until then, and their rows live at
alternate keys (:func:`alt_key`) that the late writer never writes, every write to them conditional (never
backwards). Readers take the newest of the main key and the alternate keys of the shard's in-doubt chunks.
"""

from __future__ import annotations

import base64
import hashlib
import json
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Final

from lakesync.core.hlc import decode

BATCH_DEADLINE_MS: Final = 30_000
"""How long after its commit a chunk's writer may still sign a batch of its rows."""
SIGNATURE_EXPIRY_MS: Final = 15 * 60_000
"""AWS refuses a signed request that reaches it more than 15 minutes after its signature's time stamp."""
RETRY_SPAN_MS: Final = 15_000
"""The SDK's retries of one call end within this (``lakesync.aws.clients.CLIENT_CONFIG``: 3 attempts of at most 1 s
to connect and 2 s to read, with backoff); each attempt is signed afresh."""
CLOCK_MARGIN_MS: Final = 60_000
"""Skew between a writer's clock and AWS's (Lambda keeps time with the Amazon Time Sync Service)."""
DOUBT_RUN_ENTRIES: Final = 100
"""Most entries one in-doubt run records: its record lists their rows' main keys (up to 2,048 bytes each), so that it
stays well within an item."""
ALT_PREFIX: Final = "~"
"""No main row key starts with it (gateway ids are identifiers)."""


@dataclass(frozen=True, slots=True)
class Doubt:
    """Chunks ``first .. last`` (entry positions) whose rows live at alternate keys until ``until_ms``."""

    first: int
    last: int
    until_ms: int


def deadline_ms(last_commit_hlc: int) -> int:
    """The last moment a chunk's writer may sign a batch of its rows."""
    return decode(last_commit_hlc)[0] + BATCH_DEADLINE_MS


def until_ms(last_commit_hlc: int) -> int:
    """When no batch of the rows of a chunk (whose last commit HLC is given) can land any more."""
    return deadline_ms(last_commit_hlc) + RETRY_SPAN_MS + SIGNATURE_EXPIRY_MS + CLOCK_MARGIN_MS


def alt_key(doubt: Doubt, main_key: str) -> str:
    """The alternate key of a row (main key ``main_key``) for the in-doubt chunks ``doubt``: fixed length whatever the
    row id's, so it always fits DynamoDB's key limit."""
    digest = hashlib.blake2b(main_key.encode("utf-8", "surrogatepass"), digest_size=16).digest()
    return f"{ALT_PREFIX}{doubt.first}#{base64.urlsafe_b64encode(digest).rstrip(b'=').decode('ascii')}"


def encode_doubts(doubts: Sequence[Doubt]) -> str:
    """The head's ``dq`` attribute."""
    return json.dumps([[d.first, d.last, d.until_ms] for d in doubts], separators=(",", ":"))


def decode_doubts(text: str | None) -> tuple[Doubt, ...]:
    """The in-doubt chunks a head's ``dq`` lists (none when it has none)."""
    if not text:
        return ()
    return tuple(Doubt(int(first), int(last), int(until)) for first, last, until in json.loads(text))
