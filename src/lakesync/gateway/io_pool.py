"""One thread pool for a service call's independent storage requests (the stores' clients are thread-safe).

Made on first use and kept for a warm function's life; a service waits for everything it submitted before it
returns, so no request outlives the invocation that made it.
"""

from __future__ import annotations

import threading
from concurrent.futures import ThreadPoolExecutor

_POOL: ThreadPoolExecutor | None = None
_LOCK = threading.Lock()


def io_pool() -> ThreadPoolExecutor:
    """The shared pool (8 threads)."""
    global _POOL
    with _LOCK:
        if _POOL is None:
            _POOL = ThreadPoolExecutor(max_workers=8, thread_name_prefix="lakesync-io")
        return _POOL
