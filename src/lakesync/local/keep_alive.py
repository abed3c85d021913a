"""Moto's request handler serving HTTP/1.1 keep-alive: one TCP connection carries a client's requests one after another.

Werkzeug's development server answers every request with ``Connection: close`` and then discards whatever the client
sends in the next few milliseconds (its way of draining a body the application left unread). So behind it, every AWS
call of a client opens a TCP connection, and the server a thread: a third of the server's time under many threads
(the concurrency tests), and a tail for every broadcast, which reads DynamoDB in many short calls.

:func:`keep_alive_handler` keeps moto's handler (its WSGI environ, with the S3 metadata headers it preserves) and
replaces only how a response is written: whole, with its ``Content-Length``, the connection left open unless the
client or an error closes it. That is safe only behind an application that reads every request body before it
answers, as :class:`lakesync.local.moto._Isolation` does. A stopped server must also end its kept connections
(:meth:`close_all`): its handler threads would otherwise go on serving them after ``shutdown``.
"""

from __future__ import annotations

import contextlib
import logging
import socket
import threading
from collections.abc import Iterable
from typing import Any, ClassVar

logger = logging.getLogger(__name__)

_NO_BODY = frozenset({204, 304})
_FRAMING = frozenset({"content-length", "transfer-encoding", "connection"})


def keep_alive_handler() -> type[Any]:
    """Moto's ``MotoRequestHandler`` writing whole responses on kept-alive connections (see the module docstring): a
    new class per server, whose ``close_all()`` ends the connections it holds open."""
    from moto.moto_server.werkzeug_app import MotoRequestHandler

    class KeepAlive(MotoRequestHandler):
        protocol_version = "HTTP/1.1"
        held: ClassVar[set[socket.socket]] = set()
        held_lock: ClassVar[threading.Lock] = threading.Lock()

        def setup(self) -> None:
            super().setup()
            # A response goes out in two writes (head, body): with Nagle's algorithm the body would wait for the
            # client's delayed ACK of the head (40 ms or more) on every kept connection.
            self.connection.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
            with self.held_lock:
                self.held.add(self.connection)

        def finish(self) -> None:
            with self.held_lock:
                self.held.discard(self.connection)
            super().finish()

        @classmethod
        def close_all(cls) -> None:
            """End every connection the server still holds (after ``shutdown``: the server accepts no more)."""
            with cls.held_lock:
                held = list(cls.held)
            for connection in held:
                with contextlib.suppress(OSError):
                    connection.shutdown(socket.SHUT_RDWR)

        def run_wsgi(self) -> None:
            if self.headers.get("Expect", "").lower().strip(" \t") == "100-continue":
                self.wfile.write(b"HTTP/1.1 100 Continue\r\n\r\n")
            self.environ = environ = self.make_environ()
            answer = _call(self.server.app, environ)
            if answer is None:
                self.close_connection = True  # the body may be unread: the next request line cannot be found
                answer = ("500 Internal Server Error", [("Content-Type", "text/plain")], b"Internal Server Error")
            status, headers, body = answer
            code_text, _, reason = status.partition(" ")
            code = int(code_text)
            self.send_response(code, reason)
            head = self.command == "HEAD"
            for name, value in headers:
                if name.lower() not in _FRAMING or (head and name.lower() == "content-length"):
                    self.send_header(name, value)
            if not head and code not in _NO_BODY and code >= 200:
                self.send_header("Content-Length", str(len(body)))
            if self.close_connection:
                self.send_header("Connection", "close")
            self.end_headers()
            if not head and code not in _NO_BODY:
                self.wfile.write(body)

    return KeepAlive


def _call(app: Any, environ: dict[str, Any]) -> tuple[str, list[tuple[str, str]], bytes] | None:
    """The application's status, headers and whole body; ``None`` when it failed (logged)."""
    started: list[Any] = []

    def start_response(status: str, headers: list[tuple[str, str]], exc_info: Any = None) -> Any:
        started[:] = [status, headers]
        return _refuse_write

    try:
        chunks: Iterable[bytes] = app(environ, start_response)
        try:
            body = b"".join(chunks)
        finally:
            close = getattr(chunks, "close", None)
            if close is not None:
                close()
    except Exception:
        logger.exception("moto failed a request: %s %s", environ.get("REQUEST_METHOD"), environ.get("PATH_INFO"))
        return None
    return started[0], started[1], body


def _refuse_write(data: bytes) -> None:
    raise NotImplementedError("write() is not supported: return the body")
