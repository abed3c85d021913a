"""The cache of log ranges a scope difference reads (``lakesync.gateway.tail_cache``): bounded by bytes, least
recently used dropped first, a range larger than the cache not kept."""

from __future__ import annotations

from lakesync.core.log import LogEntry, ShardId
from lakesync.gateway.tail_cache import TailCache
from tests import factories

SHARD = ShardId("gw", "todos")


def _entries(count: int, size: int) -> list[LogEntry]:
    return [
        LogEntry(SHARD, seq, seq, factories.insert(f"r{seq}", hlc=seq), None, {"id": f"r{seq}"}, size)
        for seq in range(1, count + 1)
    ]


def test_a_range_is_kept_until_ranges_used_later_push_it_out() -> None:
    cache = TailCache(max_bytes=300)
    a, b, c = ("gw", "todos", 0, 1, 11), ("gw", "todos", 0, 2, 12), ("gw", "todos", 0, 3, 13)
    cache.put(a, _entries(1, 100))
    cache.put(b, _entries(2, 50))
    assert cache.get(a) is not None  # a is now the most recently used
    cache.put(c, _entries(2, 100))  # 100 + 100 + 200 > 300: b, the least recently used, goes
    assert cache.get(b) is None
    assert [e.seq for e in cache.get(a) or []] == [1]
    assert [e.seq for e in cache.get(c) or []] == [1, 2]


def test_a_range_larger_than_the_cache_is_not_kept_and_a_key_differing_in_its_mark_misses() -> None:
    cache = TailCache(max_bytes=100)
    cache.put(("gw", "todos", 0, 5, 15), _entries(5, 30))
    assert cache.get(("gw", "todos", 0, 5, 15)) is None
    cache.put(("gw", "todos", 0, 1, 11), _entries(1, 30))
    assert cache.get(("gw", "todos", 0, 1, 99)) is None  # the same positions of another log
    assert cache.get(("gw", "todos", 0, 1, 11)) is not None
