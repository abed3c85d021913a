"""Every name the lake gives AWS Glue matches Glue's pattern (Iceberg's GlueCatalog refuses others, and Glue stores
names in lower case), and distinct synced tables never share a state table."""

from __future__ import annotations

from hypothesis import given
from hypothesis import strategies as st

from lakesync.core.schema import is_valid_identifier
from lakesync.lake.tables import DELTA_LOG, GLUE_NAME, NAMESPACE, state_table

# The table names schemas and pushes accept: [A-Za-z_][A-Za-z0-9_]{0,63}.
TABLE_NAMES = st.from_regex(r"\A[A-Za-z_][A-Za-z0-9_]{0,63}\Z")


@given(TABLE_NAMES)
def test_state_tables_have_glue_safe_names(table: str) -> None:
    assert is_valid_identifier(table)
    assert GLUE_NAME.match(state_table(table)), state_table(table)


@given(TABLE_NAMES, TABLE_NAMES)
def test_distinct_tables_get_distinct_state_tables(a: str, b: str) -> None:
    if a != b:
        assert state_table(a) != state_table(b)


@given(TABLE_NAMES)
def test_case_variants_of_one_name_get_distinct_state_tables(table: str) -> None:
    variants = {table, table.lower(), table.upper(), table.swapcase()}
    assert len({state_table(v) for v in variants}) == len(variants)


def test_lower_case_names_keep_their_readable_state_table_and_the_fixed_names_are_glue_safe() -> None:
    assert state_table("todos") == "state_todos"
    assert state_table("Todos").startswith("state_todos_") and len(state_table("Todos")) == len("state_todos_") + 8
    assert GLUE_NAME.match(NAMESPACE) and GLUE_NAME.match(DELTA_LOG)
