"""The embedded moto server keeps HTTP/1.1 connections open between requests (``lakesync.local.keep_alive``), and
its answers are framed as before: bodies whole with their length, a HEAD's length kept, errors answered."""

from __future__ import annotations

import http.client
import json
import uuid
from urllib.parse import urlsplit

import pytest

from lakesync.local.access import LocalCredentials, sign
from tests.conftest import FAKE_AWS

CREDENTIALS = LocalCredentials(FAKE_AWS["aws_access_key_id"], FAKE_AWS["aws_secret_access_key"])


def _request(
    conn: http.client.HTTPConnection, endpoint: str, method: str, path: str, body: bytes = b"", **headers: str
) -> http.client.HTTPResponse:
    service = "dynamodb" if "x-amz-target" in headers else "s3"
    signed = sign(CREDENTIALS, method, endpoint + path, body, service=service)
    conn.request(method, path, body=body or None, headers={**signed, **headers})
    return conn.getresponse()


def test_one_connection_carries_many_requests(moto_endpoint: str) -> None:
    conn = http.client.HTTPConnection(urlsplit(moto_endpoint).netloc, timeout=10)
    target = {"x-amz-target": "DynamoDB_20120810.ListTables", "content-type": "application/x-amz-json-1.0"}
    sockets = set()
    for _ in range(5):
        response = _request(conn, moto_endpoint, "POST", "/", b"{}", **target)
        assert response.status == 200
        assert "TableNames" in json.loads(response.read())
        assert response.getheader("Connection") is None  # not "close"
        assert conn.sock is not None
        sockets.add(id(conn.sock))
    assert len(sockets) == 1
    conn.close()


def test_bodies_heads_and_errors_are_framed_on_a_kept_connection(moto_endpoint: str) -> None:
    conn = http.client.HTTPConnection(urlsplit(moto_endpoint).netloc, timeout=10)
    bucket = f"keep-{uuid.uuid4().hex[:12]}"
    assert _request(conn, moto_endpoint, "PUT", f"/{bucket}").read() is not None
    data = bytes(range(256)) * 1000
    put = _request(conn, moto_endpoint, "PUT", f"/{bucket}/a%20b.bin", data)
    assert put.status == 200
    put.read()
    head = _request(conn, moto_endpoint, "HEAD", f"/{bucket}/a%20b.bin")
    assert head.status == 200 and head.getheader("Content-Length") == str(len(data))
    assert head.read() == b""
    got = _request(conn, moto_endpoint, "GET", f"/{bucket}/a%20b.bin")
    assert got.status == 200 and got.read() == data
    missing = _request(conn, moto_endpoint, "GET", f"/{bucket}/missing")
    assert missing.status == 404 and b"NoSuchKey" in missing.read()
    # an unsigned request is refused, and the connection still serves the next one
    conn.request("POST", "/", body=b"{}", headers={"x-amz-target": "DynamoDB_20120810.ListTables"})
    refused = conn.getresponse()
    assert refused.status == 403
    refused.read()
    again = _request(conn, moto_endpoint, "GET", f"/{bucket}/a%20b.bin")
    assert again.status == 200 and again.read() == data
    conn.close()


def test_a_stopped_server_ends_its_kept_connections() -> None:
    from lakesync.local.moto import MotoServer

    server = MotoServer(credentials=CREDENTIALS).start()
    endpoint = server.endpoint_url
    conn = http.client.HTTPConnection(urlsplit(endpoint).netloc, timeout=10)
    target = {"x-amz-target": "DynamoDB_20120810.ListTables", "content-type": "application/x-amz-json-1.0"}
    first = _request(conn, endpoint, "POST", "/", b"{}", **target)
    assert first.status == 200
    first.read()
    server.stop()
    # the connection kept open is ended with the server: no answer comes from a stopped server
    with pytest.raises((http.client.HTTPException, OSError)):
        _request(conn, endpoint, "POST", "/", b"{}", **target).read()
    conn.close()
