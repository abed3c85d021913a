"""API Gateway HTTP API (payload format 2.0) events and Lambda proxy responses, built and read locally.

The embedded default serves the same Lambda handlers as AWS does; this module is the translation API Gateway
performs on either side of the function call, with no I/O:

* :func:`http_event` turns one HTTP request into the event an HTTP API hands a Lambda proxy integration with
  ``payloadFormatVersion: 2.0``.
* :func:`response_to_http` turns what the function returned into the status, headers and body the client sees.

Invariants (API Gateway's documented or observed behaviour; where AWS documents nothing the choice is marked *ours*):

* Header names are lower-cased; repeated headers (and repeated query parameters) are joined with ``,``.
* ``Cookie`` headers leave ``headers`` and become the ``cookies`` list (one entry per ``name=value`` pair).
* ``queryStringParameters``, ``pathParameters``, ``cookies`` and ``body`` are absent when empty.
* Binary bodies reach the function base64-encoded with ``isBase64Encoded: true``, text bodies as they are.
  *Ours:* text means a textual content type (``text/*``, JSON, XML, JavaScript, ``+json``/``+xml``), no
  ``Content-Encoding`` and valid UTF-8; everything else, including a body without ``Content-Type``, is base64.
* A result that is a dict with ``statusCode`` is a structured response: ``headers``, ``cookies`` (each one a
  ``set-cookie`` header), ``body`` and ``isBase64Encoded`` are honoured, ``multiValueHeaders`` (a payload 1.0 field)
  is ignored, and a body without ``content-type`` is sent as ``text/plain; charset=utf-8`` (*ours:* an empty body
  gets no content type). Any other JSON value (a dict without ``statusCode``, a list, a string, a number, ``null``)
  means status 200, ``application/json``, with the value serialised as JSON as the body.
* *Ours:* a malformed structured response (a status that is not an integer in 200–599, a non-string body, a header
  that is not a string or number, bad base64) raises :class:`ValueError`; the local front answers it with a 500,
  as API Gateway answers a response it cannot read.
"""

from __future__ import annotations

import base64
import binascii
import json
import re
import secrets
import time
from collections.abc import Iterable, Mapping
from datetime import UTC, datetime
from typing import Any
from urllib.parse import parse_qsl, urlencode

__all__ = ["DEFAULT_ACCOUNT_ID", "DEFAULT_API_ID", "http_event", "is_text_content", "response_to_http"]

DEFAULT_ACCOUNT_ID = "123456789012"
DEFAULT_API_ID = "local"

_TEXT_TYPES = frozenset({"application/json", "application/javascript", "application/xml"})
# Framing headers belong to the connection, not to the function: the server recomputes them.
_FRAMING_HEADERS = frozenset({"content-length", "transfer-encoding", "connection", "keep-alive"})
_ROUTE_PARAM = re.compile(r"\{([^{}]+)\}")
_MONTHS = ("Jan", "Feb", "Mar", "Apr", "May", "Jun", "Jul", "Aug", "Sep", "Oct", "Nov", "Dec")

HeaderInput = Mapping[str, str] | Iterable[tuple[str, str]]
QueryInput = str | Mapping[str, str] | Iterable[tuple[str, str]]


def is_text_content(content_type: str | None, content_encoding: str | None = None) -> bool:
    """Whether API Gateway passes a body of this type to the function as text rather than base64.

    Args:
        content_type: The request's ``Content-Type`` (parameters such as ``charset`` are ignored).
        content_encoding: The request's ``Content-Encoding``; any encoding (e.g. gzip) makes the body binary.

    Returns:
        True for textual media types without a content encoding.
    """
    if content_encoding or not content_type:
        return False
    mime = content_type.split(";", 1)[0].strip().lower()
    return mime.startswith("text/") or mime in _TEXT_TYPES or mime.endswith(("+json", "+xml"))


def http_event(
    method: str,
    path: str,
    *,
    query: QueryInput | None = None,
    headers: HeaderInput | None = None,
    body: bytes | str | None = None,
    route_key: str | None = None,
    stage: str = "$default",
    request_id: str | None = None,
    source_ip: str = "127.0.0.1",
    time_epoch_ms: int | None = None,
) -> dict[str, Any]:
    """Build the API Gateway HTTP API payload 2.0 event for one request.

    Args:
        method: HTTP method; upper-cased.
        path: Request path as the client sent it, without the query (for a named stage it starts with
            ``/<stage>``, as ``rawPath`` does on AWS). Percent-escapes are kept as sent.
        query: The raw query string (without ``?``), or name/value pairs to encode into one.
        headers: Request headers, as a mapping or as pairs (pairs keep repeated headers).
        body: Request body; ``str`` is taken as UTF-8.
        route_key: The matched route, e.g. ``"POST /v1/sync/{gatewayId}/push"``; ``$default`` when omitted. When it
            has ``{name}`` or ``{name+}`` parameters that match ``path``, ``pathParameters`` is filled.
        stage: Stage name; ``$default`` for the default stage.
        request_id: ``requestContext.requestId``; random in API Gateway's style when omitted.
        source_ip: The caller's address (``requestContext.http.sourceIp`` and ``x-forwarded-for``).
        time_epoch_ms: Request time in epoch milliseconds; the current time when omitted.

    Returns:
        The event dict, JSON-serialisable.
    """
    method = method.upper()
    raw_query = _raw_query(query)
    header_map, cookies = _fold_headers(headers)
    header_map.setdefault("x-forwarded-for", source_ip)
    header_map.setdefault("x-forwarded-proto", "http")
    epoch_ms = int(time.time() * 1000) if time_epoch_ms is None else time_epoch_ms
    request_id = request_id or _new_request_id()
    domain = _host_name(header_map.get("host", "")) or f"{DEFAULT_API_ID}.execute-api.localhost"
    route_key = route_key or "$default"

    event: dict[str, Any] = {
        "version": "2.0",
        "routeKey": route_key,
        "rawPath": path,
        "rawQueryString": raw_query,
    }
    if cookies:
        event["cookies"] = cookies
    event["headers"] = header_map
    params = _query_parameters(raw_query)
    if params:
        event["queryStringParameters"] = params
    path_params = _path_parameters(route_key, path)
    if path_params:
        event["pathParameters"] = path_params
    event["requestContext"] = {
        "accountId": DEFAULT_ACCOUNT_ID,
        "apiId": DEFAULT_API_ID,
        "domainName": domain,
        "domainPrefix": domain.split(".", 1)[0],
        "http": {
            "method": method,
            "path": path,
            "protocol": "HTTP/1.1",
            "sourceIp": source_ip,
            "userAgent": header_map.get("user-agent", ""),
        },
        "requestId": request_id,
        "routeKey": route_key,
        "stage": stage,
        "time": _clf_time(epoch_ms),
        "timeEpoch": epoch_ms,
    }
    if body is not None:
        data = body.encode("utf-8") if isinstance(body, str) else body
        if data:
            text = _as_text(data, header_map.get("content-type"), header_map.get("content-encoding"))
            event["body"] = text if text is not None else base64.b64encode(data).decode("ascii")
            event["isBase64Encoded"] = text is None
            return event
    event["isBase64Encoded"] = False
    return event


def response_to_http(result: Any) -> tuple[int, list[tuple[str, str]], bytes]:
    """Interpret a Lambda proxy integration result (payload 2.0) as API Gateway does.

    Args:
        result: Whatever the handler returned.

    Returns:
        ``(status, headers, body)``; headers are ``(name, value)`` pairs without framing headers
        (``content-length`` and the like belong to the server).

    Raises:
        ValueError: The result is a malformed structured response, or not JSON-serialisable.
    """
    if not (isinstance(result, dict) and "statusCode" in result):
        try:
            text = json.dumps(result)
        except (TypeError, ValueError) as e:
            raise ValueError(f"handler result is not JSON-serialisable: {e}") from e
        return 200, [("content-type", "application/json")], text.encode("utf-8")

    status = _status(result["statusCode"])
    headers: list[tuple[str, str]] = []
    for name, value in (result.get("headers") or {}).items():
        if not isinstance(name, str):
            raise ValueError(f"header name must be a string, got {name!r}")
        if name.lower() not in _FRAMING_HEADERS:
            headers.append((name, _header_value(name, value)))
    for cookie in result.get("cookies") or ():
        if not isinstance(cookie, str):
            raise ValueError(f"cookie must be a string, got {cookie!r}")
        headers.append(("set-cookie", cookie))

    body = result.get("body")
    if body is None:
        data = b""
    elif not isinstance(body, str):
        raise ValueError(f"body must be a string, got {type(body).__name__}")
    elif result.get("isBase64Encoded") is True:
        try:
            data = base64.b64decode(body, validate=True)
        except binascii.Error as e:
            raise ValueError(f"body is not valid base64: {e}") from e
    else:
        data = body.encode("utf-8")
    if data and not any(name.lower() == "content-type" for name, _ in headers):
        headers.append(("content-type", "text/plain; charset=utf-8"))
    return status, headers, data


def _raw_query(query: QueryInput | None) -> str:
    if query is None:
        return ""
    if isinstance(query, str):
        return query.removeprefix("?")
    pairs = list(query.items()) if isinstance(query, Mapping) else list(query)
    return urlencode(pairs)


def _query_parameters(raw_query: str) -> dict[str, str]:
    params: dict[str, str] = {}
    for name, value in parse_qsl(raw_query, keep_blank_values=True):
        params[name] = f"{params[name]},{value}" if name in params else value
    return params


def _fold_headers(headers: HeaderInput | None) -> tuple[dict[str, str], list[str]]:
    folded: dict[str, str] = {}
    cookies: list[str] = []
    pairs = headers.items() if isinstance(headers, Mapping) else (headers or ())
    for name, value in pairs:
        key = name.lower()
        if key == "cookie":
            cookies.extend(part.strip() for part in value.split(";") if part.strip())
        elif key in folded:
            folded[key] = f"{folded[key]},{value}"
        else:
            folded[key] = value
    return folded, cookies


def _path_parameters(route_key: str, path: str) -> dict[str, str]:
    _, _, template = route_key.partition(" ")
    if not _ROUTE_PARAM.search(template):
        return {}
    pattern = ""
    position = 0
    for match in _ROUTE_PARAM.finditer(template):
        pattern += re.escape(template[position : match.start()])
        name = match.group(1)
        if name.endswith("+"):
            pattern += f"(?P<{_group(name[:-1])}>.+)"
        else:
            pattern += f"(?P<{_group(name)}>[^/]+)"
        position = match.end()
    pattern += re.escape(template[position:])
    found = re.fullmatch(pattern, path)
    if found is None:
        return {}
    names = [m.group(1).removesuffix("+") for m in _ROUTE_PARAM.finditer(template)]
    return {name: found.group(_group(name)) for name in names}


def _group(name: str) -> str:
    # Route parameter names may hold characters a regex group name cannot.
    return "p" + name.encode("utf-8").hex()


def _as_text(data: bytes, content_type: str | None, content_encoding: str | None) -> str | None:
    if not is_text_content(content_type, content_encoding):
        return None
    try:
        return data.decode("utf-8")
    except UnicodeDecodeError:
        return None


def _status(value: Any) -> int:
    if isinstance(value, bool) or not isinstance(value, int):
        raise ValueError(f"statusCode must be an integer, got {value!r}")
    if not 200 <= value <= 599:
        raise ValueError(f"statusCode must be within 200..599, got {value}")
    return value


def _header_value(name: str, value: Any) -> str:
    if isinstance(value, str):
        text = value
    elif isinstance(value, bool):
        text = "true" if value else "false"
    elif isinstance(value, int | float):
        text = json.dumps(value)
    else:
        raise ValueError(f"header {name!r} must be a string or number, got {type(value).__name__}")
    if "\r" in text or "\n" in text:
        raise ValueError(f"header {name!r} contains a line break")
    return text


def _clf_time(epoch_ms: int) -> str:
    # Spelled out rather than strftime("%b"), which follows the process locale.
    moment = datetime.fromtimestamp(epoch_ms / 1000, tz=UTC)
    return f"{moment.day:02d}/{_MONTHS[moment.month - 1]}/{moment.year}:{moment:%H:%M:%S} +0000"


def _host_name(host: str) -> str:
    if host.startswith("["):
        return host.partition("]")[0] + "]"
    return host.partition(":")[0]


def _new_request_id() -> str:
    # Shaped like API Gateway's request ids ("JKJaXmPLvHcESHA="): random bytes in base64.
    return base64.b64encode(secrets.token_bytes(11)).decode("ascii")
