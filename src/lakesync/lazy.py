"""A value built on first use, replaceable and closed on reset: how the Lambda runtime holds long-lived resources."""

from __future__ import annotations

import threading
from collections.abc import Callable
from typing import Generic, TypeVar

T = TypeVar("T")


class Lazy(Generic[T]):
    """Holds one value: ``build()`` makes it on first :meth:`get`; :meth:`use` puts another in its place (tests,
    the embedded default); :meth:`reset` closes it (``close``) and forgets it."""

    def __init__(self, build: Callable[[], T], close: Callable[[T], None] = lambda _value: None) -> None:
        self._build = build
        self._close = close
        self._value: list[T] = []
        self._lock = threading.Lock()

    def get(self) -> T:
        """The value, built now if there is none."""
        with self._lock:
            if not self._value:
                self._value.append(self._build())
            return self._value[0]

    def use(self, value: T) -> None:
        """Close the current value, if any, and hold ``value`` instead."""
        self.reset()
        with self._lock:
            self._value.append(value)

    def reset(self) -> None:
        """Close and forget the value; the next :meth:`get` builds a new one."""
        with self._lock:
            held, self._value = self._value, []
        for value in held:
            self._close(value)
