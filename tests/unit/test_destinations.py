"""Destination configs (lakesync.core.destinations): what each type accepts, the document round trip, which tables
a destination applies to, and refusals of hostile documents: wrong types, unknown fields, huge strings, nested junk
and credentials in urls (refused, and never echoed in the message)."""

from __future__ import annotations

import json
from typing import Any

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from lakesync.core.destinations import (
    MAX_TABLES,
    MAX_URL_LENGTH,
    DestinationConfig,
    DestinationType,
    parse_destination,
)
from lakesync.core.errors import LakeSyncError, ValidationError

ARN = "arn:aws:secretsmanager:eu-west-1:123456789012:secret:lakesync/analytics-AbCdEf"


def _refused(doc: object) -> str:
    with pytest.raises(ValidationError) as caught:
        parse_destination(doc)
    assert caught.value.status == 400 and caught.value.api_code == "VALIDATION_ERROR"
    return caught.value.message


# -- accepted documents --------------------------------------------------------------------------------------------


@pytest.mark.parametrize(
    "doc",
    [
        {"name": "pg", "type": "postgres", "secretArn": ARN},
        {"name": "pg", "type": "postgres", "url": "postgresql://db.internal:5432/app"},
        {"name": "pg", "type": "postgres", "url": "postgres://iam_user@db.internal/app?sslmode=require"},
        {"name": "pg", "type": "postgres", "secretArn": ARN, "url": "postgresql://db.internal/app"},
        {"name": "my-sql_1", "type": "mysql", "secretArn": ARN},
        {"name": "maria", "type": "mysql", "url": "mariadb://db.internal:3306/app"},
        {"name": "lite", "type": "sqlite", "url": "sqlite:///var/data/app.db"},
        {"name": "lite", "type": "sqlite", "url": "sqlite:////abs/app.db"},
        {"name": "bq", "type": "bigquery", "url": "bigquery://my-project-1/analytics_eu"},
        {"name": "bq", "type": "bigquery", "url": "bigquery://my-project-1/ds", "secretArn": ARN},
        {"name": "0", "type": "sqlite", "url": "sqlite:///x.db", "tables": ["todos", "_notes", "T2"]},
        {"name": "A" * 64, "type": "postgres", "secretArn": ARN},
        {
            "name": "gov",
            "type": "postgres",
            "secretArn": "arn:aws-us-gov:secretsmanager:us-gov-west-1:123456789012:secret:x",
        },
        {
            "name": "cn",
            "type": "mysql",
            "secretArn": "arn:aws-cn:secretsmanager:cn-north-1:123456789012:secret:a/b+c=d.e@f",
        },
    ],
)
def test_destination_valid_documents_round_trip(doc: dict[str, Any]) -> None:
    # When a valid document is parsed, Then its document form is the input, and parsing that again is the same config
    config = parse_destination(doc)
    assert config.to_json() == doc
    assert parse_destination(json.loads(json.dumps(config.to_json()))) == config


def test_destination_fields_are_typed() -> None:
    config = parse_destination({"name": "pg", "type": "postgres", "secretArn": ARN, "tables": ["todos"]})
    assert config == DestinationConfig("pg", DestinationType.POSTGRES, secret_arn=ARN, tables=("todos",))
    assert config.type is DestinationType.POSTGRES and config.url is None


def test_destination_null_optional_fields_count_as_absent() -> None:
    config = parse_destination({"name": "pg", "type": "postgres", "secretArn": ARN, "url": None, "tables": None})
    assert config.to_json() == {"name": "pg", "type": "postgres", "secretArn": ARN}


def test_destination_applies_to_listed_tables_or_every_table() -> None:
    every = parse_destination({"name": "a", "type": "postgres", "secretArn": ARN})
    some = parse_destination({"name": "a", "type": "postgres", "secretArn": ARN, "tables": ["todos", "notes"]})
    assert every.applies_to("todos") and every.applies_to("anything")
    assert some.applies_to("todos") and some.applies_to("notes")
    assert not some.applies_to("users") and not some.applies_to("Todos")


def test_destination_config_is_frozen() -> None:
    config = parse_destination({"name": "a", "type": "postgres", "secretArn": ARN})
    with pytest.raises(AttributeError):
        config.name = "b"  # type: ignore[misc]


# -- refused documents ---------------------------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("doc", "message"),
    [
        (None, "Destination must be a JSON object, not null"),
        ([], "Destination must be a JSON object, not an array"),
        ("pg", "Destination must be a JSON object, not a string"),
        (7, "Destination must be a JSON object, not a number"),
        ({}, "Missing required field: name"),
        ({"type": "postgres"}, "Missing required field: name"),
        ({"name": None, "type": "postgres"}, "Missing required field: name"),
        ({"name": "pg"}, "Missing required field: type"),
        ({"name": "", "type": "postgres"}, 'Invalid destination name "": name must be 1 to 64'),
        ({"name": "-pg", "type": "postgres"}, 'Invalid destination name "-pg"'),
        ({"name": "a b", "type": "postgres"}, 'Invalid destination name "a b"'),
        ({"name": "a#b", "type": "postgres"}, 'Invalid destination name "a#b"'),
        ({"name": "pg\n", "type": "postgres"}, 'Invalid destination name "pg\\n"'),
        ({"name": "é", "type": "postgres"}, "Invalid destination name"),
        ({"name": "A" * 65, "type": "postgres"}, "Invalid destination name"),
        ({"name": 5, "type": "postgres"}, "Invalid destination name (a number)"),
        ({"name": ["pg"], "type": "postgres"}, "Invalid destination name (an array)"),
        ({"name": "pg", "type": "oracle"}, 'Invalid destination type "oracle": type must be one of: postgres, mysql'),
        ({"name": "pg", "type": "Postgres"}, 'Invalid destination type "Postgres"'),
        ({"name": "pg", "type": {"x": 1}}, "Invalid destination type (an object)"),
        ({"name": "pg", "type": "postgres"}, "A postgres destination needs secretArn"),
        ({"name": "m", "type": "mysql"}, "A mysql destination needs secretArn"),
        ({"name": "s", "type": "sqlite"}, "A sqlite destination needs url"),
        ({"name": "b", "type": "bigquery", "secretArn": ARN}, "A bigquery destination needs url"),
        ({"name": "a", "type": "postgres", "password": "x"}, 'Unknown destination field(s): "password"'),
        ({"name": "a", "type": "postgres", "secret_arn": ARN}, 'Unknown destination field(s): "secret_arn"'),
        (
            {"name": "a", "type": "postgres", "connectionString": "x"},
            'Unknown destination field(s): "connectionString". Allowed: name, type, secretArn, url, tables',
        ),
    ],
)
def test_destination_invalid_documents_are_refused_naming_the_field(doc: object, message: str) -> None:
    assert _refused(doc).startswith(message)


@pytest.mark.parametrize(
    "arn",
    [
        "",
        "arn:aws:secretsmanager:eu-west-1:12345678901:secret:x",  # 11-digit account
        "arn:aws:secretsmanager:eu-west-1:123456789012:parameter:x",
        "arn:aws:ssm:eu-west-1:123456789012:secret:x",
        "arn:aws:secretsmanager:eu-west-1:123456789012:secret:",
        "arn:aws:secretsmanager::123456789012:secret:x",
        "arn:aws:secretsmanager:eu-west-1:123456789012:secret:x y",
        "arn:aws:secretsmanager:eu-west-1:123456789012:secret:x\n",
        "postgresql://user:pw@host/db",
        "arn:aws:secretsmanager:eu-west-1:123456789012:secret:" + "x" * 3000,
    ],
)
def test_destination_secret_arn_must_be_a_secrets_manager_arn(arn: str) -> None:
    message = _refused({"name": "a", "type": "postgres", "secretArn": arn})
    assert message.startswith("secretArn must be a Secrets Manager secret ARN")
    assert len(message) < 200


@pytest.mark.parametrize("arn", [5, [ARN], {"arn": ARN}, True])
def test_destination_secret_arn_must_be_a_string(arn: object) -> None:
    assert _refused({"name": "a", "type": "postgres", "secretArn": arn}).startswith("secretArn must be a string")


def test_destination_sqlite_takes_no_secret() -> None:
    doc = {"name": "s", "type": "sqlite", "url": "sqlite:///a.db", "secretArn": ARN}
    assert _refused(doc) == "secretArn does not apply to a sqlite destination"


@pytest.mark.parametrize(
    ("kind", "url"),
    [
        ("postgres", "postgresql://app:s3cr3t-pw@db.internal/app"),
        ("postgres", "postgresql://app:@db.internal/app"),
        ("postgres", "postgresql://app%3As3cr3t-pw@db.internal/app"),
        ("postgres", "postgresql://db.internal/app?password=s3cr3t-pw"),
        ("postgres", "postgresql://db.internal/app?sslmode=require&PASSWORD=s3cr3t-pw"),
        ("postgres", "postgresql://db.internal/app?sslpassword=s3cr3t-pw"),
        ("postgres", "postgresql://db.internal/app?user=a&pwd=s3cr3t-pw"),
        ("mysql", "mysql://root:s3cr3t-pw@db.internal:3306/app"),
        ("mysql", "mysql://db.internal/app?Secret=s3cr3t-pw"),
        ("mysql", "mysql://db.internal/app?auth_token=s3cr3t-pw"),
        ("mysql", "mysql://db.internal/app?api-key=s3cr3t-pw"),
        ("bigquery", "bigquery://my-project/ds?credentials=s3cr3t-pw"),
        ("bigquery", "bigquery://sa:s3cr3t-pw@my-project/ds"),
        ("sqlite", "sqlite:///a.db?token=s3cr3t-pw"),
        # A wrong scheme does not hide the password check
        ("postgres", "mysql://root:s3cr3t-pw@db.internal/app"),
    ],
)
def test_destination_url_with_credentials_is_refused_and_not_echoed(kind: str, url: str) -> None:
    # When a url carries a password or a credential-like query parameter
    message = _refused({"name": "a", "type": kind, "url": url})
    # Then the message sends the user to secretArn and does not repeat the secret
    assert "secretArn" in message and "Secrets Manager" in message
    assert "s3cr3t" not in message and url not in message


@pytest.mark.parametrize(
    ("kind", "url", "message"),
    [
        (
            "postgres",
            "mysql://db.internal/app",
            "url scheme must match type postgres: expected postgresql:// or postgres://",
        ),
        ("postgres", "db.internal:5432/app", "url scheme must match type postgres"),
        ("mysql", "postgresql://db.internal/app", "url scheme must match type mysql: expected mysql:// or mariadb://"),
        ("sqlite", "file:///a.db", "url scheme must match type sqlite"),
        ("bigquery", "bq://p/d", "url scheme must match type bigquery"),
        ("postgres", "postgresql:///app", "url of a postgres destination must name a host"),
        ("postgres", "postgresql://db.internal:99999/app", "url is not a valid URL"),
        ("postgres", "postgresql://db.internal:port/app", "url is not a valid URL"),
        ("postgres", "postgresql://[::1/app", "url is not a valid URL"),
        ("postgres", "postgresql://db.internal/app#frag", "url must not have a fragment"),
        ("postgres", "postgresql://db internal/app", "url must be printable ASCII without spaces"),
        ("postgres", "postgresql://db.internal/app\n", "url must be printable ASCII without spaces"),
        ("postgres", "postgresql://db.intérnal/app", "url must be printable ASCII without spaces"),
        ("postgres", "", "url must not be empty"),
        ("sqlite", "sqlite://host/a.db", "url of a sqlite destination must be sqlite:///path/to/file.db"),
        ("sqlite", "sqlite:///", "url of a sqlite destination must be"),
        ("sqlite", "sqlite:///a.db?mode=ro", "url of a sqlite destination must be"),
        ("bigquery", "bigquery://my-project", "url of a bigquery destination must be bigquery://project/dataset"),
        ("bigquery", "bigquery://my-project/", "url of a bigquery destination must be"),
        ("bigquery", "bigquery://my-project/a/b", "url of a bigquery destination must be"),
        ("bigquery", "bigquery://my-project/data-set", "url of a bigquery destination must be"),
        ("bigquery", "bigquery://My-Project/ds", "url of a bigquery destination must be"),
        ("bigquery", "bigquery://abc/ds", "url of a bigquery destination must be"),
        ("bigquery", "bigquery://my-project:443/ds", "url of a bigquery destination must be"),
        ("bigquery", "bigquery://sa@my-project/ds", "url of a bigquery destination must be"),
        ("bigquery", "bigquery://my-project/ds?location=EU", "url of a bigquery destination must be"),
    ],
)
def test_destination_url_must_fit_the_type(kind: str, url: str, message: str) -> None:
    assert _refused({"name": "a", "type": kind, "url": url}).startswith(message)


@pytest.mark.parametrize("url", [5, ["postgresql://h/d"], {"host": "h"}, False])
def test_destination_url_must_be_a_string(url: object) -> None:
    assert _refused({"name": "a", "type": "postgres", "url": url}).startswith("url must be a string, not ")


def test_destination_url_length_is_bounded() -> None:
    url = "postgresql://db.internal/" + "a" * MAX_URL_LENGTH
    assert _refused({"name": "a", "type": "postgres", "url": url}) == f"url must be at most {MAX_URL_LENGTH} characters"
    ok = "postgresql://db.internal/" + "a" * (MAX_URL_LENGTH - len("postgresql://db.internal/"))
    assert parse_destination({"name": "a", "type": "postgres", "url": ok}).url == ok


@pytest.mark.parametrize(
    ("tables", "message"),
    [
        ([], "tables must be a non-empty array"),
        ("todos", "tables must be a non-empty array"),
        ({"todos": True}, "tables must be a non-empty array"),
        (["todos", "1bad"], 'tables[1] "1bad" is not a valid table name. Identifiers must start'),
        (["todos", ""], 'tables[1] "" is not a valid table name'),
        (["todos", None], "tables[1] (null) is not a valid table name"),
        ([["todos"]], "tables[0] (an array) is not a valid table name"),
        ([{"table": "todos"}], "tables[0] (an object) is not a valid table name"),
        (["a" * 65], 'tables[0] "' + "a" * 64 + '..." is not a valid table name'),
        (["todos", "notes", "todos"], 'Duplicate table in tables: "todos"'),
        (["t"] * (MAX_TABLES + 1), f"tables must list at most {MAX_TABLES} tables"),
    ],
)
def test_destination_tables_must_be_distinct_identifiers(tables: object, message: str) -> None:
    doc = {"name": "a", "type": "postgres", "secretArn": ARN, "tables": tables}
    assert _refused(doc).startswith(message)


# -- hostile input -------------------------------------------------------------------------------------------------


def test_destination_huge_strings_are_refused_with_short_messages() -> None:
    huge = "x" * 1_000_000
    for doc in (
        {"name": huge, "type": "postgres"},
        {"name": "a", "type": huge},
        {"name": "a", "type": "postgres", "secretArn": huge},
        {"name": "a", "type": "postgres", "url": huge},
        {"name": "a", "type": "postgres", "secretArn": ARN, "tables": [huge]},
        {huge: 1, "name": "a", "type": "postgres"},
    ):
        assert len(_refused(doc)) < 300


def test_destination_many_unknown_fields_are_listed_briefly() -> None:
    doc = {"name": "a", "type": "postgres", **{f"extra{i}": i for i in range(1000)}}
    message = _refused(doc)
    assert message.startswith('Unknown destination field(s): "extra0", "extra1"') and ", ..." in message
    assert len(message) < 300


def test_destination_control_characters_in_echoed_values_are_escaped() -> None:
    message = _refused({"name": "a\r\nInjected: 1\x00", "type": "postgres"})
    assert "\r" not in message and "\n" not in message and "\x00" not in message


def test_destination_deeply_nested_junk_is_refused() -> None:
    nested: Any = "x"
    for _ in range(10_000):
        nested = [nested]
    for doc in (
        {"name": nested, "type": "postgres"},
        {"name": "a", "type": "postgres", "secretArn": ARN, "tables": nested},
        {"name": "a", "type": "postgres", "url": {"deep": nested}},
    ):
        _refused(doc)


_json = st.recursive(
    st.none() | st.booleans() | st.integers() | st.floats(allow_nan=False) | st.text(max_size=40),
    lambda inner: st.lists(inner, max_size=4) | st.dictionaries(st.text(max_size=10), inner, max_size=4),
    max_leaves=12,
)
_field_values = {
    "name": st.one_of(st.sampled_from(["a", "pg-1", "", "-x", "A" * 65]), _json),
    "type": st.one_of(st.sampled_from([t.value for t in DestinationType]), _json),
    "secretArn": st.one_of(st.just(ARN), _json),
    "url": st.one_of(
        st.sampled_from(
            [
                "postgresql://h/d",
                "postgresql://u:s3cr3t@h/d",
                "mysql://h/d?password=s3cr3t",
                "sqlite:///a.db",
                "bigquery://my-project/ds",
            ]
        ),
        st.text(max_size=60),
        _json,
    ),
    "tables": st.one_of(st.lists(st.sampled_from(["todos", "notes", "1x", ""]), max_size=3), _json),
}


@settings(max_examples=400, deadline=None)
@given(
    st.fixed_dictionaries({}, optional=_field_values),
    st.dictionaries(st.text(max_size=8), _json, max_size=2),
)
def test_destination_any_document_is_a_config_or_a_validation_error(
    fields: dict[str, Any], extra: dict[str, Any]
) -> None:
    # Given any JSON document (known fields with arbitrary values, sometimes unknown ones)
    doc = {**extra, **fields}
    # When parsed, Then it is a valid config or a ValidationError -- never another exception
    try:
        config = parse_destination(doc)
    except ValidationError as exc:
        assert "s3cr3t" not in exc.message
        return
    except LakeSyncError:  # pragma: no cover - a failure
        raise
    assert parse_destination(config.to_json()) == config
    assert "s3cr3t" not in json.dumps(config.to_json())
