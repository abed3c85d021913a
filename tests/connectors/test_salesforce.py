"""The Salesforce connector against a local Salesforce double: OAuth flows (client credentials, password, JWT
bearer), queryAll paging through nextRecordsUrl, the SystemModstamp cursor with overlap and dedup, IsDeleted rows,
token expiry, 403 REQUEST_LIMIT_EXCEEDED, Sforce-Limit-Info, positions across restarts, and record actions."""

from __future__ import annotations

import json
import logging
from collections.abc import Iterator
from typing import Any
from urllib.parse import parse_qs, urlsplit

import pytest

from lakesync.connectors import salesforce
from lakesync.connectors.http_api import ApiAuthError, ApiThrottledError, RetryPolicy
from lakesync.core.actions import ActionContext, make_action
from lakesync.core.connectors import ConnectorValidationError, validate_connector_config
from lakesync.core.errors import ActionExecutionError, ActionNotSupportedError, AdapterError, ValidationError
from lakesync.core.hlc import HLC
from tests.connectors.salesforce_server import SalesforceState, running

pytestmark = pytest.mark.integration

CLIENT_ID = "3MVG9-consumer-key"
CLIENT_SECRET = "8A4BE698BCA2-very-secret"
PASSWORD = "hunter2-and-security-token"


@pytest.fixture
def state() -> SalesforceState:
    return SalesforceState(client_id=CLIENT_ID, client_secret=CLIENT_SECRET, password=PASSWORD)


@pytest.fixture
def base_url(state: SalesforceState) -> Iterator[str]:
    with running(state) as url:
        yield url


class Harness:
    def __init__(self, state: SalesforceState, base_url: str) -> None:
        self.state = state
        self.base_url = base_url
        self.sleeps: list[float] = []

    def connector(self, secrets: dict[str, str] | None = None, **settings: Any) -> salesforce.SalesforceConnector:
        sf = {
            "instanceUrl": self.base_url,
            "clientId": CLIENT_ID,
            "authFlow": "client_credentials",
            "clientSecret": "secret://sf#clientSecret",
            **settings,
        }
        if sf.get("authFlow") is None:
            del sf["authFlow"]
        doc = {"name": "sf", "type": "salesforce", "salesforce": sf, "ingest": {"intervalMs": 1000}}
        config = validate_connector_config(doc)
        connector = salesforce.create(config, secrets or {"clientSecret": CLIENT_SECRET})
        impl = connector.ingest
        assert isinstance(impl, salesforce.SalesforceConnector) and connector.actions is impl
        for client in (impl.client, impl.token_client):
            client.sleep = self.sleeps.append
            client.jitter = lambda: 1.0
            client.retry = RetryPolicy(max_attempts=4, base_delay=0.5)
        impl._hlc = HLC(lambda: 1_700_000_000_000)
        return impl


@pytest.fixture
def h(state: SalesforceState, base_url: str) -> Harness:
    return Harness(state, base_url)


def drain(connector: salesforce.SalesforceConnector, position: Any, limit: int = 5000) -> tuple[list[Any], Any]:
    rows: list[Any] = []
    for _ in range(50):
        batch = connector.poll(position, limit)
        rows.extend(batch.rows)
        position = json.loads(json.dumps(batch.position))
        if not batch.more:
            return rows, position
    raise AssertionError("poll never caught up")


def soql_of(path: str) -> str:
    return parse_qs(urlsplit(path).query)["q"][0]


def test_salesforce_client_credentials_and_query_all_paging(h: Harness, state: SalesforceState) -> None:
    accounts = [state.insert("Account", Name=f"Acme {n}") for n in range(450)]
    contact = state.insert("Contact", LastName="Lovelace", Email="ada@acme.example")
    connector = h.connector(batchSize=200)

    first = connector.poll({}, 250)
    assert first.more
    assert [r.row_id for r in first.rows] == accounts[:400]  # two pages of 200: stops at the page boundary
    rows, position = drain(connector, json.loads(json.dumps(first.position)), limit=250)
    all_rows = [*first.rows, *rows]
    assert [r.row_id for r in all_rows] == [*accounts, contact]
    assert {r.table for r in all_rows} == {"sf_accounts", "sf_contacts"}
    acct = all_rows[0]
    assert acct.values is not None and acct.values["Name"] == "Acme 0"
    assert acct.version == "2025-03-01T12:00:00.000Z"
    assert acct.origin["url"].endswith(f"/sobjects/Account/{accounts[0]}")

    [token_form] = state.token_requests()
    assert token_form["grant_type"] == "client_credentials" and token_form["client_id"] == CLIENT_ID
    queries = state.queries()
    assert all(headers.get("Sforce-Query-Options") == "batchSize=200" for _, headers in queries)
    firsts = [p for p, _ in queries if "?q=" in p]
    assert firsts and all("/services/data/v62.0/queryAll?" in p for p in firsts)
    assert "SELECT Id, IsDeleted, SystemModstamp, Name," in soql_of(firsts[0])
    assert soql_of(firsts[0]).endswith("FROM Account ORDER BY SystemModstamp ASC, Id ASC")
    assert any("/query/01g" in p for p, _ in queries)  # nextRecordsUrl
    assert position["objects"]["Opportunity"]["cursor"] is None


def test_salesforce_incremental_overlap_dedup_and_deletes(h: Harness, state: SalesforceState) -> None:
    a = state.insert("Account", Name="A")
    b = state.insert("Account", Name="B")
    connector = h.connector(includeContacts=False, includeOpportunities=False, overlapSeconds=300)
    rows, position = drain(connector, {})
    assert [r.row_id for r in rows] == [a, b]

    rows, position = drain(connector, position)
    assert rows == []
    assert "WHERE SystemModstamp >= 2025-03-01T11:55:00Z ORDER BY" in soql_of(state.queries()[-1][0])

    state.tick(10)
    state.update(b, Name="B2")
    state.tick(10)
    state.delete(a)
    rows, position = drain(connector, position)
    assert [(r.row_id, r.values and r.values["Name"]) for r in rows] == [(b, "B2"), (a, None)]
    assert rows[1].values is None and rows[1].version == "2025-03-01T12:00:20.000Z"
    assert drain(connector, position)[0] == []


def test_salesforce_late_commit_inside_the_overlap_is_caught(h: Harness, state: SalesforceState) -> None:
    connector = h.connector(includeContacts=False, includeOpportunities=False)
    state.tick(60)
    visible = state.insert("Account", Name="committed first")
    _, position = drain(connector, {})
    # A long transaction commits a record stamped 30 s before the cursor.
    late = state.insert("Account", Name="long transaction")
    state.records[late]["SystemModstamp"] = "2025-03-01T12:00:30.000+0000"
    rows, position = drain(connector, position)
    assert [r.row_id for r in rows] == [late]
    assert visible != late


def test_salesforce_restart_resumes_mid_query_without_duplicates(h: Harness, state: SalesforceState) -> None:
    ids = [state.insert("Account", Name=f"n{n}") for n in range(500)]
    for n in range(len(ids)):
        if n % 100 == 0:
            state.tick(1)
    kw = {"batchSize": 200, "includeContacts": False, "includeOpportunities": False}
    batch = h.connector(**kw).poll({}, 200)
    stored = json.loads(json.dumps(batch.position))
    assert stored["objects"]["Account"]["resume"]["next"].startswith("/services/data/v62.0/query/01g")

    again = h.connector(**kw).poll({}, 200)  # a crash before the position was stored: the same versions
    assert [(r.row_id, r.version) for r in again.rows] == [(r.row_id, r.version) for r in batch.rows]

    rest, position = drain(h.connector(**kw), stored, limit=200)
    seen = [(r.row_id, r.version) for r in [*batch.rows, *rest]]
    assert len(seen) == len(set(seen)) == 500
    assert drain(h.connector(**kw), position)[0] == []

    # An expired query locator restarts from the cursor; dedup keeps it exact.
    state.expire_locators()
    batch = h.connector(**kw).poll({}, 200)
    state.expire_locators()
    rest, _ = drain(h.connector(**kw), json.loads(json.dumps(batch.position)), limit=200)
    seen = [r.row_id for r in [*batch.rows, *rest]]
    assert len(seen) == len(set(seen)) == 500


def test_salesforce_expired_token_reauthenticates_once(
    h: Harness, state: SalesforceState, caplog: pytest.LogCaptureFixture
) -> None:
    caplog.set_level(logging.DEBUG)
    state.insert("Account", Name="A")
    connector = h.connector(includeContacts=False, includeOpportunities=False)
    _, position = drain(connector, {})
    state.expire_tokens()
    state.tick(5)
    state.insert("Account", Name="B")
    rows, position = drain(connector, position)
    assert [r.values["Name"] for r in rows] == ["B"]
    assert len(state.token_requests()) == 2

    # The app's secret was rotated and the token expired: a clear, non-leaking authentication error.
    state.client_secret = "rotated"
    state.expire_tokens()
    with pytest.raises(ApiAuthError) as info:
        connector.poll(position, 10)
    assert "invalid_client" in info.value.message and "client_credentials" in info.value.message
    for text in (info.value.message, caplog.text):
        assert CLIENT_SECRET not in text
        assert not any(t in text for t in ["00D000000000001!AQ"])  # access tokens neither


def test_salesforce_request_limit_exceeded_is_throttling(h: Harness, state: SalesforceState) -> None:
    state.insert("Account", Name="A")
    connector = h.connector(includeContacts=False, includeOpportunities=False)
    state.concurrency_limited(2)
    assert len(drain(connector, {})[0]) == 1
    assert h.sleeps == [0.5, 1.0]

    # The daily total is used up: no point retrying within the call.
    h.sleeps.clear()
    state.api_limit = state.api_calls
    with pytest.raises(ApiThrottledError) as info:
        connector.poll({}, 10)
    assert info.value.retryable and info.value.vendor_code == "REQUEST_LIMIT_EXCEEDED"
    assert h.sleeps == []


def test_salesforce_high_api_usage_pauses_after_one_page(h: Harness, state: SalesforceState) -> None:
    for n in range(450):
        state.insert("Account", Name=f"n{n}")
    connector = h.connector(batchSize=200, includeContacts=False, includeOpportunities=False, maxApiUsagePercent=50)
    state.api_limit = 10
    state.api_calls = 4  # the next call reports 5/10 = 50 %
    batch = connector.poll({}, 5000)
    assert len(batch.rows) == 200 and not batch.more
    assert batch.position["objects"]["Account"]["resume"]
    assert connector.rules.api_usage == (5, 10)
    state.api_limit = 1000
    rows, _ = drain(connector, json.loads(json.dumps(batch.position)))
    assert len(rows) == 250


def test_salesforce_password_flow_against_the_login_url(h: Harness, state: SalesforceState) -> None:
    state.insert("Account", Name="A")
    connector = h.connector(
        {"clientSecret": CLIENT_SECRET, "password": PASSWORD},
        authFlow=None,  # the original's config: username-password
        username=state.username,
        password="secret://sf#password",
        clientSecret="secret://sf#clientSecret",
        loginUrl=h.base_url,
        includeContacts=False,
        includeOpportunities=False,
    )
    assert connector.settings.auth_flow == "password"
    assert len(drain(connector, {})[0]) == 1
    form = state.token_requests()[-1]
    assert form["grant_type"] == "password" and form["username"] == state.username


def test_salesforce_jwt_bearer_flow(state: SalesforceState, base_url: str) -> None:
    from cryptography.hazmat.primitives import serialization
    from cryptography.hazmat.primitives.asymmetric import rsa

    key = rsa.generate_private_key(public_exponent=65537, key_size=2048)
    pem = key.private_bytes(
        serialization.Encoding.PEM, serialization.PrivateFormat.PKCS8, serialization.NoEncryption()
    ).decode()
    state.public_key = key.public_key()
    state.insert("Account", Name="A")
    h = Harness(state, base_url)
    connector = h.connector(
        {"privateKey": pem},
        authFlow="jwt_bearer",
        username=state.username,
        privateKey="secret://sf#privateKey",
        loginUrl=base_url,
        includeContacts=False,
        includeOpportunities=False,
    )
    assert len(drain(connector, {})[0]) == 1
    assert state.token_requests()[-1]["grant_type"] == "urn:ietf:params:oauth:grant-type:jwt-bearer"

    bad = h.connector(
        {"privateKey": "not a key at all"}, authFlow="jwt_bearer", username="u", privateKey="x", loginUrl=base_url
    )
    with pytest.raises(ApiAuthError, match="cannot sign with the configured privateKey") as info:
        bad.poll({}, 1)
    assert "not a key at all" not in info.value.message


# -- actions ----------------------------------------------------------------------------------------------------------


def act(connector: salesforce.SalesforceConnector, action_type: str, params: dict[str, Any]) -> Any:
    return connector.execute(make_action("client-a", 7, "sf", action_type, params), ActionContext())


def test_salesforce_record_actions(h: Harness, state: SalesforceState) -> None:
    connector = h.connector()
    assert [d.action_type for d in connector.supported_actions] == ["create_record", "update_record"]
    created = act(connector, "create_record", {"sobject": "Account", "fields": {"Name": "Acme", "Industry": "Retail"}})
    record_id = created.data["id"]
    assert created.data["sobject"] == "Account" and state.records[record_id]["Name"] == "Acme"
    assert created.server_hlc >> 16 == 1_700_000_000_000

    updated = act(connector, "update_record", {"sobject": "Account", "id": record_id, "fields": {"Name": "Acme 2"}})
    assert updated.data == {"id": record_id, "sobject": "Account", "updated": ["Name"]}
    assert state.records[record_id]["Name"] == "Acme 2"
    patch = [r for r in state.requests if r[0] == "PATCH"]
    assert patch[-1][1] == f"/services/data/v62.0/sobjects/Account/{record_id}"


@pytest.mark.parametrize(
    ("action_type", "params", "message"),
    [
        ("create_record", {"sobject": "Account", "fields": {"Industry": "x"}}, "REQUIRED_FIELD_MISSING"),
        ("create_record", {"sobject": "Account", "fields": {"Bogus__c": 1}}, "INVALID_FIELD"),
        ("create_record", {"sobject": "Account; DROP", "fields": {"Name": "x"}}, "sobject must be"),
        ("update_record", {"sobject": "Account", "id": "001000000000999AAA", "fields": {"Name": "x"}}, "NOT_FOUND"),
        ("update_record", {"sobject": "Account", "id": "../../x", "fields": {"Name": "x"}}, "id must be"),
        ("update_record", {"sobject": "Account", "id": "001000000000999AAA", "fields": {}}, "fields must be"),
    ],
)
def test_salesforce_action_refusals_are_permanent(h: Harness, action_type: str, params: Any, message: str) -> None:
    with pytest.raises(ActionExecutionError, match=message) as info:
        act(h.connector(), action_type, params)
    assert info.value.retryable is False


def test_salesforce_action_retryable_and_unknown_outcomes(h: Harness, state: SalesforceState) -> None:
    connector = h.connector()
    record_id = state.insert("Account", Name="A")
    state.fail(2, 503)  # PATCH is idempotent: retried through
    act(connector, "update_record", {"sobject": "Account", "id": record_id, "fields": {"Name": "B"}})
    assert state.records[record_id]["Name"] == "B"

    state.concurrency_limited(10)
    with pytest.raises(ActionExecutionError) as info:
        act(connector, "update_record", {"sobject": "Account", "id": record_id, "fields": {"Name": "C"}})
    assert info.value.retryable is True
    state._concurrency = 0

    state.fail(1, 500)
    before = len(state.records)
    with pytest.raises(ActionExecutionError, match="may or may not have been applied") as info:
        act(connector, "create_record", {"sobject": "Account", "fields": {"Name": "D"}})
    assert info.value.retryable is False and len(state.records) == before

    with pytest.raises(ActionNotSupportedError):
        act(connector, "delete_record", {"sobject": "Account", "id": record_id})


# -- configuration ----------------------------------------------------------------------------------------------------


def sf_doc(**settings: Any) -> dict[str, Any]:
    return {"name": "s", "type": "salesforce", "salesforce": settings}


def test_salesforce_config_validation_of_auth_flows() -> None:
    base = {"instanceUrl": "https://acme.my.salesforce.com", "clientId": "c"}
    validate_connector_config(sf_doc(**base, authFlow="client_credentials", clientSecret="s"))
    validate_connector_config(sf_doc(**base, authFlow="jwt_bearer", username="u", privateKey="k"))
    with pytest.raises(ConnectorValidationError, match="requires a non-empty clientSecret"):
        validate_connector_config(sf_doc(**base, authFlow="client_credentials"))
    with pytest.raises(ConnectorValidationError, match="requires a non-empty privateKey"):
        validate_connector_config(sf_doc(**base, authFlow="jwt_bearer", username="u"))
    with pytest.raises(ConnectorValidationError, match='authFlow must be "password"'):
        validate_connector_config(sf_doc(**base, authFlow="implicit"))
    # Without authFlow: the original's required fields, unchanged.
    with pytest.raises(ConnectorValidationError, match="requires a non-empty username"):
        validate_connector_config(sf_doc(**base, clientSecret="s"))


def test_salesforce_settings() -> None:
    base = {"instanceUrl": "https://acme.my.salesforce.com/", "clientId": "c", "authFlow": "client_credentials"}
    config = validate_connector_config(sf_doc(**base, clientSecret="secret://x", includeLeads=True))
    settings = salesforce.SalesforceSettings.from_config(config, {"clientSecret": "s3cr3t"})
    assert settings.token_url == "https://acme.my.salesforce.com"
    assert [o.name for o in settings.objects] == ["Account", "Contact", "Opportunity", "Lead"]
    with pytest.raises(ValidationError, match="resolved clientSecret"):
        salesforce.SalesforceSettings.from_config(config, {})
    custom = {**base, "clientSecret": "s", "includeAccounts": False, "includeContacts": False}
    custom["objects"] = [{"sobject": "Case", "table": "sf_cases", "fields": ["Subject", "Owner.Name"]}]
    custom["includeOpportunities"] = False
    settings = salesforce.SalesforceSettings.from_config(validate_connector_config(sf_doc(**custom)), {})
    assert settings.objects == (salesforce.SObject("Case", "sf_cases", ("Subject", "Owner.Name")),)
    sandbox = {"instanceUrl": "https://x", "clientId": "c", "clientSecret": "s", "username": "u", "password": "p"}
    settings = salesforce.SalesforceSettings.from_config(
        validate_connector_config(sf_doc(**sandbox, isSandbox=True)), {}
    )
    assert settings.token_url == "https://test.salesforce.com" and settings.auth_flow == "password"
    assert salesforce.DESCRIPTOR.secret_fields == ("clientSecret", "password", "privateKey")


# -- a misbehaving Salesforce ------------------------------------------------------------------------------------------

ACCOUNTS_ONLY = {"batchSize": 200, "includeContacts": False, "includeOpportunities": False}


def test_salesforce_a_next_records_url_that_never_advances_fails_the_poll(h: Harness, state: SalesforceState) -> None:
    for n in range(300):
        state.insert("Account", Name=f"n{n}")
    calls = {"n": 0}

    def hook(locator: str, offset: int, page: dict[str, Any]) -> dict[str, Any]:
        calls["n"] += 1
        if calls["n"] >= 40:  # so that a connector that does not notice still ends
            return {**page, "done": True, "nextRecordsUrl": None}
        # The same page again: a locator whose next batch is its first one.
        return {**page, "done": False, "nextRecordsUrl": f"/services/data/v62.0/query/{locator}-0"}

    state.page_hook = hook
    with pytest.raises(AdapterError, match="nextRecordsUrl"):
        h.connector(**ACCOUNTS_ONLY).poll({}, 5000)
    assert calls["n"] == 2  # noticed when the second page hands out the same URL again


def test_salesforce_pages_of_records_already_emitted_count_toward_the_poll_limit(
    h: Harness, state: SalesforceState
) -> None:
    for n in range(300):
        state.insert("Account", Name=f"n{n}")
    connector = h.connector(**ACCOUNTS_ONLY)
    _, position = drain(connector, {})
    calls = {"n": 0}

    def hook(locator: str, offset: int, page: dict[str, Any]) -> dict[str, Any]:
        calls["n"] += 1
        if calls["n"] >= 60:
            return {**page, "done": True, "nextRecordsUrl": None}
        # The first page again under a new URL each time (offset 0 written with more zeros).
        return {**page, "done": False, "nextRecordsUrl": f"/services/data/v62.0/query/{locator}-{'0' * calls['n']}"}

    state.page_hook = hook
    batch = connector.poll(position, 1000)
    assert batch.rows == []
    assert batch.more and batch.position["objects"]["Account"]["resume"]
    assert calls["n"] == 5  # 5 pages of 200 records read: the limit of 1000


@pytest.mark.parametrize("stamp", ["yesterday", "2025-03-01T12:00:00.000", "2025-02-30T12:00:00.000+0000"])
def test_salesforce_an_unreadable_system_modstamp_is_a_clear_vendor_error(
    h: Harness, state: SalesforceState, stamp: str
) -> None:
    record_id = state.insert("Account", Name="a")
    state.records[record_id]["SystemModstamp"] = stamp
    with pytest.raises(AdapterError, match="SystemModstamp"):
        h.connector(**ACCOUNTS_ONLY).poll({}, 5000)


def test_salesforce_a_record_with_an_empty_id_is_a_clear_vendor_error(h: Harness, state: SalesforceState) -> None:
    record_id = state.insert("Account", Name="a")
    state.records[record_id]["Id"] = ""
    with pytest.raises(AdapterError, match="without Id"):
        h.connector(**ACCOUNTS_ONLY).poll({}, 5000)
