"""Exponential backoff with jitter, capped: how long background sync waits after a failure.

Delay ``n`` (0-based, the ``n``-th consecutive failure) is drawn uniformly from ``[base/2, base]`` where
``base = min(cap, initial * factor**n)`` ("equal jitter": never less than half the nominal delay, so a flapping
server is not hammered, and spread so that many clients that lost the server together do not return together).
A success resets the sequence.
"""

from __future__ import annotations

import random
from collections.abc import Callable
from dataclasses import dataclass, field


@dataclass
class Backoff:
    """A backoff sequence; ``next_delay()`` after each failure, ``reset()`` after a success.

    Attributes:
        initial: Nominal first delay in seconds.
        factor: Growth per consecutive failure.
        cap: Largest nominal delay in seconds.
        random: ``() -> float in [0, 1)``; injectable for tests.
    """

    initial: float = 0.5
    factor: float = 2.0
    cap: float = 30.0
    random: Callable[[], float] = field(default=random.random, repr=False)
    failures: int = 0

    def __post_init__(self) -> None:
        if self.initial <= 0 or self.factor < 1 or self.cap < self.initial:
            raise ValueError("Backoff needs initial > 0, factor >= 1 and cap >= initial")

    def nominal(self, failures: int) -> float:
        """The nominal (un-jittered) delay after ``failures + 1`` consecutive failures."""
        # Cap the exponent too, so a long outage never computes a huge power.
        if failures > 64:
            return self.cap
        return min(self.cap, self.initial * self.factor**failures)

    def next_delay(self) -> float:
        """The delay before the next attempt; counts one more failure."""
        base = self.nominal(self.failures)
        self.failures += 1
        return base / 2 + self.random() * base / 2

    def reset(self) -> None:
        """A success: the next failure starts from ``initial`` again."""
        self.failures = 0
