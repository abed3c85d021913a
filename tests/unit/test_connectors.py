"""Connector configs: validation order and exact messages per built-in type and for the ingest section."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from lakesync.core.connectors import ConnectorConfig, ConnectorValidationError, validate_connector_config
from lakesync.core.errors import ValidationError

VECTORS = Path(__file__).parent.parent / "vectors"
CONFIG_CASES = json.loads((VECTORS / "schema_validation.json").read_text(encoding="utf-8"))["connectorConfig"]

PG = {"name": "pg", "type": "postgres", "postgres": {"connectionString": "postgres://x"}}
TABLE = {"table": "t", "query": "SELECT * FROM t", "strategy": {"type": "diff"}}


@pytest.mark.parametrize("case", CONFIG_CASES, ids=[c["name"] for c in CONFIG_CASES])
def test_validate_connector_config_matches_vectors(case):
    expected = case["expected"]
    if expected["ok"]:
        config = validate_connector_config(case["config"])
        assert (config.name, config.type) == (case["config"]["name"], case["config"]["type"])
        assert config.to_json() == case["config"]
        return
    with pytest.raises(ConnectorValidationError) as info:
        validate_connector_config(case["config"])
    assert info.value.message == expected["message"]
    assert info.value.code == expected["code"]
    assert isinstance(info.value, ValidationError)
    assert (info.value.status, info.value.api_code) == (400, "VALIDATION_ERROR")


@pytest.mark.parametrize(
    ("config", "message"),
    [
        (None, "Connector config must be an object"),
        ("pg", "Connector config must be an object"),
        ([], "Connector name must be a non-empty string"),
        ({"type": "postgres"}, "Connector name must be a non-empty string"),
        ({"name": "", "type": "postgres"}, "Connector name must be a non-empty string"),
        ({"name": "pg"}, "Connector type must be a non-empty string"),
        ({"name": "pg", "type": 3}, "Connector type must be a non-empty string"),
        ({"name": "pg", "type": "postgres"}, 'Connector type "postgres" requires a postgres config object'),
        (
            {"name": "pg", "type": "postgres", "postgres": None},
            'Connector type "postgres" requires a postgres config object',
        ),
        (
            {"name": "pg", "type": "postgres", "postgres": []},
            "Postgres connector requires a non-empty connectionString",
        ),
        (
            {"name": "m", "type": "mysql", "mysql": {"connectionString": ""}},
            "MySQL connector requires a non-empty connectionString",
        ),
        ({"name": "b", "type": "bigquery", "bigquery": {}}, "BigQuery connector requires a non-empty projectId"),
        (
            {"name": "b", "type": "bigquery", "bigquery": {"projectId": "p"}},
            "BigQuery connector requires a non-empty dataset",
        ),
        ({"name": "j", "type": "jira", "jira": "x"}, 'Connector type "jira" requires a jira config object'),
        (
            {"name": "j", "type": "jira", "jira": {"domain": "d", "email": "e"}},
            "Jira connector requires a non-empty apiToken",
        ),
        (
            {
                "name": "s",
                "type": "salesforce",
                "salesforce": {"instanceUrl": "u", "clientId": "c", "clientSecret": "s", "username": "n"},
            },
            "Salesforce connector requires a non-empty password",
        ),
        ({**PG, "ingest": None}, "Ingest config must be an object"),
        ({**PG, "ingest": {}}, "Ingest config must have a non-empty tables array"),
        ({**PG, "ingest": {"tables": []}}, "Ingest config must have a non-empty tables array"),
        ({**PG, "ingest": {"tables": [TABLE, 5]}}, "Ingest table at index 1 must be an object"),
        (
            {**PG, "ingest": {"tables": [{**TABLE, "table": ""}]}},
            "Ingest table at index 0 must have a non-empty table name",
        ),
        (
            {**PG, "ingest": {"tables": [{**TABLE, "query": None}]}},
            "Ingest table at index 0 must have a non-empty query",
        ),
        (
            {**PG, "ingest": {"tables": [{**TABLE, "strategy": "diff"}]}},
            "Ingest table at index 0 must have a strategy object",
        ),
        (
            {**PG, "ingest": {"tables": [{**TABLE, "strategy": {}}]}},
            'Ingest table at index 0 strategy type must be "cursor" or "diff"',
        ),
        (
            {**PG, "ingest": {"tables": [{**TABLE, "strategy": {"type": "cursor", "cursorColumn": ""}}]}},
            "Ingest table at index 0 cursor strategy requires a non-empty cursorColumn",
        ),
        ({**PG, "ingest": {"tables": [TABLE], "intervalMs": "1000"}}, "Ingest intervalMs must be a positive number"),
        ({**PG, "ingest": {"tables": [TABLE], "intervalMs": None}}, "Ingest intervalMs must be a positive number"),
        ({**PG, "ingest": {"tables": [TABLE], "intervalMs": True}}, "Ingest intervalMs must be a positive number"),
        ({**PG, "ingest": {"tables": [TABLE], "intervalMs": 0.5}}, "Ingest intervalMs must be a positive number"),
        (
            {"name": "x", "type": "custom", "ingest": {"intervalMs": 5}},
            "Ingest config must have a non-empty tables array",
        ),
        (
            {
                "name": "j",
                "type": "jira",
                "jira": {"domain": "d", "email": "e", "apiToken": "t"},
                "ingest": {"intervalMs": 0},
            },
            "Ingest intervalMs must be a positive number",
        ),
    ],
)
def test_validate_connector_config_reports_first_failure(config, message):
    with pytest.raises(ConnectorValidationError) as info:
        validate_connector_config(config)
    assert info.value.message == message


def test_validate_connector_config_accepts_unknown_type_without_settings():
    config = validate_connector_config({"name": "hubspot-1", "type": "hubspot"})
    assert config == ConnectorConfig("hubspot-1", "hubspot", {"name": "hubspot-1", "type": "hubspot"})
    assert config.settings is None
    assert config.summary() == {"name": "hubspot-1", "type": "hubspot", "hasIngest": False}


def test_validate_connector_config_api_type_ingest_needs_no_tables():
    doc = {
        "name": "j",
        "type": "jira",
        "jira": {"domain": "d", "email": "e", "apiToken": "t"},
        "ingest": {"intervalMs": 60000},
    }
    config = validate_connector_config(doc)
    assert config.has_ingest
    assert config.ingest == {"intervalMs": 60000}
    assert config.settings == {"domain": "d", "email": "e", "apiToken": "t"}


def test_validate_connector_config_full_sql_ingest_and_summary_hides_settings():
    doc = {
        **PG,
        "ingest": {
            "tables": [
                TABLE,
                {
                    "table": "u",
                    "query": "q",
                    "rowIdColumn": "uid",
                    "strategy": {"type": "cursor", "cursorColumn": "ts"},
                },
            ],
            "intervalMs": 10000,
        },
    }
    config = validate_connector_config(doc)
    assert config.to_json() == doc
    assert config.summary() == {"name": "pg", "type": "postgres", "hasIngest": True}
    assert "connectionString" not in json.dumps(config.summary())
