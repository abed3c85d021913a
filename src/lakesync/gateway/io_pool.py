"""One thread pool for a service call's independent storage requests (the stores' clients are thread-safe).

Made on first use and kept for a warm function's life; a service waits for everything it submitted before it
returns, so no request outlives the invocation that made it.
"""

from __future__ import annotations

import threading
from collections.abc import Iterable
from concurrent.futures import Future, ThreadPoolExecutor, wait
from typing import TypeVar

_T = TypeVar("_T")

_POOL: ThreadPoolExecutor | None = None
_LOCK = threading.Lock()


def io_pool() -> ThreadPoolExecutor:
    """The shared pool (8 threads)."""
    global _POOL
    with _LOCK:
        if _POOL is None:
            _POOL = ThreadPoolExecutor(max_workers=8, thread_name_prefix="lakesync-io")
        return _POOL


def results_of(futures: Iterable[Future[_T]]) -> list[_T]:
    """Each future's result, in order, once all of them have ended: a failure is raised only when the others are
    done too, so none outlives the call."""
    started = list(futures)
    wait(started)
    return [future.result() for future in started]
