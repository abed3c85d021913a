"""lakesync.core.lake_work: when each lake job has work -- the flush for unflushed entries, flush requests, unpublished
ranges and releases the checkpoints allow (and not again for a release successful runs left undone); compaction and
checkpoint only while the lake lags the checkpoints and after a newer upstream run; which unfinished run serves the
work; which engine a flush run goes to, by the backlog.
"""

from __future__ import annotations

import pytest

from lakesync.core.flush_requests import CLOCK_SKEW_MS
from lakesync.core.lake_work import (
    DEFAULT_COMPACT_POLICY,
    DEFAULT_FUNCTION_MAX_BACKLOG,
    DEFAULT_RETENTION_MS,
    EVERY_FLUSH,
    STALE_AFTER_RUNS,
    CompactPolicy,
    JobRun,
    Reason,
    ReleaseTarget,
    Work,
    checkpoint_work,
    choose_flush_engine,
    compact_work,
    flush_backlog,
    flush_work,
    lagging_shards,
    release_candidates,
    release_cutoff_hlc,
    release_limit,
)
from lakesync.core.log import ShardHead, ShardId

NOW = 1_800_000_000_000
RETENTION = DEFAULT_RETENTION_MS
A, B = "default#todos#0", "default#notes#0"


def _head(key: str = A, **fields: int | None) -> ShardHead:
    return ShardHead(ShardId.parse(key), **fields)  # type: ignore[arg-type]


def _flushed(key: str = A, seq: int = 10, **more: int | None) -> ShardHead:
    """A head with everything flushed and published up to ``seq``, committed a while ago."""
    fields: dict[str, int | None] = {
        "seq": seq,
        "flushed_seq": seq,
        "published_seq": seq,
        "last_commit_hlc": (NOW - 3_600_000) << 16,
    }
    fields.update(more)
    return _head(key, **fields)


def _flush(heads: dict[str, ShardHead], **kwargs: object) -> Work:
    options: dict[str, object] = {"publishing": True, "retention_ms": RETENTION, "now_ms": NOW}
    options.update(kwargs)
    return flush_work(heads, **options)  # type: ignore[arg-type]


def _run(state: str, started: int | None, completed: int | None = None, run_id: str = "jr") -> JobRun:
    return JobRun(run_id, state, started, completed)


# -- flush ----------------------------------------------------------------------------------------------------------


def test_flush_has_no_work_when_everything_is_flushed_published_and_nothing_requested():
    # Given heads flushed and published to their end, no request, no release target
    heads = {A: _flushed(A), B: _flushed(B)}
    # When the flush's work is decided
    work = _flush(heads)
    # Then there is none
    assert not work.due and work.reasons == () and work.since_ms is None


def test_flush_is_due_for_unflushed_entries_since_their_newest_commit():
    # Given two shards with unflushed entries, committed at different times
    heads = {
        A: _head(A, seq=5, flushed_seq=3, published_seq=3, last_commit_hlc=(NOW - 60_000) << 16 | 7),
        B: _head(B, seq=9, flushed_seq=2, published_seq=2, last_commit_hlc=(NOW - 5_000) << 16),
    }
    # When the flush's work is decided
    work = _flush(heads)
    # Then it is due for both, since the newest commit
    assert work.reasons == (Reason("unflushed", 2, NOW - 5_000),)


def test_flush_counts_a_head_without_a_commit_time_as_committed_now():
    work = _flush({A: _head(A, seq=1)})
    assert work.reasons == (Reason("unflushed", 1, NOW),)


def test_flush_is_due_for_recorded_requests_since_the_newest():
    # Given everything flushed but two flush requests recorded
    work = _flush({A: _flushed()}, request_ms=[NOW - 9_000, NOW - 2_000])
    # Then the flush is due for them (a run clears them)
    assert work.reasons == (Reason("requests", 2, NOW - 2_000),)


def test_flush_is_due_for_requests_even_without_any_shard():
    assert _flush({}, request_ms=[NOW]).reasons == (Reason("requests", 1, NOW),)


@pytest.mark.parametrize(
    ("published", "released", "publishing", "due"),
    [
        (7, 0, True, True),  # published behind flushed
        (None, 0, True, True),  # never published: publishing starts at the release mark
        (None, 10, True, False),  # never published, but released through the end: nothing to publish
        (7, 0, False, False),  # publishing off: the position means nothing
    ],
)
def test_flush_is_due_for_unpublished_ranges_only_with_publishing_on(published, released, publishing, due):
    # Given a shard flushed to 10 with a published position
    heads = {A: _flushed(A, published_seq=published, released_seq=released)}
    # When the flush's work is decided
    work = _flush(heads, publishing=publishing)
    # Then it is due exactly when publishing is on and the position is behind
    assert work.reasons == ((Reason("unpublished", 1, NOW),) if due else ())


# -- release --------------------------------------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("head", "position", "publishing", "limit"),
    [
        (_flushed(seq=10), 8, True, 8),  # the checkpoint covers less than is flushed
        (_flushed(seq=10), 20, True, 10),  # flushed is the bound
        (_flushed(seq=10, published_seq=6), 20, True, 6),  # published is the bound
        (_flushed(seq=10, published_seq=6), 20, False, 10),  # ... only with publishing on
        (_flushed(seq=10, published_seq=None, released_seq=4), 20, True, 4),  # never published: the release mark
        (_head(seq=12, flushed_seq=10, published_seq=12), 12, True, 10),  # unflushed entries are not released
    ],
)
def test_release_limit_is_flushed_covered_and_published(head, position, publishing, limit):
    assert release_limit(head, position, publishing=publishing) == limit


def test_release_cutoff_is_the_older_of_the_retention_and_the_checkpoint_hlc():
    retention_hlc = ((NOW - RETENTION) << 16) | 0xFFFF
    assert release_cutoff_hlc(NOW, RETENTION, 2**62) == retention_hlc
    assert release_cutoff_hlc(NOW, RETENTION, 12345) == 12345


def test_release_candidates_are_shards_whose_limit_passes_their_release_mark():
    # Given a shard covered beyond its mark, one covered only up to its mark, one without a checkpoint
    heads = {A: _flushed(A, released_seq=3), B: _flushed(B, released_seq=8), "other#t#0": _flushed("other#t#0")}
    positions = {A: 9, B: 8}
    hlcs = {A: (NOW - 2 * RETENTION) << 16, B: NOW << 16}
    # When the candidates are listed
    found = release_candidates(heads, positions, hlcs, publishing=True, now_ms=NOW, retention_ms=RETENTION)
    # Then only the first is one, with its limit and the cutoff its checkpoint allows
    assert found == {A: (9, (NOW - 2 * RETENTION) << 16)}


def _target(seq: int = 9, age_ms: int = 2 * RETENTION, checkpoint_ms: int | None = NOW - RETENTION) -> ReleaseTarget:
    return ReleaseTarget(seq, (NOW - age_ms) << 16, checkpoint_ms)


def test_flush_is_due_for_a_release_since_the_entry_may_go():
    # Given a shard whose release step would mark entry 9: past the retention, after its checkpoint appeared
    heads = {A: _flushed(A, released_seq=3)}
    target = _target(age_ms=RETENTION + 60_000, checkpoint_ms=NOW - 120_000)
    # When the flush's work is decided
    work = _flush(heads, targets={A: target})
    # Then it is due for the release, since the later of the two
    assert work.reasons == (Reason("release", 1, NOW - 60_000),)
    # And since the checkpoint when that came later
    later = _flush(heads, targets={A: _target(checkpoint_ms=NOW - 1_000)})
    assert later.reasons == (Reason("release", 1, NOW - 1_000),)


def test_flush_release_due_time_is_now_when_the_checkpoint_time_is_unknown():
    work = _flush({A: _flushed(A, released_seq=3)}, targets={A: _target(checkpoint_ms=None)})
    assert work.reasons == (Reason("release", 1, NOW),)


def test_flush_has_no_release_when_the_target_is_at_the_mark_or_missing():
    heads = {A: _flushed(A, released_seq=9), B: _flushed(B)}
    assert not _flush(heads, targets={A: _target(seq=9), B: None}).due


def test_flush_release_left_undone_by_successful_runs_is_stale():
    # Given a release due since T, and successful runs that started after T (+ the clock margin)
    heads = {A: _flushed(A, released_seq=3)}
    targets = {A: _target(checkpoint_ms=NOW - 600_000)}
    due_at = NOW - 600_000
    after = [_run("SUCCEEDED", due_at + CLOCK_SKEW_MS + i, run_id=f"jr{i}") for i in range(STALE_AFTER_RUNS)]
    # When as many as STALE_AFTER_RUNS of them left it undone
    work = _flush(heads, targets=targets, runs=after)
    # Then the release is stale: reported, not acted on
    assert not work.due and work.stale == (Reason("release", 1, due_at),)
    # And one run fewer, runs that started too early, or runs that failed do not make it stale
    assert _flush(heads, targets=targets, runs=after[1:]).due
    early = [_run("SUCCEEDED", due_at + CLOCK_SKEW_MS - 1, run_id=f"e{i}") for i in range(3)]
    assert _flush(heads, targets=targets, runs=early).due
    failed = [_run("FAILED", due_at + 10_000, run_id=f"f{i}") for i in range(3)]
    assert _flush(heads, targets=targets, runs=failed).due


def test_flush_stale_release_does_not_hide_other_work():
    heads = {A: _flushed(A, released_seq=3), B: _head(B, seq=2, last_commit_hlc=NOW << 16)}
    runs = [_run("SUCCEEDED", NOW, run_id=f"jr{i}") for i in range(3)]
    work = _flush(heads, targets={A: _target(checkpoint_ms=NOW - 600_000)}, runs=runs)
    assert [r.kind for r in work.reasons] == ["unflushed"] and [r.kind for r in work.stale] == ["release"]


# -- compaction and checkpoint ------------------------------------------------------------------------------------


def test_lagging_shards_are_flushed_beyond_their_checkpoint_position():
    heads = {A: _flushed(A, seq=10), B: _flushed(B, seq=4), "x#t#0": _head("x#t#0")}
    assert lagging_shards(heads, {A: 10, B: 3}) == [B]
    assert lagging_shards(heads, {}) == [B, A]


FLUSHED = {A: _flushed(A, seq=10)}


def test_compaction_is_idle_while_the_checkpoints_cover_everything_flushed():
    # Given every flushed entry covered by the checkpoints, and a flush that finished after the last compaction
    flush_runs = [_run("SUCCEEDED", NOW - 5_000, NOW - 1_000)]
    compact_runs = [_run("SUCCEEDED", NOW - 600_000, NOW - 500_000)]
    # Then compaction has nothing to do
    assert not compact_work(FLUSHED, {A: 10}, flush_runs, compact_runs).due


def test_compaction_is_due_after_a_flush_that_finished_after_it_last_began():
    flush_runs = [_run("SUCCEEDED", NOW - 5_000, NOW - 1_000), _run("SUCCEEDED", NOW - 900_000, NOW - 800_000)]
    compact_runs = [_run("SUCCEEDED", NOW - 600_000, NOW - 500_000)]
    work = compact_work(FLUSHED, {A: 7}, flush_runs, compact_runs)
    assert work.reasons == (Reason("flushed", 1, NOW - 1_000),)


def test_compaction_counts_a_failed_flush_as_a_change():
    # A flush can fail after its commit (the lake changed): its end counts
    work = compact_work(FLUSHED, {}, [_run("FAILED", NOW - 5_000, NOW - 1_000)], [_run("SUCCEEDED", NOW - 9_000)])
    assert work.reasons == (Reason("flushed", 1, NOW - 1_000),)


def test_compaction_is_idle_when_it_began_after_the_last_flush_finished():
    flush_runs = [_run("SUCCEEDED", NOW - 900_000, NOW - 800_000), _run("RUNNING", NOW - 1_000)]
    compact_runs = [_run("FAILED", NOW - 10_000, NOW - 5_000), _run("SUCCEEDED", NOW - 700_000, NOW - 600_000)]
    # The unfinished flush does not count yet, the failed compaction does not count as one that began
    assert not compact_work(FLUSHED, {A: 7}, flush_runs, compact_runs).due


def test_compaction_that_never_succeeded_is_due_once_even_without_a_flush_history():
    assert compact_work(FLUSHED, {}, [], []).reasons == (Reason("flushed", 1, 0),)
    assert compact_work(FLUSHED, {}, [], [_run("FAILED", NOW - 5_000, NOW - 1_000)]).due
    assert not compact_work(FLUSHED, {}, [], [_run("SUCCEEDED", NOW - 5_000, NOW - 1_000)]).due


def test_checkpoint_is_due_after_a_compaction_that_finished_after_it_last_began():
    compact_runs = [_run("SUCCEEDED", NOW - 50_000, NOW - 20_000)]
    checkpoint_runs = [_run("SUCCEEDED", NOW - 3_600_000, NOW - 3_500_000)]
    work = checkpoint_work(FLUSHED, {A: 4}, compact_runs, checkpoint_runs)
    assert work.job == "checkpoint" and work.reasons == (Reason("compacted", 1, NOW - 20_000),)
    # And idle once a checkpoint began after it, or while the checkpoints cover everything
    assert not checkpoint_work(FLUSHED, {A: 4}, compact_runs, [_run("SUCCEEDED", NOW - 10_000)]).due
    assert not checkpoint_work(FLUSHED, {A: 10}, compact_runs, checkpoint_runs).due


# -- runs -------------------------------------------------------------------------------------------------------------


def test_job_run_states_and_finish_time():
    assert _run("RUNNING", 5).active and _run("RUNNING", 5).finished_ms is None
    assert _run("SUCCEEDED", 5, 9).succeeded and _run("SUCCEEDED", 5, 9).finished_ms == 9
    assert _run("TIMEOUT", 5).finished_ms == 5 and not _run("TIMEOUT", 5).succeeded


def test_work_is_covered_by_a_queued_run_or_one_that_began_after_it():
    work = Work("compact", (Reason("flushed", 1, NOW - 60_000), Reason("flushed", 1, NOW - 10_000)))
    assert work.since_ms == NOW - 10_000
    assert work.covering([_run("WAITING", None, run_id="q")]) == _run("WAITING", None, run_id="q")
    began_after = _run("RUNNING", NOW - 10_000 + CLOCK_SKEW_MS, run_id="after")
    assert work.covering([_run("RUNNING", NOW - 10_001), began_after]) == began_after
    assert work.covering([_run("RUNNING", NOW - 10_000 + CLOCK_SKEW_MS - 1)]) is None
    assert work.covering([_run("SUCCEEDED", NOW, NOW)]) is None
    assert Work("flush").covering([_run("WAITING", None)]) is None


def test_work_report_names_reasons_and_stale_ones():
    work = Work("flush", (Reason("unflushed", 2, 5),), (Reason("release", 1, 3),))
    assert work.report() == {
        "job": "flush",
        "due": True,
        "reasons": {"unflushed": 2},
        "since_ms": 5,
        "stale": {"release": 1},
    }


# -- the compaction policy -----------------------------------------------------------------------------------------
WAITING = CompactPolicy(min_flush_runs=3, max_wait_ms=3_600_000)


def _flushes(*finished: int) -> list[JobRun]:
    return [_run("SUCCEEDED", ms - 10_000, ms, run_id=f"f{i}") for i, ms in enumerate(finished)]


def test_compaction_waits_for_the_policys_number_of_flush_runs_since_it_last_began():
    compacted = [_run("SUCCEEDED", NOW - 600_000, NOW - 500_000)]
    # Two flushes since the last compaction began (and older ones before it) are not enough
    two = _flushes(NOW - 1_000, NOW - 2_000, NOW - 700_000, NOW - 800_000)
    assert not compact_work(FLUSHED, {A: 7}, two, compacted, policy=WAITING, now_ms=NOW).due
    # A third is
    three = _flushes(NOW - 1_000, NOW - 2_000, NOW - 3_000)
    work = compact_work(FLUSHED, {A: 7}, three, compacted, policy=WAITING, now_ms=NOW)
    assert work.reasons == (Reason("flushed", 1, NOW - 1_000),)
    # Unfinished runs do not count
    running = [_run("RUNNING", NOW - 500), *_flushes(NOW - 1_000, NOW - 2_000)]
    assert not compact_work(FLUSHED, {A: 7}, running, compacted, policy=WAITING, now_ms=NOW).due


def test_compaction_is_due_once_the_first_flush_since_has_waited_long_enough():
    compacted = [_run("SUCCEEDED", NOW - 9_000_000, NOW - 8_000_000)]
    fresh = _flushes(NOW - 3_599_999)
    assert not compact_work(FLUSHED, {A: 7}, fresh, compacted, policy=WAITING, now_ms=NOW).due
    aged = _flushes(NOW - 3_600_000)
    assert compact_work(FLUSHED, {A: 7}, aged, compacted, policy=WAITING, now_ms=NOW).due


def test_compaction_policy_keeps_the_other_rules():
    # Never compacted: due at once whatever the policy; covered by the checkpoints: idle however many flushes
    assert compact_work(FLUSHED, {}, _flushes(NOW - 1_000), [], policy=WAITING, now_ms=NOW).due
    many = _flushes(*(NOW - 1_000 * i for i in range(1, 10)))
    compacted = [_run("SUCCEEDED", NOW - 600_000, NOW - 500_000)]
    assert not compact_work(FLUSHED, {A: 10}, many, compacted, policy=WAITING, now_ms=NOW).due
    # The default waits for 16 runs or 6 hours; every flush is the old rule
    assert DEFAULT_COMPACT_POLICY == CompactPolicy(16, 6 * 3600 * 1000)
    assert compact_work(FLUSHED, {A: 7}, _flushes(NOW - 1_000), compacted, policy=EVERY_FLUSH).due
    with pytest.raises(ValueError, match="needs the time"):
        compact_work(FLUSHED, {A: 7}, many, compacted, policy=WAITING)
    with pytest.raises(ValueError, match="min_flush_runs >= 1"):
        CompactPolicy(min_flush_runs=0)


# -- the flush's engine -------------------------------------------------------------------------------------------


def test_flush_backlog_is_the_entries_above_the_flushed_sequence_of_every_shard():
    # Given shards with entries flushed or not (one whose head was read before a flush's advance landed)
    heads = [_head(A, seq=12, flushed_seq=2), _head(B, seq=7, flushed_seq=7), _head(A, seq=3, flushed_seq=5)]
    # Then the backlog counts the unflushed entries, never less than none per shard
    assert flush_backlog(heads) == 10
    assert flush_backlog([]) == 0


@pytest.mark.parametrize(
    ("backlog", "engine"),
    [
        (0, "function"),  # nothing unflushed (a release or a request): the cheap engine
        (1_000, "function"),  # a small backlog
        (DEFAULT_FUNCTION_MAX_BACKLOG, "function"),  # at the limit, still the function
        (DEFAULT_FUNCTION_MAX_BACKLOG + 1, "glue"),  # beyond it, the Glue job
        (50 * DEFAULT_FUNCTION_MAX_BACKLOG, "glue"),  # a large backlog
    ],
)
def test_a_flush_goes_to_the_function_up_to_its_backlog_limit_and_to_glue_beyond(backlog, engine):
    assert choose_flush_engine(backlog, max_backlog=DEFAULT_FUNCTION_MAX_BACKLOG) == engine


@pytest.mark.parametrize("backlog", [0, 10**9])
def test_with_one_engine_deployed_every_flush_goes_to_it(backlog):
    # Given an override deploying one engine
    # Then whatever the backlog, the run goes to that engine
    assert choose_flush_engine(backlog, max_backlog=100, engines=("function",)) == "function"
    assert choose_flush_engine(backlog, max_backlog=100, engines=("glue",)) == "glue"


def test_choosing_an_engine_needs_one_and_a_limit():
    with pytest.raises(ValueError, match="function, glue"):
        choose_flush_engine(1, max_backlog=10, engines=())
    with pytest.raises(ValueError, match="max_backlog"):
        choose_flush_engine(1, max_backlog=-1)


def test_the_default_limit_leaves_the_function_half_its_timeout_at_the_measured_rate():
    # Given the measured rate (benchmarks/results/cost-flush-engines.json: the slowest row size) and the function's
    # 900-second timeout
    import json
    from pathlib import Path

    doc = json.loads((Path(__file__).parents[2] / "benchmarks/results/cost-flush-engines.json").read_text())
    # Then the default is the benchmark's measured default rounded down (to a round figure, not below half of it),
    # which a run at that rate flushes, after a cold start, in half the timeout
    assert doc["deployed_default"] == DEFAULT_FUNCTION_MAX_BACKLOG
    assert 0.5 * doc["measured_default"] <= DEFAULT_FUNCTION_MAX_BACKLOG <= doc["measured_default"]
    seconds = DEFAULT_FUNCTION_MAX_BACKLOG / doc["slowest_deltas_per_s"] + doc["cold_seconds"]
    assert seconds <= 0.5 * doc["function"]["timeout_s"]


def test_lakesync_local_reads_the_functions_limit_as_the_stack_sets_it():
    # Given the embedded default's pipeline, which chooses the flush engine with choose_flush_engine
    from lakesync.aws.settings.env import SettingsError
    from lakesync.local.pipeline import flush_function_max_backlog

    # Then its limit is the deployed default, or LAKESYNC_FLUSH_FUNCTION_MAX_BACKLOG as the lake tick reads it
    assert flush_function_max_backlog({}) == DEFAULT_FUNCTION_MAX_BACKLOG
    assert flush_function_max_backlog({"LAKESYNC_FLUSH_FUNCTION_MAX_BACKLOG": " 12 "}) == 12
    with pytest.raises(SettingsError, match="LAKESYNC_FLUSH_FUNCTION_MAX_BACKLOG"):
        flush_function_max_backlog({"LAKESYNC_FLUSH_FUNCTION_MAX_BACKLOG": "-3"})
