"""Response compression in the functions' router: gzip only when the request admits it, the body is big enough and
compression makes it smaller; text and bytes bodies alike."""

from __future__ import annotations

import base64
import gzip
import json
import os

import pytest

from lakesync.router import GZIP_MIN_BYTES, Response, Router, accepts_gzip


@pytest.mark.parametrize(
    ("header", "expected"),
    [
        (None, False),
        ("", False),
        ("gzip", True),
        ("GZIP", True),
        ("deflate, gzip;q=0.8", True),
        ("gzip;q=0", False),
        ("gzip; q=0.0, identity", False),
        ("br", False),
        ("*", True),
        ("*;q=0", False),
        ("gzip;q=0, *", False),
        ("x-gzip", True),
        ("gzip;q=nonsense", False),
    ],
)
def test_accept_encoding_is_read_as_http_defines_it(header: str | None, expected: bool) -> None:
    assert accepts_gzip(header) is expected


def _router(body: object, content_type: str = "application/json") -> Router:
    router = Router(json.dumps)

    @router.get("/health")
    def answer() -> Response:
        return Response(200, content_type, body)

    return router


def _event(accept_encoding: str | None) -> dict[str, object]:
    headers = {"accept-encoding": accept_encoding} if accept_encoding is not None else {}
    return {"rawPath": "/health", "requestContext": {"http": {"method": "GET"}}, "headers": headers}


def _body(result: dict[str, object]) -> bytes:
    text = str(result["body"])
    return base64.b64decode(text) if result["isBase64Encoded"] else text.encode()


@pytest.mark.parametrize(
    "body", [{"rows": ["same text " * 20] * 20}, "é" * 2000, b"\x08\x01" * 3000], ids=["json", "text", "bytes"]
)
def test_a_large_body_is_gzipped_when_accepted(body: object) -> None:
    plain = _router(body).resolve(_event(None))
    packed = _router(body).resolve(_event("gzip"))
    assert "Content-Encoding" not in plain["headers"]
    assert packed["headers"]["Content-Encoding"] == "gzip"
    assert packed["headers"]["Vary"] == "Accept-Encoding"
    assert packed["isBase64Encoded"] is True
    assert gzip.decompress(_body(packed)) == _body(plain)
    assert len(_body(packed)) < len(_body(plain))


def test_small_or_incompressible_bodies_go_out_as_they_are() -> None:
    small = _router({"ok": True}).resolve(_event("gzip"))
    assert small["isBase64Encoded"] is False and "Content-Encoding" not in small["headers"]
    noise = os.urandom(4 * GZIP_MIN_BYTES)
    result = _router(noise, "application/octet-stream").resolve(_event("gzip"))
    assert "Content-Encoding" not in result["headers"] and _body(result) == noise


def test_a_lone_surrogate_is_left_to_the_runtime() -> None:
    result = _router("\ud800" * GZIP_MIN_BYTES, "text/plain").resolve(_event("gzip"))
    assert result["isBase64Encoded"] is False and "Content-Encoding" not in result["headers"]
