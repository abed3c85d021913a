"""The shared I/O pool's gathering of results: in order, and a failure raised only once every request has ended."""

from __future__ import annotations

import threading
import time
from concurrent.futures import wait

import pytest

from lakesync.io_pool import results_of, submit


def test_results_of_gives_each_result_in_submission_order() -> None:
    delays = [0.05, 0.0, 0.02]
    futures = [submit(lambda i=i, s=s: (time.sleep(s), i)[1]) for i, s in enumerate(delays)]
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
        results_of([submit(fails), submit(slow)])
    assert ended.is_set()


def test_work_that_fans_out_from_every_pool_thread_at_once_completes() -> None:
    # Given more jobs than the pool has threads, each held until all have started or the pool is full, and each then
    # submitting work of its own and waiting for it (as a shard's log read does inside a pull's fan-out)
    jobs = 12
    started = threading.Barrier(8, timeout=5)

    def nested(i: int) -> int:
        return i * 10

    def job(i: int) -> int:
        if i < 8:
            started.wait()  # every pool thread is busy with a job
        return sum(results_of([submit(nested, i), submit(nested, i + 1)]))

    outer = [submit(job, i) for i in range(jobs)]
    _, pending = wait(outer, timeout=10)
    # Then every job completes, the nested work run on the thread that asked for it
    assert not pending
    assert [f.result() for f in outer] == [20 * i + 10 for i in range(jobs)]


def test_a_failure_of_work_submitted_from_a_pool_thread_is_raised_by_its_future() -> None:
    def fails() -> int:
        raise ValueError("nested")

    def job() -> str:
        nested = submit(fails)
        assert nested.done()
        return type(nested.exception()).__name__

    assert submit(job).result(timeout=5) == "ValueError"


def test_inline_runs_submitted_work_in_the_calling_thread_for_the_block_only() -> None:
    from lakesync.io_pool import inline, on_pool_thread

    caller = threading.get_ident()
    with inline():
        assert submit(threading.get_ident).result() == caller
        assert on_pool_thread()
    assert not on_pool_thread()
    assert submit(threading.get_ident).result() != caller
