"""A stand-in for API Gateway's WebSocket management API (moto does not serve it), on a stdlib HTTP server.

It implements the documented subset the sender uses, under a stage path (``/{stage}/@connections/{id}``, the
connection id URL-encoded as boto3 sends it):

* ``POST`` (``PostToConnection``): the body is one message to the session; 200, or 410 ``GoneException`` for an id
  it does not know;
* ``DELETE`` (``DeleteConnection``): 204 and the session is gone; 410 for an unknown id;
* ``GET`` (``GetConnection``): 200 ``{connectedAt, identity}`` (the wire's JSON names); 410 for an unknown id.

Errors carry ``x-amzn-ErrorType`` as API Gateway's REST-JSON errors do. ``throttle(id, n)`` answers the next ``n``
calls for that id with 429 ``LimitExceededException``.
"""

from __future__ import annotations

import json
import threading
import urllib.parse
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass, field
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Any

STAGE = "prod"


@dataclass
class ManagementApi:
    """The fake's state: open sessions and what each was sent, closed ids, pending throttles and every request."""

    url: str = ""
    sessions: dict[str, list[bytes]] = field(default_factory=dict)
    closed: list[str] = field(default_factory=list)
    throttles: dict[str, int] = field(default_factory=dict)
    requests: list[tuple[str, str]] = field(default_factory=list)
    lock: threading.Lock = field(default_factory=threading.Lock)

    def connect(self, connection_id: str) -> None:
        with self.lock:
            self.sessions[connection_id] = []

    def throttle(self, connection_id: str, times: int = 1) -> None:
        with self.lock:
            self.throttles[connection_id] = times

    def sent(self, connection_id: str) -> list[bytes]:
        with self.lock:
            return list(self.sessions.get(connection_id, []))

    def receive(self, method: str, connection_id: str, body: bytes) -> tuple[bool, bool]:
        """Record a request and apply it: ``(throttled, known)``."""
        with self.lock:
            self.requests.append((method, connection_id))
            throttled = self.throttles.get(connection_id, 0) > 0
            if throttled:
                self.throttles[connection_id] -= 1
            known = connection_id in self.sessions
            if throttled or not known:
                return throttled, known
            if method == "POST":
                self.sessions[connection_id].append(body)
            elif method == "DELETE":
                del self.sessions[connection_id]
                self.closed.append(connection_id)
            return throttled, known

    def reset(self) -> None:
        with self.lock:
            self.sessions.clear()
            self.closed.clear()
            self.throttles.clear()
            self.requests.clear()


def _handler(state: ManagementApi) -> type[BaseHTTPRequestHandler]:
    class Handler(BaseHTTPRequestHandler):
        def log_message(self, format: str, *args: Any) -> None:
            pass

        def _answer(self, status: int, body: dict[str, Any] | None = None, error: str | None = None) -> None:
            data = json.dumps(body).encode() if body is not None else b""
            self.send_response(status)
            self.send_header("Content-Type", "application/json")
            self.send_header("Content-Length", str(len(data)))
            if error:
                self.send_header("x-amzn-ErrorType", error)
            self.end_headers()
            self.wfile.write(data)

        def _serve(self, method: str) -> None:
            length = int(self.headers.get("Content-Length") or 0)
            body = self.rfile.read(length) if length else b""
            prefix = f"/{STAGE}/@connections/"
            if not self.path.startswith(prefix):
                self._answer(404, {"message": "Not Found"}, "NotFoundException")
                return
            connection_id = urllib.parse.unquote(self.path[len(prefix) :])
            throttled, known = state.receive(method, connection_id, body)
            if throttled:
                self._answer(429, {"message": "Too Many Requests"}, "LimitExceededException")
            elif not known:
                self._answer(410, {"message": None}, "GoneException")
            elif method == "GET":
                identity = {"sourceIp": "127.0.0.1", "userAgent": "test"}
                self._answer(200, {"connectedAt": "2025-01-01T00:00:00Z", "identity": identity})
            elif method == "DELETE":
                self._answer(204)
            else:
                self._answer(200)

        def do_POST(self) -> None:
            self._serve("POST")

        def do_DELETE(self) -> None:
            self._serve("DELETE")

        def do_GET(self) -> None:
            self._serve("GET")

    return Handler


@contextmanager
def management_api() -> Iterator[ManagementApi]:
    """Serve the fake on 127.0.0.1; ``url`` is the stage's callback URL."""
    state = ManagementApi()
    server = ThreadingHTTPServer(("127.0.0.1", 0), _handler(state))
    server.daemon_threads = True
    state.url = f"http://127.0.0.1:{server.server_address[1]}/{STAGE}"
    thread = threading.Thread(target=server.serve_forever, name="management-api", daemon=True)
    thread.start()
    try:
        yield state
    finally:
        server.shutdown()
        server.server_close()
        thread.join(timeout=5)
