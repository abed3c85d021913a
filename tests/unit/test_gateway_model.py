"""The gateway's storage-neutral types: a log entry given only its stored wire JSON decodes its delta on first use
and is then indistinguishable from one built with the delta; entries are immutable."""

from __future__ import annotations

import pytest

from lakesync.core.canonical import js_stringify
from lakesync.core.delta import make_delta
from lakesync.core.log import LogEntry, ShardId, stored_entry

SHARD = ShardId("gw", "todos", 0)
DELTA = make_delta("UPDATE", table="todos", row_id="r1", client_id="c1", hlc=7 << 16, columns={"t": "ü", "n": 1.5})
TEXT = js_stringify(DELTA.to_json())


def test_log_entry_from_stored_json_equals_the_entry_built_with_its_delta() -> None:
    stored = LogEntry(SHARD, 3, 9, None, {"t": "a"}, {"t": "ü", "n": 1.5}, 40, TEXT)
    built = LogEntry(SHARD, 3, 9, DELTA, {"t": "a"}, {"t": "ü", "n": 1.5}, 40)

    assert stored.delta == DELTA
    assert stored == built and built == stored
    assert stored.wire_json == TEXT and built.wire_json is None


def test_log_entry_equality_covers_every_field_but_the_wire_json() -> None:
    entry = LogEntry(SHARD, 3, 9, DELTA, None, {"t": "ü"}, 40, TEXT)

    assert entry == LogEntry(SHARD, 3, 9, DELTA, None, {"t": "ü"}, 40, "{}")
    assert entry != LogEntry(SHARD, 4, 9, DELTA, None, {"t": "ü"}, 40, TEXT)
    assert entry != LogEntry(SHARD, 3, 9, DELTA, {}, {"t": "ü"}, 40, TEXT)
    assert entry != entry.with_images(None, None)
    assert entry.with_images(None, None).with_images(None, {"t": "ü"}) == entry


def test_log_entry_is_immutable_and_needs_its_delta_or_its_text() -> None:
    entry = LogEntry(SHARD, 3, 9, None, None, None, 40, TEXT)
    with pytest.raises(AttributeError):
        entry.seq = 4  # type: ignore[misc]
    with pytest.raises(ValueError):
        LogEntry(SHARD, 3, 9, None, None, None, 40)


@pytest.mark.parametrize("with_images", [True, False])
def test_an_entry_read_back_is_a_plain_immutable_log_entry_equal_to_the_one_built(with_images: bool) -> None:
    # Given an entry read back from the log by its wire JSON, its images loaded on first use (or left out)
    loads: list[int] = []

    def load() -> list[tuple[dict[str, object] | None, dict[str, object] | None]]:
        loads.append(1)
        return [({"t": "a"}, {"t": "ü", "n": 1.5})]

    entry = stored_entry(SHARD, 3, 9, 40, TEXT, (load, 0) if with_images else None)
    # Then it is a LogEntry itself (not a subclass), as immutable as any
    assert type(entry) is LogEntry
    with pytest.raises(AttributeError):
        entry.seq = 4  # type: ignore[misc]
    # And equal to the entry built with its delta, its images read only when asked for
    assert loads == []
    images = ({"t": "a"}, {"t": "ü", "n": 1.5}) if with_images else (None, None)
    assert entry == LogEntry(SHARD, 3, 9, DELTA, *images, 40)
    assert (entry.before, entry.after, entry.wire_json) == (*images, TEXT)
    assert loads == ([1] if with_images else [])
