"""Pausing Python's cyclic garbage collector around bulk work.

A bulk call (a materialiser's ``apply``, a client's ``insert_many`` or checkpoint load) allocates a few objects per
row and column, all freed by reference counting (rows, states, tuples and JSON values hold no cycles), while the
long-lived objects beside it (kept states, a decoded checkpoint) make every full collection walk hundreds of
thousands of objects. Measured, those collections cost a quarter of a materialiser call.
"""

from __future__ import annotations

import contextlib
import gc
import threading
from collections.abc import Iterator

__all__ = ["collector_paused"]

_lock = threading.Lock()
_holders = 0
_was_enabled = False


@contextlib.contextmanager
def collector_paused() -> Iterator[None]:
    """Pause the cyclic collector for the block; threads nest, and the last one out restores it if it was on."""
    global _holders, _was_enabled
    with _lock:
        if _holders == 0:
            _was_enabled = gc.isenabled()
            gc.disable()
        _holders += 1
    try:
        yield
    finally:
        with _lock:
            _holders -= 1
            if _holders == 0 and _was_enabled:
                gc.enable()
