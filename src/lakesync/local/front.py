"""The local HTTP front: real HTTP on 127.0.0.1 in front of the same Lambda handlers API Gateway invokes on AWS.

Each request, whatever its method and path, becomes an API Gateway HTTP API payload 2.0 event
(:func:`lakesync.local.events.http_event`), goes to the handler with a :class:`LambdaContext`, and the handler's
result goes back to the client as API Gateway would send it (:func:`lakesync.local.events.response_to_http`).

Invariants:

* A handler exception, or a result API Gateway could not interpret, is a 500 with the body
  ``{"error": "Internal error", "code": "INTERNAL_ERROR"}``; the traceback goes to the log, never to the client.
* A body over ``max_body_bytes`` (API Gateway's 10 MB payload limit by default) is answered 413 from the
  ``Content-Length`` alone (or as soon as a chunked body passes the limit) and is never buffered. The connection is
  then closed after draining (up to 64 MiB) what the client keeps sending, so the client can read the 413.
* HTTP/1.1 keep-alive: every response carries ``Content-Length`` (except 204 and 304, where HTTP forbids a body
  length), so connections are reused; malformed framing closes the connection.
* Logging goes through the stdlib :mod:`logging` module (logger ``lakesync.local.front``): access lines at DEBUG,
  protocol errors at INFO, handler failures at ERROR. Nothing is written to stderr directly.
* *Ours:* the front does not enforce a Lambda or integration timeout; ``get_remaining_time_in_millis`` counts down
  from ``timeout_seconds`` so handlers that budget their time behave as on AWS.
"""

from __future__ import annotations

import contextlib
import json
import logging
import math
import re
import socket
import socketserver
import sys
import threading
import time
import uuid
from collections.abc import Callable
from dataclasses import dataclass
from http import HTTPStatus
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from types import TracebackType
from typing import Any, Self
from urllib.parse import urlsplit

from lakesync.core.errors import LakeSyncError, PayloadTooLargeError, ValidationError
from lakesync.local.events import DEFAULT_ACCOUNT_ID, http_event, response_to_http
from lakesync.local.websocket import ManagementRequest, SocketHub, is_socket_path

__all__ = ["API_GATEWAY_MAX_BODY_BYTES", "Handler", "LambdaContext", "LocalFront"]

logger = logging.getLogger(__name__)

API_GATEWAY_MAX_BODY_BYTES = 10 * 1024 * 1024
"""API Gateway's payload size limit (10 MB)."""

Handler = Callable[[dict[str, Any], Any], Any]
"""A Lambda handler: ``(event, context) -> result``."""

INTERNAL_ERROR_BODY = {"error": "Internal error", "code": "INTERNAL_ERROR"}
_REFUSED_REQUESTS = frozenset({HTTPStatus.NOT_IMPLEMENTED, HTTPStatus.HTTP_VERSION_NOT_SUPPORTED})
_DRAIN_TIMEOUT_SECONDS = 2.0
_DRAIN_MAX_BYTES = 64 * 1024 * 1024
_CHUNK_SIZE = re.compile(rb"[0-9A-Fa-f]{1,16}")
_MAX_LINE = 65536
# Connection-level headers stay with this connection, as they do at API Gateway.
_HOP_BY_HOP = frozenset(
    {"connection", "expect", "keep-alive", "proxy-connection", "te", "trailer", "transfer-encoding", "upgrade"}
)


@dataclass(frozen=True, slots=True)
class LambdaContext:
    """The part of the Lambda context object our handlers and Powertools read.

    Attributes:
        function_name: The function's name.
        aws_request_id: The invocation's request id.
        invoked_function_arn: The ARN the function was invoked with.
        memory_limit_in_mb: Configured memory.
        function_version: Always ``$LATEST`` locally.
        log_group_name: CloudWatch log group the function would log to.
        log_stream_name: Log stream name (empty locally).
        deadline_monotonic: :func:`time.monotonic` value at which the invocation would time out.
        identity: Cognito identity (``None`` for API Gateway invocations).
        client_context: Mobile client context (``None`` for API Gateway invocations).
    """

    function_name: str
    aws_request_id: str
    invoked_function_arn: str
    memory_limit_in_mb: int = 1024
    function_version: str = "$LATEST"
    log_group_name: str = ""
    log_stream_name: str = ""
    deadline_monotonic: float = math.inf
    identity: None = None
    client_context: None = None

    def get_remaining_time_in_millis(self) -> int:
        """Milliseconds left before the invocation's deadline (never negative)."""
        remaining = self.deadline_monotonic - time.monotonic()
        return max(0, int(remaining * 1000)) if math.isfinite(remaining) else 2**31 - 1


class LocalFront:
    """Serve one Lambda handler over HTTP the way an API Gateway HTTP API ``$default`` route would.

    Usage::

        with LocalFront(lambda_handler) as front:
            urllib.request.urlopen(front.url + "/v1/health")
    """

    def __init__(
        self,
        handler: Handler,
        host: str = "127.0.0.1",
        port: int = 0,
        *,
        max_body_bytes: int = API_GATEWAY_MAX_BODY_BYTES,
        function_name: str = "lakesync-local",
        memory_limit_in_mb: int = 1024,
        timeout_seconds: float = 30.0,
        idle_timeout_seconds: float = 60.0,
        sockets: SocketHub | None = None,
        authorizer: Callable[[dict[str, Any]], dict[str, Any] | None] | None = None,
    ) -> None:
        """Configure the front; nothing listens until :meth:`start`.

        Args:
            handler: The Lambda handler to call for every request.
            host: Address to bind.
            port: Port to bind; 0 picks a free one (read it back from :attr:`port`).
            max_body_bytes: Largest request body accepted; larger ones get 413.
            function_name: ``context.function_name`` (also used in the ARN and log group).
            memory_limit_in_mb: ``context.memory_limit_in_mb``.
            timeout_seconds: The simulated function timeout behind ``get_remaining_time_in_millis``.
            idle_timeout_seconds: How long an idle keep-alive connection stays open.
            sockets: Serves WebSocket upgrades to the real-time socket and the management API of its sessions
                (:mod:`lakesync.local.websocket`); ``None``: those requests go to the handler like any other.
            authorizer: Runs before the handler as API Gateway runs a route's authorizer: given the event, it
                returns the refusal (a handler result) or ``None`` to call the handler
                (:class:`lakesync.local.authorizer.LocalAuthorizer`).
        """
        if max_body_bytes < 0:
            raise ValueError("max_body_bytes must not be negative")
        self.handler = handler
        self.host = host
        self.max_body_bytes = max_body_bytes
        self.function_name = function_name
        self.memory_limit_in_mb = memory_limit_in_mb
        self.timeout_seconds = timeout_seconds
        self.idle_timeout_seconds = idle_timeout_seconds
        self.sockets = sockets
        self.authorizer = authorizer
        self._requested_port = port
        self._server: _Server | None = None
        self._thread: threading.Thread | None = None

    @property
    def port(self) -> int:
        """The bound port (only while started)."""
        return self._running_server().server_address[1]

    @property
    def url(self) -> str:
        """Base URL, e.g. ``http://127.0.0.1:54321`` (only while started)."""
        host = self.host if ":" not in self.host else f"[{self.host}]"
        return f"http://{host}:{self.port}"

    def start(self) -> Self:
        """Bind and serve in a background thread.

        Raises:
            RuntimeError: Already started.
            OSError: The address cannot be bound.
        """
        if self._server is not None:
            raise RuntimeError("LocalFront is already started")
        server = _Server((self.host, self._requested_port), _RequestHandler, front=self)
        self._thread = threading.Thread(
            target=server.serve_forever, kwargs={"poll_interval": 0.1}, name=f"local-front:{self.function_name}"
        )
        self._server = server
        self._thread.daemon = True
        self._thread.start()
        logger.info("local front for %s listening on %s", self.function_name, self.url)
        return self

    def stop(self) -> None:
        """Stop serving, close open connections and release the port. Idempotent."""
        server, thread = self._server, self._thread
        self._server = self._thread = None
        if server is None:
            return
        if self.sockets is not None:
            self.sockets.close_all()
        server.shutdown()
        server.close_connections()
        server.server_close()
        if thread is not None:
            thread.join()

    def __enter__(self) -> Self:
        return self.start()

    def __exit__(
        self, exc_type: type[BaseException] | None, exc: BaseException | None, tb: TracebackType | None
    ) -> None:
        self.stop()

    def invoke(
        self, method: str, target: str, headers: list[tuple[str, str]], body: bytes, source_ip: str
    ) -> tuple[int, list[tuple[str, str]], bytes]:
        """Run one request through the handler as API Gateway would; the HTTP server calls this.

        Args:
            method: HTTP method.
            target: The request target (path and query, or an absolute URL).
            headers: Request headers as pairs.
            body: The whole request body.
            source_ip: The client's address.

        Returns:
            ``(status, headers, body)`` for the client; ``apigw-requestid`` is among the headers.
        """
        if target.startswith("/"):
            path, _, query = target.partition("?")
        else:
            parts = urlsplit(target)
            path, query = parts.path or "/", parts.query
        event = http_event(method, path, query=query, headers=headers, body=body, source_ip=source_ip)
        request_id: str = event["requestContext"]["requestId"]
        context = LambdaContext(
            function_name=self.function_name,
            aws_request_id=str(uuid.uuid4()),
            invoked_function_arn=f"arn:aws:lambda:us-east-1:{DEFAULT_ACCOUNT_ID}:function:{self.function_name}",
            memory_limit_in_mb=self.memory_limit_in_mb,
            log_group_name=f"/aws/lambda/{self.function_name}",
            deadline_monotonic=time.monotonic() + self.timeout_seconds,
        )
        try:
            refusal = self.authorizer(event) if self.authorizer is not None else None
            result = refusal if refusal is not None else self.handler(event, context)
            status, out_headers, out_body = response_to_http(result)
        # Lambda reports any handler failure as a failed invocation, which API Gateway turns into a 500.
        except Exception:
            logger.exception("%s %s failed (request %s)", method, path, request_id)
            status = 500
            out_headers = [("content-type", "application/json")]
            out_body = json.dumps(INTERNAL_ERROR_BODY).encode("utf-8")
        out_headers.append(("apigw-requestid", request_id))
        return status, out_headers, out_body

    def _running_server(self) -> _Server:
        if self._server is None:
            raise RuntimeError("LocalFront is not started")
        return self._server


class _Server(ThreadingHTTPServer):
    daemon_threads = True

    def __init__(
        self, address: tuple[str, int], handler_class: type[BaseHTTPRequestHandler], *, front: LocalFront
    ) -> None:
        if ":" in address[0]:
            self.address_family = socket.AF_INET6
        self.front = front
        self._connections: set[socket.socket] = set()
        self._connections_lock = threading.Lock()
        super().__init__(address, handler_class)

    def server_bind(self) -> None:
        # HTTPServer.server_bind resolves the host with getfqdn(), which can stall on a machine without DNS.
        socketserver.TCPServer.server_bind(self)
        host, port = self.server_address[:2]
        self.server_name, self.server_port = str(host), int(port)

    def process_request(self, request: Any, client_address: Any) -> None:
        with self._connections_lock:
            self._connections.add(request)
        super().process_request(request, client_address)

    def shutdown_request(self, request: Any) -> None:
        with self._connections_lock:
            self._connections.discard(request)
        super().shutdown_request(request)

    def close_connections(self) -> None:
        """Wake every handler thread blocked on a kept-alive connection so it ends."""
        with self._connections_lock:
            connections = list(self._connections)
        for connection in connections:
            with contextlib.suppress(OSError):
                connection.shutdown(socket.SHUT_RDWR)

    def handle_error(self, request: Any, client_address: Any) -> None:
        # Called inside the except block of the request thread: clients that go away are routine, the rest is not.
        if isinstance(sys.exc_info()[1], ConnectionError | TimeoutError):
            logger.debug("connection from %s ended early", client_address, exc_info=True)
        else:
            logger.exception("error serving %s", client_address)


class _RequestHandler(BaseHTTPRequestHandler):
    protocol_version = "HTTP/1.1"
    server: _Server

    def setup(self) -> None:
        super().setup()
        self.connection.settimeout(self.server.front.idle_timeout_seconds)

    def version_string(self) -> str:
        return "lakesync-local"

    def __getattr__(self, name: str) -> Any:
        # BaseHTTPRequestHandler dispatches to do_<METHOD>; an HTTP API $default route takes every method.
        if name.startswith("do_"):
            return self._serve
        raise AttributeError(name)

    def handle_expect_100(self) -> bool:
        length = self._declared_length()
        if length is not None and length > self.server.front.max_body_bytes:
            self._reject_too_large(length)
            return False
        return super().handle_expect_100()

    def _serve(self) -> None:
        front = self.server.front
        if front.sockets is not None and self._serve_sockets(front.sockets):
            return
        transfer_encoding = self.headers.get("Transfer-Encoding")
        if transfer_encoding is not None:
            if transfer_encoding.strip().lower() != "chunked":
                self.send_error(HTTPStatus.NOT_IMPLEMENTED, "Unsupported Transfer-Encoding")
                return
            body = self._read_chunked(front.max_body_bytes)
            if body is None:
                return
        else:
            length = self._declared_length()
            if length is None:
                self.send_error(HTTPStatus.BAD_REQUEST, "Invalid Content-Length")
                return
            if length > front.max_body_bytes:
                self._reject_too_large(length)
                return
            body = self.rfile.read(length) if length else b""
            if len(body) < length:
                self.close_connection = True
                return
        headers = [(name, value) for name, value in self.headers.items() if name.lower() not in _HOP_BY_HOP]
        headers.append(("x-forwarded-port", str(self.server.server_port)))
        # http.server folds a leading "//" into "/" (an open-redirect guard for file servers); API Gateway routes
        # the path as sent, so "//v1/..." must not reach the "/v1/..." routes: take the target from the request line.
        words = self.requestline.split()
        target = words[1] if len(words) == 3 else self.path
        status, out_headers, payload = front.invoke(self.command, target, headers, body, str(self.client_address[0]))
        self._write(status, out_headers, payload)

    def _serve_sockets(self, sockets: SocketHub) -> bool:
        """Serve a socket upgrade or a management-API call; ``False`` when the request is neither."""
        path, _, query = self.path.partition("?")
        if self.headers.get("Upgrade", "").lower() == "websocket" and is_socket_path(path):
            sockets.serve_upgrade(self, path, query)
            return True
        if not path.startswith("/@connections/"):
            return False
        length = self._declared_length()
        if length is None or length > API_GATEWAY_MAX_BODY_BYTES:
            self.send_error(HTTPStatus.BAD_REQUEST, "Invalid Content-Length")
            return True
        body = self.rfile.read(length) if length else b""
        words = self.requestline.split()
        request = ManagementRequest(
            method=self.command,
            target=words[1] if len(words) == 3 else self.path,
            headers={name.lower(): value for name, value in self.headers.items()},
            peer=str(self.client_address[0]) if self.client_address else "",
            local_address=_local_address(self.connection),
        )
        answer = sockets.refusal(request, body) or sockets.manage(self.command, path, body)
        if answer is None:
            return False
        self._write(*answer)
        return True

    def _declared_length(self) -> int | None:
        """The Content-Length (0 when absent), or None when it is not a valid length."""
        values = self.headers.get_all("Content-Length") or []
        if not values:
            return 0
        text = values[0].strip()
        if len(set(values)) != 1 or not (text.isascii() and text.isdigit()):
            return None
        return int(text)

    def _read_chunked(self, limit: int) -> bytes | None:
        """Read a chunked body; None when a response (400/413) was already sent."""
        parts: list[bytes] = []
        total = 0
        while True:
            line = self.rfile.readline(_MAX_LINE + 1)
            size_text = line.split(b";", 1)[0].strip()
            if not _CHUNK_SIZE.fullmatch(size_text):
                self.send_error(HTTPStatus.BAD_REQUEST, "Invalid chunked encoding")
                return None
            size = int(size_text, 16)
            if size == 0:
                break
            total += size
            if total > limit:
                self._reject_too_large(None)
                return None
            chunk = self.rfile.read(size)
            if len(chunk) < size or self.rfile.readline(_MAX_LINE + 1).strip():
                self.send_error(HTTPStatus.BAD_REQUEST, "Invalid chunked encoding")
                return None
            parts.append(chunk)
        while self.rfile.readline(_MAX_LINE + 1).strip():
            pass  # trailer fields: API Gateway does not pass them on either
        return b"".join(parts)

    def _reject_too_large(self, declared: int | None) -> None:
        limit = self.server.front.max_body_bytes
        error = PayloadTooLargeError(f"Payload too large (max {limit} bytes)")
        self._write(error.status, [("content-type", "application/json")], _json(error), close=True)
        # Closing with unread input makes the kernel reset the connection, and a client still sending its body
        # would see the reset instead of the 413: read and drop what keeps coming, within bounds.
        self._drain(_DRAIN_MAX_BYTES if declared is None else min(declared, _DRAIN_MAX_BYTES))

    def _drain(self, budget: int) -> None:
        with contextlib.suppress(OSError, ValueError):
            self.connection.settimeout(_DRAIN_TIMEOUT_SECONDS)
            while budget > 0:
                data = self.rfile.read1(min(budget, 65536))
                if not data:
                    break
                budget -= len(data)

    def send_error(self, code: int, message: str | None = None, explain: str | None = None) -> None:
        status = HTTPStatus(code)
        text = message or status.phrase
        if status in _REFUSED_REQUESTS:
            # The stdlib answers a request it cannot read (an HTTP version or a transfer coding it does not speak)
            # with a 5xx; it is the request that is wrong, and bad input gets a 4xx.
            status, text = HTTPStatus.BAD_REQUEST, f"{text}: send HTTP/1.1 with a Content-Length or chunked body"
            code = status
        if self.request_version == "HTTP/0.9":
            # Still the stdlib's default when the request line did not parse, which would send the body alone.
            self.request_version = "HTTP/1.1"
        error = ValidationError(text) if status < 500 else LakeSyncError(text)
        self.log_error("code %d, message %s", code, text)
        self._write(code, [("content-type", "application/json")], _json(error), close=True)

    def _write(self, status: int, headers: list[tuple[str, str]], body: bytes, *, close: bool = False) -> None:
        self.send_response(status)
        for name, value in headers:
            self.send_header(name, value)
        bodiless = status in (HTTPStatus.NO_CONTENT, HTTPStatus.NOT_MODIFIED)
        if not bodiless:
            self.send_header("Content-Length", str(len(body)))
        if close:
            self.send_header("Connection", "close")
        self.end_headers()
        if not bodiless and self.command != "HEAD" and body:
            self.wfile.write(body)

    def log_message(self, format: str, *args: Any) -> None:
        logger.debug("%s " + format, self.address_string(), *args)

    def log_error(self, format: str, *args: Any) -> None:
        logger.info("%s " + format, self.address_string(), *args)


def _local_address(connection: socket.socket) -> str:
    """The address a TCP client connected to (empty for other sockets)."""
    try:
        address = connection.getsockname()
    except OSError:
        return ""
    return str(address[0]) if isinstance(address, tuple) else ""


def _json(error: LakeSyncError) -> bytes:
    return json.dumps(error.to_body()).encode("utf-8")
