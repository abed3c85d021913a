"""The embedded default is not a back door (issue 40, item 7), against real ``lakesync local`` stacks.

* moto (every table, bucket and secret) listens on 127.0.0.1 whatever ``--host`` says, and answers only requests
  SigV4-signed with its random per-instance credential; the handlers, worker processes and the stack's own clients
  are handed that credential.
* The sockets' management API answers only peers on this machine, signed with the same credential.
* ``--host`` other than loopback prints a warning saying what is exposed.

What is and is not exercised: the machine's non-loopback addresses are never dialled (this workplace forbids
traffic to them), so "moto is not reachable from elsewhere" is shown by the listening socket's own address
(127.0.0.1, not 0.0.0.0), and the management API's refusal of a remote peer by handing the front's server a
connection whose peer address is 192.0.2.10 (TEST-NET-1) at the accept boundary -- the real request path from there
on -- plus the peer rule itself.
"""

from __future__ import annotations

import json
import socket
import stat
import subprocess
import sys
import urllib.error
import urllib.request
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import boto3
import pytest
from botocore.exceptions import ClientError

from lakesync.auth import mint_token
from lakesync.local.access import LocalCredentials, SignatureRefused, is_loopback_host, sign, verify
from lakesync.local.moto import MotoServer
from lakesync.local.runner import AWS_CONFIG_FILE, LocalStack, aws_profile, exposure_warning
from lakesync.local.websocket import is_local_peer

pytestmark = pytest.mark.integration

OTHER_MACHINE = "192.0.2.10"  # TEST-NET-1: documentation only, never routed


@pytest.fixture(scope="module")
def exposed(tmp_path_factory: pytest.TempPathFactory) -> Iterator[LocalStack]:
    """A stack started as ``lakesync local --host 0.0.0.0`` would start it, with one worker process."""
    data = Path(tmp_path_factory.mktemp("exposed"))
    with LocalStack(data, host="0.0.0.0", port=0, persist=False, materialise=False, workers=1) as running:
        yield running


def _status(url: str, *, method: str = "GET", headers: dict[str, str] | None = None, body: bytes | None = None) -> int:
    request = urllib.request.Request(url, data=body, method=method, headers=headers or {})
    try:
        with urllib.request.urlopen(request, timeout=30) as response:
            return int(response.status)
    except urllib.error.HTTPError as exc:
        return exc.code


# --- moto: loopback only, and only its own credential --------------------------------------------------------------


def test_moto_listens_on_loopback_while_the_front_listens_everywhere(exposed: LocalStack) -> None:
    assert exposed._moto is not None and exposed._front is not None
    assert exposed._moto._server is not None and exposed._front._server is not None
    assert exposed._front._server.socket.getsockname()[0] == "0.0.0.0"
    assert exposed._moto._server.socket.getsockname()[0] == "127.0.0.1"
    assert exposed.aws_endpoint.startswith("http://127.0.0.1:")


def test_a_moto_server_refuses_a_non_loopback_address() -> None:
    for host in ("0.0.0.0", "::", OTHER_MACHINE):
        with pytest.raises(ValueError, match="loopback only"):
            MotoServer(host)


def test_each_stack_has_its_own_random_credential(exposed: LocalStack) -> None:
    other = MotoServer()
    mine = exposed.aws_kwargs()

    assert mine["aws_access_key_id"] != other.credentials.access_key_id
    assert mine["aws_secret_access_key"] != other.credentials.secret_access_key
    assert (mine["aws_access_key_id"], mine["aws_secret_access_key"]) != ("testing", "testing")


@pytest.mark.parametrize(
    ("credentials", "code"),
    [
        ({"aws_access_key_id": "testing", "aws_secret_access_key": "testing"}, "InvalidClientTokenId"),
        ({"aws_secret_access_key": "not-the-instance-secret"}, "SignatureDoesNotMatch"),
    ],
    ids=["moto-default-credentials", "right-key-wrong-secret"],
)
@pytest.mark.parametrize("service", ["dynamodb", "s3", "sqs", "secretsmanager"])
def test_moto_refuses_requests_signed_with_other_credentials(
    exposed: LocalStack, service: str, credentials: dict[str, str], code: str
) -> None:
    client = boto3.client(service, **{**exposed.aws_kwargs(), **credentials})
    calls = {
        "dynamodb": lambda: client.list_tables(),
        "s3": lambda: client.list_buckets(),
        "sqs": lambda: client.list_queues(),
        "secretsmanager": lambda: client.list_secrets(),
    }

    with pytest.raises(ClientError) as refused:
        calls[service]()

    assert refused.value.response["ResponseMetadata"]["HTTPStatusCode"] == 403
    assert refused.value.response["Error"]["Code"] == code


def test_moto_refuses_unsigned_requests_to_its_control_api_and_keeps_its_data(exposed: LocalStack) -> None:
    endpoint = exposed.aws_endpoint

    assert _status(f"{endpoint}/moto-api/data.json") == 403
    assert _status(f"{endpoint}/moto-api/reset", method="POST", body=b"") == 403
    assert _status(f"{endpoint}/", method="POST", body=b"Action=ListQueues") == 403
    deltas = boto3.client("dynamodb", **exposed.aws_kwargs()).describe_table(TableName="lakesync-deltas")
    assert deltas["Table"]["TableStatus"] == "ACTIVE"


def test_the_run_writes_its_credential_only_where_its_jwt_key_is(exposed: LocalStack) -> None:
    profile = exposed.data_dir / AWS_CONFIG_FILE

    assert aws_profile(exposed.data_dir) == exposed.aws_kwargs()
    assert stat.S_IMODE(profile.stat().st_mode) == 0o600
    assert stat.S_IMODE(exposed.data_dir.stat().st_mode) == 0o700
    dynamodb = boto3.client("dynamodb", **aws_profile(exposed.data_dir))
    assert dynamodb.describe_table(TableName="lakesync-deltas")["Table"]["TableStatus"] == "ACTIVE"


def test_the_handlers_in_a_worker_process_reach_moto_with_the_instance_credential(exposed: LocalStack) -> None:
    token = mint_token("alice", "default", exposed.secret)
    url = f"{exposed.url.replace('0.0.0.0', '127.0.0.1')}/v1/sync/default/pull?clientId=alice&since=0"

    assert _status(url, headers={"Authorization": f"Bearer {token}"}) == 200


# --- The sockets' management API -----------------------------------------------------------------------------------


def _management(stack: LocalStack, credentials: dict[str, str] | None = None) -> Any:
    kwargs = {**stack.aws_kwargs(), **(credentials or {})}
    kwargs["endpoint_url"] = stack.url.replace("0.0.0.0", "127.0.0.1")
    return boto3.client("apigatewaymanagementapi", **kwargs)


def test_the_management_api_serves_this_machine_signed_with_the_instance_credential(exposed: LocalStack) -> None:
    with pytest.raises(ClientError) as gone:
        _management(exposed).post_to_connection(ConnectionId="nobody-here0000=", Data=b"x")

    assert gone.value.response["Error"]["Code"] == "GoneException"  # served: no such session


@pytest.mark.parametrize(
    "credentials",
    [
        {"aws_access_key_id": "testing", "aws_secret_access_key": "testing"},
        {"aws_secret_access_key": "not-the-instance-secret"},
    ],
    ids=["other-credentials", "wrong-secret"],
)
def test_the_management_api_refuses_other_credentials(exposed: LocalStack, credentials: dict[str, str]) -> None:
    with pytest.raises(ClientError) as refused:
        _management(exposed, credentials).post_to_connection(ConnectionId="nobody-here0000=", Data=b"x")

    assert refused.value.response["ResponseMetadata"]["HTTPStatusCode"] == 403


def test_the_management_api_refuses_an_unsigned_call(exposed: LocalStack) -> None:
    url = f"{exposed.url.replace('0.0.0.0', '127.0.0.1')}/@connections/nobody-here0000%3D"

    assert _status(url, method="POST", body=b"x") == 403
    assert _status(url, method="DELETE") == 403


def test_the_management_api_refuses_a_peer_on_another_machine_even_when_signed(exposed: LocalStack) -> None:
    assert exposed._front is not None and exposed._front._server is not None
    credentials = LocalCredentials(
        exposed.aws_kwargs()["aws_access_key_id"], exposed.aws_kwargs()["aws_secret_access_key"]
    )
    url = f"{exposed.url}/@connections/nobody-here0000%3D"
    headers = sign(credentials, "DELETE", url, service="execute-api")
    request = "".join(f"{k}: {v}\r\n" for k, v in headers.items())
    ours, theirs = socket.socketpair()
    with ours, theirs:
        # The server takes the connection as if accepted from another machine; the rest is its real request path.
        exposed._front._server.process_request(theirs, (OTHER_MACHINE, 40000))
        ours.sendall(f"DELETE /@connections/nobody-here0000%3D HTTP/1.1\r\n{request}Content-Length: 0\r\n\r\n".encode())
        ours.settimeout(30)
        answer = ours.recv(65536).decode("latin-1")

    assert answer.startswith("HTTP/1.1 403 ")
    assert "ForbiddenException" in answer


@pytest.mark.parametrize(
    ("peer", "local", "same_machine"),
    [
        ("127.0.0.1", "127.0.0.1", True),
        ("127.0.0.5", "0.0.0.0", True),
        ("::1", "::1", True),
        ("10.1.2.3", "10.1.2.3", True),  # this machine, through its own address
        (OTHER_MACHINE, "10.1.2.3", False),
        (OTHER_MACHINE, "", False),
        ("", "", False),
    ],
)
def test_the_peer_rule(peer: str, local: str, same_machine: bool) -> None:
    assert is_local_peer(peer, local) is same_machine


# --- --host ------------------------------------------------------------------------------------------------------


def test_lakesync_local_warns_when_the_host_is_not_loopback(tmp_path: Path) -> None:
    command = [sys.executable, "-m", "lakesync.cli", "local", "--host", "0.0.0.0", "--port", "0"]
    command += ["--lake-interval", "0", "--workers", "0", "--data-dir", str(tmp_path / "data")]
    stderr_path = tmp_path / "stderr.txt"
    lines = []
    with (
        stderr_path.open("w") as stderr,
        subprocess.Popen(command, stdout=subprocess.PIPE, stderr=stderr, text=True) as process,
    ):
        assert process.stdout is not None
        try:
            for line in process.stdout:
                lines.append(line)
                if line.startswith("Ctrl-C to stop"):
                    break
        finally:
            process.terminate()
            process.wait(timeout=60)
    err = stderr_path.read_text()

    assert "WARNING: --host 0.0.0.0 serves the gateway API and its real-time socket" in err
    assert "no sync rules by default" in err and "stay on 127.0.0.1" in err
    banner = next(line for line in lines if line.startswith("LakeSync local gateway"))
    assert "AWS/moto at http://127.0.0.1:" in banner
    # And the banner says plainly that the gateway, without rules, is open
    assert any(
        line.startswith("gateway 'default' has no sync rules: any valid token reads and writes") for line in lines
    )


@pytest.mark.parametrize("host", ["127.0.0.1", "localhost", "::1", "127.0.0.2"])
def test_no_warning_for_a_loopback_host(host: str, tmp_path: Path) -> None:
    assert is_loopback_host(host)
    assert exposure_warning(host, tmp_path) is None
    assert exposure_warning("0.0.0.0", tmp_path) is not None


def test_signed_requests_name_no_secret(exposed: LocalStack) -> None:
    credentials = LocalCredentials.generate()
    headers = sign(credentials, "POST", f"{exposed.aws_endpoint}/moto-api/reset")

    assert credentials.secret_access_key not in json.dumps(headers)
    assert credentials.secret_access_key not in repr(credentials)


def test_moto_refuses_a_presigned_url_even_of_its_own_credential(exposed: LocalStack) -> None:
    s3 = boto3.client("s3", **exposed.aws_kwargs())
    url = s3.generate_presigned_url("list_objects_v2", Params={"Bucket": "lakesync-checkpoints"}, ExpiresIn=60)

    assert "Signature=" in url
    assert _status(url) == 403


@pytest.mark.parametrize(
    ("target", "tamper"),
    [
        ("/bucket/a%20b/c%2Bd%3De.txt?versionId=1&acl", None),
        ("/?Action=ListQueues&Version=2012-11-05", None),
        ("/bucket/key?b=2&a=1", "body"),
        ("/bucket/key?b=2&a=1", "query"),
        ("/bucket/key", "header"),
    ],
)
def test_a_signature_covers_method_path_query_headers_and_body(target: str, tamper: str | None) -> None:
    credentials = LocalCredentials.generate()
    body = b'{"TableName": "t"}'
    signed = {k.lower(): v for k, v in sign(credentials, "PUT", f"http://127.0.0.1:1{target}", body).items()}
    if tamper == "body":
        body += b" "
    elif tamper == "query":
        target = target.replace("a=1", "a=2")
    elif tamper == "header":
        signed["x-amz-date"] = "20200101T000000Z"

    if tamper is None:
        verify(credentials, "PUT", target, signed, body)
    else:
        with pytest.raises(SignatureRefused) as refused:
            verify(credentials, "PUT", target, signed, body)
        assert refused.value.code == ("XAmzContentSHA256Mismatch" if tamper == "body" else "SignatureDoesNotMatch")
