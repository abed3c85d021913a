"""``ManagementApiSender`` against a stand-in of API Gateway's management API (``tests/management_api.py``; moto does
not serve it): the requests boto3 makes, 410 as a gone session, 429 retried a bounded number of times."""

from __future__ import annotations

from collections.abc import Iterator
from typing import Any

import boto3
import pytest

from lakesync.aws.ws_sender import ManagementApiSender, management_api_client
from lakesync.core.errors import AdapterError, RateLimitedError
from tests.management_api import ManagementApi, management_api

FAKE = {"region_name": "us-east-1", "aws_access_key_id": "testing", "aws_secret_access_key": "testing"}
CONNECTION = "L0SM9cOFvHcCIhw="  # API Gateway's ids end in "=": boto3 must encode it in the path


@pytest.fixture(scope="module")
def server() -> Iterator[ManagementApi]:
    with management_api() as state:
        yield state


@pytest.fixture
def api(server: ManagementApi, monkeypatch: pytest.MonkeyPatch) -> ManagementApi:
    for key, value in {
        "AWS_DEFAULT_REGION": "us-east-1",
        "AWS_ACCESS_KEY_ID": "t",
        "AWS_SECRET_ACCESS_KEY": "t",
    }.items():
        monkeypatch.setenv(key, value)
    server.reset()
    server.connect(CONNECTION)
    return server


def sender(api: ManagementApi, **kwargs: Any) -> tuple[ManagementApiSender, list[float]]:
    waits: list[float] = []
    return ManagementApiSender(api.url, sleep=waits.append, **kwargs), waits


def test_send_posts_the_bytes_to_the_connection(api: ManagementApi) -> None:
    # Given a sender on the stage's callback URL (its client made on first use)
    send, waits = sender(api)
    # When it sends binary data and base64 text to an open session
    assert send.send(CONNECTION, b"\x03\x00\xff") is True
    assert send.send(CONNECTION, b"AwD/") is True
    # Then the session got both messages, byte for byte, by PostToConnection, with no retry
    assert api.sent(CONNECTION) == [b"\x03\x00\xff", b"AwD/"]
    assert api.requests == [("POST", CONNECTION), ("POST", CONNECTION)]
    assert waits == []


def test_a_gone_connection_is_false_and_closing_it_is_no_error(api: ManagementApi) -> None:
    send, _ = sender(api)
    assert send.send("gone-connection=", b"x") is False
    send.close("gone-connection=")
    assert api.requests == [("POST", "gone-connection="), ("DELETE", "gone-connection=")]


def test_close_deletes_the_connection(api: ManagementApi) -> None:
    send, _ = sender(api)
    send.close(CONNECTION)
    assert api.closed == [CONNECTION]
    assert send.send(CONNECTION, b"x") is False


def test_a_throttled_send_is_retried_with_back_off(api: ManagementApi) -> None:
    # Given the API throttles the next call once
    api.throttle(CONNECTION, 1)
    send, waits = sender(api)
    # When a message is sent
    assert send.send(CONNECTION, b"x") is True
    # Then it was retried once after a short wait, and delivered once
    assert api.requests == [("POST", CONNECTION)] * 2
    assert len(waits) == 1 and 0 <= waits[0] <= 0.05
    assert api.sent(CONNECTION) == [b"x"]


def test_throttling_past_the_attempts_raises(api: ManagementApi) -> None:
    api.throttle(CONNECTION, 10)
    send, waits = sender(api, attempts=3)
    with pytest.raises(RateLimitedError):
        send.send(CONNECTION, b"x")
    assert len(api.requests) == 3 and len(waits) == 2
    with pytest.raises(RateLimitedError):
        send.close(CONNECTION)


def test_other_failures_raise_at_once(api: ManagementApi) -> None:
    # Given a callback URL outside the stage (the API answers 404)
    send = ManagementApiSender(api.url.rsplit("/", 1)[0] + "/other-stage", sleep=lambda _s: None)
    with pytest.raises(AdapterError):
        send.send(CONNECTION, b"x")
    # And one nothing listens on
    with pytest.raises(AdapterError):
        ManagementApiSender("http://127.0.0.1:9/prod").send(CONNECTION, b"x")


def test_an_injected_client_is_used(api: ManagementApi) -> None:
    client = boto3.client("apigatewaymanagementapi", endpoint_url=api.url, **FAKE)
    send = ManagementApiSender("https://unused.example/prod", client=client)
    assert send.send(CONNECTION, b"y") and api.sent(CONNECTION) == [b"y"]
    assert send.client is client
    # And GetConnection works on the stand-in as on API Gateway (the local front's route mirrors it)
    assert client.get_connection(ConnectionId=CONNECTION)["Identity"]["SourceIp"] == "127.0.0.1"
    assert management_api_client(api.url).meta.config.retries["total_max_attempts"] == 1
