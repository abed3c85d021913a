"""In-doubt runs (lakesync.aws.buffer.row_doubts): how long a late batch can land, where a row of a run lives, the
head's ``dq`` form."""

from __future__ import annotations

from hypothesis import given
from hypothesis import strategies as st

from lakesync.aws.buffer.row_doubts import (
    BATCH_DEADLINE_MS,
    CLOCK_MARGIN_MS,
    RETRY_SPAN_MS,
    SIGNATURE_EXPIRY_MS,
    Doubt,
    alt_key,
    deadline_ms,
    decode_doubts,
    encode_doubts,
    until_ms,
)
from lakesync.core.hlc import encode
from lakesync.core.log import row_key


def test_a_late_batch_is_bounded_by_the_deadline_the_retries_and_the_signature_expiry() -> None:
    # Given a chunk committed at wall time t
    t = 1_800_000_000_000
    commit_hlc = encode(t, 7)
    # Then its writer signs no batch after t + 30 s, and none lands after AWS's 15 minutes past the SDK's last retry,
    # with a minute of clock skew
    assert deadline_ms(commit_hlc) == t + BATCH_DEADLINE_MS == t + 30_000
    assert until_ms(commit_hlc) == t + 30_000 + RETRY_SPAN_MS + SIGNATURE_EXPIRY_MS + CLOCK_MARGIN_MS
    assert SIGNATURE_EXPIRY_MS == 15 * 60_000


@given(
    gateway=st.from_regex(r"[a-z][a-z0-9_-]{0,30}", fullmatch=True),
    table=st.from_regex(r"[a-z][a-z0-9_]{0,30}", fullmatch=True),
    row_id=st.text(min_size=1, max_size=2000),
    first=st.integers(min_value=1, max_value=10**12),
)
def test_an_alternate_key_is_short_and_never_a_main_key(gateway: str, table: str, row_id: str, first: int) -> None:
    main = row_key(gateway, table, row_id)
    key = alt_key(Doubt(first, first + 3, 0), main)
    # Then it fits DynamoDB's key limit whatever the row id's length, is told apart from every main key, and names
    # its run
    assert len(key.encode()) <= 64 and key.startswith(f"~{first}#") and not main.startswith("~")
    # And it is the row's alone: another row, or another run, has another
    assert alt_key(Doubt(first, first + 3, 0), main + "x") != key
    assert alt_key(Doubt(first + 1, first + 3, 0), main) != key


def test_the_heads_runs_round_trip_and_none_is_empty() -> None:
    runs = (Doubt(1, 48, 1_800_000_000_000), Doubt(97, 150, 1_800_000_060_000))
    assert decode_doubts(encode_doubts(runs)) == runs
    assert decode_doubts(None) == () and decode_doubts("") == ()
