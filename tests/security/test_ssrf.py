"""No server-side request forgery (issue 40, item 4).

* Connector and destination hosts are resolved and refused when loopback, link-local, private, CGNAT, unspecified,
  multicast or a metadata address (IPv4-mapped, NAT64 and 6to4 forms included), unless the deployment allows given
  CIDRs (``LAKESYNC_ALLOWED_NETWORKS``) -- which can never open link-local or metadata addresses, not even for
  ``lakesync local``, which allows loopback.
* API connectors need https (``lakesync local`` allows http); the urllib opener has only the https (and there http)
  handler, no ``file:``/``ftp:``/``data:``; redirects are not followed (never off-origin).
* Checked at registration and again when dialling: a name is resolved once, every address checked, and the checked
  address is dialled (the ``Host`` header keeps the name).

Through the Lambda handlers on the moto server, over real HTTP against ``lakesync local``, and in process against
local stand-ins that count what reaches them.
"""

from __future__ import annotations

import ipaddress
import json
import socket
import threading
import urllib.error
import urllib.request
from collections.abc import Iterator
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path
from typing import Any

import pytest

import functions.admin as admin_fn
from functions._runtime import reset_runtime
from lakesync import egress
from lakesync.aws.destinations import open_destination
from lakesync.aws.settings.connectors import ConnectorSettings
from lakesync.aws.settings.env import SettingsError
from lakesync.aws.settings.validators import network_policy
from lakesync.connectors.http_api import ApiRequestError, HttpApiClient, RetryPolicy, UrllibTransport
from lakesync.connectors.secrets import InMemorySecretStore
from lakesync.connectors.sql.postgres import PostgresRunner
from lakesync.core.destinations import DestinationConfig, DestinationType
from lakesync.core.errors import LakeSyncError
from lakesync.core.network import LOCAL_DEVELOPMENT, STRICT, ForbiddenTargetError, NetworkPolicy, parse_networks
from lakesync.local.runner import LocalStack
from tests.functions.conftest import Api, api, aws_env
from tests.integration.test_local_connectors import http
from tests.security.connector_deps import connector_deps

__all__ = ["api", "aws_env"]

pytestmark = pytest.mark.integration

REFUSED = [
    "127.0.0.1",
    "127.8.9.10",
    "::1",
    "10.1.2.3",
    "172.16.0.1",
    "192.168.1.1",
    "100.64.0.1",  # CGNAT
    "fd12:3456::1",  # unique local
    "169.254.169.254",  # EC2 metadata
    "169.254.170.2",  # ECS task credentials
    "169.254.1.1",
    "fe80::1",
    "fd00:ec2::254",  # EC2 metadata over IPv6
    "0.0.0.0",
    "::",
    "224.0.0.1",
    "ff02::1",
    "255.255.255.255",
    "::ffff:169.254.169.254",  # IPv4-mapped
    "::ffff:127.0.0.1",
    "::ffff:10.0.0.1",
    "64:ff9b::a9fe:a9fe",  # NAT64 of 169.254.169.254
    "2002:a9fe:a9fe::1",  # 6to4 of 169.254.169.254
    "::169.254.169.254",  # IPv4-compatible
]
NEVER = [
    "169.254.169.254",
    "169.254.170.2",
    "fe80::1",
    "fd00:ec2::254",
    "::ffff:169.254.169.254",
    "64:ff9b::a9fe:a9fe",
    "0.0.0.0",
]


# -- the address policy -----------------------------------------------------------------------------------------------


@pytest.mark.parametrize("address", REFUSED)
def test_the_default_policy_refuses_non_public_addresses(address: str) -> None:
    assert STRICT.refusal(ipaddress.ip_address(address)) is not None


@pytest.mark.parametrize("address", ["93.184.216.34", "2606:2800:220:1:248:1893:25c8:1946", "::ffff:93.184.216.34"])
def test_the_default_policy_allows_public_addresses(address: str) -> None:
    assert STRICT.refusal(ipaddress.ip_address(address)) is None


@pytest.mark.parametrize("address", NEVER)
def test_no_allowance_opens_link_local_or_metadata(address: str) -> None:
    everything = NetworkPolicy(allowed=parse_networks(["10.0.0.0/8", "127.0.0.0/8", "fc00::/7", "::1/128"]))
    assert everything.refusal(ipaddress.ip_address(address)) is not None
    assert LOCAL_DEVELOPMENT.refusal(ipaddress.ip_address(address)) is not None


def test_an_allowance_opens_only_its_networks() -> None:
    rds = NetworkPolicy(allowed=parse_networks(["10.0.0.0/16"]))
    assert rds.refusal(ipaddress.ip_address("10.0.3.4")) is None
    assert rds.refusal(ipaddress.ip_address("10.1.3.4")) is not None
    assert rds.refusal(ipaddress.ip_address("127.0.0.1")) is not None


@pytest.mark.parametrize("value", ["169.254.0.0/16", "169.254.169.254/32", "0.0.0.0/0", "fe80::/64", "::/0", "x"])
def test_the_setting_cannot_allow_link_local_metadata_or_everything(value: str) -> None:
    with pytest.raises(SettingsError, match="LAKESYNC_ALLOWED_NETWORKS"):
        ConnectorSettings.from_env({"LAKESYNC_ALLOWED_NETWORKS": value})


def test_the_settings_read_the_allowance_and_plain_http() -> None:
    policy = network_policy(
        {"LAKESYNC_ALLOWED_NETWORKS": "10.0.0.0/16, fd00:1::/64", "LAKESYNC_ALLOW_PLAIN_HTTP": "true"}
    )
    assert policy.allowed == parse_networks(["10.0.0.0/16", "fd00:1::/64"]) and policy.allow_http
    assert network_policy({}) == STRICT


# -- local stand-ins that count what reaches them --------------------------------------------------------------------


class _Counting(BaseHTTPRequestHandler):
    def do_GET(self) -> None:
        state = self.server.state  # type: ignore[attr-defined]
        state["hosts"].append(self.headers.get("Host"))
        if state.get("redirect"):
            self.send_response(302)
            self.send_header("Location", state["redirect"])
            self.send_header("Content-Length", "0")
            self.end_headers()
            return
        body = b'{"ok": true}'
        self.send_response(200)
        self.send_header("Content-Type", "application/json")
        self.send_header("Content-Length", str(len(body)))
        self.end_headers()
        self.wfile.write(body)

    def log_message(self, *args: Any) -> None:
        pass


@pytest.fixture
def stand_in() -> Iterator[dict[str, Any]]:
    server = ThreadingHTTPServer(("127.0.0.1", 0), _Counting)
    state: dict[str, Any] = {"hosts": [], "port": server.server_address[1]}
    server.state = state  # type: ignore[attr-defined]
    thread = threading.Thread(target=server.serve_forever, kwargs={"poll_interval": 0.05}, daemon=True)
    thread.start()
    yield state
    server.shutdown()
    server.server_close()


@pytest.fixture
def listener() -> Iterator[dict[str, Any]]:
    """A TCP port on loopback that counts the connections it accepts (a database that must never be dialled)."""
    sock = socket.socket()
    sock.bind(("127.0.0.1", 0))
    sock.listen(8)
    sock.settimeout(0.05)
    state: dict[str, Any] = {"accepted": 0, "port": sock.getsockname()[1], "stop": False}

    def accept() -> None:
        while not state["stop"]:
            try:
                conn, _ = sock.accept()
            except OSError:
                continue
            state["accepted"] += 1
            conn.close()

    thread = threading.Thread(target=accept, daemon=True)
    thread.start()
    yield state
    state["stop"] = True
    thread.join(2)
    sock.close()


@pytest.fixture
def policy() -> Iterator[Any]:
    """Set the process's policy for the test (restored after)."""
    previous = egress.current()
    yield egress.configure
    egress.configure(previous)


def _client(url: str) -> HttpApiClient:
    return HttpApiClient(url, transport=UrllibTransport(), retry=RetryPolicy(max_attempts=1), sleep=lambda s: None)


def test_a_name_resolving_to_loopback_is_refused_and_never_dialled(policy: Any, stand_in: dict[str, Any]) -> None:
    policy(STRICT)
    # "localhost" is a name, not a literal: only its resolution shows it is loopback
    with pytest.raises(ForbiddenTargetError, match="loopback"):
        _client(f"https://localhost:{stand_in['port']}").get_json("/x")
    assert stand_in["hosts"] == []


def test_a_name_with_any_refused_address_is_refused_whole(policy: Any, monkeypatch: pytest.MonkeyPatch) -> None:
    policy(STRICT)
    real = socket.getaddrinfo

    def rebinding(host: str, *args: Any, **kwargs: Any) -> Any:
        if host == "vendor.test":
            return [
                (socket.AF_INET, socket.SOCK_STREAM, 6, "", ("93.184.216.34", 443)),
                (socket.AF_INET, socket.SOCK_STREAM, 6, "", ("169.254.169.254", 443)),
            ]
        return real(host, *args, **kwargs)

    monkeypatch.setattr(socket, "getaddrinfo", rebinding)
    with pytest.raises(ForbiddenTargetError, match="metadata"):
        egress.connect_tcp("vendor.test", 443, 1.0)


def test_the_checked_address_is_dialled_once_resolved_with_the_host_name_kept(
    policy: Any, monkeypatch: pytest.MonkeyPatch, stand_in: dict[str, Any]
) -> None:
    policy(LOCAL_DEVELOPMENT)
    looked_up: list[str] = []
    real = socket.getaddrinfo

    def resolver(host: str, *args: Any, **kwargs: Any) -> Any:
        looked_up.append(host)
        if host == "vendor.test":  # answers loopback once, then (a rebinding) the metadata address
            address = "127.0.0.1" if looked_up.count("vendor.test") == 1 else "169.254.169.254"
            return [(socket.AF_INET, socket.SOCK_STREAM, 6, "", (address, args[0] if args else 80))]
        return real(host, *args, **kwargs)

    monkeypatch.setattr(socket, "getaddrinfo", resolver)
    assert _client(f"http://vendor.test:{stand_in['port']}").get_json("/x") == {"ok": True}
    # One lookup of the name; the connection went to the checked address, the Host header kept the name
    assert looked_up.count("vendor.test") == 1
    assert stand_in["hosts"] == [f"vendor.test:{stand_in['port']}"]
    # And the next connection resolves again: the metadata answer is refused, nothing is sent
    with pytest.raises(ForbiddenTargetError, match="metadata"):
        _client(f"http://vendor.test:{stand_in['port']}").get_json("/x")
    assert len(stand_in["hosts"]) == 1


@pytest.mark.parametrize("url", ["file:///etc/passwd", "ftp://example.com/x", "data:text/plain,x", "gopher://x/"])
def test_only_https_and_local_http_handlers_are_installed(policy: Any, url: str) -> None:
    policy(LOCAL_DEVELOPMENT)
    with pytest.raises(ForbiddenTargetError, match="https"):
        UrllibTransport()("GET", url, {}, None, 1.0)
    with pytest.raises(urllib.error.URLError, match="unknown url type"):
        egress.opener().open(url, timeout=1.0)


def test_plain_http_is_refused_by_default(policy: Any, stand_in: dict[str, Any]) -> None:
    policy(NetworkPolicy(allowed=parse_networks(["127.0.0.0/8"])))  # loopback allowed, http not
    with pytest.raises(ForbiddenTargetError, match="https"):
        _client(f"http://127.0.0.1:{stand_in['port']}").get_json("/x")
    with pytest.raises(urllib.error.URLError, match="unknown url type"):
        egress.opener().open(f"http://127.0.0.1:{stand_in['port']}/x", timeout=1.0)
    assert stand_in["hosts"] == []


def test_a_redirect_is_not_followed(policy: Any, stand_in: dict[str, Any]) -> None:
    policy(LOCAL_DEVELOPMENT)
    target = {"hosts": []}
    stand_in["redirect"] = "http://169.254.169.254/latest/meta-data/"
    with pytest.raises(ApiRequestError, match="302"):
        _client(f"http://127.0.0.1:{stand_in['port']}").get_json("/x")
    assert len(stand_in["hosts"]) == 1 and target["hosts"] == []
    # And an absolute URL handed out by a response must share the base URL's origin
    with pytest.raises(ApiRequestError, match="outside"):
        _client(f"http://127.0.0.1:{stand_in['port']}").get_json("http://127.0.0.2:1/next")


# -- connectors and destinations ----------------------------------------------------------------------------------


@pytest.mark.parametrize(
    "host", ["127.0.0.1", "localhost", "10.0.0.5", "169.254.169.254", "[::ffff:169.254.169.254]", "[fd00:ec2::254]"]
)
def test_a_postgres_connector_at_a_refused_host_is_400_and_never_dialled(
    policy: Any, listener: dict[str, Any], host: str
) -> None:
    from lakesync.gateway.connectors import register_connector

    policy(STRICT)
    deps = connector_deps(InMemorySecretStore())
    bare = host.strip("[]")
    body = {
        "name": "crm",
        "type": "postgres",
        "postgres": {"connectionString": f"host={bare} port={listener['port']} dbname=x user=u password=pw-77"},
    }
    with pytest.raises(ForbiddenTargetError) as refused:
        register_connector(deps, "default", body)
    assert refused.value.status == 400 and "pw-77" not in refused.value.message
    assert listener["accepted"] == 0 and deps.config.list_connectors("default") == []


def test_a_sql_connector_refuses_at_dial_time_when_the_name_moves(
    policy: Any, monkeypatch: pytest.MonkeyPatch, listener: dict[str, Any]
) -> None:
    # Given a runner made while its name resolved to an allowed address
    policy(NetworkPolicy(allowed=parse_networks(["127.0.0.0/8"])))
    runner = PostgresRunner(f"postgresql://u:pw@db.test:{listener['port']}/x", name="crm")
    real = socket.getaddrinfo

    def metadata(host: str, *args: Any, **kwargs: Any) -> Any:
        if host == "db.test":
            return [(socket.AF_INET, socket.SOCK_STREAM, 6, "", ("169.254.169.254", 5432))]
        return real(host, *args, **kwargs)

    monkeypatch.setattr(socket, "getaddrinfo", metadata)
    # When it connects, Then the new answer is refused and nothing is dialled
    with pytest.raises(ForbiddenTargetError, match="metadata"):
        runner.query("SELECT 1")
    assert listener["accepted"] == 0


@pytest.mark.parametrize(
    "url", ["postgresql://169.254.169.254/x", "postgresql://[::ffff:a9fe:a9fe]/x", "mysql://169.254.170.2/x"]
)
def test_a_destination_at_a_metadata_address_is_refused_even_for_local_development(policy: Any, url: str) -> None:
    policy(LOCAL_DEVELOPMENT)
    kind = DestinationType.MYSQL if url.startswith("mysql") else DestinationType.POSTGRES
    with pytest.raises(ForbiddenTargetError):
        open_destination(DestinationConfig("d", kind, url=url), None)


def test_a_destination_on_loopback_is_refused_by_default_and_dialled_never(
    policy: Any, listener: dict[str, Any]
) -> None:
    policy(STRICT)
    config = DestinationConfig("d", DestinationType.POSTGRES, url=f"postgresql://u@localhost:{listener['port']}/x")
    destination = open_destination(config, None)  # connections are lazy: the first apply dials
    from lakesync.core.schema import parse_table_schema

    schema = parse_table_schema({"table": "todos", "columns": [{"name": "title", "type": "string"}]})
    with pytest.raises(LakeSyncError, match="loopback"):
        destination.apply(schema, [])
    assert listener["accepted"] == 0


# -- through the Lambda handlers on moto ------------------------------------------------------------------------------


def _jira(domain: str) -> dict[str, Any]:
    return {"name": "jira", "type": "jira", "jira": {"domain": domain, "email": "e@example.com", "apiToken": "tok-1"}}


@pytest.mark.parametrize(
    "domain",
    [
        "http://169.254.169.254/latest/meta-data",
        "https://169.254.169.254",
        "https://[::ffff:169.254.169.254]",
        "https://[fd00:ec2::254]",
        "https://169.254.170.2/v2/credentials",
        "file:///etc/passwd",
    ],
)
def test_lambda_jira_at_a_metadata_address_is_400(api: Api, domain: str) -> None:
    before = api.items()
    reply = api.call(admin_fn, api.event("admin_connectors_post", token=api.admin_token(), body=_jira(domain)))
    assert reply.status == 400 and reply.json()["code"] == "VALIDATION_ERROR", reply.body
    assert api.items() == before


def test_lambda_a_deployment_without_allowances_refuses_loopback_and_http(
    api: Api, monkeypatch: pytest.MonkeyPatch, stand_in: dict[str, Any], listener: dict[str, Any]
) -> None:
    # Given a deployment with the default policy (no allowed networks, no plain http)
    monkeypatch.delenv("LAKESYNC_ALLOWED_NETWORKS")
    monkeypatch.delenv("LAKESYNC_ALLOW_PLAIN_HTTP")
    reset_runtime()
    for body in (
        _jira(f"http://127.0.0.1:{stand_in['port']}"),
        _jira(f"https://localhost:{stand_in['port']}"),
        {
            "name": "crm",
            "type": "postgres",
            "postgres": {"connectionString": f"postgresql://u:pw@127.0.0.1:{listener['port']}/x"},
        },
    ):
        reply = api.call(admin_fn, api.event("admin_connectors_post", token=api.admin_token(), body=body))
        assert reply.status == 400, reply.body
    assert stand_in["hosts"] == [] and listener["accepted"] == 0


# -- over real HTTP against lakesync local ----------------------------------------------------------------------------


@pytest.fixture(scope="module")
def stack(tmp_path_factory: pytest.TempPathFactory) -> Iterator[LocalStack]:
    with LocalStack(Path(tmp_path_factory.mktemp("ssrf")), port=0, persist=False, materialise=False) as running:
        yield running


def _post(stack: LocalStack, path: str, body: Any) -> tuple[int, dict[str, Any]]:
    status, answer = http(stack, "POST", path, body, sub="ops", role="admin")
    return int(status), dict(answer)


@pytest.mark.parametrize(
    "domain", ["http://169.254.169.254/latest/meta-data", "http://[fe80::1]", "http://[::ffff:169.254.169.254]"]
)
def test_http_local_allows_loopback_but_never_link_local(stack: LocalStack, domain: str) -> None:
    status, body = _post(stack, "/v1/admin/connectors/default", _jira(domain))
    assert status == 400 and body["code"] == "VALIDATION_ERROR", body


def test_http_local_salesforce_at_the_metadata_address_is_400(stack: LocalStack) -> None:
    doc = {
        "name": "sf",
        "type": "salesforce",
        "salesforce": {
            "authFlow": "client_credentials",
            "instanceUrl": "http://169.254.169.254",
            "clientId": "id",
            "clientSecret": "cs-secret-1",
        },
    }
    status, body = _post(stack, "/v1/admin/connectors/default", doc)
    assert status == 400 and "cs-secret-1" not in json.dumps(body), body
