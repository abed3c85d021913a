"""One thread pool for a service call's independent storage requests (the stores' clients are thread-safe).

Made on first use and kept for a warm function's life; a service waits for everything it submitted before it
returns, so no request outlives the invocation that made it. Work submitted from one of the pool's own threads runs
there and then: a pool thread that waited for the pool could wait forever once every thread does.
"""

from __future__ import annotations

import threading
from collections.abc import Callable, Iterable, Iterator
from concurrent.futures import Future, ThreadPoolExecutor, wait
from contextlib import contextmanager
from typing import Any, ParamSpec, TypeVar

_T = TypeVar("_T")
_P = ParamSpec("_P")

_POOL: ThreadPoolExecutor | None = None
_LOCK = threading.Lock()
_THREAD = threading.local()


def _enter_pool() -> None:
    _THREAD.in_pool = True


def _pool() -> ThreadPoolExecutor:
    """The shared pool (8 threads), made on first use."""
    global _POOL
    with _LOCK:
        if _POOL is None:
            _POOL = ThreadPoolExecutor(max_workers=8, thread_name_prefix="lakesync-io", initializer=_enter_pool)
        return _POOL


def on_pool_thread() -> bool:
    """Whether the calling thread is one of the pool's (where :func:`submit` runs work at once, not beside it)."""
    return bool(getattr(_THREAD, "in_pool", False))


@contextmanager
def inline() -> Iterator[None]:
    """For the block, work submitted from this thread runs in it, at once, as on one of the pool's threads (a
    profiler of this thread then sees it; the requests go one after another)."""
    previous = on_pool_thread()
    _THREAD.in_pool = True
    try:
        yield
    finally:
        _THREAD.in_pool = previous


def submit(fn: Callable[_P, _T], /, *args: _P.args, **kwargs: _P.kwargs) -> Future[_T]:
    """``fn(*args, **kwargs)`` on the pool; on one of its threads, run at once (the future is done when returned)."""
    if not on_pool_thread():
        return _pool().submit(fn, *args, **kwargs)
    done: Future[_T] = Future()
    try:
        done.set_result(fn(*args, **kwargs))
    except Exception as exc:
        done.set_exception(exc)
    return done


@contextmanager
def awaited(*futures: Future[Any] | None) -> Iterator[None]:
    """Wait for ``futures`` (``None``: nothing to wait for) when the block ends, however it ends: requests started
    beside the block's own end with it."""
    try:
        yield
    finally:
        wait([future for future in futures if future is not None])


def results_of(futures: Iterable[Future[_T]]) -> list[_T]:
    """Each future's result, in order, once all of them have ended: a failure is raised only when the others are
    done too, so none outlives the call."""
    started = list(futures)
    wait(started)
    return [future.result() for future in started]
