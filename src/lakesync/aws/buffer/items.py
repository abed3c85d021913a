"""The buffer's items on DynamoDB, attribute by attribute: a name in the code for every stored attribute, and the
codecs between the items and the domain types (docs/buffer.md).

The stored names are a storage format: short, since every byte of an item is billed, and never renamed. Code reads
and writes them through the names here: :class:`HeadAttr` (the heads table), :class:`RowAttr` (rows),
:class:`ChunkAttr` (the log, one item per commit chunk), :class:`DedupAttr` (dedup), :class:`DoubtAttr` (the
records of in-doubt runs in the config table) and :class:`RegistryAttr` (the shard registry in the config table).
Items are built by hand (no TypeSerializer) because this is the hot path.
"""

from __future__ import annotations

from collections.abc import Iterable, Sequence
from typing import Any, Final

from lakesync.aws.buffer.log_chunks import chunk_first, chunk_key, decode_entries, encode_entries, is_commit_mark
from lakesync.aws.buffer.row_doubts import Doubt, decode_doubts, encode_doubts
from lakesync.aws.items import Item, decode_row_state, encode_row_state, num_attr, registry_key, str_attr
from lakesync.aws.tables import TTL_ATTRIBUTE
from lakesync.core.log import (
    LOG_CHUNK_MAX_ENTRIES,
    ROW_RECENT_KEY_CHARS,
    Commit,
    LogEntry,
    ShardHead,
    ShardId,
    StoredRow,
    row_key,
)

__all__ = [
    "DOUBT_PREFIX",
    "ChunkAttr",
    "DedupAttr",
    "DoubtAttr",
    "HeadAttr",
    "RegistryAttr",
    "RowAttr",
    "chunk_item",
    "chunk_span",
    "decode_chunk_part",
    "dedup_item",
    "dedup_record_key",
    "doubt_from_record",
    "doubt_record_item",
    "doubt_record_key",
    "doubts_update",
    "head_doubts",
    "head_from_item",
    "head_key",
    "head_last_commit_hlc",
    "head_seq",
    "live_delta_ids",
    "new_head_item",
    "record_pks",
    "registry_item",
    "row_from_item",
    "row_item",
    "row_item_key",
    "rows_applied",
]


class HeadAttr:
    """The heads table: one item per shard, keyed by the shard."""

    SHARD: Final = "shard"
    SEQ: Final = "seq"
    """The position of the log's last committed entry the head is moved over."""
    ROWS_APPLIED: Final = "ra"
    """Every chunk up to it has its rows written (absent on an old head: then ``seq``)."""
    DOUBTS: Final = "dq"
    """The in-doubt runs (:func:`lakesync.aws.buffer.row_doubts.encode_doubts`); absent when there are none."""
    BYTES_TOTAL: Final = "bt"
    DELTAS_TOTAL: Final = "dt"
    FLUSHED_SEQ: Final = "fs"
    FLUSHED_BYTES: Final = "fb"
    FLUSHED_DELTAS: Final = "fd"
    LAST_COMMIT_HLC: Final = "lch"
    RELEASED_SEQ: Final = "rs"
    RELEASED_HLC: Final = "rh"
    PUBLISHED_SEQ: Final = "ps"


class RowAttr:
    """The rows table: the latest state of each row (a cache of the log), keyed by its main or alternate key."""

    KEY: Final = "pk"
    STATE: Final = "s"
    """The row's LWW state as JSON text (:func:`lakesync.aws.items.encode_row_state`)."""
    VERSION: Final = "v"
    """The position of the last log entry folded in: a row is never written backwards."""
    RECENT: Final = "k"
    """The recent dedup keys of the row's deltas, concatenated (absent when none)."""


class ChunkAttr:
    """The deltas table: one item per commit chunk (:mod:`lakesync.aws.buffer.log_chunks`)."""

    SHARD: Final = "shard"
    SEQ: Final = "seq"
    """The sort key: :func:`lakesync.aws.buffer.log_chunks.chunk_key` of the chunk's first sequence."""
    COUNT: Final = "n"
    FIRST_HLC: Final = "c"
    """The commit HLC of the first entry; entry ``first + i`` has ``c + i``."""
    ENTRIES: Final = "z"
    """The entries, compressed."""
    PREVIOUS_HLC: Final = "pv"
    """The commit HLC of the entry before the chunk (absent on a shard's first chunk)."""
    MARK_HLC: Final = "chlc"
    """The last commit HLC, on commit marks only: the sort key of the sparse ``by_commit`` index."""
    EXPIRES: Final = TTL_ATTRIBUTE


class DedupAttr:
    """The dedup table: one item per delta id pushed, live while ``exp`` is in the future."""

    KEY: Final = "pk"
    EXPIRES: Final = TTL_ATTRIBUTE


class RegistryAttr:
    """A shard's entry in the registry (config table), which pulls and the flush list shards by."""

    GATEWAY: Final = "gw"
    SORT_KEY: Final = "sk"
    TABLE: Final = "table"


class DoubtAttr:
    """The record of an in-doubt run (config table): its positions, deadline and its rows' main keys."""

    GATEWAY: Final = "gw"
    SORT_KEY: Final = "sk"
    FIRST: Final = "first"
    LAST: Final = "last"
    UNTIL: Final = "until"
    ROWS: Final = "rows"


# -- heads ----------------------------------------------------------------------------------------------------------
def head_key(shard: ShardId) -> Item:
    """The key of ``shard``'s head item."""
    return {HeadAttr.SHARD: str_attr(shard.key)}


def new_head_item(head: ShardHead, *, applied: int) -> Item:
    """A new shard's head item at ``head`` (nothing flushed yet), rows applied through ``applied``."""
    item: Item = {
        HeadAttr.SHARD: str_attr(head.shard.key),
        HeadAttr.SEQ: num_attr(head.seq),
        HeadAttr.BYTES_TOTAL: num_attr(head.bytes_total),
        HeadAttr.DELTAS_TOTAL: num_attr(head.deltas_total),
        HeadAttr.FLUSHED_SEQ: num_attr(0),
        HeadAttr.FLUSHED_BYTES: num_attr(0),
        HeadAttr.FLUSHED_DELTAS: num_attr(0),
        HeadAttr.LAST_COMMIT_HLC: num_attr(head.last_commit_hlc),
        HeadAttr.ROWS_APPLIED: num_attr(applied),
    }
    return item


def head_from_item(item: Item) -> ShardHead:
    """The head a head item holds."""
    return ShardHead(
        shard=ShardId.parse(item[HeadAttr.SHARD]["S"]),
        seq=int(item[HeadAttr.SEQ]["N"]),
        bytes_total=int(item[HeadAttr.BYTES_TOTAL]["N"]),
        deltas_total=int(item[HeadAttr.DELTAS_TOTAL]["N"]),
        flushed_seq=int(item[HeadAttr.FLUSHED_SEQ]["N"]),
        flushed_bytes=int(item[HeadAttr.FLUSHED_BYTES]["N"]),
        flushed_deltas=int(item[HeadAttr.FLUSHED_DELTAS]["N"]),
        last_commit_hlc=int(item[HeadAttr.LAST_COMMIT_HLC]["N"]),
        released_seq=int(item[HeadAttr.RELEASED_SEQ]["N"]) if HeadAttr.RELEASED_SEQ in item else 0,
        released_hlc=int(item[HeadAttr.RELEASED_HLC]["N"]) if HeadAttr.RELEASED_HLC in item else 0,
        published_seq=int(item[HeadAttr.PUBLISHED_SEQ]["N"]) if HeadAttr.PUBLISHED_SEQ in item else None,
    )


def head_seq(item: Item) -> int:
    """The head's ``seq``."""
    return int(item[HeadAttr.SEQ]["N"])


def head_last_commit_hlc(item: Item) -> int:
    """The head's ``lch``: the commit HLC of the entry at ``seq``."""
    return int(item[HeadAttr.LAST_COMMIT_HLC]["N"])


def rows_applied(head_item: Item | None) -> int:
    """The head's ``ra``: every chunk up to it has its rows written."""
    if head_item is None:
        return 0
    if HeadAttr.ROWS_APPLIED in head_item:
        return int(head_item[HeadAttr.ROWS_APPLIED]["N"])
    return head_seq(head_item)


def head_doubts(head_item: Item | None) -> tuple[Doubt, ...]:
    """The in-doubt chunks a head lists (``dq``)."""
    if head_item is None or HeadAttr.DOUBTS not in head_item:
        return ()
    return decode_doubts(head_item[HeadAttr.DOUBTS]["S"])


def doubts_update(doubts: Sequence[Doubt] | None, values: dict[str, Any]) -> str:
    """The part of a head update that sets its in-doubt runs (``dq``), if given (its value added to ``values``)."""
    if doubts is None:
        return ""
    if not doubts:
        return f" REMOVE {HeadAttr.DOUBTS}"
    values[":dq"] = str_attr(encode_doubts(doubts))
    return f", {HeadAttr.DOUBTS} = :dq"


# -- rows -----------------------------------------------------------------------------------------------------------
def row_item_key(pk: str) -> Item:
    """The key of the row item at ``pk`` (a main or an alternate key)."""
    return {RowAttr.KEY: str_attr(pk)}


def row_item(gateway: str, row: StoredRow) -> Item:
    """The item of a row at its main key."""
    state = row.state
    item: Item = {
        RowAttr.KEY: str_attr(row_key(gateway, state.table, state.row_id)),
        RowAttr.STATE: str_attr(encode_row_state(state)),
        RowAttr.VERSION: num_attr(row.version),
    }
    if row.recent:
        item[RowAttr.RECENT] = str_attr("".join(row.recent))
    return item


def row_from_item(key: tuple[str, str], item: Item) -> StoredRow:
    """The row ``(table, row id)`` a row item holds."""
    table, row_id = key
    recent = item[RowAttr.RECENT]["S"] if RowAttr.RECENT in item else ""
    return StoredRow(
        decode_row_state(table, row_id, item[RowAttr.STATE]["S"]),
        int(item[RowAttr.VERSION]["N"]),
        tuple(recent[i : i + ROW_RECENT_KEY_CHARS] for i in range(0, len(recent), ROW_RECENT_KEY_CHARS)),
    )


# -- log chunks -----------------------------------------------------------------------------------------------------
def chunk_item(commit: Commit, *, log_ttl_s: int, mark_every: int) -> Item:
    """The log item of a commit chunk: what the commit's conditional put writes. ``log_ttl_s``: how long after its
    last commit the item expires; ``mark_every``: how many entries apart the commit marks are."""
    first, last = commit.entries[0], commit.entries[-1]
    if len(commit.entries) > LOG_CHUNK_MAX_ENTRIES or any(
        e.seq != first.seq + i or e.commit_hlc != first.commit_hlc + i for i, e in enumerate(commit.entries)
    ):
        raise ValueError(
            f"a commit holds at most {LOG_CHUNK_MAX_ENTRIES} entries with consecutive sequences and commit HLCs"
        )
    chunk: Item = {
        ChunkAttr.SHARD: str_attr(commit.shard.key),
        ChunkAttr.SEQ: num_attr(chunk_key(first.seq)),
        ChunkAttr.COUNT: num_attr(len(commit.entries)),
        ChunkAttr.FIRST_HLC: num_attr(first.commit_hlc),
        ChunkAttr.ENTRIES: {"B": encode_entries(commit.entries)},
        ChunkAttr.EXPIRES: num_attr((last.commit_hlc >> 16) // 1000 + log_ttl_s),
    }
    if first.seq > 1 and commit.previous_commit_hlc > 0:
        # The commit HLC of the entry before the chunk: a cursor standing there is checked by the read after it.
        chunk[ChunkAttr.PREVIOUS_HLC] = num_attr(commit.previous_commit_hlc)
    if is_commit_mark(first.seq, last.seq, mark_every):
        # Only marks are in the sparse `by_commit` index (an entry costs a write unit).
        chunk[ChunkAttr.MARK_HLC] = num_attr(last.commit_hlc)
    return chunk


def chunk_span(item: Item) -> tuple[int, int, int]:
    """``(first sequence, count, first commit HLC)`` of a log item."""
    return (
        chunk_first(int(item[ChunkAttr.SEQ]["N"])),
        int(item[ChunkAttr.COUNT]["N"]),
        int(item[ChunkAttr.FIRST_HLC]["N"]),
    )


def decode_chunk_part(shard: ShardId, item: Item, start: int, wanted: int, images: bool) -> list[LogEntry]:
    """Up to ``wanted`` entries of a chunk item from its ``start``-th on, decoded alone (the text inflated no further
    than they reach when the chunk holds more)."""
    first, count, first_hlc = chunk_span(item)
    if start >= count:
        return []
    stop = start + wanted
    blob = item[ChunkAttr.ENTRIES]["B"]
    return decode_entries(
        shard, first, first_hlc, blob, images=images, start=start, stop=stop if stop < count else None
    )


# -- dedup ----------------------------------------------------------------------------------------------------------
def dedup_record_key(gateway: str, delta_id: str) -> Item:
    """The key of the dedup record of ``delta_id`` pushed to ``gateway``."""
    return {DedupAttr.KEY: str_attr(f"{gateway}#{delta_id}")}


def dedup_item(gateway: str, delta_id: str, expires_at: int) -> Item:
    """The dedup record of ``delta_id``, live until ``expires_at`` (epoch seconds)."""
    return {**dedup_record_key(gateway, delta_id), DedupAttr.EXPIRES: num_attr(expires_at)}


def live_delta_ids(gateway: str, items: Iterable[Item], now_s: int) -> set[str]:
    """The delta ids of the dedup records ``items`` of ``gateway`` still live at ``now_s``."""
    prefix = len(gateway) + 1
    return {item[DedupAttr.KEY]["S"][prefix:] for item in items if int(item[DedupAttr.EXPIRES]["N"]) > now_s}


# -- the config table: the registry and the in-doubt runs' records ---------------------------------------------------
def registry_item(shard: ShardId) -> Item:
    """The shard's entry in the registry (config table), which pulls and the flush list shards by."""
    return {
        RegistryAttr.GATEWAY: str_attr(shard.gateway),
        RegistryAttr.SORT_KEY: str_attr(registry_key(shard)),
        RegistryAttr.TABLE: str_attr(shard.table),
    }


DOUBT_PREFIX: Final = "#doubt#"
"""Config sort keys of the in-doubt runs' records: ``#doubt#{shard}#{first}#{last}``, holding their rows' main
keys."""


def doubt_record_key(shard: ShardId, doubt: Doubt) -> Item:
    """The config-table key of the record of ``shard``'s in-doubt run ``doubt``."""
    # By first and last: two writers that take the same turn over may read different ends of the log, and each
    # record must list the rows of its own run (their alternate keys, by first position, hold the same states).
    return {
        DoubtAttr.GATEWAY: str_attr(shard.gateway),
        DoubtAttr.SORT_KEY: str_attr(f"{DOUBT_PREFIX}{shard.key}#{doubt.first}#{doubt.last}"),
    }


def doubt_record_item(shard: ShardId, doubt: Doubt, pks: Sequence[str]) -> Item:
    """The record of an in-doubt run: its positions, deadline and its rows' main keys ``pks``."""
    return {
        **doubt_record_key(shard, doubt),
        DoubtAttr.FIRST: num_attr(doubt.first),
        DoubtAttr.LAST: num_attr(doubt.last),
        DoubtAttr.UNTIL: num_attr(doubt.until_ms),
        DoubtAttr.ROWS: {"L": [str_attr(pk) for pk in pks]},
    }


def doubt_from_record(item: Item) -> Doubt:
    """The in-doubt run a record is of."""
    return Doubt(int(item[DoubtAttr.FIRST]["N"]), int(item[DoubtAttr.LAST]["N"]), int(item[DoubtAttr.UNTIL]["N"]))


def record_pks(item: Item) -> list[str]:
    """The main keys of the rows an in-doubt run's record lists."""
    return [value["S"] for value in item[DoubtAttr.ROWS]["L"]]
