"""API Gateway HTTP API payload 2.0 translation: http_event builds faithful events, response_to_http reads results.

Faithfulness is also checked against Powertools' own v2 event class and resolver, which our handlers use on AWS.
"""

from __future__ import annotations

import base64
import json
from datetime import UTC, datetime

import pytest
from aws_lambda_powertools.event_handler import APIGatewayHttpResolver
from aws_lambda_powertools.utilities.data_classes import APIGatewayProxyEventV2

from lakesync.local.events import http_event, is_text_content, response_to_http

PROTOBUF_BODY = bytes(range(256))  # every byte value, so not UTF-8


def test_http_event_given_plain_get_then_has_v2_shape_and_no_optional_fields():
    epoch_ms = 1_700_000_000_123

    event = http_event("get", "/v1/health", request_id="req-1", source_ip="10.0.0.7", time_epoch_ms=epoch_ms)

    assert event["version"] == "2.0"
    assert event["routeKey"] == "$default"
    assert event["rawPath"] == "/v1/health"
    assert event["rawQueryString"] == ""
    assert event["isBase64Encoded"] is False
    assert not {"body", "cookies", "queryStringParameters", "pathParameters"} & event.keys()
    context = event["requestContext"]
    assert context["http"] == {
        "method": "GET",
        "path": "/v1/health",
        "protocol": "HTTP/1.1",
        "sourceIp": "10.0.0.7",
        "userAgent": "",
    }
    assert context["requestId"] == "req-1"
    assert context["routeKey"] == "$default"
    assert context["stage"] == "$default"
    assert context["timeEpoch"] == epoch_ms
    expected_time = datetime.fromtimestamp(epoch_ms / 1000, tz=UTC).strftime("%d/%b/%Y:%H:%M:%S +0000")
    assert context["time"] == expected_time
    assert event["headers"]["x-forwarded-for"] == "10.0.0.7"
    json.dumps(event)  # the event must survive the Lambda service's JSON round trip


def test_http_event_given_repeated_mixed_case_headers_then_lower_cases_and_comma_joins():
    headers = [("X-Trace", "a"), ("Accept", "text/plain"), ("x-trace", "b"), ("Host", "api.example.com:8443")]

    event = http_event("GET", "/", headers=headers)

    assert event["headers"]["x-trace"] == "a,b"
    assert event["headers"]["accept"] == "text/plain"
    assert all(name == name.lower() for name in event["headers"])
    assert event["requestContext"]["domainName"] == "api.example.com"
    assert event["requestContext"]["domainPrefix"] == "api"


def test_http_event_given_cookie_headers_then_moves_each_pair_to_cookies():
    headers = [("Cookie", "a=1; b=2"), ("cookie", "c=3"), ("User-Agent", "ua/1")]

    event = http_event("GET", "/", headers=headers)

    assert event["cookies"] == ["a=1", "b=2", "c=3"]
    assert "cookie" not in event["headers"]
    assert event["requestContext"]["http"]["userAgent"] == "ua/1"


def test_http_event_given_repeated_and_escaped_query_then_raw_is_kept_and_parameters_decoded():
    raw = "since=42&table=a&table=b&q=caf%C3%A9&empty="

    event = http_event("GET", "/v1/sync/gw/pull", query=raw)

    assert event["rawQueryString"] == raw
    assert event["queryStringParameters"] == {"since": "42", "table": "a,b", "q": "café", "empty": ""}


def test_http_event_given_query_pairs_then_encodes_raw_query_string():
    event = http_event("GET", "/", query=[("a", "1 2"), ("a", "3")])

    assert event["rawQueryString"] == "a=1+2&a=3"
    assert event["queryStringParameters"] == {"a": "1 2,3"}


@pytest.mark.parametrize(
    "content_type",
    ["application/json", "application/json; charset=utf-8", "text/plain", "application/problem+json", "text/csv"],
)
def test_http_event_given_text_content_type_then_body_is_plain_text(content_type):
    body = json.dumps({"clientId": "c1", "note": "zoë"})

    event = http_event("POST", "/", headers={"Content-Type": content_type}, body=body.encode("utf-8"))

    assert event["isBase64Encoded"] is False
    assert event["body"] == body


@pytest.mark.parametrize(
    ("headers", "body"),
    [
        ({"Content-Type": "application/x-protobuf"}, PROTOBUF_BODY),
        ({"Content-Type": "application/x-protobuf"}, b"ascii-only protobuf bytes"),
        ({"Content-Type": "application/octet-stream"}, b"\x00\x01"),
        ({"Content-Type": "application/json"}, b"\xff\xfe not utf-8"),
        ({"Content-Type": "application/json", "Content-Encoding": "gzip"}, b"\x1f\x8b\x08"),
        ({}, b"no content type"),
    ],
    ids=["protobuf", "protobuf-ascii", "octet-stream", "json-not-utf8", "gzip-json", "no-content-type"],
)
def test_http_event_given_binary_body_then_base64_round_trips(headers, body):
    event = http_event("POST", "/v1/sync/gw/push", headers=headers, body=body)

    assert event["isBase64Encoded"] is True
    assert base64.b64decode(event["body"], validate=True) == body


def test_http_event_given_str_body_then_taken_as_utf8():
    event = http_event("POST", "/", headers={"content-type": "text/plain"}, body="héllo")

    assert event["body"] == "héllo"
    assert event["isBase64Encoded"] is False


def test_http_event_given_empty_body_then_no_body_field():
    event = http_event("POST", "/", headers={"content-type": "application/json"}, body=b"")

    assert "body" not in event
    assert event["isBase64Encoded"] is False


def test_http_event_given_route_key_with_parameters_then_fills_path_parameters():
    event = http_event("POST", "/v1/sync/gw-1/push", route_key="POST /v1/sync/{gatewayId}/push")
    greedy = http_event("GET", "/static/a/b.js", route_key="GET /static/{proxy+}")
    mismatch = http_event("GET", "/other", route_key="POST /v1/sync/{gatewayId}/push")

    assert event["routeKey"] == event["requestContext"]["routeKey"] == "POST /v1/sync/{gatewayId}/push"
    assert event["pathParameters"] == {"gatewayId": "gw-1"}
    assert greedy["pathParameters"] == {"proxy": "a/b.js"}
    assert "pathParameters" not in mismatch


def test_http_event_given_no_request_id_then_each_event_gets_a_fresh_one():
    ids = {http_event("GET", "/")["requestContext"]["requestId"] for _ in range(50)}

    assert len(ids) == 50


def test_http_event_given_powertools_v2_event_class_then_fields_read_back():
    event = http_event(
        "POST",
        "/v1/sync/gw/push",
        query="since=7",
        headers=[("Content-Type", "application/x-protobuf"), ("Cookie", "s=1")],
        body=PROTOBUF_BODY,
    )

    parsed = APIGatewayProxyEventV2(event)

    assert parsed.http_method == "POST"
    assert parsed.path == "/v1/sync/gw/push"
    assert parsed.cookies == ["s=1"]
    assert parsed.query_string_parameters == {"since": "7"}
    assert parsed.is_base64_encoded is True
    assert base64.b64decode(parsed.body or "") == PROTOBUF_BODY
    assert parsed.headers.get("Content-Type") == "application/x-protobuf"


def test_http_event_given_powertools_http_resolver_then_routes_and_response_reads_back():
    app = APIGatewayHttpResolver()

    @app.post("/v1/sync/<gateway_id>/echo")
    def echo(gateway_id: str) -> dict[str, object]:
        return {"gateway": gateway_id, "body": app.current_event.json_body}

    event = http_event(
        "POST", "/v1/sync/gw-9/echo", headers={"content-type": "application/json"}, body=b'{"clientId":"c"}'
    )

    status, headers, body = response_to_http(app.resolve(event, None))

    assert status == 200
    assert ("Content-Type", "application/json") in headers
    assert json.loads(body) == {"gateway": "gw-9", "body": {"clientId": "c"}}


def test_response_to_http_given_structured_response_then_headers_cookies_and_body_are_kept():
    result = {
        "statusCode": 201,
        "headers": {"Content-Type": "application/json", "X-Count": 3, "Vary": "a,b"},
        "cookies": ["s=1; HttpOnly", "t=2"],
        "body": '{"ok":true}',
        "isBase64Encoded": False,
    }

    status, headers, body = response_to_http(result)

    assert status == 201
    assert headers == [
        ("Content-Type", "application/json"),
        ("X-Count", "3"),
        ("Vary", "a,b"),
        ("set-cookie", "s=1; HttpOnly"),
        ("set-cookie", "t=2"),
    ]
    assert body == b'{"ok":true}'


def test_response_to_http_given_base64_protobuf_body_then_decodes_to_bytes():
    result = {
        "statusCode": 200,
        "headers": {"content-type": "application/x-protobuf"},
        "body": base64.b64encode(PROTOBUF_BODY).decode("ascii"),
        "isBase64Encoded": True,
    }

    status, headers, body = response_to_http(result)

    assert (status, body) == (200, PROTOBUF_BODY)
    assert headers == [("content-type", "application/x-protobuf")]


def test_response_to_http_given_no_content_type_then_defaults_to_text_plain():
    _, with_body, _ = response_to_http({"statusCode": 200, "body": "hi"})
    _, without_body, body = response_to_http({"statusCode": 204})

    assert with_body == [("content-type", "text/plain; charset=utf-8")]
    assert without_body == []
    assert body == b""


def test_response_to_http_given_multi_value_and_framing_headers_then_ignores_them():
    result = {
        "statusCode": 200,
        "headers": {"Content-Length": "999", "Connection": "close", "X-Kept": "1"},
        "multiValueHeaders": {"X-Dropped": ["a", "b"]},
        "body": "abc",
    }

    _, headers, body = response_to_http(result)

    assert headers == [("X-Kept", "1"), ("content-type", "text/plain; charset=utf-8")]
    assert body == b"abc"


@pytest.mark.parametrize(
    "result",
    [
        {"message": "no status code", "body": "not a proxy response"},
        ["a", 1, None],
        "Hello from Lambda!",
        42,
        None,
    ],
    ids=["dict-without-status", "list", "str", "int", "none"],
)
def test_response_to_http_given_bare_json_value_then_200_json_of_the_value(result):
    status, headers, body = response_to_http(result)

    assert status == 200
    assert headers == [("content-type", "application/json")]
    assert json.loads(body) == result


@pytest.mark.parametrize(
    "result",
    [
        {"statusCode": "200"},
        {"statusCode": True},
        {"statusCode": 99},
        {"statusCode": 600},
        {"statusCode": 200, "body": {"not": "a string"}},
        {"statusCode": 200, "body": "!!!", "isBase64Encoded": True},
        {"statusCode": 200, "headers": {"X-A": ["list"]}},
        {"statusCode": 200, "headers": {"X-A": "a\r\nInjected: 1"}},
        {"statusCode": 200, "cookies": [1]},
        {"not": {1, 2}},
    ],
    ids=[
        "status-str",
        "status-bool",
        "status-low",
        "status-high",
        "body-dict",
        "bad-base64",
        "header-list",
        "header-crlf",
        "cookie-int",
        "unserialisable",
    ],
)
def test_response_to_http_given_malformed_result_then_raises_value_error(result):
    with pytest.raises(ValueError):
        response_to_http(result)


@pytest.mark.parametrize(
    ("content_type", "encoding", "expected"),
    [
        ("text/html; charset=utf-8", None, True),
        ("APPLICATION/JSON", None, True),
        ("application/vnd.api+json", None, True),
        ("application/atom+xml", None, True),
        ("application/x-protobuf", None, False),
        ("application/x-www-form-urlencoded", None, False),
        ("application/json", "gzip", False),
        (None, None, False),
    ],
)
def test_is_text_content_given_media_type_then_classifies(content_type, encoding, expected):
    assert is_text_content(content_type, encoding) is expected
