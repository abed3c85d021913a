"""Secrets stay inside their gateway (issue 40, item 3).

* A ``secret://`` reference is accepted only under ``{prefix}/{gateway}/``: another gateway's secret, the JWT signing
  key or any other secret the function may read is a 400 at registration and is never read -- and a config stored
  before the rule (written straight to the config store) is refused again when it is opened.
* No error body or log line carries a connection string's password, whatever its form: a libpq keyword string whose
  host is unreachable (the probe of the issue, which answered 502 with the whole string) included.
* A destination URL cannot carry parameters that redirect the connection (``host``, ``hostaddr``, ``port``,
  ``service``, ``passfile``, ``sslrootcert``, ``options``, ``unix_socket``...): 400 at registration, refused before
  dialling for a destination stored before the rule.
* SQL ingest runs one statement in a read-only transaction: ``...; COMMIT; DROP ...`` is refused at registration, and
  a query stored before that check is refused by the server itself (PostgreSQL's extended protocol, MariaDB without
  multi-statements) -- nothing it smuggles is executed, against the real servers the suite starts.

Through the Lambda handlers on the moto server, over real HTTP against ``lakesync local``, and in process.
"""

from __future__ import annotations

import json
import logging
import urllib.error
import urllib.request
import uuid
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

import functions.admin as admin_fn
from lakesync import egress
from lakesync.auth import mint_token
from lakesync.aws.connector_secrets import SecretsManagerSecretStore
from lakesync.aws.destinations import open_destination
from lakesync.connectors.runtime import ConnectorRuntime
from lakesync.connectors.secrets import InMemorySecretStore
from lakesync.connectors.sql.mysql import MySQLRunner
from lakesync.connectors.sql.postgres import PostgresRunner
from lakesync.core.connectors import ConnectorConfig
from lakesync.core.destinations import DestinationConfig, DestinationType, parse_destination
from lakesync.core.errors import AdapterError, LakeSyncError, ValidationError
from lakesync.core.network import LOCAL_DEVELOPMENT, STRICT, ForbiddenTargetError
from lakesync.core.redact import Redactor, mask_conninfo, redact
from lakesync.gateway.connectors import register_connector
from lakesync.gateway.memory import InMemoryConfigStore
from lakesync.local.runner import LocalStack
from tests.functions.conftest import Api, api, aws_env
from tests.security.connector_deps import PREFIX, connector_deps
from tests.sql.servers import Server, mariadb_server, postgres_server

__all__ = ["api", "aws_env", "mariadb_server", "postgres_server"]

pytestmark = pytest.mark.integration

PASSWORD = "kw-S3cret-pw-4711"
QUOTED_PASSWORD = "two words ' and-a-quote"
SMUGGLED = "SELECT 1 AS id) AS a; COMMIT; DROP TABLE victims; SELECT * FROM (SELECT 1 AS id"


def _pg_body(connection: str, name: str = "crm", query: str = "SELECT 1 AS id") -> dict[str, Any]:
    return {
        "name": name,
        "type": "postgres",
        "postgres": {"connectionString": connection},
        "ingest": {"tables": [{"table": "t", "query": query, "strategy": {"type": "diff"}}]},
    }


class SpyStore(InMemorySecretStore):
    """An in-memory secret store that records every read."""

    def __init__(self) -> None:
        super().__init__()
        self.reads: list[str] = []

    def get_secret(self, secret_id: str) -> str:
        self.reads.append(secret_id)
        return super().get_secret(secret_id)


@pytest.fixture
def loopback() -> Iterator[None]:
    previous = egress.configure(LOCAL_DEVELOPMENT)
    yield
    egress.configure(previous)


# -- one redaction helper ---------------------------------------------------------------------------------------------


@pytest.mark.parametrize(
    "text",
    [
        f"host=db port=5432 user=u password={PASSWORD} dbname=x",
        f"host=db password = '{PASSWORD} x'",
        f"postgresql://u:{PASSWORD}@db:5432/x",
        f"mysql://u:{PASSWORD}@db/x?ssl_verify_cert=true",
        f"https://db/x?sslmode=require&password={PASSWORD}",
        f'{{"username": "u", "password": "{PASSWORD}"}}',
        f"Authorization: Bearer {PASSWORD}",
        f"client_secret={PASSWORD}&grant_type=password",
    ],
)
def test_credential_shapes_are_redacted_whatever_their_value(text: str) -> None:
    # Given a message holding a credential the redactor was not told of
    shown = redact(text)
    # Then its value is gone, and what says where stays
    assert PASSWORD not in shown and "***" in shown


def test_known_secrets_are_redacted_in_every_encoding() -> None:
    redactor = Redactor([QUOTED_PASSWORD])
    for encoded in (QUOTED_PASSWORD, "two%20words%20%27%20and-a-quote", "two+words+%27+and-a-quote"):
        assert "two words" not in redactor(f"failed near {encoded}!") and "%20words" not in redactor(encoded)
    assert "and-a-quote" not in redactor('missing = after "two words \\\' and-a-quote"')


def test_a_keyword_connection_string_is_shown_by_location_only() -> None:
    assert mask_conninfo(f"host=db.internal port=6432 dbname=crm user=u password={PASSWORD}") == (
        "host=db.internal port=6432 dbname=crm"
    )


# -- references stay inside their gateway ---------------------------------------------------------------------------


@pytest.mark.parametrize(
    "reference",
    [
        f"secret://{PREFIX}/other/crm/connectionString",  # another gateway's
        f"secret://{PREFIX}/default-x/crm/connectionString",  # a gateway whose id starts with ours
        f"secret://{PREFIX}/default/../other/crm/connectionString",
        "secret://JwtSecretB8834B39-AbCdEfGhIjKl",  # the JWT signing key, by name
        "secret://arn:aws:secretsmanager:us-east-1:123456789012:secret:JwtSecretB8834B39-AbCdEf",  # and by ARN
        "secret://lakesync/other-environment/connectors/default/crm/connectionString",
    ],
)
def test_a_reference_outside_the_gateway_is_400_and_never_read(reference: str) -> None:
    # Given every one of those secrets exists and the function could read it
    store = SpyStore()
    for name in (reference.removeprefix("secret://"), f"{PREFIX}/other/crm/connectionString"):
        store.secrets[name] = f"postgresql://u:{PASSWORD}@db/x"
    deps = connector_deps(store)
    # When a gateway admin registers a connector referencing it
    with pytest.raises(ValidationError) as refused:
        register_connector(deps, "default", _pg_body(reference))
    # Then it is a 400 naming the rule, the secret was never read and nothing is stored
    assert refused.value.status == 400 and "must reference a secret of this gateway" in refused.value.message
    assert store.reads == [] and deps.config.list_connectors("default") == []
    assert PASSWORD not in refused.value.message


def test_a_foreign_reference_stored_before_the_rule_is_refused_when_opened() -> None:
    # Given a config written straight to the store, as one registered before the rule was
    store = SpyStore()
    store.secrets[f"{PREFIX}/other/crm/connectionString"] = f"postgresql://u:{PASSWORD}@db/x"
    deps = connector_deps(store)
    foreign = ConnectorConfig("crm", "postgres", _pg_body(f"secret://{PREFIX}/other/crm/connectionString"))
    deps.config.add_connector("default", foreign)
    # When the poller, a source pull or an action opens it
    assert deps.connectors is not None
    with pytest.raises(ValidationError, match="must reference a secret of this gateway"):
        deps.connectors.connector("default", "crm")
    # Then the secret was never read
    assert store.reads == []


def test_a_reference_of_the_gateway_resolves() -> None:
    store = SpyStore()
    name = f"{PREFIX}/default/shared/connectionString"
    store.secrets[name] = "postgresql://u@db.example.com/x"
    runtime = ConnectorRuntime(InMemoryConfigStore(), store, secret_prefix=PREFIX)
    config = ConnectorConfig("crm", "postgres", _pg_body(f"secret://{name}"))
    from lakesync.connectors.runtime import open_connector

    open_connector(config, store, gateway="default", prefix=PREFIX).close()
    assert store.reads == [name]
    runtime.close()


# -- through the Lambda handlers on moto ------------------------------------------------------------------------------


@pytest.fixture
def reads(monkeypatch: pytest.MonkeyPatch) -> list[str]:
    """Every secret id the connector secret store (Secrets Manager) is asked for."""
    seen: list[str] = []
    original = SecretsManagerSecretStore.get_secret

    def spy(self: SecretsManagerSecretStore, secret_id: str) -> str:
        seen.append(secret_id)
        return original(self, secret_id)

    monkeypatch.setattr(SecretsManagerSecretStore, "get_secret", spy)
    return seen


def _secrets_client(moto_endpoint: str) -> Any:
    import boto3

    return boto3.client("secretsmanager", endpoint_url=moto_endpoint, region_name="us-east-1")


def test_lambda_keyword_connection_string_to_an_unreachable_host_leaks_no_password(
    api: Api, caplog: pytest.LogCaptureFixture
) -> None:
    caplog.set_level(logging.DEBUG, logger="lakesync")
    caplog.set_level(logging.INFO)
    # Given a libpq keyword string holding a password (plain, and quoted with spaces), host unreachable
    for password, connection in (
        (PASSWORD, f"host=127.0.0.1 port=1 dbname=crm user=app password={PASSWORD} connect_timeout=3"),
        (QUOTED_PASSWORD, "host=127.0.0.1 port=1 user=app password='two words \\' and-a-quote'"),
    ):
        # When an admin registers it
        reply = api.call(
            admin_fn, api.event("admin_connectors_post", token=api.admin_token(), body=_pg_body(connection))
        )
        # Then the source is reported unreachable, naming where, and neither the body nor any log line has the
        # password (or the string) in any form
        assert reply.status == 502, reply.body
        assert "127.0.0.1" in reply.json()["error"]
        for fragment in (password, "two words", "and-a-quote", connection):
            assert fragment.encode() not in reply.body
            assert fragment not in caplog.text


def test_lambda_foreign_and_jwt_references_are_400_and_never_read(
    api: Api, moto_endpoint: str, reads: list[str]
) -> None:
    sm = _secrets_client(moto_endpoint)
    suffix = uuid.uuid4().hex[:8]
    other = sm.create_secret(Name=f"{PREFIX}/other/crm-{suffix}/connectionString", SecretString=PASSWORD)
    jwt = sm.create_secret(Name=f"JwtSecretB8834B39-{suffix}", SecretString="k" * 64)
    before = api.items()
    for reference in (other["ARN"], other["Name"], jwt["ARN"], jwt["Name"]):
        reply = api.call(
            admin_fn,
            api.event("admin_connectors_post", token=api.admin_token(), body=_pg_body(f"secret://{reference}")),
        )
        assert reply.status == 400 and reply.json()["code"] == "VALIDATION_ERROR", reply.body
        assert "must reference a secret of this gateway" in reply.json()["error"]
        assert PASSWORD.encode() not in reply.body and b"k" * 64 not in reply.body
    assert reads == [] and api.items() == before


def test_lambda_destination_urls_that_redirect_are_400(api: Api) -> None:
    for url in (
        "postgresql://db.example.com/app?host=10.0.0.5",
        "postgresql://db.example.com/app?hostaddr=169.254.169.254",
        "postgresql://db.example.com/app?port=6543",
        "postgresql://db.example.com/app?service=prod",
        "postgresql://db.example.com/app?passfile=/etc/passwd",
        "postgresql://db.example.com/app?sslrootcert=/var/task/x.pem",
        "postgresql://db.example.com/app?options=-c%20search_path%3Devil",
        "postgresql://a.example.com,b.example.com/app",
        "mysql://db.example.com/app?unix_socket=/tmp/mysql.sock",
        "mysql://db.example.com/app?ssl_ca=/etc/passwd",
    ):
        kind = "mysql" if url.startswith("mysql") else "postgres"
        body = {"name": "analytics", "type": kind, "url": url}
        reply = api.call(admin_fn, api.event("admin_materialise_post", token=api.admin_token(), body=body))
        assert reply.status == 400 and reply.json()["code"] == "VALIDATION_ERROR", (url, reply.body)
        assert url not in reply.json()["error"]
    allowed = {"name": "analytics", "type": "postgres", "url": "postgresql://db.example.com/app?sslmode=verify-full"}
    reply = api.call(admin_fn, api.event("admin_materialise_post", token=api.admin_token(), body=allowed))
    assert reply.status == 200
    assert api.items()["config"] == 1


@pytest.mark.parametrize(
    "url",
    ["postgresql://db.example.com/app?host=10.0.0.5", "postgresql://db.example.com/app?hostaddr=169.254.169.254"],
)
def test_a_redirecting_destination_stored_before_the_rule_is_refused_before_dialling(url: str) -> None:
    # Given a config that bypassed registration (stored before the rule)
    config = DestinationConfig("analytics", DestinationType.POSTGRES, url=url)
    previous = egress.configure(STRICT)
    try:
        with pytest.raises(ForbiddenTargetError, match="may not set"):
            open_destination(config, None)
        # And a secret's url is held to the same rule
        with pytest.raises(ForbiddenTargetError, match="may not set"):
            open_destination(config, {"url": url, "password": PASSWORD})
    finally:
        egress.configure(previous)


def test_parse_destination_keeps_the_allowed_options() -> None:
    url = "postgresql://db.example.com:6432/app?sslmode=verify-full&connect_timeout=5&application_name=x"
    assert parse_destination({"name": "a", "type": "postgres", "url": url}).url == url


# -- over real HTTP against lakesync local --------------------------------------------------------------------------


@pytest.fixture(scope="module")
def stack(tmp_path_factory: pytest.TempPathFactory) -> Iterator[LocalStack]:
    with LocalStack(Path(tmp_path_factory.mktemp("secrets")), port=0, persist=False, materialise=False) as running:
        yield running


def _http(stack: LocalStack, method: str, path: str, body: Any = None) -> tuple[int, bytes]:
    token = mint_token("ops", "default", stack.secret, role="admin")
    headers = {"Authorization": f"Bearer {token}", "Content-Type": "application/json"}
    data = json.dumps(body).encode() if body is not None else None
    req = urllib.request.Request(stack.url + path, data=data, method=method, headers=headers)
    try:
        with urllib.request.urlopen(req, timeout=60) as resp:
            return resp.status, resp.read()
    except urllib.error.HTTPError as exc:
        return exc.code, exc.read()


def test_http_keyword_connection_string_and_foreign_reference(stack: LocalStack) -> None:
    # Given the keyword-string probe of the issue: 502 without the password
    connection = f"host=127.0.0.1 port=1 dbname=crm user=app password={PASSWORD} connect_timeout=3"
    status, body = _http(stack, "POST", "/v1/admin/connectors/default", _pg_body(connection))
    assert status == 502 and PASSWORD.encode() not in body and b"password" not in body, body
    # And another gateway's secret, existing in the local secret files, is a 400 and never echoed
    other = stack.data_dir / "connector-secrets" / "lakesync__connectors__other__crm__connectionString"
    other.parent.mkdir(parents=True, exist_ok=True)
    other.write_text(f"postgresql://u:{PASSWORD}@127.0.0.1:1/x")
    status, body = _http(
        stack, "POST", "/v1/admin/connectors/default", _pg_body(f"secret://{PREFIX}/other/crm/connectionString")
    )
    assert status == 400 and b"must reference a secret of this gateway" in body and PASSWORD.encode() not in body
    # And a destination URL with a host parameter is a 400
    status, body = _http(
        stack,
        "POST",
        "/v1/admin/materialise/default",
        {"name": "a", "type": "postgres", "url": "postgresql://db.example.com/app?host=127.0.0.1"},
    )
    assert status == 400, body
    status, listed = _http(stack, "GET", "/v1/admin/connectors/default")
    assert (status, json.loads(listed)) == (200, [])


# -- SQL ingest: one read-only statement, against the real servers ---------------------------------------------------


@pytest.fixture
def pg_victims(postgres_server: Server) -> Iterator[str]:
    import psycopg

    url = postgres_server.url(f"sec_{uuid.uuid4().hex[:8]}")
    with psycopg.connect(url, autocommit=True) as conn:
        conn.execute("CREATE TABLE victims (id INT PRIMARY KEY)")
        conn.execute("INSERT INTO victims VALUES (1)")
    yield url
    with psycopg.connect(url, autocommit=True) as conn:
        assert conn.execute("SELECT count(*) FROM victims").fetchone() == (1,)  # nothing smuggled ran


@pytest.fixture
def maria_victims(mariadb_server: Server) -> Iterator[str]:
    import pymysql

    url = mariadb_server.url(f"sec_{uuid.uuid4().hex[:8]}")
    database = url.rsplit("/", 1)[1]
    conn = pymysql.connect(host=mariadb_server.host, port=mariadb_server.port, user=mariadb_server.user)
    with conn.cursor() as cur:
        cur.execute(f"CREATE DATABASE IF NOT EXISTS `{database}`")
        cur.execute(f"CREATE TABLE `{database}`.victims (id INT PRIMARY KEY)")
        cur.execute(f"INSERT INTO `{database}`.victims VALUES (1)")
    conn.commit()
    yield url
    with conn.cursor() as cur:
        cur.execute(f"SELECT count(*) FROM `{database}`.victims")
        assert cur.fetchone() == (1,)  # nothing smuggled ran
    conn.close()


@pytest.mark.parametrize(
    "payload",
    [
        SMUGGLED,
        "SELECT 1 AS id) AS a; INSERT INTO victims VALUES (2); SELECT * FROM (SELECT 1 AS id",
        "SELECT 1 AS id) AS a; DELETE FROM victims; SELECT * FROM (SELECT 1 AS id",
    ],
)
def test_a_smuggled_statement_is_refused_at_registration(payload: str, loopback: None, pg_victims: str) -> None:
    store = SpyStore()
    deps = connector_deps(store)
    with pytest.raises(ValidationError, match="single statement"):
        register_connector(deps, "default", _pg_body(pg_victims, query=payload))
    assert deps.config.list_connectors("default") == []


@pytest.mark.parametrize("kind", ["postgres", "mysql"])
@pytest.mark.parametrize(
    "payload",
    [
        SMUGGLED,
        "SELECT 1 AS id) AS a; INSERT INTO victims VALUES (2); SELECT * FROM (SELECT 1 AS id",
    ],
)
def test_a_query_stored_before_the_check_runs_no_smuggled_statement(
    kind: str, payload: str, loopback: None, request: pytest.FixtureRequest
) -> None:
    # Given a connector whose query bypassed registration, polled through its runner (as the poller does)
    url = request.getfixturevalue("pg_victims" if kind == "postgres" else "maria_victims")
    from lakesync.connectors.sql.query import IngestTable

    runner = PostgresRunner(url, name="crm") if kind == "postgres" else MySQLRunner(url, name="crm")
    table = IngestTable("t", payload, "id", "diff")
    # When it runs, Then the server refuses it as more than one statement (the fixture checks nothing ran)
    with pytest.raises(AdapterError):
        runner.query(table.select(runner.dialect, order=False))
    # And a single statement still cannot write: the transaction is read-only
    with pytest.raises(AdapterError, match=r"read-only|READ ONLY|read only"):
        runner.query("INSERT INTO victims VALUES (3)")
    # And the connection still serves reads
    assert runner.query("SELECT count(*) AS n FROM victims")[1] == [(1,)]
    runner.close()


def test_a_server_refusal_never_quotes_the_password(loopback: None, postgres_server: Server) -> None:
    # Given a wrong password in a keyword string to the real server (trust auth accepts any: use a missing database)
    connection = (
        f"host=127.0.0.1 port={postgres_server.port} dbname=nope_{uuid.uuid4().hex[:6]} user=u password={PASSWORD}"
    )
    runner = PostgresRunner(connection, name="crm")
    with pytest.raises(AdapterError) as failed:
        runner.query("SELECT 1")
    assert PASSWORD not in failed.value.message and "password" not in failed.value.message
    assert f"127.0.0.1:{postgres_server.port}" in failed.value.message


@pytest.mark.parametrize(
    "connection",
    [
        "host=db.example.com hostaddr=169.254.169.254 dbname=x",
        "host=db.example.com service=prod",
        "host=db.example.com passfile=/etc/passwd",
        "host=db.example.com options='-c default_transaction_read_only=off'",
        "host=/var/run/postgresql dbname=x",
        "host=a.example.com,b.example.com dbname=x",
        "postgresql://db.example.com/x?host=10.0.0.1",
        "postgresql://db.example.com/x?sslrootcert=/etc/passwd",
    ],
)
def test_connector_connection_strings_that_redirect_are_400(connection: str) -> None:
    store = SpyStore()
    deps = connector_deps(store)
    with pytest.raises(LakeSyncError) as refused:
        register_connector(deps, "default", _pg_body(connection))
    assert refused.value.status == 400 and connection not in refused.value.message
    assert deps.config.list_connectors("default") == [] and store.secrets == {}


# -- destinations name only their gateway's secrets ------------------------------------------------------------------

DESTINATION_PREFIX = "lakesync/test/destinations/"


def _arn(name: str) -> str:
    return f"arn:aws:secretsmanager:us-east-1:123456789012:secret:{name}-AbCdEf"


def test_lambda_destination_secret_of_another_gateway_is_400(api: Api, monkeypatch: pytest.MonkeyPatch) -> None:
    from functions._runtime import reset_runtime

    monkeypatch.setenv("LAKESYNC_DESTINATION_SECRET_PREFIX", DESTINATION_PREFIX)
    reset_runtime()
    for name in (f"{DESTINATION_PREFIX}other/analytics", "JwtSecretB8834B39", f"{DESTINATION_PREFIX}default-x/a"):
        body = {"name": "analytics", "type": "postgres", "secretArn": _arn(name)}
        reply = api.call(admin_fn, api.event("admin_materialise_post", token=api.admin_token(), body=body))
        assert reply.status == 400 and "must name a secret of this gateway" in reply.json()["error"], reply.body
    own = {"name": "analytics", "type": "postgres", "secretArn": _arn(f"{DESTINATION_PREFIX}default/analytics")}
    reply = api.call(admin_fn, api.event("admin_materialise_post", token=api.admin_token(), body=own))
    assert reply.status == 200 and api.items()["config"] == 1


def test_a_destination_stored_before_the_rule_never_reads_a_foreign_secret() -> None:
    from lakesync.aws.destinations import ConfiguredDestinations

    # Given a destination naming another gateway's secret, stored before the rule
    config = InMemoryConfigStore()
    foreign = DestinationConfig(
        "analytics", DestinationType.POSTGRES, secret_arn=_arn(f"{DESTINATION_PREFIX}other/analytics")
    )
    config.add_destination("default", foreign)
    asked: list[str] = []

    class Client:
        def get_secret_value(self, SecretId: str) -> dict[str, str]:
            asked.append(SecretId)
            return {"SecretString": json.dumps({"url": f"postgresql://u:{PASSWORD}@db.example.com/x"})}

    provider = ConfiguredDestinations(config, Client, secret_prefix=DESTINATION_PREFIX)  # type: ignore[arg-type]
    # When the materialiser resolves the gateway's destinations
    resolved = provider.destinations("default", "todos")
    # Then that one is a failure naming the rule, and its secret was never read
    assert resolved.opened == () and asked == []
    assert "must name a secret of this gateway" in resolved.failures["analytics"].message


def test_an_error_body_is_redacted_at_the_edge_whatever_raised_it() -> None:
    # Given an error whose message was built carelessly (a driver's text quoted as it came)
    from lakesync import edge

    error = AdapterError(f"could not connect: host=db.internal password={PASSWORD} (postgresql://u:{PASSWORD}@db/x)")
    # When it is answered, Then the body keeps what happened and where, never the credential
    body = edge.error_response(error).body
    assert isinstance(body, dict)
    assert PASSWORD not in body["error"] and "host=db.internal" in body["error"] and body["code"] == "ADAPTER_ERROR"


def test_lambda_a_careless_adapter_message_reaches_neither_body_nor_logs(
    api: Api, caplog: pytest.LogCaptureFixture
) -> None:
    # Given a connector type (a plugin's) whose failure quotes its connection string as it came
    from lakesync.connectors import registry
    from lakesync.connectors.base import ConnectorTypeDescriptor

    descriptor = ConnectorTypeDescriptor("careless", "Careless", "test", "database", {}, {})

    def careless(config: ConnectorConfig, secrets: Any) -> Any:
        raise AdapterError(f"cannot reach host=db.internal user=app password={PASSWORD} sslmode=require")

    registry.register(descriptor, careless)
    caplog.set_level(logging.DEBUG)
    try:
        body = {"name": "c", "type": "careless", "careless": {}}
        reply = api.call(admin_fn, api.event("admin_connectors_post", token=api.admin_token(), body=body))
    finally:
        registry.unregister("careless")
    # Then the request fails as the adapter said, and neither the body nor any log line holds the password
    assert reply.status == 502 and b"host=db.internal" in reply.body
    assert PASSWORD.encode() not in reply.body and PASSWORD not in caplog.text
