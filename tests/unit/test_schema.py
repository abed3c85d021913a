"""Schema: identifier rules, schema-document validation (messages in order), safe evolution, delta checks."""

from __future__ import annotations

import json
import string
from pathlib import Path

import pytest
from hypothesis import given
from hypothesis import strategies as st

from lakesync.core.delta import RowDelta
from lakesync.core.errors import (
    LakeSyncError,
    PayloadTooLargeError,
    SchemaDefinitionError,
    SchemaError,
    ValidationError,
)
from lakesync.core.schema import (
    IDENTIFIER_RE,
    Cardinality,
    ColumnType,
    TableSchema,
    check_column_evolution,
    check_schema_limits,
    evolve_schema,
    is_valid_identifier,
    parse_table_schema,
    parse_table_schema_json,
    validate_delta,
    validate_table_name,
)
from tests.factories import delete, insert, schema_with, table_schema, update

VECTORS = Path(__file__).parent.parent / "vectors"
SCHEMA_VECTORS = json.loads((VECTORS / "schema_validation.json").read_text(encoding="utf-8"))
IDENTIFIER_CASES = SCHEMA_VECTORS["identifiers"]
BODY_CASES = SCHEMA_VECTORS["schemaBody"]
EVOLVE_CASES = SCHEMA_VECTORS["evolve"]

# The shared rule text, taken from a vector's message rather than retyped.
_COLUMN_NAME_MESSAGE = next(c for c in BODY_CASES if c["name"] == "column name with space")["expected"]["message"]
IDENTIFIER_RULE_TEXT = _COLUMN_NAME_MESSAGE.split(". ", 1)[1]


def _body(**fields: object) -> dict[str, object]:
    doc: dict[str, object] = {"table": "t", "columns": [{"name": "a", "type": "string"}]}
    doc.update(fields)
    return doc


# --- identifiers -----------------------------------------------------------------------------------------------


@pytest.mark.parametrize("case", IDENTIFIER_CASES, ids=[repr(c["name"]) for c in IDENTIFIER_CASES])
def test_is_valid_identifier_matches_vectors(case):
    assert is_valid_identifier(case["name"]) is case["expected"]


@pytest.mark.parametrize("case", IDENTIFIER_CASES, ids=[repr(c["name"]) for c in IDENTIFIER_CASES])
def test_validate_table_name_raises_schema_error_for_invalid_vectors(case):
    if case["expected"]:
        validate_table_name(case["name"])
        return
    with pytest.raises(SchemaError) as info:
        validate_table_name(case["name"])
    assert info.value.message == f'Invalid SQL identifier: "{case["name"]}". {IDENTIFIER_RULE_TEXT}'
    assert (info.value.status, info.value.api_code) == (422, "SCHEMA_ERROR")


@pytest.mark.parametrize("name", ["users\n", "users\r\n", "\nusers", "users ", "a\x00"])
def test_is_valid_identifier_rejects_surrounding_newlines_and_whitespace(name):
    assert not is_valid_identifier(name)
    assert IDENTIFIER_RE.match(name) is None
    assert IDENTIFIER_RE.search(name) is None


def test_is_valid_identifier_accepts_64_chars_and_rejects_65():
    assert is_valid_identifier("a" * 64)
    assert is_valid_identifier("_" + "9" * 63)
    assert not is_valid_identifier("a" * 65)


@pytest.mark.parametrize("name", ["café", "é", "a\u0661", "\uff41bc", "stra\u00dfe", "\u212a"])
def test_is_valid_identifier_rejects_non_ascii_letters_and_digits(name):
    assert not is_valid_identifier(name)


@pytest.mark.parametrize("value", [None, 5, True, ["users"], {"users": 1}, b"users"])
def test_is_valid_identifier_rejects_non_strings(value):
    assert not is_valid_identifier(value)


@given(st.text(alphabet=string.ascii_letters + string.digits + "_-é\n ", max_size=70))
def test_is_valid_identifier_agrees_with_character_rule(name):
    head_ok = bool(name) and (name[0] in string.ascii_letters + "_")
    tail_ok = all(ch in string.ascii_letters + string.digits + "_" for ch in name)
    assert is_valid_identifier(name) is (head_ok and tail_ok and len(name) <= 64)


# --- schema documents ------------------------------------------------------------------------------------------


@pytest.mark.parametrize("case", BODY_CASES, ids=[c["name"] for c in BODY_CASES])
def test_parse_table_schema_json_matches_vectors(case):
    expected = case["expected"]
    if expected["ok"]:
        schema = parse_table_schema_json(case["raw_body"])
        doc = json.loads(case["raw_body"])
        assert schema.table == doc["table"]
        assert [c.to_json() for c in schema.columns] == doc["columns"]
        assert parse_table_schema(schema.to_json()) == schema
        return
    with pytest.raises(LakeSyncError) as info:
        parse_table_schema_json(case["raw_body"])
    assert info.value.message == expected["message"]
    assert info.value.status == expected["status"]
    assert info.value.api_code == expected["code"]
    if expected["code"] == "SCHEMA_ERROR":
        assert isinstance(info.value, SchemaDefinitionError)


@pytest.mark.parametrize("raw", ["{", "", "nope", '{"table": NaN}', "[Infinity]", b"\xff\xfe"])
def test_parse_table_schema_json_rejects_non_json_as_validation_error(raw):
    with pytest.raises(ValidationError) as info:
        parse_table_schema_json(raw)
    assert info.value.message == "Invalid JSON body"
    assert (info.value.status, info.value.api_code) == (400, "VALIDATION_ERROR")


def test_parse_table_schema_json_accepts_utf8_bytes():
    raw = json.dumps(_body()).encode("utf-8")
    assert parse_table_schema_json(raw) == parse_table_schema(_body())


@pytest.mark.parametrize(
    ("doc", "message"),
    [
        (None, "Missing required fields: table, columns"),
        ([], "Missing required fields: table, columns"),
        ({"table": "", "columns": []}, "Missing required fields: table, columns"),
        ({"table": 0, "columns": []}, "Missing required fields: table, columns"),
        ({"table": "t", "columns": {}}, "Missing required fields: table, columns"),
        ({"table": "1t", "columns": "x"}, "Missing required fields: table, columns"),
        ({"table": "1t", "columns": [{"name": ""}]}, 'Invalid table name: "1t". {rule}'),
        ({"table": True, "columns": []}, 'Invalid table name: "true". {rule}'),
        ({"table": ["a"], "columns": []}, 'Invalid table name: "a". {rule}'),
        ({"table": "t", "columns": [5]}, "Each column must have a non-empty 'name' string"),
        ({"table": "t", "columns": [{"name": 7, "type": "string"}]}, "Each column must have a non-empty 'name' string"),
        (
            {"table": "t", "columns": [{"name": "a", "type": "string"}, {"name": "b-c", "type": "x"}]},
            'Invalid column name: "b-c". {rule}',
        ),
        (
            {"table": "t", "columns": [{"name": "a"}]},
            'Invalid column type "undefined" for column "a". Allowed: string, number, boolean, json, null',
        ),
        (
            {"table": "t", "columns": [{"name": "a", "type": None}]},
            'Invalid column type "null" for column "a". Allowed: string, number, boolean, json, null',
        ),
        (
            {"table": "t", "columns": [{"name": "a", "type": "STRING"}]},
            'Invalid column type "STRING" for column "a". Allowed: string, number, boolean, json, null',
        ),
        (_body(primaryKey=[]), "primaryKey must be a non-empty array of strings"),
        (_body(primaryKey="a"), "primaryKey must be a non-empty array of strings"),
        (_body(primaryKey=None), "primaryKey must be a non-empty array of strings"),
        (_body(primaryKey=["a", 1]), "primaryKey must be a non-empty array of strings"),
        (_body(primaryKey=["zz", 1]), 'primaryKey column "zz" must be "row_id" or exist in columns'),
        (_body(primaryKey=["a"], softDelete="yes"), "softDelete must be a boolean"),
        (_body(softDelete=None), "softDelete must be a boolean"),
        (_body(softDelete=True, externalIdColumn=""), "externalIdColumn must be a non-empty string"),
        (_body(externalIdColumn=3), "externalIdColumn must be a non-empty string"),
        (_body(primaryKey=["nope"], softDelete=1), 'primaryKey column "nope" must be "row_id" or exist in columns'),
    ],
)
def test_parse_table_schema_reports_first_failure_in_original_order(doc, message):
    with pytest.raises(SchemaDefinitionError) as info:
        parse_table_schema(doc)
    assert info.value.message == message.replace("{rule}", IDENTIFIER_RULE_TEXT)
    assert (info.value.status, info.value.api_code) == (400, "SCHEMA_ERROR")


def test_parse_table_schema_builds_typed_schema_with_all_options():
    doc = {
        "table": "issues",
        "sourceTable": "jira_issues",
        "columns": [
            {"name": "key", "type": "string"},
            {"name": "points", "type": "number"},
            {
                "name": "project",
                "type": "string",
                "references": {"table": "projects", "column": "key", "cardinality": "many-to-one"},
            },
        ],
        "primaryKey": ["row_id", "key"],
        "softDelete": False,
        "externalIdColumn": "key",
    }
    schema = parse_table_schema(doc)
    assert schema.source_table == "jira_issues"
    assert schema.delta_table == "jira_issues"
    assert schema.column_names == ("key", "points", "project")
    assert schema.columns[1].type is ColumnType.NUMBER
    ref = schema.columns[2].references
    assert ref is not None and (ref.table, ref.column, ref.cardinality) == ("projects", "key", Cardinality.MANY_TO_ONE)
    assert schema.effective_primary_key == ("row_id", "key")
    assert schema.is_soft_delete is False
    assert schema.external_id_column == "key"
    assert schema.to_json() == doc
    assert TableSchema.from_json(schema.to_json()) == schema


def test_table_schema_defaults_are_row_id_key_and_soft_delete():
    schema = table_schema(title="string")
    assert schema.primary_key is None and schema.effective_primary_key == ("row_id",)
    assert schema.soft_delete is None and schema.is_soft_delete is True
    assert schema.delta_table == "todos"
    assert schema.to_json() == {"table": "todos", "columns": [{"name": "title", "type": "string"}]}


@pytest.mark.parametrize("source_table", ["bad-name", "", 5, "x" * 65])
def test_parse_table_schema_rejects_invalid_source_table(source_table):
    with pytest.raises(SchemaDefinitionError) as info:
        parse_table_schema(_body(sourceTable=source_table))
    assert info.value.message.startswith("Invalid source table name: ")
    assert info.value.message.endswith(IDENTIFIER_RULE_TEXT)


@pytest.mark.parametrize(
    "ref",
    [
        "projects",
        {"table": "projects", "column": "key"},
        {"table": "projects", "column": "key", "cardinality": "one-to-one"},
        {"table": "pro jects", "column": "key", "cardinality": "many-to-one"},
        {"table": "projects", "column": "", "cardinality": "one-to-many"},
    ],
)
def test_parse_table_schema_rejects_malformed_references(ref):
    doc = {"table": "t", "columns": [{"name": "a", "type": "string", "references": ref}]}
    with pytest.raises(SchemaDefinitionError) as info:
        parse_table_schema(doc)
    assert info.value.message.startswith('Invalid references for column "a"')


def test_parse_table_schema_treats_null_references_and_source_table_as_absent():
    doc = {"table": "t", "sourceTable": None, "columns": [{"name": "a", "type": "json", "references": None}]}
    schema = parse_table_schema(doc)
    assert schema.source_table is None
    assert schema.columns[0].references is None


def test_parse_table_schema_runs_original_checks_before_our_extra_checks():
    doc = {
        "table": "t",
        "sourceTable": "bad name",
        "columns": [{"name": "a", "type": "string", "references": "junk"}],
        "externalIdColumn": "zz",
    }
    with pytest.raises(SchemaDefinitionError) as info:
        parse_table_schema(doc)
    assert info.value.message == 'externalIdColumn "zz" must exist in columns'


# --- evolution -------------------------------------------------------------------------------------------------


@pytest.mark.parametrize("case", EVOLVE_CASES, ids=[c["name"] for c in EVOLVE_CASES])
def test_evolve_schema_matches_vectors(case):
    current = parse_table_schema(case["current"])
    proposed = parse_table_schema(case["proposed"])
    expected = case["expected"]
    if expected["ok"]:
        schema, version = evolve_schema(current, proposed, case["current_version"])
        assert schema == proposed
        # Our one difference: an identical schema keeps its version (the original bumps it); see the no-op test.
        want = expected["version"] if proposed != current else case["current_version"]
        assert version == want
        return
    with pytest.raises(SchemaError) as info:
        evolve_schema(current, proposed, case["current_version"])
    assert info.value.message == expected["message"]
    # The original raised its SchemaError (domain code SCHEMA_MISMATCH); an unsafe evolution is a bad schema
    # document for us, so it is the SchemaDefinitionError subclass (400 SCHEMA_ERROR).
    assert isinstance(info.value, SchemaDefinitionError)


def test_evolve_schema_identical_schema_keeps_version():
    current = table_schema(title="string", done="boolean")
    same = table_schema(title="string", done="boolean")
    schema, version = evolve_schema(current, same, 7)
    assert version == 7
    assert schema is current


def test_evolve_schema_added_column_bumps_version_and_is_kept():
    current = table_schema(title="string")
    proposed = table_schema(title="string", priority="number")
    schema, version = evolve_schema(current, proposed, 3)
    assert version == 4
    assert schema.column_names == ("title", "priority")


def test_evolve_schema_option_change_is_a_new_version():
    current = table_schema(title="string")
    proposed = schema_with(current, externalIdColumn="title")
    _, version = evolve_schema(current, proposed, 1)
    assert version == 2


@pytest.mark.parametrize(
    ("before", "after", "message"),
    [
        ({}, {"primaryKey": ["title"]}, 'Cannot change primaryKey from ["row_id"] to ["title"]'),
        ({"primaryKey": ["title"]}, {"primaryKey": ["title", "row_id"]}, 'from ["title"] to ["title","row_id"]'),
        ({"primaryKey": ["title"]}, {}, 'Cannot change primaryKey from ["title"] to ["row_id"]'),
        ({}, {"softDelete": False}, "Cannot change softDelete from true to false"),
        ({"softDelete": False}, {"softDelete": True}, "Cannot change softDelete from false to true"),
        ({}, {"sourceTable": "tasks"}, 'Cannot change sourceTable from "todos" to "tasks"'),
        ({"sourceTable": "tasks"}, {"sourceTable": "jobs"}, 'Cannot change sourceTable from "tasks" to "jobs"'),
    ],
    ids=["pk-set", "pk-extended", "pk-dropped", "soft-off", "soft-on", "source-set", "source-changed"],
)
def test_evolve_schema_rejects_changing_how_rows_are_keyed_deleted_or_fed(before, after, message):
    # Given a stored schema, When a version changes its primary key, soft delete or source table
    current = schema_with(table_schema(title="string"), **before)
    proposed = schema_with(table_schema(title="string", done="boolean"), **after)
    # Then the evolution is unsafe: 400 SCHEMA_ERROR in the style of the original's messages
    with pytest.raises(SchemaDefinitionError) as info:
        evolve_schema(current, proposed, 3)
    assert info.value.message.endswith(message)
    assert (info.value.status, info.value.api_code) == (400, "SCHEMA_ERROR")


@pytest.mark.parametrize(
    "spelled", [{"primaryKey": ["row_id"]}, {"softDelete": True}, {"sourceTable": "todos"}], ids=lambda d: next(iter(d))
)
def test_evolve_schema_spelling_out_a_default_is_no_change(spelled):
    current = table_schema(title="string")
    proposed = schema_with(current, **spelled)
    assert evolve_schema(current, proposed, 1) == (proposed, 2)


def test_check_schema_limits_bounds_columns_and_document_size():
    # Given schemas at and over the column bound, and one whose stored document is too large
    at = table_schema("t", **{f"c{i}": "string" for i in range(1000)})
    over = table_schema("t", **{f"c{i}": "string" for i in range(1001)})
    check_schema_limits(at)
    with pytest.raises(SchemaDefinitionError) as info:
        check_schema_limits(over)
    assert info.value.message == "A schema may have at most 1,000 columns; t has 1,001"
    ref = {"table": "r" * 64, "column": "c" * 64, "cardinality": "many-to-one"}
    names = [f"c{i:063d}" for i in range(1000)]
    wide = {
        "table": "t",
        "columns": [{"name": name, "type": "boolean", "references": ref} for name in names],
        "primaryKey": names,
    }
    with pytest.raises(PayloadTooLargeError) as big:
        check_schema_limits(parse_table_schema(wide))
    assert big.value.status == 413 and big.value.message.endswith("bytes; the limit is 307,200")


def test_evolve_schema_rejects_table_mismatch():
    with pytest.raises(SchemaDefinitionError) as info:
        evolve_schema(table_schema("todos", title="string"), table_schema("tasks", title="string"), 1)
    assert info.value.message == "Cannot evolve schema: table name mismatch"


def test_evolve_schema_names_first_removed_column_in_current_order():
    current = table_schema(a="string", b="string", c="string")
    proposed = table_schema(a="number", d="string")
    with pytest.raises(SchemaDefinitionError) as info:
        evolve_schema(current, proposed, 1)
    assert info.value.message == 'Cannot remove column "b" — only adding nullable columns is supported'


def test_evolve_schema_type_change_names_column_and_both_types():
    with pytest.raises(SchemaDefinitionError) as info:
        evolve_schema(table_schema(a="json"), table_schema(a="string"), 1)
    assert info.value.message == 'Cannot change type of column "a" from "json" to "string"'


def test_evolve_schema_duplicate_columns_use_last_declared_type():
    dup = parse_table_schema(
        {"table": "t", "columns": [{"name": "a", "type": "string"}, {"name": "a", "type": "number"}]}
    )
    _, version = evolve_schema(dup, table_schema("t", a="number"), 1)
    assert version == 2
    with pytest.raises(SchemaDefinitionError):
        evolve_schema(dup, table_schema("t", a="string"), 1)


# --- deltas against a schema -----------------------------------------------------------------------------------

H1 = 1 << 16  # the deltas' HLC: millisecond 1


def test_validate_delta_accepts_known_and_sparse_columns():
    schema = table_schema(title="string", done="boolean")
    validate_delta(schema, insert("r1", hlc=H1, title="x", done=False), 1)
    validate_delta(schema, update("r1", hlc=H1, done="not-a-bool"), 1)  # types are not checked
    validate_delta(schema, update("r1", hlc=H1), 1)


def test_validate_delta_rejects_unknown_column_with_version_in_message():
    schema = table_schema(title="string")
    with pytest.raises(SchemaError) as info:
        validate_delta(schema, update("r1", hlc=H1, title="x", colour="red"), 3)
    assert info.value.message == (
        'Unknown column "colour" in delta for table "todos". Schema version 3 does not include this column.'
    )
    assert (info.value.status, info.value.api_code, info.value.code) == (422, "SCHEMA_ERROR", "SCHEMA_MISMATCH")


def test_validate_delta_always_accepts_delete():
    schema = table_schema(title="string")
    validate_delta(schema, delete("r1", hlc=H1), 1)
    # A DELETE from the wire may still carry columns; it is a delete all the same.
    delete_with_columns = RowDelta.from_json({**update("r1", hlc=H1, colour="red").to_json(), "op": "DELETE"})
    validate_delta(schema, delete_with_columns, 1)


def test_validate_delta_only_constrains_its_own_table():
    schema = table_schema("todos", title="string")
    validate_delta(schema, insert("r1", hlc=H1, table="notes", body="x"), 1)
    with pytest.raises(SchemaError):
        validate_delta(schema, insert("r1", hlc=H1, table="todos", body="x"), 1)


def test_validate_delta_uses_source_table_when_set():
    schema = schema_with(table_schema("issues", key="string"), sourceTable="jira_issues")
    validate_delta(schema, insert("r1", hlc=H1, table="issues", other=1), 1)
    with pytest.raises(SchemaError) as info:
        validate_delta(schema, insert("r1", hlc=H1, table="jira_issues", other=1), 1)
    assert 'for table "jira_issues"' in info.value.message


@pytest.mark.parametrize("cardinality", [{}, [], ["many-to-one"], 1, True])
def test_parse_table_schema_reference_with_a_non_string_cardinality_is_a_schema_error(cardinality):
    # (before: an object or array cardinality raised TypeError, a 500 on the admin route)
    ref = {"table": "b", "column": "c", "cardinality": cardinality}
    with pytest.raises(SchemaDefinitionError) as info:
        parse_table_schema({"table": "t", "columns": [{"name": "a", "type": "string", "references": ref}]})
    assert info.value.message.startswith('Invalid references for column "a"')


def test_check_column_evolution_judges_columns_only():
    # (the Spark state tables hold columns only: a change of the table options is no concern there)
    current = schema_with(table_schema(title="string"), softDelete=False, primaryKey=["title"])
    check_column_evolution(current, table_schema(title="string", done="boolean"))
    with pytest.raises(SchemaDefinitionError, match='Cannot remove column "title"'):
        check_column_evolution(current, table_schema(done="boolean"))
    with pytest.raises(SchemaDefinitionError, match='Cannot change type of column "title"'):
        check_column_evolution(current, table_schema(title="number"))
