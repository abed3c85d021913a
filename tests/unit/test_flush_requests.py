"""lakesync.core.flush_requests: the flush-request key format and the rule deciding whether a flush run serves a
request (a run that provably begins after it).
"""

from __future__ import annotations

import pytest
from hypothesis import given
from hypothesis import strategies as st

from lakesync.core.flush_requests import (
    CLOCK_SKEW_MS,
    ActiveRun,
    FlushRequest,
    covering_run,
    flush_request_key,
    parse_flush_request_key,
)

AT_MS = 1_700_000_000_000


@given(
    at_ms=st.integers(min_value=0, max_value=10**15 - 1),
    request_id=st.text(min_size=1, max_size=40),
)
def test_flush_request_key_roundtrips(at_ms, request_id):
    key = flush_request_key(at_ms, request_id)
    assert parse_flush_request_key("gw", key) == FlushRequest("gw", at_ms, request_id)


@given(st.integers(min_value=0, max_value=10**15 - 1), st.integers(min_value=0, max_value=10**15 - 1))
def test_flush_request_keys_sort_by_time(a, b):
    # The flush job deletes requests by a key range, which only works if key order is time order
    assert (flush_request_key(a, "x") < flush_request_key(b, "x")) == (a < b)


def test_flush_request_key_matches_the_written_shape():
    request = FlushRequest("default", AT_MS, "abc")
    assert request.key == "flush#001700000000000#abc"


@pytest.mark.parametrize(("at_ms", "request_id"), [(-1, "x"), (10**15, "x"), (AT_MS, "")])
def test_flush_request_key_rejects_what_cannot_be_a_key(at_ms, request_id):
    with pytest.raises(ValueError):
        flush_request_key(at_ms, request_id)


@pytest.mark.parametrize(
    ("gateway", "sk"),
    [
        ("default", "flushlease"),
        ("default", "flush#"),
        ("default", "flush#1700000000000#abc"),
        ("default", "flush#001700000000000#"),
        ("default", "flush#00170000000000x#abc"),
        ("default", "schema#todos"),
        ("", "flush#001700000000000#abc"),
    ],
    ids=["lease", "prefix-only", "short-time", "empty-id", "non-digit", "schema", "no-gateway"],
)
def test_parse_flush_request_key_ignores_other_items(gateway, sk):
    assert parse_flush_request_key(gateway, sk) is None


def test_active_run_started_after_the_request_covers_it():
    run = ActiveRun("jr_1", started_ms=AT_MS + CLOCK_SKEW_MS)
    assert run.covers(AT_MS)


@pytest.mark.parametrize("started_ms", [AT_MS - 60_000, AT_MS, AT_MS + CLOCK_SKEW_MS - 1, None])
def test_active_run_not_provably_after_the_request_does_not_cover_it(started_ms):
    # A run that began before the request -- or within the clock skew of it, or at an unknown time -- may have read
    # the shard heads before the request's deltas were committed
    assert not ActiveRun("jr_1", started_ms=started_ms).covers(AT_MS)


def test_queued_run_covers_every_request_seen_before_it():
    assert ActiveRun("jr_1", started_ms=AT_MS - 60_000, queued=True).covers(AT_MS)
    assert ActiveRun("jr_2", started_ms=None, queued=True).covers(AT_MS)


def test_covering_run_picks_a_run_that_serves_the_request():
    early = ActiveRun("jr_early", started_ms=AT_MS - 5_000)
    late = ActiveRun("jr_late", started_ms=AT_MS + 5_000)
    assert covering_run([early, late], AT_MS) == late
    assert covering_run([early], AT_MS) is None
    assert covering_run([], AT_MS) is None
