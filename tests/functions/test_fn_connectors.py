"""Connector admin routes through functions.admin.lambda_handler, with Secrets Manager and EventBridge Scheduler on
the moto server and a real PostgreSQL source: the type catalogue without a token; registration moving the plaintext
connection string into Secrets Manager (never in the config, the listing, a response or a log line) and creating the
connector's schedule; 400/409/404/502 with the original's bodies and nothing stored; unregistration removing the
schedule and the secret; the scheduled poll function bringing the source's rows in."""

from __future__ import annotations

import json
import logging
from typing import Any

import pytest

import functions.admin as admin_fn
import functions.connector_poll as poll_fn
import functions.pull as pull_fn
from tests.sql.servers import Server, postgres_server

__all__ = ["postgres_server"]

GROUP = "lakesync-connectors"
POLL_ARN = "arn:aws:lambda:us-east-1:123456789012:function:lakesync-connector-poll"
ROLE_ARN = "arn:aws:iam::123456789012:role/lakesync-connector-schedules"


@pytest.fixture
def connectors_api(api: Any, monkeypatch: pytest.MonkeyPatch, moto_endpoint: str) -> Any:
    import boto3

    from functions._runtime import reset_runtime

    monkeypatch.setenv("LAKESYNC_CONNECTOR_SCHEDULE_GROUP", GROUP)
    monkeypatch.setenv("LAKESYNC_CONNECTOR_POLL_FUNCTION_ARN", POLL_ARN)
    monkeypatch.setenv("LAKESYNC_CONNECTOR_SCHEDULER_ROLE_ARN", ROLE_ARN)
    prefix = f"lakesync/test-{id(api)}"
    monkeypatch.setenv("LAKESYNC_CONNECTOR_SECRET_PREFIX", prefix)
    kwargs = {"endpoint_url": moto_endpoint, "region_name": "us-east-1"}
    scheduler = boto3.client("scheduler", **kwargs)
    try:
        scheduler.create_schedule_group(Name=GROUP)
    except scheduler.exceptions.ConflictException:
        pass
    reset_runtime()
    api.scheduler = scheduler
    api.secrets = boto3.client("secretsmanager", **kwargs)
    api.prefix = prefix
    return api


def _body(url: str, name: str = "crm") -> dict[str, Any]:
    return {
        "name": name,
        "type": "postgres",
        "postgres": {"connectionString": url},
        "ingest": {
            "intervalMs": 30000,
            "tables": [{"table": "customers", "query": "SELECT id, name FROM customers", "strategy": {"type": "diff"}}],
        },
    }


@pytest.fixture
def pg_url(postgres_server: Server) -> str:
    import psycopg

    url = postgres_server.url()
    with psycopg.connect(url, autocommit=True) as conn:
        conn.execute("CREATE TABLE customers (id INT PRIMARY KEY, name TEXT)")
        conn.execute("INSERT INTO customers VALUES (1, 'ada'), (2, 'grace')")
    # A password the server ignores (trust authentication) but that must never surface anywhere
    return url.replace("postgres@", "postgres:s3cr3t-pw@")


def test_connector_types_need_no_token_and_are_sorted(bare_api: Any) -> None:
    reply = bare_api.call(admin_fn, bare_api.event("connector_types", token=None))
    types = reply.json()
    assert reply.status == 200
    assert [t["type"] for t in types] == sorted(t["type"] for t in types)
    assert {"bigquery", "mysql", "postgres"} <= {t["type"] for t in types}
    pg = next(t for t in types if t["type"] == "postgres")
    assert pg["category"] == "database" and pg["secretFields"] == ["connectionString"]
    assert pg["configSchema"]["required"] == ["connectionString"] and "tables" in pg["ingestSchema"]["properties"]


def test_register_list_poll_and_unregister(connectors_api: Any, pg_url: str, caplog: pytest.LogCaptureFixture) -> None:
    api = connectors_api
    # (botocore's own DEBUG lines echo request bodies, as they do for any secret: Lambda logs at INFO)
    caplog.set_level(logging.INFO)
    caplog.set_level(logging.DEBUG, logger="lakesync")
    token = api.admin_token()
    # When a connector is registered with a plaintext connection string
    reply = api.call(admin_fn, api.event("admin_connectors_post", token=token, body=_body(pg_url)))
    assert (reply.status, reply.json()) == (200, {"registered": True, "name": "crm"})
    # Then the secret holds the connection string and the stored config only its ARN
    name = f"{api.prefix}/default/crm/connectionString"
    secret = api.secrets.describe_secret(SecretId=name)
    assert api.secrets.get_secret_value(SecretId=name)["SecretString"] == pg_url
    items = api.client.scan(TableName=api.tables.config)["Items"]
    stored = next(json.loads(i["doc"]["S"]) for i in items if i["sk"]["S"] == "conn#crm")
    assert stored["postgres"]["connectionString"] == f"secret://{secret['ARN']}"
    # And the schedule invokes the poll function every minute with the connector's identity
    schedule = api.scheduler.get_schedule(Name="default--crm", GroupName=GROUP)
    assert schedule["ScheduleExpression"] == "rate(1 minute)"
    assert schedule["Target"]["Arn"] == POLL_ARN and schedule["Target"]["RoleArn"] == ROLE_ARN
    assert json.loads(schedule["Target"]["Input"]) == {"gateway": "default", "connector": "crm"}
    # And the listing names it without its config
    listed = api.call(admin_fn, api.event("admin_connectors_get", token=token))
    assert listed.json() == [{"name": "crm", "type": "postgres", "hasIngest": True, "isPolling": True}]
    # When the schedule fires, the rows arrive as ingest:crm deltas
    result = poll_fn.lambda_handler(json.loads(schedule["Target"]["Input"]), _context())
    assert result["status"] == "polled" and result["rows"] == 2
    pulled = api.call(pull_fn, api.event("pull", token=api.admin_token(), query={"clientId": "ops", "since": "0"}))
    rows = {d["rowId"]: d for d in pulled.json()["deltas"] if d["table"] == "customers"}
    assert set(rows) == {"1", "2"} and rows["1"]["clientId"] == "ingest:crm"
    # When it is unregistered, the schedule and the secret go too, and a second delete is 404
    gone = api.call(admin_fn, api.event("admin_connectors_delete", token=token))
    assert (gone.status, gone.json()) == (200, {"unregistered": True, "name": "crm"})
    with pytest.raises(api.scheduler.exceptions.ResourceNotFoundException):
        api.scheduler.get_schedule(Name="default--crm", GroupName=GROUP)
    with pytest.raises(api.secrets.exceptions.ResourceNotFoundException):
        api.secrets.get_secret_value(SecretId=name)
    again = api.call(admin_fn, api.event("admin_connectors_delete", token=token))
    assert (again.status, again.json()) == (404, {"error": 'Connector "crm" not found', "code": "NOT_FOUND"})
    # And the password never appeared in a response or a log line
    assert "s3cr3t-pw" not in caplog.text
    for r in (reply, listed, pulled, gone, again):
        assert b"s3cr3t-pw" not in r.body


def _context(remaining_s: float | None = None) -> Any:
    import math
    import time

    from lakesync.local.front import LambdaContext

    return LambdaContext(
        function_name="lakesync-connector-poll",
        aws_request_id="c0ffee00-0000-4000-8000-000000000001",
        invoked_function_arn=POLL_ARN,
        memory_limit_in_mb=512,
        deadline_monotonic=math.inf if remaining_s is None else time.monotonic() + remaining_s,
    )


def test_the_polls_lease_ends_with_the_invocation(
    connectors_api: Any, pg_url: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    from lakesync.aws.connector_positions import DynamoDBPositionStore

    api = connectors_api
    reply = api.call(admin_fn, api.event("admin_connectors_post", token=api.admin_token(), body=_body(pg_url)))
    assert reply.status == 200
    taken: list[tuple[int, int]] = []
    acquire = DynamoDBPositionStore.acquire

    def recording(self: Any, gateway: str, name: str, version: int, token: str, until_ms: int, now_ms: int) -> bool:
        taken.append((until_ms, now_ms))
        return acquire(self, gateway, name, version, token, until_ms, now_ms)

    monkeypatch.setattr(DynamoDBPositionStore, "acquire", recording)
    # When the schedule invokes the poll function with 20 s left before its timeout
    result = poll_fn.lambda_handler({"gateway": "default", "connector": "crm"}, _context(remaining_s=20))
    # Then it polled under a lease that ends no later than the invocation (a killed run's lease is dead with it)
    assert result["status"] == "polled" and result["rows"] == 2
    assert len(taken) == 1 and 0 < taken[0][0] - taken[0][1] <= 20_000


def test_bad_configs_are_400_or_409_and_store_nothing(connectors_api: Any, pg_url: str) -> None:
    api = connectors_api
    token = api.admin_token()
    before = api.items()
    bad = _body(pg_url)
    bad["ingest"]["tables"][0]["strategy"] = {"type": "cursor"}
    reply = api.call(admin_fn, api.event("admin_connectors_post", token=token, body=bad))
    assert (reply.status, reply.json()) == (
        400,
        {
            "error": "Ingest table at index 0 cursor strategy requires a non-empty cursorColumn",
            "code": "VALIDATION_ERROR",
        },
    )
    no_name = api.call(admin_fn, api.event("admin_connectors_post", token=token, body={"type": "postgres"}))
    assert (no_name.status, no_name.json()["error"]) == (400, "Connector name must be a non-empty string")
    assert api.items() == before
    assert api.call(admin_fn, api.event("admin_connectors_post", token=token, body=_body(pg_url))).status == 200
    dup = api.call(admin_fn, api.event("admin_connectors_post", token=token, body=_body(pg_url)))
    assert (dup.status, dup.json()) == (409, {"error": 'Connector "crm" already exists', "code": "VALIDATION_ERROR"})
    client = api.call(admin_fn, api.event("admin_connectors_get", token=api.token()))
    assert client.status == 403


def test_missing_secret_is_400_unreachable_source_502_and_neither_stores_anything(connectors_api: Any) -> None:
    api = connectors_api
    token = api.admin_token()
    before = api.items()
    # A reference to a secret of this gateway that does not exist: the request's mistake, a 400
    body = _body(f"secret://{api.prefix}/default/crm/connectionString")
    missing = api.call(admin_fn, api.event("admin_connectors_post", token=token, body=body))
    assert missing.status == 400 and missing.json()["code"] == "VALIDATION_ERROR"
    assert "references a secret that does not exist" in missing.json()["error"]
    dead = api.call(
        admin_fn,
        api.event("admin_connectors_post", token=token, body=_body("postgresql://u:pw-x9@127.0.0.1:1/db", "dead")),
    )
    assert dead.status == 502 and 'Connector "dead"' in dead.json()["error"] and "pw-x9" not in dead.json()["error"]
    assert api.items() == before
    names = [s["Name"] for s in api.secrets.list_secrets()["SecretList"]]
    assert not [n for n in names if n.startswith(api.prefix)]
