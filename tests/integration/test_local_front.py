"""LocalFront over real HTTP on 127.0.0.1: requests reach the handler as API Gateway v2 events and its results
come back as API Gateway would send them, including failures, size limits, keep-alive and concurrency.
"""

from __future__ import annotations

import base64
import http.client
import json
import logging
import socket
import threading
import time
import urllib.error
import urllib.request
from concurrent.futures import ThreadPoolExecutor
from typing import Any

import pytest
from aws_lambda_powertools.event_handler import APIGatewayHttpResolver, Response

from lakesync.local.front import API_GATEWAY_MAX_BODY_BYTES, INTERNAL_ERROR_BODY, LambdaContext, LocalFront

pytestmark = pytest.mark.integration

SECRET = "do-not-leak-this-detail"


class EchoHandler:
    """Echoes the request back; a few paths misbehave on purpose. Records every event it receives."""

    def __init__(self, delay: float = 0.0) -> None:
        self.delay = delay
        self.events: list[dict[str, Any]] = []
        self.contexts: list[LambdaContext] = []
        self.active = 0
        self.max_active = 0
        self._lock = threading.Lock()

    def __call__(self, event: dict[str, Any], context: LambdaContext) -> Any:
        with self._lock:
            self.events.append(event)
            self.contexts.append(context)
            self.active += 1
            self.max_active = max(self.max_active, self.active)
        try:
            if self.delay:
                time.sleep(self.delay)
            return self._respond(event)
        finally:
            with self._lock:
                self.active -= 1

    def _respond(self, event: dict[str, Any]) -> Any:
        path = event["rawPath"]
        if path == "/boom":
            raise RuntimeError(SECRET)
        if path == "/malformed":
            return {"statusCode": "not-a-status"}
        if path == "/missing":
            return {"statusCode": 404, "headers": {"content-type": "application/json"}, "body": '{"code":"NOT_FOUND"}'}
        if path == "/bare":
            return {"bare": True}
        if path == "/bytes":
            raw = base64.b64decode(event["body"]) if event.get("isBase64Encoded") else event.get("body", "").encode()
            return {
                "statusCode": 200,
                "headers": {"content-type": event["headers"].get("content-type", "application/octet-stream")},
                "body": base64.b64encode(raw).decode("ascii"),
                "isBase64Encoded": True,
            }
        echo = {
            "method": event["requestContext"]["http"]["method"],
            "path": path,
            "query": event.get("queryStringParameters", {}),
            "headers": event["headers"],
            "body": event.get("body"),
            "isBase64Encoded": event["isBase64Encoded"],
        }
        return {"statusCode": 200, "headers": {"content-type": "application/json"}, "body": json.dumps(echo)}


@pytest.fixture
def echo() -> EchoHandler:
    return EchoHandler()


@pytest.fixture
def front(echo: EchoHandler):
    with LocalFront(echo) as running:
        yield running


def _request(url: str, *, method: str = "GET", body: bytes | None = None, headers: dict[str, str] | None = None):
    request = urllib.request.Request(url, data=body, method=method, headers=headers or {})
    try:
        with urllib.request.urlopen(request, timeout=10) as response:
            return response.status, response.headers, response.read()
    except urllib.error.HTTPError as error:
        with error:
            return error.code, error.headers, error.read()


def test_local_front_given_json_post_then_handler_sees_v2_event_and_client_gets_its_response(front, echo):
    payload = json.dumps({"clientId": "c1", "deltas": []}).encode()

    status, headers, body = _request(
        front.url + "/v1/sync/gw/push?x=1&x=2",
        method="POST",
        body=payload,
        headers={"Content-Type": "application/json", "X-Custom": "yes"},
    )

    assert status == 200
    echoed = json.loads(body)
    assert echoed["method"] == "POST"
    assert echoed["path"] == "/v1/sync/gw/push"
    assert echoed["query"] == {"x": "1,2"}
    assert echoed["headers"]["x-custom"] == "yes"
    assert echoed["body"] == payload.decode()
    assert echoed["isBase64Encoded"] is False
    assert "connection" not in echoed["headers"]
    event = echo.events[0]
    assert event["version"] == "2.0"
    assert event["requestContext"]["requestId"] == headers["apigw-requestid"]
    assert headers["Content-Length"] == str(len(body))


def test_local_front_given_binary_body_then_bytes_round_trip_exactly(front, echo):
    payload = bytes(range(256)) * 4

    status, headers, body = _request(
        front.url + "/bytes", method="POST", body=payload, headers={"Content-Type": "application/x-protobuf"}
    )

    assert status == 200
    assert body == payload
    assert headers["Content-Type"] == "application/x-protobuf"
    assert echo.events[0]["isBase64Encoded"] is True


def test_local_front_given_handler_not_found_result_then_status_and_body_pass_through(front):
    status, headers, body = _request(front.url + "/missing")

    assert status == 404
    assert json.loads(body) == {"code": "NOT_FOUND"}
    assert headers["Content-Type"] == "application/json"


def test_local_front_given_bare_dict_result_then_200_json(front):
    status, headers, body = _request(front.url + "/bare")

    assert status == 200
    assert headers["Content-Type"] == "application/json"
    assert json.loads(body) == {"bare": True}


def test_local_front_given_handler_exception_then_500_without_details_and_traceback_logged(front, caplog):
    caplog.set_level(logging.ERROR, logger="lakesync.local.front")

    status, _, body = _request(front.url + "/boom")

    assert status == 500
    assert json.loads(body) == INTERNAL_ERROR_BODY
    assert SECRET.encode() not in body
    assert b"Traceback" not in body
    logged = [record for record in caplog.records if record.exc_info]
    assert len(logged) == 1
    assert SECRET in str(logged[0].exc_info[1])


def test_local_front_given_malformed_handler_result_then_500(front, caplog):
    caplog.set_level(logging.ERROR, logger="lakesync.local.front")

    status, _, body = _request(front.url + "/malformed")

    assert status == 500
    assert json.loads(body) == INTERNAL_ERROR_BODY
    assert any(record.exc_info for record in caplog.records)


def test_local_front_given_body_over_limit_then_413_and_handler_not_called():
    echo = EchoHandler()
    with LocalFront(echo, max_body_bytes=1024) as small:
        status, headers, body = _request(
            small.url + "/v1/sync/gw/push", method="POST", body=b"x" * 8 * 1024 * 1024, headers={"Content-Type": "x/y"}
        )

    assert status == 413
    assert json.loads(body)["code"] == "VALIDATION_ERROR"
    assert "1024" in json.loads(body)["error"]
    assert headers["Connection"] == "close"
    assert echo.events == []


def test_local_front_given_declared_length_over_default_limit_then_413_before_body_is_sent(front, echo):
    connection = http.client.HTTPConnection("127.0.0.1", front.port, timeout=10)
    connection.putrequest("POST", "/v1/sync/gw/push")
    connection.putheader("Content-Length", str(API_GATEWAY_MAX_BODY_BYTES + 1))
    connection.endheaders(b"only the first bytes")

    started = time.monotonic()
    response = connection.getresponse()
    body = response.read()
    elapsed = time.monotonic() - started
    connection.close()

    assert response.status == 413
    assert json.loads(body)["code"] == "VALIDATION_ERROR"
    assert elapsed < 1.0
    assert echo.events == []


def test_local_front_given_chunked_body_then_handler_gets_it_whole_and_over_limit_gets_413():
    echo = EchoHandler()
    with LocalFront(echo, max_body_bytes=64) as small:
        accepted = http.client.HTTPConnection("127.0.0.1", small.port, timeout=10)
        accepted.request(
            "POST", "/", body=iter([b"hello ", b"chunked"]), headers={"Content-Type": "text/plain"}, encode_chunked=True
        )
        accepted_response = accepted.getresponse()
        accepted_body = json.loads(accepted_response.read())
        accepted.close()

        rejected = http.client.HTTPConnection("127.0.0.1", small.port, timeout=10)
        rejected.request("POST", "/", body=iter([b"y" * 40, b"y" * 40]), encode_chunked=True)
        rejected_response = rejected.getresponse()
        rejected_response.read()
        rejected.close()

    assert accepted_response.status == 200
    assert accepted_body["body"] == "hello chunked"
    assert "transfer-encoding" not in accepted_body["headers"]
    assert rejected_response.status == 413
    assert len(echo.events) == 1


def test_local_front_given_keep_alive_then_second_request_reuses_the_connection(front):
    connection = http.client.HTTPConnection("127.0.0.1", front.port, timeout=10)
    connection.request("POST", "/first", body=b"{}", headers={"Content-Type": "application/json"})
    first = connection.getresponse()
    first.read()
    sock = connection.sock
    connection.request("GET", "/second")
    second = connection.getresponse()
    second_body = json.loads(second.read())
    reused = connection.sock is sock
    connection.close()

    assert first.status == second.status == 200
    assert first.getheader("Connection") is None
    assert reused
    assert second_body["path"] == "/second"


def test_local_front_given_head_then_length_without_body_and_connection_stays_usable(front):
    connection = http.client.HTTPConnection("127.0.0.1", front.port, timeout=10)
    connection.request("HEAD", "/same")
    head = connection.getresponse()
    head_body = head.read()
    connection.request("GET", "/same")
    get = connection.getresponse()
    get_body = get.read()
    connection.close()

    assert head.status == get.status == 200
    assert head_body == b""
    assert int(head.getheader("Content-Length")) > 0
    assert len(get_body) == int(get.getheader("Content-Length"))
    assert json.loads(get_body)["method"] == "GET"


def test_local_front_given_any_method_then_handler_receives_it(front):
    statuses = {}
    for method in ("PUT", "PATCH", "DELETE", "OPTIONS", "PROPFIND"):
        status, _, body = _request(front.url + "/m", method=method)
        statuses[method] = (status, json.loads(body)["method"])

    assert statuses == {method: (200, method) for method in statuses}


def test_local_front_given_concurrent_requests_then_served_in_parallel_and_answers_do_not_mix():
    echo = EchoHandler(delay=0.2)
    with LocalFront(echo) as front, ThreadPoolExecutor(max_workers=8) as pool:
        started = time.monotonic()
        results = list(
            pool.map(
                lambda i: _request(
                    f"{front.url}/n/{i}",
                    method="POST",
                    body=f"payload-{i}".encode(),
                    headers={"Content-Type": "text/plain"},
                ),
                range(16),
            )
        )
        elapsed = time.monotonic() - started

    bodies = [json.loads(body) for _, _, body in results]
    assert [status for status, _, _ in results] == [200] * 16
    assert [(b["path"], b["body"]) for b in bodies] == [(f"/n/{i}", f"payload-{i}") for i in range(16)]
    assert echo.max_active > 1
    assert elapsed < 16 * 0.2
    assert len({c.aws_request_id for c in echo.contexts}) == 16


def test_local_front_given_lambda_context_then_carries_function_identity_and_time_budget():
    echo = EchoHandler()
    with LocalFront(echo, function_name="push", memory_limit_in_mb=512, timeout_seconds=5) as front:
        _request(front.url + "/ctx")

    context = echo.contexts[0]
    assert context.function_name == "push"
    assert context.memory_limit_in_mb == 512
    assert context.invoked_function_arn.endswith(":function:push")
    assert 0 < context.get_remaining_time_in_millis() <= 5000


def test_local_front_given_powertools_resolver_then_routes_like_on_aws():
    app = APIGatewayHttpResolver()

    @app.post("/v1/sync/<gateway_id>/push")
    def push(gateway_id: str) -> Response[bytes]:
        raw = base64.b64decode(app.current_event.body or "")
        return Response(200, "application/x-protobuf", gateway_id.encode() + b":" + raw)

    with LocalFront(app.resolve) as front:
        status, headers, body = _request(
            front.url + "/v1/sync/gw-1/push",
            method="POST",
            body=b"\x0a\x02\xff\x00",
            headers={"Content-Type": "application/x-protobuf"},
        )
        not_found, _, _ = _request(front.url + "/nowhere")

    assert status == 200
    assert headers["Content-Type"] == "application/x-protobuf"
    assert body == b"gw-1:\x0a\x02\xff\x00"
    assert not_found == 404


def test_local_front_given_stop_with_idle_keep_alive_connection_then_stops_promptly_and_frees_port(echo):
    front = LocalFront(echo).start()
    port = front.port
    idle = http.client.HTTPConnection("127.0.0.1", port, timeout=10)
    idle.request("GET", "/idle")
    idle.getresponse().read()

    started = time.monotonic()
    front.stop()
    elapsed = time.monotonic() - started
    idle.close()

    assert elapsed < 2.0
    with pytest.raises(ConnectionRefusedError), socket.create_connection(("127.0.0.1", port), timeout=2):
        pass
    with pytest.raises(RuntimeError):
        _ = front.url


def test_local_front_given_invalid_content_length_then_400_json_and_connection_closed(front, echo):
    with socket.create_connection(("127.0.0.1", front.port), timeout=10) as raw:
        raw.sendall(b"POST /x HTTP/1.1\r\nHost: local\r\nContent-Length: 12abc\r\n\r\n")
        response = http.client.HTTPResponse(raw)
        response.begin()
        body = json.loads(response.read())

    assert response.status == 400
    assert body == {"error": "Invalid Content-Length", "code": "VALIDATION_ERROR"}
    assert response.getheader("Connection") == "close"
    assert echo.events == []


@pytest.mark.parametrize(
    ("request_head", "reason"),
    [
        (b"GET /x HTTP/9.9\r\nHost: local\r\n\r\n", "Invalid HTTP version"),
        (b"POST /x HTTP/1.1\r\nHost: local\r\nTransfer-Encoding: gzip\r\n\r\n", "Unsupported Transfer-Encoding"),
    ],
    ids=["http-version", "transfer-coding"],
)
def test_local_front_given_a_request_it_cannot_read_then_400_json_and_connection_closed(
    front, echo, request_head: bytes, reason: str
):
    with socket.create_connection(("127.0.0.1", front.port), timeout=10) as raw:
        raw.sendall(request_head)
        response = http.client.HTTPResponse(raw)
        response.begin()
        body = json.loads(response.read())

    assert response.status == 400
    assert body["code"] == "VALIDATION_ERROR" and body["error"].startswith(reason)
    assert response.getheader("Connection") == "close"
    assert echo.events == []
