"""The local-first store for asyncio applications: the same store (:class:`~lakesync.client.store.LocalStore`), its
blocking calls run in worker threads, its change notifications delivered on the event loop.

::

    store = await lakesync.client.aio.connect("app.db", url=..., gateway="default", token=..., schemas=[...])
    await store.insert("todos", "t1", {"title": "write the report"})
    report = await store.sync()
    async for change in store.changes("todos"):
        ...

Every method awaits the store's own (thread-safe) method in a thread of the loop's default executor, so a slow
SQLite write or a sync against a distant gateway never blocks the loop; the guarantees are the store's. Background
sync (:meth:`AsyncLocalStore.start`) keeps running on the store's own threads. Nothing here is kept apart from the
store: it is a thin face that forwards, so it stays in step with it.
"""

from __future__ import annotations

import asyncio
import contextlib
import inspect
from collections.abc import AsyncIterator, Awaitable, Callable, Mapping, Sequence
from typing import Any, Self

from lakesync.client.model import Change, StreamSubscription, SyncReport
from lakesync.client.store import Batch, LocalStore
from lakesync.client.store import connect as connect_store
from lakesync.core.canonical import JsonValue
from lakesync.core.merge import RowState

__all__ = ["AsyncLocalStore", "ChangeStream", "connect"]


async def connect(path: Any, **options: Any) -> AsyncLocalStore:
    """Open (or create) the local database at ``path``, as :func:`lakesync.client.connect` does (same arguments),
    for use from asyncio."""
    return AsyncLocalStore(await asyncio.to_thread(connect_store, path, **options))


class AsyncLocalStore:
    """An asyncio face of a :class:`~lakesync.client.store.LocalStore` (see the module docstring)."""

    def __init__(self, store: LocalStore) -> None:
        self.store = store
        """The wrapped store (its attributes, such as ``client_id``, ``online`` and ``last_error``, are read here)."""

    # -- reads -----------------------------------------------------------------------------------------------------
    async def rows(self, table: str) -> dict[str, dict[str, JsonValue]]:
        """Every live row of a user table (:meth:`LocalStore.rows`)."""
        return await asyncio.to_thread(self.store.rows, table)

    async def get(self, table: str, row_id: str) -> dict[str, JsonValue] | None:
        """One live row's values, or ``None``."""
        return await asyncio.to_thread(self.store.get, table, row_id)

    async def query(self, sql: str, params: Sequence[Any] | Mapping[str, Any] = ()) -> list[tuple[Any, ...]]:
        """A read-only SQL statement's rows (:meth:`LocalStore.query`)."""
        return await asyncio.to_thread(self.store.query, sql, params)

    async def state(self, table: str, row_id: str) -> RowState | None:
        """The row's per-column LWW state."""
        return await asyncio.to_thread(self.store.state, table, row_id)

    async def pending(self) -> int:
        """Local deltas not yet acknowledged by the gateway."""
        return await asyncio.to_thread(self.store.pending)

    # -- writes ----------------------------------------------------------------------------------------------------
    async def insert(self, table: str, row_id: str, values: Mapping[str, JsonValue]) -> None:
        """Create a row (:meth:`LocalStore.insert`)."""
        await asyncio.to_thread(self.store.insert, table, row_id, values)

    async def update(self, table: str, row_id: str, values: Mapping[str, JsonValue]) -> None:
        """Set columns of a live row (:meth:`LocalStore.update`)."""
        await asyncio.to_thread(self.store.update, table, row_id, values)

    async def delete(self, table: str, row_id: str) -> None:
        """Delete a live row (:meth:`LocalStore.delete`)."""
        await asyncio.to_thread(self.store.delete, table, row_id)

    async def insert_many(self, table: str, rows: Mapping[str, Mapping[str, JsonValue]]) -> None:
        """Insert many rows in one transaction (:meth:`LocalStore.insert_many`)."""
        await asyncio.to_thread(self.store.insert_many, table, rows)

    @contextlib.asynccontextmanager
    async def batch(self) -> AsyncIterator[Batch]:
        """Collect writes and apply them in one transaction when the block ends without an exception::

        async with store.batch() as b:
            b.insert("todos", "t1", {"title": "a"})
            b.update("todos", "t0", {"done": True})
        """
        collected = Batch()
        yield collected
        await asyncio.to_thread(self.store.apply, collected)

    # -- sync ------------------------------------------------------------------------------------------------------
    async def sync(self) -> SyncReport:
        """One push + pull cycle (:meth:`LocalStore.sync`)."""
        return await asyncio.to_thread(self.store.sync)

    def start(self) -> None:
        """Sync in the background, on the store's own threads (:meth:`LocalStore.start`)."""
        self.store.start()

    async def stop(self) -> None:
        """Stop background sync and wait for it."""
        await asyncio.to_thread(self.store.stop)

    def request_sync(self) -> None:
        """Ask the background sync for a cycle soon."""
        self.store.request_sync()

    # -- stream subscriptions --------------------------------------------------------------------------------------
    async def subscribe_stream(
        self, name: str, params: Mapping[str, str] | None = None, *, ttl: int | None = None
    ) -> StreamSubscription:
        """Subscribe to a stream of the sync rules (:meth:`LocalStore.subscribe_stream`)."""
        return await asyncio.to_thread(self.store.subscribe_stream, name, params, ttl=ttl)

    async def unsubscribe(self, name: str | StreamSubscription, params: Mapping[str, str] | None = None) -> bool:
        """Unsubscribe from a stream (:meth:`LocalStore.unsubscribe`)."""
        return await asyncio.to_thread(self.store.unsubscribe, name, params)

    async def subscriptions(self) -> list[StreamSubscription]:
        """The stream subscriptions the store holds, with their states (:meth:`LocalStore.subscriptions`)."""
        return await asyncio.to_thread(self.store.subscriptions)

    # -- changes ---------------------------------------------------------------------------------------------------
    def subscribe(self, table: str, callback: Callable[[Change], Awaitable[None] | None]) -> Callable[[], None]:
        """Call ``callback(change)`` on this event loop whenever rows of ``table`` change; a coroutine function's
        coroutine runs as a task. Returns a function that unsubscribes. Must be called from the loop."""
        loop = asyncio.get_running_loop()
        tasks: set[asyncio.Task[None]] = set()

        def on_loop(change: Change) -> None:
            result = callback(change)
            if inspect.isawaitable(result):
                task = asyncio.ensure_future(result)
                tasks.add(task)  # kept until done, so the task is not collected midway
                task.add_done_callback(tasks.discard)

        def from_store(change: Change) -> None:
            with contextlib.suppress(RuntimeError):  # the loop is closed: nobody is listening any more
                loop.call_soon_threadsafe(on_loop, change)

        return self.store.subscribe(table, from_store)

    def changes(self, table: str) -> ChangeStream:
        """The changes of ``table`` from this call on, as an async iterator (leaving ``async with`` or
        :meth:`ChangeStream.close` unsubscribes). Must be called from the loop."""
        return ChangeStream(self, table)

    # -- lifecycle -------------------------------------------------------------------------------------------------
    async def close(self) -> None:
        """Stop background sync and close the file."""
        await asyncio.to_thread(self.store.close)

    async def __aenter__(self) -> Self:
        return self

    async def __aexit__(self, *exc: object) -> None:
        await self.close()


class ChangeStream:
    """The changes of one table, subscribed at creation and queued until read (see :meth:`AsyncLocalStore.changes`)."""

    def __init__(self, store: AsyncLocalStore, table: str) -> None:
        self._queue: asyncio.Queue[Change | None] = asyncio.Queue()
        """The changes, then ``None`` once closed (so a reader waiting for the next one stops)."""
        self._unsubscribe: Callable[[], None] | None = store.subscribe(table, self._queue.put_nowait)

    def __aiter__(self) -> Self:
        return self

    async def __anext__(self) -> Change:
        change = await self._queue.get()
        if change is None:
            self._queue.put_nowait(None)  # for every other reader, and the next call
            raise StopAsyncIteration
        return change

    def close(self) -> None:
        """Unsubscribe; the changes already queued can still be read, then the iteration ends (also for a task
        waiting for the next change)."""
        if self._unsubscribe is not None:
            self._unsubscribe()
            self._unsubscribe = None
            self._queue.put_nowait(None)

    async def __aenter__(self) -> Self:
        return self

    async def __aexit__(self, *exc: object) -> None:
        self.close()
