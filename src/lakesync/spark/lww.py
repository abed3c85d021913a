"""Per-column LWW in Spark: the closed form of :mod:`lakesync.core.merge`, as DataFrame → DataFrame transforms.

The fold is Spark-native (column expressions and higher-order functions, no Python UDFs). For the deltas of one row
(``gateway``, ``tbl``, ``row_id``) it computes exactly the core's closed form:

* ``tombstone`` = the greatest DELETE version; ``written`` = the greatest write version, kept iff above it;
* each column = the greatest ``(version, canonical value)`` among the writes of that column, kept iff its version is
  above the tombstone. (The greatest write of a column is above the tombstone iff any is, so "max, then compare" is
  the same as "filter, then max"; both aggregations are therefore plain ``max`` with map-side partial aggregation.)

Versions order by ``hlc``, then client id in UTF-16 code-unit order; equal versions by the canonical value text in
UTF-16 order. Spark compares ``encode(x, 'UTF-16BE')`` binaries, which it orders unsigned-lexicographically, shorter
prefix first: exactly :func:`lakesync.core.canonical.utf16_key`. Within one delta a repeated column name counts once,
with its last value. Values are the delta log's canonical JSON text (``stable_stringify``), never re-parsed.

Stored state text (``_state``)
    The JSON of :func:`lakesync.core.merge.state_to_json`, ``{"t": ..., "w": ..., "c": {name: [value, "hlc",
    clientId]}}``, columns in UTF-16 name order, with each value's canonical text framed by TAB characters
    (``name:[<TAB>value<TAB>,"hlc",clientId]``). TAB is JSON whitespace, so any JSON parser reads the text
    (``state_from_json(table, row_id, json.loads(text))``), and a raw TAB never occurs inside a JSON text (it is
    escaped in strings), so Spark recovers every value's canonical text exactly by splitting on TAB. Jackson-based
    parsing (``from_json``) would re-print numbers (``1e+21`` → ``1.0E21``) and lose the canonical text that equal-
    version ties compare. :func:`encode_state_text` writes the same layout in Python.

``_values`` is the JSON object of the live values, keys in UTF-16 order, each value its canonical text.

A stored state re-enters the fold as pseudo-deltas (:func:`state_deltas`): the tombstone as a DELETE, ``written`` as a
write without columns, each column as a one-column write at its version. Since the closed form is a semilattice join,
``fold(stored(fold(A)) ∪ B) == fold(A ∪ B)``.
"""

from __future__ import annotations

from collections.abc import Sequence

from pyspark.sql import Column, DataFrame
from pyspark.sql import functions as F

from lakesync.core.canonical import js_string, stable_stringify, utf16_key
from lakesync.core.merge import RowState, Version
from lakesync.core.schema import ColumnType
from lakesync.lake.tables import ROW_KEY

__all__ = [
    "DELTA_COLUMNS",
    "FOLDED_COLUMNS",
    "STATE_JSON_SCHEMA",
    "encode_state_text",
    "fold",
    "render",
    "state_deltas",
]

KEY = ("gateway", "tbl", "row_id")
DELTA_COLUMNS = (*KEY, "op", "client_id", "hlc", "columns")
"""The delta-log columns the fold reads (``columns``: ``array<struct<name, value>>``, values canonical JSON)."""
FOLDED_COLUMNS = (*KEY, "tombstone", "written", "columns")
"""What :func:`fold` returns: versions as ``struct<hlc, client_id>`` (or null) and the live columns as
``array<struct<name, value, hlc, client_id>>`` in UTF-16 name order."""

STATE_JSON_SCHEMA = "struct<t:array<string>,w:array<string>,c:map<string,array<string>>>"
"""``from_json`` schema of ``_state``: versions as ``[hlc, clientId]``; column values are taken from the TAB frames."""

SEP = "\t"
_CELL = "struct<hlc:bigint,ck:binary,vk:binary,value:string,client_id:string>"
_VERSION = "struct<hlc:bigint,ck:binary,client_id:string>"
_COLUMNS = "array<struct<name:string,value:string>>"


def _utf16(text: Column) -> Column:
    return F.encode(text, "UTF-16BE")


def _last_occurrences(columns: Column) -> Column:
    """The columns of one delta without the earlier occurrences of a repeated name (order kept)."""

    def is_last(c: Column, i: Column) -> Column:
        later = F.slice(columns, i + 2, F.size(columns))
        return ~F.exists(later, lambda d: d["name"] == c["name"])

    return F.filter(columns, is_last)


def _above(hlc: Column, ck: Column, tomb: Column) -> Column:
    """Whether version ``(hlc, ck)`` is strictly above ``tomb`` (true when there is no tombstone)."""
    return tomb.isNull() | (hlc > tomb.hlc) | ((hlc == tomb.hlc) & (ck > tomb.ck))


def fold(deltas: DataFrame) -> DataFrame:
    """The per-row LWW state of a set of deltas (order and duplicates do not matter).

    Args:
        deltas: Delta-log-shaped rows with at least :data:`DELTA_COLUMNS`.

    Returns:
        One row per ``(gateway, tbl, row_id)`` with :data:`FOLDED_COLUMNS`.
    """
    is_delete = F.col("op") == "DELETE"
    version = F.struct(
        F.col("hlc").cast("bigint").alias("hlc"), _utf16(F.col("client_id")).alias("ck"), F.col("client_id")
    )
    base = deltas.select(
        *KEY, is_delete.alias("del"), version.alias("v"), _last_occurrences(F.col("columns")).alias("cols")
    )
    no_cell = F.lit(None).cast(_CELL)
    no_version = F.lit(None).cast(_VERSION)
    row_events = base.select(
        *KEY,
        F.lit(None).cast("string").alias("name"),
        F.when(F.col("del"), F.col("v")).alias("t"),
        F.when(~F.col("del"), F.col("v")).alias("w"),
        no_cell.alias("cell"),
    )
    cell_events = (
        base.where(~F.col("del"))
        .select(*KEY, "v", F.explode("cols").alias("c"))
        .select(
            *KEY,
            F.col("c.name").alias("name"),
            no_version.alias("t"),
            no_version.alias("w"),
            F.struct(
                F.col("v.hlc"),
                F.col("v.ck"),
                _utf16(F.col("c.value")).alias("vk"),
                F.col("c.value"),
                F.col("v.client_id"),
            ).alias("cell"),
        )
    )
    per_column = (
        row_events.unionByName(cell_events)
        .groupBy(*KEY, "name")
        .agg(F.max("t").alias("t"), F.max("w").alias("w"), F.max("cell").alias("cell"))
    )
    per_row = per_column.groupBy(*KEY).agg(
        F.max("t").alias("t"),
        F.max("w").alias("w"),
        F.collect_list(
            F.when(F.col("name").isNotNull(), F.struct(_utf16(F.col("name")).alias("nk"), "name", "cell"))
        ).alias("cells"),
    )
    tomb = F.col("t")
    live = F.array_sort(F.filter("cells", lambda c: _above(c.cell.hlc, c.cell.ck, tomb)))
    return per_row.select(
        *KEY,
        F.when(tomb.isNotNull(), F.struct(tomb.hlc.alias("hlc"), tomb.client_id.alias("client_id"))).alias("tombstone"),
        F.when(
            F.col("w").isNotNull() & _above(F.col("w.hlc"), F.col("w.ck"), tomb),
            F.struct(F.col("w.hlc").alias("hlc"), F.col("w.client_id").alias("client_id")),
        ).alias("written"),
        F.transform(
            live,
            lambda c: F.struct(
                c["name"].alias("name"),
                c.cell.value.alias("value"),
                c.cell.hlc.alias("hlc"),
                c.cell.client_id.alias("client_id"),
            ),
        ).alias("columns"),
    )


def state_deltas(states: DataFrame) -> DataFrame:
    """Stored states as pseudo-deltas whose fold is the stored state.

    Args:
        states: Rows with ``gateway``, ``tbl``, ``row_id`` and ``state`` (the ``_state`` text).

    Returns:
        :data:`DELTA_COLUMNS` rows: the tombstone as a DELETE, ``written`` as an UPDATE without columns, each column
        as a one-column UPDATE at its version. A ``_state`` whose TAB frames do not match its columns fails the job.
    """
    parsed = states.select(
        *KEY,
        F.from_json("state", STATE_JSON_SCHEMA).alias("s"),
        F.filter(F.split("state", SEP), lambda _, i: i % 2 == 1).alias("vals"),
    )
    entries = F.map_entries(F.col("s.c"))
    checked = F.when(F.size(entries) == F.size("vals"), entries).otherwise(
        F.raise_error(F.lit("corrupt _state: column values are not TAB-framed"))
    )
    no_columns = F.array().cast(_COLUMNS)

    def pseudo(op: str, hlc: Column, client_id: Column, columns: Column) -> Column:
        return F.struct(
            F.lit(op).alias("op"),
            hlc.cast("bigint").alias("hlc"),
            client_id.alias("client_id"),
            columns.alias("columns"),
        )

    def maybe(version: Column, op: str) -> Column:
        return F.when(
            version.isNull(), F.array().cast(f"array<struct<op:string,hlc:bigint,client_id:string,columns:{_COLUMNS}>>")
        ).otherwise(F.array(pseudo(op, version[0], version[1], no_columns)))

    per_column = F.zip_with(
        checked,
        F.col("vals"),
        # e.value is [value as Spark re-printed it, "hlc", clientId]; v is the value's exact text
        lambda e, v: pseudo("UPDATE", e.value[1], e.value[2], F.array(F.struct(e.key.alias("name"), v.alias("value")))),
    )
    return parsed.select(
        *KEY, F.explode(F.concat(maybe(F.col("s.t"), "DELETE"), maybe(F.col("s.w"), "UPDATE"), per_column)).alias("d")
    ).select(*KEY, "d.op", "d.client_id", "d.hlc", "d.columns")


def _json_string(text: Column) -> Column:
    """A JSON string literal of ``text`` (Spark's JSON writer escapes it; any JSON parser reads it back)."""
    quoted = F.to_json(F.array(text))
    return quoted.substr(F.lit(2), F.length(quoted) - 2)


def _version_json(version: Column) -> Column:
    return F.when(version.isNull(), F.lit("null")).otherwise(
        F.concat(F.lit('["'), version.hlc.cast("string"), F.lit('",'), _json_string(version.client_id), F.lit("]"))
    )


def _typed(columns: Column, name: str, kind: ColumnType) -> Column:
    text = F.get(F.filter(columns, lambda c: c["name"] == F.lit(name)), 0).value
    if kind is ColumnType.STRING:
        return F.when(text.startswith('"'), F.from_json(F.concat(F.lit("["), text, F.lit("]")), "array<string>")[0])
    if kind is ColumnType.NUMBER:
        return F.when(text.rlike("^-?[0-9]"), text.cast("double"))
    if kind is ColumnType.BOOLEAN:
        return F.when(text == "true", F.lit(True)).when(text == "false", F.lit(False))
    return text


def render(folded: DataFrame, typed: Sequence[tuple[str, ColumnType]], updated_at: Column) -> DataFrame:
    """The state-table rows of folded states (docs/lake.md, ``state_<table>``).

    Args:
        folded: The output of :func:`fold`.
        typed: ``(column, type)`` of the typed columns to fill, in table order.
        updated_at: The ``_updated_at`` timestamp to stamp.

    Returns:
        ``_gateway, _row_key, _exists, _state, _hlc, _values, _updated_at`` and the typed columns, plus ``tbl``.
        A typed column holds the value cast to its type (``json``/``null``: the canonical JSON text), or null when
        the value does not fit the type; ``_values`` always has it.
    """
    cols = F.col("columns")
    exists = F.col("written").isNotNull()
    entries = F.transform(
        cols,
        lambda c: F.concat(
            _json_string(c["name"]),
            F.lit(":[" + SEP),
            c.value,
            F.lit(SEP + ',"'),
            c.hlc.cast("string"),
            F.lit('",'),
            _json_string(c.client_id),
            F.lit("]"),
        ),
    )
    state = F.concat(
        F.lit('{"t":'),
        _version_json(F.col("tombstone")),
        F.lit(',"w":'),
        _version_json(F.col("written")),
        F.lit(',"c":{'),
        F.array_join(entries, ","),
        F.lit("}}"),
    )
    values = F.concat(
        F.lit("{"),
        F.array_join(F.transform(cols, lambda c: F.concat(_json_string(c["name"]), F.lit(":"), c.value)), ","),
        F.lit("}"),
    )
    return folded.select(
        "tbl",
        F.col("gateway").alias("_gateway"),
        F.col("row_id").alias(ROW_KEY),
        exists.alias("_exists"),
        state.alias("_state"),
        F.greatest(F.col("tombstone.hlc"), F.col("written.hlc")).alias("_hlc"),
        F.when(exists, values).alias("_values"),
        updated_at.alias("_updated_at"),
        *(_typed(cols, name, kind).alias(name) for name, kind in typed),
    )


def _version_text(v: Version | None) -> str:
    return "null" if v is None else f'["{v.hlc}",{js_string(v.client_id)}]'


def encode_state_text(state: RowState) -> str:
    """The ``_state`` text of a row state in Python, in the layout :func:`render` writes (see module docstring)."""
    entries = (
        f'{js_string(name)}:[{SEP}{stable_stringify(col.value)}{SEP},"{col.hlc}",{js_string(col.client_id)}]'
        for name, col in sorted(state.columns.items(), key=lambda item: utf16_key(item[0]))
    )
    return f'{{"t":{_version_text(state.tombstone)},"w":{_version_text(state.written)},"c":{{{",".join(entries)}}}}}'
