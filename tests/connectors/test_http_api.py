"""The vendor HTTP client on a scripted transport: retry budgets, Retry-After forms, non-idempotent requests,
origin checks, and redaction of secrets from messages and logs."""

from __future__ import annotations

import logging
import socket
import time
from collections.abc import Iterator, Mapping
from datetime import timedelta
from http.server import BaseHTTPRequestHandler
from typing import Any

import pytest

from lakesync.connectors.api_cursor import IncrementalState, parse_time
from lakesync.connectors.http_api import (
    ApiOutcomeUnknownError,
    ApiRequestError,
    ApiThrottledError,
    ApiUnavailableError,
    HttpApiClient,
    HttpResponse,
    Redactor,
    RetryPolicy,
    UrllibTransport,
)
from tests.connectors.vendor_http import StateServer, serving

SECRET = "s3cr3t/with+chars"


class Script:
    """A transport answering from a list (an exception instance is raised)."""

    def __init__(self, *answers: HttpResponse | OSError) -> None:
        self.answers = list(answers)
        self.sent: list[tuple[str, str, Mapping[str, str], bytes | None]] = []

    def __call__(self, method: str, url: str, headers: Mapping[str, str], body: bytes | None, timeout: float) -> Any:
        self.sent.append((method, url, headers, body))
        answer = self.answers.pop(0)
        if isinstance(answer, OSError):
            raise answer
        return answer


def resp(status: int, body: bytes = b"{}", **headers: str) -> HttpResponse:
    return HttpResponse(status, {k.lower().replace("_", "-"): v for k, v in headers.items()}, body)


def client(transport: Script, sleeps: list[float], **kw: Any) -> HttpApiClient:
    return HttpApiClient(
        "https://api.example.com/",
        transport=transport,
        sleep=sleeps.append,
        jitter=lambda: 0.5,
        wall_clock=lambda: 1_000_000.0,
        redactor=Redactor([SECRET]),
        retry=RetryPolicy(max_attempts=3, base_delay=1.0, max_retry_after=30.0, max_total_sleep=40.0),
        **kw,
    )


def test_retry_after_as_http_date_and_seconds() -> None:
    sleeps: list[float] = []
    # 1,000,010 s after the epoch is Mon, 12 Jan 1970 13:46:50 GMT.
    t = Script(resp(429, retry_after="Mon, 12 Jan 1970 13:46:50 GMT"), resp(429, retry_after="2"), resp(200))
    assert client(t, sleeps).request("GET", "/x").status == 200
    assert sleeps == [10.0, 2.0]


def test_throttling_and_5xx_budgets_are_bounded() -> None:
    sleeps: list[float] = []
    with pytest.raises(ApiThrottledError, match="still throttled after 3 attempts"):
        client(Script(resp(429), resp(429), resp(429)), sleeps).request("GET", "/x")
    assert sleeps == [0.5, 1.0]  # jittered exponential backoff without Retry-After
    sleeps.clear()
    with pytest.raises(ApiUnavailableError, match="HTTP 503; after 3 attempts"):
        client(Script(resp(503), resp(503), resp(503)), sleeps).request("GET", "/x")
    sleeps.clear()
    # Total sleep is capped: 25 + 25 > 40, so the second wait is not taken.
    with pytest.raises(ApiThrottledError):
        client(Script(resp(429, retry_after="25"), resp(429, retry_after="25")), sleeps).request("GET", "/x")
    assert sleeps == [25.0]


def test_network_failures_retry_idempotent_requests_only() -> None:
    sleeps: list[float] = []
    t = Script(ConnectionResetError("reset"), TimeoutError("timed out"), resp(200))
    assert client(t, sleeps).request("PUT", "/x", json_body={"a": 1}).status == 200
    assert len(t.sent) == 3

    t = Script(TimeoutError("timed out"))
    with pytest.raises(ApiOutcomeUnknownError, match="may or may not have been applied") as info:
        client(t, sleeps).request("POST", "/create", json_body={"a": 1})
    assert info.value.retryable is False and len(t.sent) == 1
    # Refused: surely not applied, so even a create is retried.
    t = Script(ConnectionRefusedError("refused"), resp(201))
    assert client(t, sleeps).request("POST", "/create", json_body={}).status == 201


def test_absolute_urls_must_stay_on_the_origin() -> None:
    t = Script(resp(200))
    c = client(t, [])
    c.request("GET", "https://api.example.com/next?page=2")
    with pytest.raises(ApiRequestError, match="refusing a URL outside"):
        c.request("GET", "https://evil.example.com/steal")
    assert len(t.sent) == 1


def test_secrets_are_redacted_from_messages_and_logs(caplog: pytest.LogCaptureFixture) -> None:
    caplog.set_level(logging.DEBUG)
    body = b'{"message": "bad secret s3cr3t/with+chars or s3cr3t%2Fwith%2Bchars"}'
    t = Script(OSError(f"proxy said {SECRET}"), resp(400, body))
    with pytest.raises(ApiRequestError) as info:
        client(t, []).request("GET", "/x", params={"token": SECRET})
    assert "***" in info.value.message
    for text in (info.value.message, caplog.text):
        assert SECRET not in text and "s3cr3t%2Fwith%2Bchars" not in text
    assert "token=" not in info.value.message  # query strings are never quoted


def test_urllib_transport_reports_refused_connections_as_such() -> None:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        port = s.getsockname()[1]
    with pytest.raises(ConnectionRefusedError):
        UrllibTransport()("GET", f"http://127.0.0.1:{port}/", {}, None, 2.0)


def test_incremental_state_round_trip_and_pruning() -> None:
    state = IncrementalState()
    assert state.accept("a", parse_time("2025-03-01T10:00:00.000+0000"))
    assert not state.accept("a", parse_time("2025-03-01T21:00:00.000+1100"))  # the same instant, another zone
    assert state.accept("b", parse_time("2025-03-01T10:05:30.250Z"))
    assert state.cursor == "2025-03-01T10:05:30.250Z"
    state.prune(timedelta(minutes=2), timedelta(minutes=1))
    assert set(state.recent) == {"b"}
    assert IncrementalState.from_json(state.to_json()) == state
    assert IncrementalState.from_json({"cursor": "garbage"}) == IncrementalState()


def test_vendor_json_is_made_fit_for_a_delta() -> None:
    body = b'{"cut": "ab\\ud83d", "pair": "\\ud83d\\ude00", "\\udc00key": [NaN, Infinity, -Infinity, 1.5]}'
    assert HttpResponse(200, {}, body).json() == {
        "cut": "ab\ufffd",
        "pair": "\U0001f600",
        "\ufffdkey": [None, None, None, 1.5],
    }


def test_vendor_json_nested_too_deeply_reads_as_not_json() -> None:
    assert HttpResponse(200, {}, b"[" * 200_000 + b"]" * 200_000).json() is None


class _Misbehaving(BaseHTTPRequestHandler):
    """``/drip``: a body trickled one byte at a time; ``/huge``: a body far larger than any page, without a length."""

    server: StateServer[list[str]]

    def log_message(self, format: str, *args: Any) -> None:
        pass

    def do_GET(self) -> None:
        self.server.state.append(self.path)
        self.send_response(200)
        self.send_header("Content-Type", "application/json")
        try:
            if self.path == "/drip":
                self.send_header("Content-Length", "400")
                self.end_headers()
                for _ in range(400):
                    self.wfile.write(b" ")
                    self.wfile.flush()
                    time.sleep(0.01)
            else:
                self.send_header("Connection", "close")
                self.end_headers()
                chunk = b" " * 65536
                for _ in range(160):  # 10 MiB
                    self.wfile.write(chunk)
        except OSError:  # the client gave up: what the test wants
            pass


@pytest.fixture
def misbehaving() -> Iterator[tuple[str, list[str]]]:
    served: list[str] = []
    with serving(_Misbehaving, served, lambda url: None) as url:
        yield url, served


def test_a_response_trickled_slower_than_the_deadline_times_out(misbehaving: tuple[str, list[str]]) -> None:
    url, _ = misbehaving
    transport = UrllibTransport(max_seconds=0.5)
    # Each byte arrives well within the 2 s socket timeout; only a deadline on the whole response ends it.
    with pytest.raises(TimeoutError, match=r"not complete within 0\.5 s"):
        transport("GET", url + "/drip", {}, None, 2.0)


def test_a_response_larger_than_the_cap_fails_once_without_retries(misbehaving: tuple[str, list[str]]) -> None:
    url, served = misbehaving
    c = HttpApiClient(url, transport=UrllibTransport(max_body_bytes=1 << 20), sleep=lambda s: None)
    with pytest.raises(ApiUnavailableError, match="larger than"):
        c.request("GET", "/huge")
    assert served == ["/huge"]
