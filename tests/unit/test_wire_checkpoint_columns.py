"""The columnar checkpoint encoding (lakesync.wire.checkpoint_columns): a checkpoint's rows written by the real
checkpoint writer, decoded from the stream, encoded as columns and decoded again are the same deltas (deltaIds
included, derived for rows runs), in the same order; how rows are grouped into runs; JSON numbers read as doubles;
and every malformed document refused with a CodecError that says where.
"""

from __future__ import annotations

import json
from typing import Any

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from lakesync.core.canonical import JsonValue
from lakesync.core.checkpoint import checkpoint_id
from lakesync.core.delta import DeltaOp, RowDelta, make_delta
from lakesync.core.errors import CodecError
from lakesync.core.hlc import encode
from lakesync.core.merge import RowState, fold
from lakesync.gateway.checkpoint import encode_row, write_checkpoint
from lakesync.gateway.memory import InMemoryObjectStore
from lakesync.wire.checkpoint_columns import ColumnsChunk, RowsRun, decode_columns, encode_columns
from lakesync.wire.fast_checkpoint import RawDelta, decode_checkpoint
from tests.factories import T0, at, delete, insert

VALUES: list[JsonValue] = [
    None,
    True,
    False,
    0,
    1,
    -7,
    2.5,
    2**53,
    1e300,
    "",
    "x",
    "\U0001f600",
    [],
    [1, "a"],
    {"k": 1},
]


def _stream_rows(states: list[RowState]) -> list[list[RawDelta]]:
    """The rows of a checkpoint of ``states`` as the real writer stores them and the stream decoder reads them."""
    objects = InMemoryObjectStore()
    manifest = write_checkpoint(
        objects,
        gateway="default",
        checkpoint_id=checkpoint_id(T0, "00000001"),
        created_at_ms=T0,
        positions={"default#todos#0": len(states)},
        server_hlc=encode(T0, 0),
        tables=sorted({s.table for s in states}),
        rows=(encode_row(s) for s in states),
        chunk_bytes=512,
    )
    return list(decode_checkpoint(objects.objects[c.key] for c in manifest.chunks))


def _state(*deltas: RowDelta) -> RowState:
    state = fold(deltas)
    assert state is not None
    return state


def _round_trip(rows: list[list[RawDelta]]) -> ColumnsChunk:
    return decode_columns(encode_columns(rows, encode(T0, 5)))


@st.composite
def _states(draw: st.DrawFn) -> list[RowState]:
    """Rows of two tables, each written by one to three deltas (some deleted, some with columns at several
    versions), in (table, rowId) order as the checkpoint job writes them."""
    states = []
    for table in ("notes", "todos"):
        for index in range(draw(st.integers(0, 6))):
            row_id = f"r{index}"
            deltas = []
            for step in range(draw(st.integers(1, 3))):
                op = draw(st.sampled_from(["INSERT", "UPDATE", "DELETE"])) if step else "INSERT"
                names = draw(st.lists(st.sampled_from(["title", "done", "n"]), max_size=3, unique=True))
                columns = {n: draw(st.sampled_from(VALUES)) for n in names}
                client = draw(st.sampled_from(["a", "b"]))
                deltas.append(
                    make_delta(
                        op, table=table, row_id=row_id, client_id=client, hlc=encode(T0 + step, 0), columns=columns
                    )
                )
            states.append(_state(*deltas))
    return states


@settings(max_examples=150, deadline=None)
@given(_states())
def test_columns_carry_exactly_the_streams_deltas_in_order(states: list[RowState]) -> None:
    rows = _stream_rows(states)

    chunk = _round_trip(rows)

    assert list(chunk.rows()) == rows
    assert chunk.row_count() == len(rows)
    assert chunk.server_hlc == encode(T0, 5)


def test_rows_of_one_write_share_a_run_and_other_rows_go_as_deltas() -> None:
    states = [
        _state(insert("a", title="x", done=False)),
        _state(insert("b", title="y", done=True)),
        _state(insert("c", title="z")),  # other columns: a new run
        _state(insert("d", title="w", hlc=at(1)), insert("d", client="c2", hlc=at(2), done=True)),  # two versions
        _state(
            insert("e", title="v"),
            delete("e", hlc=at(3)),
        ),
        _state(insert("f", title="u")),
    ]
    rows = _stream_rows(states)

    chunk = _round_trip(rows)

    shapes = [(run.table, run.columns, run.row_ids) if isinstance(run, RowsRun) else len(run) for run in chunk.runs]
    assert shapes == [
        ("todos", ("done", "title"), ["a", "b"]),
        ("todos", ("title",), ["c"]),
        2,  # rows d and e
        ("todos", ("title",), ["f"]),
    ]
    first = chunk.runs[0]
    assert isinstance(first, RowsRun)
    assert first.values == [[False, True], ["x", "y"]]
    assert first.op is DeltaOp.INSERT and first.hlcs == [encode(T0, 0)] * 2


def test_the_document_is_smaller_than_the_stream_for_rows_of_one_write() -> None:
    states = [_state(insert(f"row-{i:05d}", title=f"task {i}", done=i % 2 == 0, n=i)) for i in range(500)]
    rows = _stream_rows(states)
    stream = sum(len(d[5]) + len(d[2]) + 60 for row in rows for d in row)  # a lower bound of the stream's bytes

    document = encode_columns(rows, 0)

    assert len(document) < stream / 2
    assert json.loads(document)["runs"][0]["rowIds"][:2] == ["row-00000", "row-00001"]


def _document(**run: Any) -> str:
    base: dict[str, Any] = {
        "op": "INSERT",
        "table": "todos",
        "columns": ["title", "n"],
        "rowIds": ["a", "b"],
        "clientIds": ["c1", "c1"],
        "hlcs": [str(encode(T0, 0)), str(encode(T0, 1))],
        "values": [["x", "y"], [1, 2]],
    }
    return json.dumps({"serverHlc": "7", "runs": [{**base, **run}]})


def test_numbers_are_read_as_doubles() -> None:
    chunk = decode_columns(_document(values=[["x", "y"], [2**53 + 1, 1.5]]))

    run = chunk.runs[0]
    assert isinstance(run, RowsRun)
    assert run.values[1] == [float(2**53 + 1), 1.5]  # as JSON.parse reads 9007199254740993


@pytest.mark.parametrize(
    ("document", "where"),
    [
        ("not json", "not JSON"),
        ("[]", "'runs' array"),
        ('{"runs": [], "serverHlc": -1}', "serverHlc"),
        ('{"runs": [], "serverHlc": "99999999999999999999999"}', "serverHlc"),
        ('{"runs": [1], "serverHlc": "1"}', "runs[0] must be an object"),
        (_document(op="DELETE"), "runs[0].op"),
        (_document(table=""), "runs[0].table"),
        (_document(columns=["title", "title"]), "runs[0].columns"),
        (_document(columns=["title", 3]), "runs[0].columns"),
        (_document(rowIds=["a"]), "runs[0].clientIds"),
        (_document(rowIds=[]), "runs[0].rowIds"),
        (_document(rowIds=["a", ""]), "runs[0].rowIds"),
        (_document(clientIds=["c1", None]), "runs[0].clientIds"),
        (_document(hlcs=["1", "-2"]), "runs[0].hlcs"),
        (_document(hlcs=["1", ""]), "runs[0].hlcs"),
        (_document(hlcs=["1", "1" * 21]), "runs[0].hlcs"),
        (_document(hlcs=["1", str(2**64)]), "runs[0].hlcs"),
        (_document(hlcs=["1", "١٢"]), "runs[0].hlcs"),  # non-ASCII digits
        (_document(values=[["x", "y"]]), "runs[0].values"),
        (_document(values=[["x"], [1, 2]]), "runs[0].values[0]"),
        (_document(values=[["x", "y"], [1, "HUGE"]]).replace('"HUGE"', "1e400"), "runs[0].values[1]"),
        (_document(rowIds="ab"), "runs[0].rowIds"),
        ('{"serverHlc": "1", "runs": [{"deltas": []}]}', "runs[0].deltas"),
        ('{"serverHlc": "1", "runs": [{"deltas": [{"op": "INSERT"}]}]}', "runs[0].deltas[0]"),
        ('{"serverHlc": "1", "runs": [{"deltas": [{"op": "INSERT", "table": "t", "rowId": "r", "clientId": "c", '
         '"deltaId": "d", "hlc": "1", "columns": [{"column": "x", "value": 1e999}]}]}]}', "runs[0].deltas[0]"),
        ('{"serverHlc": "1", "runs": [{"deltas": [' + "[" * 5000 + "]" * 5000 + "]}]}", "not JSON"),
    ],
)  # fmt: skip
def test_a_malformed_document_is_a_codec_error_that_says_where(document: str, where: str) -> None:
    with pytest.raises(CodecError, match=None) as caught:
        decode_columns(document)
    assert where in str(caught.value)


@pytest.mark.parametrize("versions", [1, 2], ids=["rows-run", "deltas-run"])
def test_values_as_deep_as_the_stream_accepts_survive_either_run(versions: int) -> None:
    deep: JsonValue = 1
    for _ in range(62):
        deep = [deep]
    deltas = [insert("r", x=deep)] + [insert("r", hlc=at(1), y=1)] * (versions - 1)
    rows = _stream_rows([_state(*deltas)])

    chunk = _round_trip(rows)

    assert list(chunk.rows()) == rows
    assert isinstance(chunk.runs[0], RowsRun) == (versions == 1)
