"""The lake tick's release rule is the flush job's: for shards with nothing left to flush, the release step of
lakesync.lake.flush marks exactly the shards lakesync.core.lake_work says are due, at the entries the tick found.

If the two drifted apart, the tick would start flush runs that release nothing (until its stale-release guard gave
up) or never start the one run that releases. Hypothesis draws heads (flushed, released, published positions),
checkpoint bounds, the clock and a log whose commit HLCs grow with the sequence; both sides ask the same store.
"""

from __future__ import annotations

from dataclasses import dataclass, field

from hypothesis import given, settings
from hypothesis import strategies as st

from lakesync.aws.flush_store import DynamoConfig
from lakesync.aws.tables import TableNames
from lakesync.core.lake_work import release_candidates
from lakesync.core.log import ShardHead, ShardId
from lakesync.lake import flush

DAY_MS = 24 * 3600 * 1000
NOW = 1_800_000_000_000
SHARDS = [ShardId("default", t) for t in ("a", "b", "c", "d")]


@dataclass
class FakeLog:
    """The buffer's log as the release step sees it: entry ``seq`` of a shard was committed at ``hlc(shard, seq)``."""

    first_ms: dict[str, int]
    step_ms: int
    marks: dict[str, tuple[int, int]] = field(default_factory=dict)

    def hlc(self, shard: str, seq: int) -> int:
        return (self.first_ms[shard] + seq * self.step_ms) << 16

    def release_target(self, shard: ShardId, up_to_seq: int, cutoff_hlc: int) -> tuple[int, int] | None:
        seqs = [s for s in range(1, up_to_seq + 1) if self.hlc(shard.key, s) <= cutoff_hlc]
        return (seqs[-1], self.hlc(shard.key, seqs[-1])) if seqs else None

    def mark_released(self, shard: ShardId, seq: int, commit_hlc: int) -> None:
        self.marks[shard.key] = (seq, commit_hlc)

    def delete_released(self, shard: ShardId, through_seq: int) -> int:
        return 0


@st.composite
def _heads(draw: st.DrawFn) -> dict[ShardId, ShardHead]:
    heads = {}
    for shard in SHARDS[: draw(st.integers(1, len(SHARDS)))]:
        flushed = draw(st.integers(0, 12))
        released = draw(st.integers(0, flushed))
        published = draw(st.one_of(st.none(), st.integers(released, flushed)))
        heads[shard] = ShardHead(
            shard, seq=flushed, flushed_seq=flushed, released_seq=released, published_seq=published
        )
    return heads


CUTOFF_MS = NOW - flush.DAY_MS
NEAR = st.integers(CUTOFF_MS - 8_000, CUTOFF_MS + 2_000)
"""Times around the retention cutoff, where an off-by-a-little rule would show."""
TIMES = st.one_of(NEAR, st.integers(NOW - 3 * DAY_MS, NOW))


@settings(max_examples=400, deadline=None)
@given(
    heads=_heads(),
    positions=st.dictionaries(st.sampled_from([s.key for s in SHARDS]), st.integers(0, 14)),
    checkpoint_ms=st.dictionaries(st.sampled_from([s.key for s in SHARDS]), TIMES),
    first_ms=st.lists(TIMES, min_size=len(SHARDS), max_size=len(SHARDS)),
    step_ms=st.one_of(st.integers(1, 1_500), st.integers(1, 6 * 3600 * 1000)),
    publishing=st.booleans(),
)
def test_flush_release_step_marks_exactly_what_the_tick_finds_due(
    heads, positions, checkpoint_ms, first_ms, step_ms, publishing
):
    hlcs = {key: ms << 16 for key, ms in checkpoint_ms.items()}
    log = FakeLog(dict(zip([s.key for s in SHARDS], first_ms, strict=True)), step_ms)
    by_key = {shard.key: head for shard, head in heads.items()}
    # Given what the tick decides: the candidates, the entries the store names, those beyond the release mark
    candidates = release_candidates(
        by_key, positions, hlcs, publishing=publishing, now_ms=NOW, retention_ms=flush.DAY_MS
    )
    targets = {key: log.release_target(ShardId.parse(key), *bound) for key, bound in candidates.items()}
    due = {key: t for key, t in targets.items() if t is not None and t[0] > by_key[key].released_seq}
    # When the flush's release step runs on the same shards (nothing left to flush, nothing newly published)
    config = flush.FlushConfig(dynamodb=DynamoConfig(TableNames.with_prefix("parity")))
    plan = flush.plan_flush({key: head.flushed_seq for key, head in by_key.items()}, heads)
    published = (
        {key: h.published_seq if h.published_seq is not None else h.released_seq for key, h in by_key.items()}
        if publishing
        else None
    )
    flush._release(log, config, plan, positions, hlcs, published, NOW, flush._Steps(None))  # type: ignore[arg-type]
    # Then it marks exactly the shards the tick found due, at the same entries
    assert log.marks == due
    # And the tick's retention is the flush's
    assert config.retention_ms == flush.DAY_MS
