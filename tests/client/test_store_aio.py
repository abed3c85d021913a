"""The asyncio face of the store (``lakesync.client.aio``) against ``lakesync local``: the same sync, writes that
never block the loop, and change notifications delivered on the loop."""

from __future__ import annotations

import asyncio
import threading
from pathlib import Path
from typing import Any

import pytest

from lakesync.auth import mint_token
from lakesync.client import Change, LocalWriteError, RowNotFoundError
from lakesync.client.aio import AsyncLocalStore, connect
from lakesync.local.runner import LocalStack
from tests.client.conftest import gateway_rows, unique_table
from tests.factories import todo_schema


async def _open(stack: LocalStack, tmp_path: Path, name: str, table: str, **options: Any) -> AsyncLocalStore:
    options.setdefault("realtime", False)
    return await connect(
        tmp_path / f"{name}.db",
        url=stack.url,
        gateway="default",
        token=mint_token(name, "default", stack.secret),
        schemas=[todo_schema(table)],
        **options,
    )


def test_two_async_stores_converge_through_the_gateway(stack: LocalStack, tmp_path: Path) -> None:
    table = unique_table()

    async def scenario() -> tuple[dict[str, Any], dict[str, Any], int]:
        async with await _open(stack, tmp_path, "ana", table) as ana, await _open(stack, tmp_path, "ben", table) as ben:
            await ana.insert(table, "t1", {"title": "draft", "done": False})
            await ben.insert(table, "t2", {"title": "review", "priority": 2})
            await ana.insert_many(table, {f"bulk{i}": {"title": f"row {i}"} for i in range(5)})
            await ana.sync()
            await ben.sync()
            await ana.sync()
            await ana.update(table, "t2", {"done": True})
            await ben.delete(table, "bulk0")
            for store in (ana, ben, ana, ben):
                await store.sync()
            return await ana.rows(table), await ben.rows(table), await ana.pending()

    rows_a, rows_b, pending = asyncio.run(scenario())
    assert rows_a == rows_b
    assert rows_a["t2"]["done"] is True and "bulk0" not in rows_a and len(rows_a) == 6
    assert pending == 0
    assert {k: {c: v for c, v in r.items() if v is not None} for k, r in rows_a.items()} == {
        k: {c: v for c, v in r.items() if v is not None} for k, r in gateway_rows(stack, table).items()
    }


def test_a_batch_is_all_or_nothing_and_errors_reach_the_awaiting_task(stack: LocalStack, tmp_path: Path) -> None:
    table = unique_table()

    async def scenario() -> dict[str, Any]:
        async with await _open(stack, tmp_path, "cal", table) as store:
            async with store.batch() as batch:
                batch.insert(table, "a", {"title": "kept"})
                batch.insert(table, "b", {"title": "kept too"})
            with pytest.raises(RowNotFoundError):
                async with store.batch() as batch:
                    batch.insert(table, "c", {"title": "not kept"})
                    batch.update(table, "missing", {"title": "x"})
            with pytest.raises(LocalWriteError):
                await store.insert(table, "d", {"priority": "high"})
            assert await store.get(table, "a") is not None
            assert await store.query(f'SELECT count(*) FROM "{table}"') == [(2,)]
            return await store.rows(table)

    assert set(asyncio.run(scenario())) == {"a", "b"}


def test_changes_arrive_on_the_loop_local_and_remote(stack: LocalStack, tmp_path: Path) -> None:
    table = unique_table()

    async def scenario() -> tuple[list[Change], list[tuple[str, bool]]]:
        loop_thread = threading.get_ident()
        seen: list[tuple[str, bool]] = []

        async def on_change(change: Change) -> None:  # a coroutine callback runs as a task on the loop
            seen.append((change.origin, threading.get_ident() == loop_thread))

        async with await _open(stack, tmp_path, "dan", table) as dan, await _open(stack, tmp_path, "eve", table) as eve:
            unsubscribe = eve.subscribe(table, on_change)
            async with eve.changes(table) as stream:
                await eve.insert(table, "mine", {"title": "local"})
                await dan.insert(table, "theirs", {"title": "remote"})
                await dan.sync()
                await eve.sync()
                got = [await asyncio.wait_for(anext(stream), 5), await asyncio.wait_for(anext(stream), 5)]
            unsubscribe()
            await asyncio.sleep(0.05)
            return got, seen

    got, seen = asyncio.run(scenario())
    assert [(c.origin, set(c.row_ids)) for c in got] == [("local", {"mine"}), ("remote", {"theirs"})]
    assert seen == [("local", True), ("remote", True)]


def test_background_sync_delivers_a_remote_change_while_the_loop_keeps_running(
    stack: LocalStack, tmp_path: Path
) -> None:
    table = unique_table()

    async def scenario() -> tuple[Change, int]:
        ticks = 0

        async def ticker() -> None:
            nonlocal ticks
            while True:
                ticks += 1
                await asyncio.sleep(0.01)

        async with await _open(stack, tmp_path, "fay", table, poll_interval=0.05) as fay:
            await fay.sync()
            async with await _open(stack, tmp_path, "gus", table) as gus:
                stream = fay.changes(table)
                fay.start()
                running = asyncio.create_task(ticker())
                await gus.insert(table, "g1", {"title": "from gus"})
                await gus.sync()
                change = await asyncio.wait_for(anext(stream), 10)
                running.cancel()
                await fay.stop()
                stream.close()
                return change, ticks

    change, ticks = asyncio.run(scenario())
    assert change.origin == "remote" and change.row_ids == frozenset({"g1"})
    assert ticks > 1  # the loop ran while the store synced in the background


def test_closing_a_change_stream_ends_the_iteration_of_a_task_waiting_on_it(tmp_path: Path) -> None:
    table = unique_table()

    async def scenario() -> tuple[list[Change], list[Change]]:
        store = await connect(
            tmp_path / "streams.db",
            url="http://127.0.0.1:9",  # never reached: local writes only
            gateway="default",
            token=mint_token("streams", "default", "s" * 32),
            schemas=[todo_schema(table)],
            realtime=False,
        )
        async with store:
            stream = store.changes(table)
            got: list[Change] = []

            async def consume() -> None:
                async for change in stream:
                    got.append(change)

            # Given a task iterating a change stream, waiting for the next change after the first
            reader = asyncio.create_task(consume())
            await store.insert(table, "r1", {"title": "one"})

            async def first_seen() -> None:
                while not got:
                    await asyncio.sleep(0.01)

            await asyncio.wait_for(first_seen(), 30)
            # When another task closes the stream
            stream.close()
            # Then the waiting iteration ends with what it got (it would otherwise wait forever)
            await asyncio.wait_for(reader, 30)
            return got, [change async for change in stream]

    got, after = asyncio.run(scenario())
    assert [c.row_ids for c in got] == [frozenset({"r1"})]
    assert after == []
