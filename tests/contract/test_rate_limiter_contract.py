"""One behaviour suite for the rate limits' shared counters (in memory and on DynamoDB, moto server), and the limiter
over each: slices never let a caller past its limit, however many processes share the count."""

from __future__ import annotations

import threading
from typing import Any

import pytest

from lakesync.aws.rate_limits import DynamoDBRateLimitCounter, counter_key
from lakesync.core.errors import CallerRateLimitedError, StorageError
from lakesync.gateway.limits import RateLimit, RateLimiter
from lakesync.gateway.memory import InMemoryRateLimitCounter
from lakesync.ports import RateLimitCounter

EXP = 2_000_000_000


@pytest.fixture(params=["memory", "dynamodb"])
def counter(request: pytest.FixtureRequest) -> RateLimitCounter:
    if request.param == "memory":
        return InMemoryRateLimitCounter()
    client, names = request.getfixturevalue("dynamodb_client"), request.getfixturevalue("dynamodb_tables")
    return DynamoDBRateLimitCounter(client, names)


class Clock:
    def __init__(self, now: float) -> None:
        self.now = now

    def __call__(self) -> float:
        return self.now


def test_a_take_is_granted_whole_then_in_part_then_not_at_all(counter: RateLimitCounter) -> None:
    assert counter.take("gw#push#c1", 7, 4, 10, EXP) == 4
    assert counter.take("gw#push#c1", 7, 4, 10, EXP) == 4
    # only 2 are left below the limit: that much is granted, then nothing
    assert counter.take("gw#push#c1", 7, 4, 10, EXP) == 2
    assert counter.take("gw#push#c1", 7, 1, 10, EXP) == 0
    assert counter.take("gw#push#c1", 7, 4, 10, EXP) == 0


def test_windows_and_keys_count_apart(counter: RateLimitCounter) -> None:
    assert counter.take("gw#push#c1", 7, 10, 10, EXP) == 10
    assert counter.take("gw#push#c1", 7, 1, 10, EXP) == 0
    assert counter.take("gw#push#c1", 8, 3, 10, EXP) == 3  # the next window starts from zero
    assert counter.take("gw#push#c2", 7, 3, 10, EXP) == 3  # another client
    assert counter.take("gw#pull#c1", 7, 3, 10, EXP) == 3  # another family
    assert counter.take("other#push#c1", 7, 3, 10, EXP) == 3  # another gateway


def test_a_want_larger_than_the_limit_gets_the_limit(counter: RateLimitCounter) -> None:
    assert counter.take("gw#push#c1", 1, 50, 10, EXP) == 10
    assert counter.take("gw#push#c1", 1, 1, 10, EXP) == 0


def test_concurrent_takes_never_grant_past_the_limit(counter: RateLimitCounter) -> None:
    granted: list[int] = []
    lock = threading.Lock()

    def worker() -> None:
        for _ in range(5):
            got = counter.take("gw#push#hot", 3, 3, 40, EXP)
            with lock:
                granted.append(got)

    threads = [threading.Thread(target=worker) for _ in range(6)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    # 90 asked for, 40 allowed: exactly the limit, whatever the interleaving
    assert sum(granted) == 40


def test_the_dynamodb_counter_is_one_item_with_a_ttl_under_a_key_no_delta_id_takes(
    dynamodb_client: Any, dynamodb_tables: Any
) -> None:
    counter = DynamoDBRateLimitCounter(dynamodb_client, dynamodb_tables)
    counter.take("gw#push#c1", 9, 3, 10, 12345)
    counter.take("gw#push#c1", 9, 2, 10, 99999)
    item = dynamodb_client.get_item(
        TableName=dynamodb_tables.dedup, Key={"pk": {"S": counter_key("gw#push#c1", 9)}}, ConsistentRead=True
    )["Item"]
    assert item == {"pk": {"S": "~rate#9#gw#push#c1"}, "n": {"N": "5"}, "exp": {"N": "12345"}}


def test_the_limiter_over_many_processes_serves_exactly_the_limit(counter: RateLimitCounter) -> None:
    # Five processes (five limiters) share one count: together they serve the limit, not five slices more.
    clock = Clock(1_000.0)
    limit = RateLimit(50, 60)
    processes = [RateLimiter(counter, {"push": limit}, clock) for _ in range(5)]
    served = refused = 0
    for turn in range(200):
        try:
            processes[turn % 5].check("gw", "c1", "push")
            served += 1
        except CallerRateLimitedError:
            refused += 1
    assert served == 50 and refused == 150


def test_a_busy_process_takes_its_allowance_in_few_shared_writes() -> None:
    counter = CountingCounter()
    limiter = RateLimiter(counter, {"pull": RateLimit(1_000, 60)}, Clock(0.0))
    for _ in range(1_000):
        limiter.check("gw", "c1", "pull")
    # slices of 10 (a hundredth of the limit), 20, 40, 80, then 100 (a tenth) at a time: 13 writes, not 1,000
    assert counter.calls == 13
    with pytest.raises(CallerRateLimitedError):
        limiter.check("gw", "c1", "pull")
    calls = counter.calls
    for _ in range(100):
        with pytest.raises(CallerRateLimitedError):
            limiter.check("gw", "c1", "pull")
    assert counter.calls == calls  # a refused window costs the process no more writes


def test_retry_after_is_the_rest_of_the_window_and_the_next_window_serves_again() -> None:
    clock = Clock(120.0)
    limiter = RateLimiter(InMemoryRateLimitCounter(), {"push": RateLimit(2, 60)}, clock)
    limiter.check("gw", "c1", "push")
    clock.now = 150.2
    limiter.check("gw", "c1", "push")
    with pytest.raises(CallerRateLimitedError) as refused:
        limiter.check("gw", "c1", "push")
    assert refused.value.retry_after_s == 30 and refused.value.status == 429
    assert refused.value.to_body()["code"] == "RATE_LIMITED"
    limiter.check("gw", "c2", "push")  # another client is not limited
    limiter.check("gw", "c1", "pull")  # nor another family (no limit set for it)
    clock.now = 180.0
    limiter.check("gw", "c1", "push")


def test_a_failing_counter_lets_requests_through() -> None:
    class Broken:
        def take(self, key: str, window: int, want: int, limit: int, expires_at: int) -> int:
            raise StorageError("DynamoDB UpdateItem failed: ProvisionedThroughputExceededException")

    limiter = RateLimiter(Broken(), {"push": RateLimit(1, 60)}, Clock(0.0))
    for _ in range(3):
        limiter.check("gw", "c1", "push")


class CountingCounter(InMemoryRateLimitCounter):
    def __init__(self) -> None:
        super().__init__()
        self.calls = 0

    def take(self, key: str, window: int, want: int, limit: int, expires_at: int) -> int:
        self.calls += 1
        return super().take(key, window, want, limit, expires_at)
