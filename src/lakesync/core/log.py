"""The buffer's domain, storage-neutral: shards, heads, stored rows, log entries, commits.

A *shard* is one gateway + table (+ a hash sub-shard for hot tables). Each shard has a *head* holding its commit
sequence: a push commits its log entries, its row-index updates and the head advance together, guarded by the head's
sequence and each row's version (optimistic concurrency). Log entries of a shard are numbered ``seq = 1, 2, ...`` in
commit order, so a reader that remembers the last ``seq`` it saw per shard never misses a late commit.
"""

from __future__ import annotations

import base64
import hashlib
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from typing import Final, TypeAlias

from lakesync.core.canonical import JsonValue, RawJson
from lakesync.core.delta import RowDelta
from lakesync.core.merge import RowState
from lakesync.core.rules import SyncRules

ITEM_LIMIT_BYTES = 400_000
"""DynamoDB's item size limit, "400 KB" (attribute names plus values), taken as 400,000 bytes: the service's real
limit lies a little above (measured between 409 and 410 KB), so every item a push writes stays within it."""
PARTITION_KEY_LIMIT_BYTES = 2048
"""DynamoDB's partition-key limit, counted over the whole stored key (our prefixes included)."""
SORT_KEY_LIMIT_BYTES = 1024
"""DynamoDB's sort-key limit, counted over the whole stored key (our prefixes included)."""
LOG_CHUNK_MAX_ENTRIES = 1000
"""Most entries one commit stores together (one log item on DynamoDB, whose size bounds it long before this)."""
LOG_TTL_S = 14 * 24 * 3600
"""How long the DynamoDB log keeps an entry (its item's TTL, counted from its commit). Release is a mark on the head
(pulls behind it get 410) and TTL deletes the items for free, so the flush must run within this time: the flush
job fails loudly on a range it cannot read whole."""


def row_key(gateway: str, table: str, row_id: str) -> str:
    """The row index's key of a row, ``{gateway}#{table}#{rowId}`` (a partition key on DynamoDB)."""
    return f"{gateway}#{table}#{row_id}"


def dedup_key(client_id: str, delta_id: str) -> str:
    """The dedup record's key of a delta: scoped by the client that wrote it.

    A deltaId is client-supplied, so a key of the deltaId alone would let one client make another client's delta
    look recorded (and vanish as a duplicate) by sending its deltaId first. A legitimate re-send always carries the
    same clientId (the deltaId algorithm hashes it), so scoping loses no dedup. The key is the unpadded base64url of
    a 128-bit BLAKE2b of the length-prefixed pair: 22 ASCII characters whatever the ids' lengths -- shorter than a
    64-character deltaId, and never near a key-size limit.
    """
    client = client_id.encode("utf-8", "surrogatepass")
    digest = hashlib.blake2b(
        len(client).to_bytes(4, "big") + client + delta_id.encode("utf-8", "surrogatepass"), digest_size=16
    ).digest()
    return base64.urlsafe_b64encode(digest).rstrip(b"=").decode("ascii")


@dataclass(frozen=True, slots=True, order=True)
class ShardId:
    """One shard of the buffer: ``{gateway}#{table}#{sub}``."""

    gateway: str
    table: str
    sub: int = 0

    @property
    def key(self) -> str:
        """The storage key of the shard."""
        return f"{self.gateway}#{self.table}#{self.sub}"

    @classmethod
    def parse(cls, key: str) -> ShardId:
        """Inverse of :attr:`key`."""
        gateway, table, sub = key.rsplit("#", 2)
        return cls(gateway, table, int(sub))

    @classmethod
    def for_row(cls, gateway: str, table: str, row_id: str, sub_shards: int = 1) -> ShardId:
        """The shard a row belongs to; stable for a fixed number of sub-shards."""
        if sub_shards <= 1:
            return cls(gateway, table, 0)
        digest = hashlib.blake2b(row_id.encode("utf-8", "surrogatepass"), digest_size=8).digest()
        return cls(gateway, table, int.from_bytes(digest, "big") % sub_shards)


@dataclass(frozen=True, slots=True)
class ShardHead:
    """The head item of a shard: commit sequence and buffer accounting.

    ``seq``/``bytes_total``/``deltas_total`` count everything ever committed; the flush job advances
    ``flushed_seq``/``flushed_bytes``/``flushed_deltas`` after its Iceberg commit, so the unflushed buffer is the
    difference. Log entries up to ``released_seq`` (commit HLCs up to ``released_hlc``) were deleted by the flush
    job's release step; a pull position behind them has expired. Entries up to ``published_seq`` were published for
    materialisation (``None``: never published; the flush publishes from the release mark on).
    """

    shard: ShardId
    seq: int = 0
    bytes_total: int = 0
    deltas_total: int = 0
    flushed_seq: int = 0
    flushed_bytes: int = 0
    flushed_deltas: int = 0
    last_commit_hlc: int = 0
    released_seq: int = 0
    released_hlc: int = 0
    published_seq: int | None = None

    @property
    def unflushed_bytes(self) -> int:
        """Bytes committed but not yet flushed to the lake."""
        return self.bytes_total - self.flushed_bytes

    @property
    def unflushed_deltas(self) -> int:
        """Log entries committed but not yet flushed to the lake."""
        return self.deltas_total - self.flushed_deltas


ROW_RECENT_KEYS = 8
"""How many dedup keys of the deltas last merged into a row the row-index item keeps (:attr:`StoredRow.recent`)."""
ROW_RECENT_KEY_CHARS = 16
"""Characters of a dedup key a row keeps (96 bits: the row scopes them, so a collision needs two of a row's few
recent deltas to agree on 96 bits)."""


def recent_key(key: str) -> str:
    """The form of a dedup key kept in a row's :attr:`StoredRow.recent`."""
    return key[:ROW_RECENT_KEY_CHARS]


@dataclass(frozen=True, slots=True)
class StoredRow:
    """A row of the row index: its merged per-column LWW state, its version (the log position of the last entry it
    holds), and the dedup keys (:func:`recent_key`) of the last deltas merged into it, oldest first (at most
    :data:`ROW_RECENT_KEYS`): a re-sent delta is recognised from its row, so a delta that changes its row needs no
    dedup record of its own."""

    state: RowState
    version: int
    recent: tuple[str, ...] = ()


RowImages: TypeAlias = "tuple[dict[str, JsonValue] | None, dict[str, JsonValue] | None]"
"""A change's row values before and after it."""


class LogEntry:
    """One committed change, as pullers see it (immutable).

    ``delta`` is the *effective* delta (only the columns that won). ``before``/``after`` are the row's values just
    before and after the change (``None`` = the row did not exist); sync rules are evaluated against them, which is how
    DELETEs and sparse UPDATEs reach the clients whose buckets held the row. ``wire_json`` is the delta's wire JSON
    as stored (what ``JSON.stringify`` writes), when the store has it: pulls send it without rendering it again.

    A store may give ``wire_json`` alone (``delta=None``): the delta is then decoded from it on first use, so a pull
    answered with the stored JSON never builds the objects. Equality ignores ``wire_json``, as it is derived. A
    store may also give the images as ``images=(load, i)``: ``load()`` returns its chunk's ``(before, after)`` pairs
    and is called on first use of either image (a pull without sync rules never parses them).
    """

    __slots__ = ("_after", "_before", "_delta", "_images", "commit_hlc", "seq", "shard", "size", "wire_json")

    shard: ShardId
    seq: int
    commit_hlc: int
    size: int
    wire_json: str | None
    _before: dict[str, JsonValue] | None
    _after: dict[str, JsonValue] | None
    _delta: RowDelta | None
    _images: tuple[Callable[[], Sequence[RowImages]], int] | None

    def __init__(
        self,
        shard: ShardId,
        seq: int,
        commit_hlc: int,
        delta: RowDelta | None,
        before: dict[str, JsonValue] | None,
        after: dict[str, JsonValue] | None,
        size: int,
        wire_json: str | None = None,
        *,
        images: tuple[Callable[[], Sequence[RowImages]], int] | None = None,
    ) -> None:
        if delta is None and wire_json is None:
            raise ValueError("a log entry needs its delta or its stored wire JSON")
        # One assignment each, not a loop over pairs: a pull page builds thousands of these.
        set_ = object.__setattr__
        set_(self, "shard", shard)
        set_(self, "seq", seq)
        set_(self, "commit_hlc", commit_hlc)
        set_(self, "_delta", delta)
        set_(self, "_before", before)
        set_(self, "_after", after)
        set_(self, "size", size)
        set_(self, "wire_json", wire_json)
        set_(self, "_images", images)

    @property
    def before(self) -> dict[str, JsonValue] | None:
        """The row's values just before the change (``None``: it did not exist)."""
        if self._images is not None:
            self._load_images()
        return self._before

    @property
    def after(self) -> dict[str, JsonValue] | None:
        """The row's values just after the change (``None``: it is gone)."""
        if self._images is not None:
            self._load_images()
        return self._after

    def _load_images(self) -> None:
        images = self._images
        if images is None:  # loaded by another thread meanwhile
            return
        load, index = images
        before, after = load()[index]
        set_ = object.__setattr__
        set_(self, "_before", before)
        set_(self, "_after", after)
        set_(self, "_images", None)

    @property
    def delta(self) -> RowDelta:
        """The effective delta (decoded from ``wire_json`` on first use when the store gave only that)."""
        if self._delta is None:
            assert self.wire_json is not None
            object.__setattr__(self, "_delta", RowDelta.from_stored_json(self.wire_json))
        assert self._delta is not None
        return self._delta

    def wire_value(self) -> JsonValue:
        """The delta for a JSON response: the stored wire JSON as it is (:class:`RawJson`), else rendered."""
        return self.delta.to_json() if self.wire_json is None else RawJson(self.wire_json)

    def with_images(self, before: dict[str, JsonValue] | None, after: dict[str, JsonValue] | None) -> LogEntry:
        """The same entry with other row images (``None``, ``None`` leaves them out)."""
        return LogEntry(self.shard, self.seq, self.commit_hlc, self._delta, before, after, self.size, self.wire_json)

    def _key(self) -> tuple[object, ...]:
        return (self.shard, self.seq, self.commit_hlc, self.delta, self.before, self.after, self.size)

    def __eq__(self, other: object) -> bool:
        return isinstance(other, LogEntry) and self._key() == other._key()

    __hash__ = None  # type: ignore[assignment]  # the row images are dicts

    def __setattr__(self, name: str, value: object) -> None:
        raise AttributeError(f"LogEntry is immutable (cannot set {name!r})")

    def __repr__(self) -> str:
        return (
            f"LogEntry(shard={self.shard!r}, seq={self.seq!r}, commit_hlc={self.commit_hlc!r}, delta={self.delta!r},"
            f" before={self.before!r}, after={self.after!r}, size={self.size!r})"
        )


class _StoredEntry(LogEntry):
    """A :class:`LogEntry` read back from the log, built by plain slot stores and then turned into a ``LogEntry``
    (the same slots, so immutable again): a pull page builds a thousand, at half the cost of the constructor."""

    __slots__ = ()
    __setattr__ = object.__setattr__  # type: ignore[assignment]

    def __init__(
        self,
        shard: ShardId,
        seq: int,
        commit_hlc: int,
        size: int,
        wire_json: str,
        images: tuple[Callable[[], Sequence[RowImages]], int] | None,
    ) -> None:
        self.shard = shard
        self.seq = seq
        self.commit_hlc = commit_hlc
        self.size = size
        self.wire_json = wire_json
        self._images = images
        self._delta = None
        self._before = None
        self._after = None
        self.__class__ = LogEntry  # type: ignore[assignment]


stored_entry: Final[
    Callable[[ShardId, int, int, int, str, tuple[Callable[[], Sequence[RowImages]], int] | None], LogEntry]
] = _StoredEntry
"""An entry read back from the log: ``(shard, seq, commit_hlc, size, wire_json, images)``, its images loaded on
first use (``None``: left out)."""


@dataclass(frozen=True, slots=True)
class RowWrite:
    """A row-index write of a commit: the row (its ``version`` the position of its last entry) and the version the
    commit's basis held (0: none)."""

    row: StoredRow
    expected_version: int


@dataclass(frozen=True, slots=True)
class CommitBasis:
    """What a push chunk is planned against, read in one consistent round trip.

    ``head`` is ``None`` for a shard never committed to; ``rows`` holds the row-index entries that exist.
    """

    head: ShardHead | None
    rows: dict[tuple[str, str], StoredRow]


@dataclass(frozen=True, slots=True)
class Commit:
    """Everything one chunk of a push writes.

    The entries continue the head's sequence and carry consecutive commit HLCs (``entries[i].commit_hlc ==
    entries[0].commit_hlc + i``; stores keep only the first). The log entries and the head advance are atomic and
    guarded by the head's sequence alone: the store applies both or neither, and fails with :class:`CommitConflict`
    if the head moved since it was read. Rows change only through commits, so a current head means the basis's rows
    were current too. The row index is a cache of the log: a store may write the rows after the log (never going
    back: each row's ``version`` is the position of the last entry it holds), as long as its commit basis folds in
    the entries whose rows are not written yet. Dedup keys of deltas whose row is not written are recorded after the
    commit (:meth:`lakesync.ports.BufferStore.record_delta_ids`); re-merging a delta into a row that holds it changes
    nothing and logs nothing.
    """

    shard: ShardId
    expected_seq: int
    head: ShardHead
    entries: tuple[LogEntry, ...]
    rows: tuple[RowWrite, ...]
    new_shard: bool = False
    previous_commit_hlc: int = 0
    """The commit HLC of entry ``expected_seq``, the one before the first entry (``0`` for a new shard)."""


class CommitConflict(Exception):
    """The head or a row changed since it was read; re-read and retry."""


@dataclass(frozen=True, slots=True)
class PullBasis:
    """What a pull reads before the log: the gateway's sync rules (``None`` when none are stored) and every shard
    ever committed to, sorted."""

    rules: SyncRules | None
    shards: tuple[ShardId, ...]


@dataclass(frozen=True, slots=True)
class ShardStats:
    """Per-shard figures for the admin metrics route."""

    shard: ShardId
    head: ShardHead
    pending_flush: bool = False
    extra: dict[str, int] = field(default_factory=dict)
