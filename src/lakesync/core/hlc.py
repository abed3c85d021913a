"""Hybrid Logical Clock.

A timestamp is an unsigned 64-bit integer: the high 48 bits hold the wall clock in epoch milliseconds, the low
16 bits a logical counter. Ordering is plain integer ordering, i.e. ``(wall, counter)`` lexicographic. This layout
is the wire contract shared with every LakeSync implementation.

:class:`HLC` follows the textbook algorithm (Kulkarni et al.): the counter resets to 0 whenever the physical clock
moves past both the local and the remote wall. Remote timestamps more than :data:`MAX_DRIFT_MS` ahead of the local
physical clock are rejected with :class:`~lakesync.core.errors.ClockDriftError`; exactly ``MAX_DRIFT_MS`` ahead is
accepted. The physical clock is injected, so tests and the gateway control time.
"""

from __future__ import annotations

import threading
import time
from collections.abc import Callable

from lakesync.core.errors import ClockDriftError, ValidationError

MAX_DRIFT_MS = 5000
MAX_COUNTER = 0xFFFF
MAX_HLC = (1 << 64) - 1
MAX_HLC_DIGITS = len(str(MAX_HLC))
"""Digits of the largest HLC (20): a longer decimal string is refused before it is converted."""
_WALL_BITS = 48

Clock = Callable[[], int]
"""A physical clock: returns epoch milliseconds."""


def system_clock() -> int:
    """The machine's wall clock in epoch milliseconds."""
    return time.time_ns() // 1_000_000


def encode(wall_ms: int, counter: int) -> int:
    """Pack a wall clock (ms) and a counter into one 64-bit HLC; the counter is masked to 16 bits."""
    return (wall_ms << 16) | (counter & MAX_COUNTER)


def decode(ts: int) -> tuple[int, int]:
    """Split an HLC into ``(wall_ms, counter)``."""
    return ts >> 16, ts & MAX_COUNTER


def compare(a: int, b: int) -> int:
    """-1, 0 or 1 as ``a`` orders before, equal to or after ``b``."""
    return (a > b) - (a < b)


def parse(value: object, *, field: str = "hlc") -> int:
    """Read an HLC from its JSON form (a decimal string of an unsigned 64-bit integer).

    Only ASCII digits are accepted: no sign, no whitespace around them (``" 123 "`` is refused).

    Raises:
        ValidationError: if ``value`` is not such a string, or names a number beyond 64 bits.
    """
    # Exactly the digits: no sign, no surrounding whitespace (Python's int() would accept " 123 "), and no more
    # digits than a 64-bit integer can have, so a huge string never reaches int().
    if not isinstance(value, str) or not value.isascii() or not value.isdigit():
        raise ValidationError(f"{field} must be a decimal string")
    if len(value) > MAX_HLC_DIGITS:
        raise ValidationError(f"{field} must be a decimal string of at most {MAX_HLC_DIGITS} digits")
    ts = int(value)
    if ts > MAX_HLC:
        raise ValidationError(f"{field} is out of range for a 64-bit HLC")
    return ts


def format_hlc(ts: int) -> str:
    """The JSON form of an HLC: its decimal string."""
    return str(ts)


class HLC:
    """A thread-safe hybrid logical clock with an injectable physical clock."""

    def __init__(self, clock: Clock = system_clock, *, wall: int = 0, counter: int = 0) -> None:
        self._clock = clock
        self._wall = wall
        self._counter = counter
        self._lock = threading.Lock()

    @property
    def state(self) -> tuple[int, int]:
        """The last issued ``(wall, counter)``."""
        return self._wall, self._counter

    def now(self) -> int:
        """Issue a timestamp for a local event."""
        with self._lock:
            physical = self._clock()
            if physical > self._wall:
                wall, counter = physical, 0
            else:
                wall, counter = self._wall, self._counter + 1
            return self._set(wall, counter)

    def recv(self, remote: int) -> int:
        """Merge a remote timestamp and issue one that orders after both.

        Raises:
            ClockDriftError: if the remote wall is more than :data:`MAX_DRIFT_MS` ahead of the physical clock.
                The clock state is left unchanged.
        """
        remote_wall, remote_counter = decode(remote)
        with self._lock:
            physical = self._clock()
            if remote_wall - physical > MAX_DRIFT_MS:
                raise ClockDriftError(f"Remote clock is {remote_wall - physical}ms ahead (max drift: {MAX_DRIFT_MS}ms)")
            wall = max(self._wall, remote_wall, physical)
            if wall == self._wall and wall == remote_wall:
                counter = max(self._counter, remote_counter) + 1
            elif wall == self._wall:
                counter = self._counter + 1
            elif wall == remote_wall:
                counter = remote_counter + 1
            else:
                counter = 0
            return self._set(wall, counter)

    def check_drift(self, remote: int) -> None:
        """Raise :class:`ClockDriftError` if ``remote`` is too far ahead, without changing the clock."""
        remote_wall = remote >> 16
        physical = self._clock()
        if remote_wall - physical > MAX_DRIFT_MS:
            raise ClockDriftError(f"Remote clock is {remote_wall - physical}ms ahead (max drift: {MAX_DRIFT_MS}ms)")

    def _set(self, wall: int, counter: int) -> int:
        if counter > MAX_COUNTER:
            wall, counter = wall + 1, 0
        if wall >= 1 << _WALL_BITS:
            raise ClockDriftError("HLC wall clock exceeds 48 bits")
        self._wall, self._counter = wall, counter
        return encode(wall, counter)
