"""The shared I/O pool's gathering of results: in order, and a failure raised only once every request has ended."""

from __future__ import annotations

import threading
import time

import pytest

from lakesync.gateway.io_pool import io_pool, results_of


def test_results_of_gives_each_result_in_submission_order() -> None:
    delays = [0.05, 0.0, 0.02]
    futures = [io_pool().submit(lambda i=i, s=s: (time.sleep(s), i)[1]) for i, s in enumerate(delays)]
    assert results_of(futures) == [0, 1, 2]


def test_results_of_raises_the_first_failure_once_the_others_have_ended() -> None:
    ended = threading.Event()

    def fails() -> int:
        raise KeyError("first")

    def slow() -> int:
        time.sleep(0.2)
        ended.set()
        return 1

    with pytest.raises(KeyError, match="first"):
        results_of([io_pool().submit(fails), io_pool().submit(slow)])
    assert ended.is_set()
