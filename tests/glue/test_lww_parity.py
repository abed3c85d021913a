"""Parity of the Spark LWW fold (lakesync.spark.lww) with the core rule (lakesync.core.merge.fold).

Focus: on Hypothesis-generated histories of many rows (few clients, columns and HLCs, so versions tie; DELETEs;
duplicate deltas; equal versions with different values; clientIds and names ordered differently by UTF-16 and by code
point; values that JSON and Python compare differently), the state Spark writes parses to exactly the core's fold, for
every row; and a stored state folded with newer deltas equals the fold of all of them (incremental compaction).
Values are compared in their canonical JSON text, the only form the lake keeps.
"""

from __future__ import annotations

import json
import random
from collections.abc import Iterable, Mapping, Sequence
from datetime import UTC, datetime
from typing import TYPE_CHECKING, Any

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from pyspark.sql import functions as F

from lakesync.core.canonical import stable_stringify, utf16_key
from lakesync.core.delta import ColumnDelta, DeltaOp, RowDelta, make_delta
from lakesync.core.merge import RowState, fold, state_from_json
from lakesync.spark import lww

if TYPE_CHECKING:
    from pyspark.sql import DataFrame, SparkSession

pytestmark = pytest.mark.spark

DELTA_LOG_SCHEMA = (
    "gateway string, tbl string, row_id string, op string, client_id string, hlc bigint, delta_id string, "
    "columns array<struct<name:string,value:string>>, shard string, seq bigint, commit_hlc bigint, "
    "commit_ts timestamp"
)
STATES_SCHEMA = "gateway string, tbl string, row_id string, state string"
Key = tuple[str, str, str]


def delta_log_rows(
    entries: Iterable[tuple[str, RowDelta]], *, shard: str = "s0", first_seq: int = 1
) -> list[tuple[Any, ...]]:
    """Delta-log rows (docs/lake.md) of ``(gateway, delta)`` entries: canonical value texts, consecutive seqs."""
    rows = []
    for seq, (gateway, delta) in enumerate(entries, start=first_seq):
        columns = [(c.column, stable_stringify(c.value)) for c in delta.columns]
        commit_hlc = delta.hlc + seq
        commit_ts = datetime.fromtimestamp((commit_hlc >> 16) / 1000, UTC)
        where = (gateway, delta.table, delta.row_id)
        what = (delta.op.value, delta.client_id, delta.hlc, delta.delta_id, columns)
        rows.append((*where, *what, shard, seq, commit_hlc, commit_ts))
    return rows


def canonical(state: RowState | None) -> Any:
    """A row state with values as canonical JSON text, versions as tuples: equal iff the lake cannot tell apart."""
    if state is None:
        return None

    def version(v: Any) -> Any:
        return None if v is None else (v.hlc, v.client_id)

    columns = {name: (stable_stringify(c.value), c.hlc, c.client_id) for name, c in state.columns.items()}
    return version(state.tombstone), version(state.written), columns


def spark_states(spark: SparkSession, deltas: DataFrame) -> dict[Key, dict[str, Any]]:
    """Fold and render in Spark; collect each row's rendered columns by key."""
    rendered = lww.render(lww.fold(deltas), (), updated_at=F.lit(datetime(2024, 1, 1, tzinfo=UTC)))
    return {(r.tbl, r._gateway, r._row_key): r.asDict() for r in rendered.collect()}


def assert_parity(rendered: Mapping[Key, Mapping[str, Any]], expected: Mapping[Key, RowState]) -> None:
    assert set(rendered) == set(expected)
    for key, state in expected.items():
        row = rendered[key]
        table, _, row_id = key
        got = state_from_json(table, row_id, json.loads(row["_state"]))
        assert canonical(got) == canonical(state), key
        assert row["_exists"] is state.exists
        versions = [v.hlc for v in (state.tombstone, state.written) if v is not None]
        assert row["_hlc"] == max(versions)
        values = state.values()
        if values is None:
            assert row["_values"] is None
        else:
            parsed = json.loads(row["_values"])
            assert {k: stable_stringify(v) for k, v in parsed.items()} == {
                k: stable_stringify(v) for k, v in values.items()
            }


# --- strategies -----------------------------------------------------------------------------------------------------

CLIENTS = ["a", "b", "\U0001f600", "\uff01", "\ue000", "é"]
NAMES = ["x", "y", "Z", "\uff01n", "\U0001f600n", 'q"\t\n\\']
TRICKY_VALUES: list[Any] = [
    1,
    1.0,
    True,
    0,
    -0.0,
    False,
    None,
    2**53,
    2**53 + 1,
    1e21,
    1e-7,
    "1",
    "\U0001f600",
    "\uff01",
]
scalars = st.one_of(
    st.sampled_from(TRICKY_VALUES),
    st.integers(min_value=-(2**60), max_value=2**60),
    st.floats(allow_nan=False, allow_infinity=False),
    st.text(alphabet=st.characters(blacklist_categories=("Cs",)), max_size=6),
)
json_values = st.recursive(
    scalars,
    lambda inner: (
        st.lists(inner, max_size=3) | st.dictionaries(st.sampled_from(["k", "K", "é", "\uff01"]), inner, max_size=3)
    ),
    max_leaves=6,
)


class History(list[tuple[str, RowDelta]]):
    """Generated ``(gateway, delta)`` entries; printed as its seed, not its ~1000 deltas."""

    seed: int = 0

    def __repr__(self) -> str:
        return f"History(seed={self.seed}, entries={len(self)})"


@st.composite
def row_histories(draw: st.DrawFn) -> History:
    """(gateway, delta) entries of 100-300 rows over two gateways and two tables, in random order, with duplicates.

    Hypothesis draws the value pool and a seed; the seed lays out the many deltas (drawing each of them through
    Hypothesis would exceed its example size).
    """
    pool = [*TRICKY_VALUES, *draw(st.lists(json_values, min_size=4, max_size=12))]
    seed = draw(st.integers(min_value=0, max_value=2**64))
    rnd = random.Random(seed)
    entries = History()
    entries.seed = seed
    for i in range(rnd.randint(100, 300)):
        gateway = rnd.choice(["gw1", "gw2"])
        table = rnd.choice(["todos", "notes"])
        row_id = f"r{i % 120}"  # the same row id recurs under other gateways and tables
        for _ in range(rnd.randint(1, 6)):
            op = rnd.choice([DeltaOp.INSERT, DeltaOp.UPDATE, DeltaOp.UPDATE, DeltaOp.DELETE])
            names = rnd.choices(NAMES, k=rnd.randint(0, 4))  # repeats: the last one counts
            delta = make_delta(
                op,
                table=table,
                row_id=row_id,
                client_id=rnd.choice(CLIENTS),
                hlc=rnd.randint(1, 3),
                columns=[ColumnDelta(name, rnd.choice(pool)) for name in names],
            )
            entries.append((gateway, delta))
            if rnd.random() < 0.1:
                entries.append((gateway, delta))
    rnd.shuffle(entries)
    return entries


def core_folds(entries: Sequence[tuple[str, RowDelta]]) -> dict[Key, RowState]:
    by_row: dict[Key, list[RowDelta]] = {}
    for gateway, delta in entries:
        by_row.setdefault((delta.table, gateway, delta.row_id), []).append(delta)
    folded = {key: fold(deltas) for key, deltas in by_row.items()}
    return {key: state for key, state in folded.items() if state is not None}


PARITY = settings(
    max_examples=8,
    deadline=None,
    suppress_health_check=[HealthCheck.too_slow, HealthCheck.data_too_large, HealthCheck.large_base_example],
)


@PARITY
@given(entries=row_histories())
def test_lww_fold_equals_core_fold_for_every_row(spark: SparkSession, entries: list[tuple[str, RowDelta]]) -> None:
    # Given random histories as delta-log rows
    deltas = spark.createDataFrame(delta_log_rows(entries), DELTA_LOG_SCHEMA)

    # When Spark folds and renders them
    rendered = spark_states(spark, deltas)

    # Then every row's state is the core's fold of its deltas
    assert_parity(rendered, core_folds(entries))


@PARITY
@given(entries=row_histories(), data=st.data())
def test_lww_fold_of_stored_state_and_new_deltas_equals_fold_of_all(
    spark: SparkSession, entries: list[tuple[str, RowDelta]], data: st.DataObject
) -> None:
    # Given the history split into an older part A and a newer part B
    rnd = random.Random(data.draw(st.integers(min_value=0, max_value=2**64)))
    in_a = [rnd.random() < 0.5 for _ in entries]
    older = [e for e, a in zip(entries, in_a, strict=True) if a]
    newer = [e for e, a in zip(entries, in_a, strict=True) if not a]
    # and fold(A) stored as state text: Spark's own render for table "todos", Python's encoder for "notes"
    spark_a = spark_states(spark, spark.createDataFrame(delta_log_rows(older), DELTA_LOG_SCHEMA))
    stored = [(gw, tbl, rid, row["_state"]) for (tbl, gw, rid), row in spark_a.items() if tbl == "todos"]
    stored += [
        (gw, tbl, rid, lww.encode_state_text(state))
        for (tbl, gw, rid), state in core_folds(older).items()
        if tbl == "notes"
    ]

    # When the stored states, as pseudo-deltas, are folded with B
    states = lww.state_deltas(spark.createDataFrame(stored, STATES_SCHEMA))
    new_deltas = spark.createDataFrame(delta_log_rows(newer), DELTA_LOG_SCHEMA).select(*lww.DELTA_COLUMNS)
    rendered = spark_states(spark, new_deltas.unionByName(states))

    # Then every row equals the core's fold of A ∪ B
    assert_parity(rendered, core_folds(entries))


# --- the building blocks ---------------------------------------------------------------------------------------------


def test_lww_utf16_order_puts_astral_client_ids_before_fullwidth_ones(spark: SparkSession) -> None:
    # Given two DELETE-free writes at the same HLC, by U+FF01 and by an astral client (code-point order: astral last)
    a = make_delta("UPDATE", table="t", row_id="r", client_id="\uff01", hlc=5, columns={"x": "fullwidth"})
    b = make_delta("UPDATE", table="t", row_id="r", client_id="\U0001f600", hlc=5, columns={"x": "astral"})
    assert utf16_key("\uff01") > utf16_key("\U0001f600")

    # When Spark folds them
    rendered = spark_states(spark, spark.createDataFrame(delta_log_rows([("g", a), ("g", b)]), DELTA_LOG_SCHEMA))

    # Then the UTF-16-greater client (U+FF01) wins, as in the core
    row = rendered[("t", "g", "r")]
    assert json.loads(row["_values"]) == {"x": "fullwidth"}
    assert_parity(rendered, core_folds([("g", a), ("g", b)]))


def test_lww_repeated_column_in_one_delta_keeps_the_last_value(spark: SparkSession) -> None:
    # Given one delta setting x twice (the first value is the greater text, which would win a version tie)
    delta = make_delta(
        "INSERT", table="t", row_id="r", client_id="c", hlc=1, columns=[ColumnDelta("x", "zz"), ColumnDelta("x", "a")]
    )

    # When Spark folds it
    rendered = spark_states(spark, spark.createDataFrame(delta_log_rows([("g", delta)]), DELTA_LOG_SCHEMA))

    # Then the later occurrence counts
    assert json.loads(rendered[("t", "g", "r")]["_values"]) == {"x": "a"}


def test_lww_state_text_is_json_with_tab_framed_canonical_values() -> None:
    # Given a state whose value prints differently in Python and in JavaScript
    state = fold([make_delta("INSERT", table="t", row_id="r", client_id="c\t", hlc=7, columns={"n": 1e21})])
    assert state is not None

    # When it is encoded as lake state text
    text = lww.encode_state_text(state)

    # Then the text is JSON that decodes to the same state, and the value's canonical text sits between TABs
    assert state_from_json("t", "r", json.loads(text)) == state
    assert text.split("\t")[1::2] == ["1e+21"]


def test_lww_corrupt_state_text_fails_the_job(spark: SparkSession) -> None:
    # Given a stored state whose values are not TAB-framed (compact JSON of the same state)
    states = spark.createDataFrame([("g", "t", "r", '{"t":null,"w":["1","c"],"c":{"x":[1,"1","c"]}}')], STATES_SCHEMA)

    # When it is read as pseudo-deltas, Then Spark refuses it instead of guessing
    with pytest.raises(Exception, match="corrupt _state"):
        lww.state_deltas(states).collect()
