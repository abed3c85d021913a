"""HLC: the 64-bit layout (byte-compatible), textbook now/recv, drift boundary, thread safety."""

from __future__ import annotations

import json
import threading
from pathlib import Path

import pytest
from hypothesis import given
from hypothesis import strategies as st

from lakesync.core import hlc
from lakesync.core.errors import ClockDriftError, ValidationError

CASES = json.loads((Path(__file__).parent.parent / "vectors" / "hlc.json").read_text())["cases"]
LAYOUT = [c for c in CASES if c["kind"] in ("encode", "decode", "compare")]
SEQUENCES = [c for c in CASES if c["kind"] == "sequence"]


@pytest.mark.parametrize("case", LAYOUT, ids=[c["name"] for c in LAYOUT])
def test_hlc_layout_matches_vectors(case):
    if case["kind"] == "encode":
        assert str(hlc.encode(case["wall"], case["counter"])) == case["expected"]
    elif case["kind"] == "decode":
        wall, counter = hlc.decode(int(case["hlc"]))
        assert {"wall": wall, "counter": counter} == case["expected"]
    else:
        assert hlc.compare(int(case["a"]), int(case["b"])) == case["expected"]


class SteppedClock:
    def __init__(self) -> None:
        self.value = 0

    def __call__(self) -> int:
        return self.value


@pytest.mark.parametrize("case", SEQUENCES, ids=[c["name"] for c in SEQUENCES])
def test_hlc_sequences_agree_with_the_original_except_the_counter_quirk(case):
    """Exact match with the original, except its recv() quirk (reference §1.4): when the physical clock is ahead of
    both the local and the remote wall, the original keeps counting while textbook HLC resets the counter to 0.
    From that step on we check the textbook value and the ordering instead of the original's exact bits."""
    clock = SteppedClock()
    init = case.get("initial_state", {"wall": 0, "counter": 0})
    clock_under_test = hlc.HLC(clock, wall=init["wall"], counter=init["counter"])
    diverged = False
    last = -1
    for step in case["steps"]:
        clock.value = step["physical"]
        expected = step["expected"]
        wall_before = clock_under_test.state[0]
        if step["op"] == "now":
            got = clock_under_test.now()
        elif expected.get("ok", True):
            remote_wall = hlc.decode(int(step["remote"]))[0]
            got = clock_under_test.recv(int(step["remote"]))
            if step["physical"] > max(wall_before, remote_wall):
                assert hlc.decode(got) == (step["physical"], 0)
                diverged = True
        else:
            state_before = clock_under_test.state
            with pytest.raises(ClockDriftError) as err:
                clock_under_test.recv(int(step["remote"]))
            assert err.value.message == expected["message"]
            assert err.value.code == expected["error_code"]
            assert clock_under_test.state == state_before
            continue
        assert got > last
        last = got
        if not diverged:
            assert str(got) == expected["hlc"]
            assert clock_under_test.state == (step["state_after"]["wall"], step["state_after"]["counter"])
        else:
            assert hlc.decode(got)[0] == expected["wall"]


def test_hlc_recv_resets_counter_when_physical_clock_passes_both_walls():
    clock = SteppedClock()
    clock.value = 1000
    c = hlc.HLC(clock)
    c.now()
    c.now()
    clock.value = 2000
    assert hlc.decode(c.recv(hlc.encode(1500, 9))) == (2000, 0)


def test_hlc_drift_exactly_max_is_accepted_and_one_more_ms_rejected():
    clock = SteppedClock()
    clock.value = 1_700_000_000_000
    c = hlc.HLC(clock)
    accepted = c.recv(hlc.encode(clock.value + hlc.MAX_DRIFT_MS, 0))
    assert hlc.decode(accepted)[0] == clock.value + hlc.MAX_DRIFT_MS
    before = c.state
    with pytest.raises(ClockDriftError, match="5001ms ahead"):
        c.recv(hlc.encode(clock.value + hlc.MAX_DRIFT_MS + 1, 0))
    assert c.state == before


def test_hlc_check_drift_does_not_advance_clock():
    clock = SteppedClock()
    clock.value = 10_000
    c = hlc.HLC(clock)
    c.check_drift(hlc.encode(15_000, 3))
    assert c.state == (0, 0)
    with pytest.raises(ClockDriftError):
        c.check_drift(hlc.encode(15_001, 0))


@given(st.lists(st.tuples(st.booleans(), st.integers(0, 3000), st.integers(0, 20)), min_size=1, max_size=60))
def test_hlc_issued_timestamps_strictly_increase(events):
    clock = SteppedClock()
    c = hlc.HLC(clock)
    last = -1
    for is_recv, physical, remote_offset in events:
        clock.value = physical
        ts = c.recv(hlc.encode(physical + remote_offset, remote_offset)) if is_recv else c.now()
        assert ts > last
        last = ts


def test_hlc_is_monotonic_across_threads():
    clock = SteppedClock()
    clock.value = 5
    c = hlc.HLC(clock)
    issued: list[int] = []
    lock = threading.Lock()

    def work() -> None:
        local = [c.now() for _ in range(500)]
        with lock:
            issued.extend(local)

    threads = [threading.Thread(target=work) for _ in range(4)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    assert len(set(issued)) == len(issued) == 2000


@pytest.mark.parametrize("text", ["", "abc", "1.5", "-1", "0x10", "１２", "18446744073709551616"])
def test_hlc_parse_rejects_non_decimal_or_out_of_range(text):
    with pytest.raises(ValidationError):
        hlc.parse(text)


def test_hlc_parse_rejects_json_numbers():
    with pytest.raises(ValidationError, match="decimal string"):
        hlc.parse(65536000000)


def test_hlc_parse_accepts_max_u64():
    assert hlc.parse("18446744073709551615") == hlc.MAX_HLC


@pytest.mark.parametrize(
    ("text", "message"),
    [
        (" 123 ", "hlc must be a decimal string"),
        ("123\n", "hlc must be a decimal string"),
        ("\t123", "hlc must be a decimal string"),
        ("+123", "hlc must be a decimal string"),
        ("", "hlc must be a decimal string"),
        ("１２３", "hlc must be a decimal string"),
        ("9" * 5000, "hlc must be a decimal string of at most 20 digits"),
        ("0" * 5000, "hlc must be a decimal string of at most 20 digits"),
        ("18446744073709551616", "hlc is out of range for a 64-bit HLC"),
    ],
    ids=["spaces", "newline", "tab", "sign", "empty", "fullwidth", "5000-digits", "5000-zeros", "2**64"],
)
def test_hlc_parse_refuses_anything_but_up_to_20_ascii_digits(text, message):
    # (before: surrounding whitespace was stripped, and 5,000 digits raised Python's int-conversion ValueError)
    with pytest.raises(ValidationError) as info:
        hlc.parse(text)
    assert info.value.message == message


@pytest.mark.parametrize("text", ["0", "00000000000000000001", "18446744073709551615"])
def test_hlc_parse_accepts_up_to_20_digits(text):
    assert hlc.parse(text) == int(text)
