"""A small router for API Gateway HTTP API (payload 2.0) events, built on the route table of ``lakesync.api_routes``.

Why not Powertools' resolver: importing ``aws_lambda_powertools.event_handler`` loads every resolver it ships
(AppSync, Bedrock agents, VPC Lattice, ...) and costs more cold-start time than all of LakeSync's own modules; the
functions need only exact routes with path parameters, a request view and an error hook. Logging, metrics and
tracing stay with Powertools.

Every response carries the router's fixed ``headers`` and ``X-Request-Id`` (API Gateway's request id), plus
``Cache-Control: no-store`` under the ``no_store_prefixes``; ``on_response`` sees every status code (metrics).
A body of at least :data:`GZIP_MIN_BYTES` goes out gzip-compressed (``Content-Encoding: gzip``, base64 to API
Gateway) when the request's ``Accept-Encoding`` admits gzip and compression makes it smaller: HTTP APIs do not
compress responses themselves, and bytes sent to the internet are billed.

Behaviour: a request matches a registered ``(method, template)`` exactly (no trailing-slash folding); a named
stage's prefix is removed from ``rawPath`` first; header names are lower-case; a ``bytes`` body is sent base64
encoded; a body that is neither ``str`` nor ``bytes`` goes through the serializer. An exception raised by a route
goes to the first registered handler of one of its classes (most specific first); unmatched requests raise
:class:`RouteNotFound` into the same hooks.
"""

from __future__ import annotations

import base64
import zlib
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from typing import Any, TypeVar

from lakesync.api_routes import Route

Handler = Callable[..., "Response"]
_H = TypeVar("_H", bound=Handler)
_E = TypeVar("_E", bound=BaseException)


GZIP_MIN_BYTES = 1024
"""Smaller bodies go out as they are (a gzip header and trailer cost 18 bytes, and tiny JSON barely shrinks)."""
_GZIP_LEVEL = 5


def accepts_gzip(accept_encoding: str | None) -> bool:
    """Whether an ``Accept-Encoding`` value admits gzip: listed (or ``*`` when gzip is not) with a non-zero q."""
    if not accept_encoding:
        return False
    weights: dict[str, float] = {}
    for part in accept_encoding.split(","):
        coding, _, params = part.strip().partition(";")
        weight = 1.0
        for param in params.split(";"):
            name, _, value = param.strip().partition("=")
            if name.strip().lower() == "q":
                try:
                    weight = float(value)
                except ValueError:
                    weight = 0.0
        weights[coding.strip().lower()] = weight
    weight = weights.get("gzip", weights.get("x-gzip", weights.get("*", 0.0)))
    return weight > 0


class RouteNotFound(Exception):
    """No registered route serves the request's method and path."""


@dataclass(frozen=True, slots=True)
class Request:
    """The parts of an HTTP API event the functions read."""

    method: str
    path: str
    headers: Mapping[str, str]
    query_string_parameters: Mapping[str, str]
    body: str | None
    is_base64_encoded: bool
    request_id: str

    @classmethod
    def from_event(cls, event: Mapping[str, Any]) -> Request:
        """Read an API Gateway v2 event (missing parts become empty)."""
        context = event.get("requestContext") or {}
        http = context.get("http") or {}
        stage = str(context.get("stage") or "$default")
        path = str(event.get("rawPath") or http.get("path") or "/")
        if stage != "$default" and path.startswith(f"/{stage}/"):
            path = path[len(stage) + 1 :]
        headers = {str(k).lower(): str(v) for k, v in (event.get("headers") or {}).items()}
        query = event.get("queryStringParameters")
        return cls(
            method=str(http.get("method") or "").upper(),
            path=path,
            headers=headers,
            query_string_parameters=dict(query) if query else {},
            body=event.get("body"),
            is_base64_encoded=bool(event.get("isBase64Encoded")),
            request_id=str(context.get("requestId") or ""),
        )


@dataclass(frozen=True, slots=True)
class Response:
    """A route's answer: status, content type, body (``bytes``, ``str`` or a JSON value) and extra headers."""

    status_code: int
    content_type: str
    body: Any
    headers: Mapping[str, str] = field(default_factory=dict)


class Router:
    """Routes API Gateway v2 events to the functions registered with :meth:`get` / :meth:`post` / :meth:`delete`."""

    def __init__(
        self,
        serializer: Callable[[Any], str],
        *,
        headers: Mapping[str, str] | None = None,
        no_store_prefixes: tuple[str, ...] = (),
        on_response: Callable[[int], None] | None = None,
    ) -> None:
        self._serializer = serializer
        self._headers = dict(headers or {})
        self._no_store_prefixes = no_store_prefixes
        self._on_response = on_response
        self._routes: list[tuple[Route, Handler]] = []
        self._error_handlers: list[tuple[type[BaseException], Callable[[Any], Response]]] = []
        self._current: Request | None = None
        self._context: object = None

    @property
    def lambda_context(self) -> object:
        """The Lambda context :meth:`resolve` was given (``None`` outside it, or when it was given none)."""
        return self._context

    @property
    def current_event(self) -> Request:
        """The request being resolved (only valid inside :meth:`resolve`)."""
        if self._current is None:
            raise RuntimeError("no request is being resolved")
        return self._current

    def get(self, path: str) -> Callable[[_H], _H]:
        """Register a GET route; ``path`` names parameters as ``{name}``."""
        return self._register("GET", path)

    def post(self, path: str) -> Callable[[_H], _H]:
        """Register a POST route; ``path`` names parameters as ``{name}``."""
        return self._register("POST", path)

    def delete(self, path: str) -> Callable[[_H], _H]:
        """Register a DELETE route; ``path`` names parameters as ``{name}``."""
        return self._register("DELETE", path)

    def _register(self, method: str, path: str) -> Callable[[_H], _H]:
        def decorate(handler: _H) -> _H:
            self._routes.append((Route(method, path, handler.__module__), handler))
            return handler

        return decorate

    def exception_handler(self, kind: type[_E]) -> Callable[[Callable[[_E], Response]], Callable[[_E], Response]]:
        """Register the response hook for exceptions of ``kind`` (and its subclasses)."""

        def decorate(hook: Callable[[_E], Response]) -> Callable[[_E], Response]:
            self._error_handlers.append((kind, hook))
            return hook

        return decorate

    def resolve(self, event: Mapping[str, Any], context: object = None) -> dict[str, Any]:
        """Route ``event`` (with the invocation's Lambda ``context``) and return the HTTP API response dict."""
        request = Request.from_event(event)
        self._current = request
        self._context = context
        try:
            try:
                response = self._dispatch(request)
            except Exception as exc:  # every exception becomes a response through the registered hooks
                response = self._handle(exc)
            result = self._render(response, request.headers.get("accept-encoding"))
        finally:
            self._current = None
            self._context = None
        headers: dict[str, str] = result["headers"]
        headers.update(self._headers)
        headers["X-Request-Id"] = request.request_id
        if self._no_store_prefixes and request.path.startswith(self._no_store_prefixes):
            headers["Cache-Control"] = "no-store"
        if self._on_response is not None:
            self._on_response(response.status_code)
        return result

    def _dispatch(self, request: Request) -> Response:
        for route, handler in self._routes:
            params = route.match(request.method, request.path)
            if params is not None:
                return handler(**params)
        raise RouteNotFound(f"{request.method} {request.path}")

    def _handle(self, exc: Exception) -> Response:
        for kind in type(exc).__mro__:
            for registered, hook in self._error_handlers:
                if registered is kind:
                    return hook(exc)
        raise exc

    def _render(self, response: Response, accept_encoding: str | None) -> dict[str, Any]:
        body = response.body
        headers = {"Content-Type": response.content_type, **response.headers}
        if not isinstance(body, bytes | str):
            body = self._serializer(body)
        # A text of n characters is at most 4n bytes: shorter ones stay under the minimum, unparsed and unencoded.
        if len(body) >= GZIP_MIN_BYTES // 4 and accepts_gzip(accept_encoding):
            body = _gzipped(body, headers) or body
        if isinstance(body, bytes):
            text, encoded = base64.b64encode(body).decode("ascii"), True
        else:
            text, encoded = body, False
        return {"statusCode": response.status_code, "headers": headers, "body": text, "isBase64Encoded": encoded}


def _gzipped(body: bytes | str, headers: dict[str, str]) -> bytes | None:
    """``body`` gzip-compressed when that is worth it (``headers`` get ``Vary`` and ``Content-Encoding``), else None."""
    try:
        data = body if isinstance(body, bytes) else body.encode("utf-8")
    except UnicodeEncodeError:  # a lone surrogate: leave the text to the runtime's JSON escaping
        return None
    if len(data) < GZIP_MIN_BYTES:
        return None
    headers["Vary"] = "Accept-Encoding"
    packer = zlib.compressobj(_GZIP_LEVEL, zlib.DEFLATED, 16 + zlib.MAX_WBITS)  # a gzip stream (RFC 1952)
    packed = packer.compress(data) + packer.flush()
    if len(packed) >= len(data):
        return None
    headers["Content-Encoding"] = "gzip"
    return packed
