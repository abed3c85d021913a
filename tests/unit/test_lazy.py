"""lakesync.lazy.Lazy: built once on first use, replaced and closed on demand."""

from __future__ import annotations

from lakesync.lazy import Lazy


def test_built_once_replaced_and_closed() -> None:
    built: list[int] = []
    closed: list[int] = []
    holder = Lazy(lambda: built.append(len(built)) or len(built), closed.append)
    assert holder.get() == 1 and holder.get() == 1 and built == [0]
    holder.use(42)
    assert closed == [1] and holder.get() == 42
    holder.reset()
    assert closed == [1, 42]
    assert holder.get() == 2 and built == [0, 1]
