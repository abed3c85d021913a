"""Property: random multi-client histories, cut into batches delivered in any order with duplicates, materialise to
exactly ``core.merge.fold`` projected onto the schema (row absent iff the fold says it does not exist)."""

from __future__ import annotations

import uuid
from typing import Any

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from lakesync.core.delta import DeltaOp, RowDelta, make_delta
from lakesync.core.merge import fold
from lakesync.core.schema import ColumnType, parse_table_schema
from lakesync.sql import SqlDestination
from lakesync.sql.coerce import coerce_value, decode_value

pytestmark = pytest.mark.integration

COLUMNS = {"s": ColumnType.STRING, "n": ColumnType.NUMBER, "b": ColumnType.BOOLEAN, "j": ColumnType.JSON}
VALUES = st.one_of(
    st.none(),
    st.booleans(),
    st.integers(-3, 3),
    st.sampled_from([0.5, -1.25, 1e300]),
    st.sampled_from(["", "a", "b", "é😀", "it's"]),
    st.lists(st.integers(0, 2), max_size=2),
    st.dictionaries(st.sampled_from(["k", "l"]), st.integers(0, 2), max_size=2),
)


@st.composite
def histories(draw: Any) -> tuple[list[RowDelta], list[list[RowDelta]]]:
    deltas: list[RowDelta] = []
    for _ in range(draw(st.integers(1, 14))):
        op = draw(st.sampled_from([DeltaOp.INSERT, DeltaOp.UPDATE, DeltaOp.UPDATE, DeltaOp.DELETE]))
        cols = draw(st.dictionaries(st.sampled_from([*COLUMNS, "extra"]), VALUES, max_size=3))
        deltas.append(
            make_delta(
                op,
                table="prop",
                row_id=draw(st.sampled_from(["r1", "r2", "r3"])),
                client_id=draw(st.sampled_from(["a", "b", "c"])),
                hlc=draw(st.integers(1, 6)) << 16,  # few distinct HLCs: many ties
                columns=cols,
            )
        )
    # Deliveries: every delta at least once, some twice, shuffled, cut into batches.
    extra = draw(st.lists(st.sampled_from(deltas), max_size=4))
    stream = draw(st.permutations(deltas + extra))
    cuts = sorted(draw(st.sets(st.integers(1, max(1, len(stream) - 1)), max_size=4)))
    batches = [stream[i:j] for i, j in zip([0, *cuts], [*cuts, len(stream)], strict=True) if stream[i:j]]
    return deltas, batches


def expected_rows(deltas: list[RowDelta], allow_nul: bool) -> dict[str, dict[str, Any]]:
    out: dict[str, dict[str, Any]] = {}
    for row_id in sorted({d.row_id for d in deltas}):
        state = fold(d for d in deltas if d.row_id == row_id)
        values = state.values() if state is not None else None
        if values is None:
            continue
        out[row_id] = {
            c: decode_value(coerce_value(values.get(c), t, allow_nul=allow_nul).value, t) for c, t in COLUMNS.items()
        }
    return out


@pytest.mark.parametrize("soft", [True, False], ids=["soft", "hard"])
@settings(max_examples=30, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(history=histories())
def test_destination_rows_equal_the_fold(dest: SqlDestination, soft: bool, history: Any) -> None:
    deltas, batches = history
    table = f"p_{uuid.uuid4().hex[:10]}"
    schema = parse_table_schema(
        {
            "table": table,
            "sourceTable": "prop",
            "columns": [{"name": c, "type": t.value} for c, t in COLUMNS.items()],
            "softDelete": soft,
        }
    )
    for batch in batches:
        dest.apply(schema, batch)
    assert _numbers_as_floats(dest.rows(schema)) == _numbers_as_floats(expected_rows(deltas, dest.dialect.allow_nul))


def _numbers_as_floats(value: Any) -> Any:
    """PostgreSQL's jsonb keeps numbers as exact decimals (``1e300`` reads back as the integer 10**300): compare
    JSON numbers by value."""
    if isinstance(value, dict):
        return {k: _numbers_as_floats(v) for k, v in value.items()}
    if isinstance(value, list):
        return [_numbers_as_floats(v) for v in value]
    if isinstance(value, int) and not isinstance(value, bool):
        return float(value)
    return value
