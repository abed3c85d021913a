"""Moto's request handler serving HTTP/1.1 keep-alive: one TCP connection carries a client's requests one after another.

Werkzeug's development server answers every request with ``Connection: close`` and then discards whatever the client
sends in the next few milliseconds (its way of draining a body the application left unread). So behind it, every AWS
call of a client opens a TCP connection, and the server a thread: a third of the server's time under many threads
(the concurrency tests), and a tail for every broadcast, which reads DynamoDB in many short calls.

:func:`keep_alive_handler` keeps moto's handler (its WSGI environ, with the S3 metadata headers it preserves) and
replaces only how a response is written: whole, with its ``Content-Length``, the connection left open unless the
client or an error closes it. That is safe only behind an application that reads every request body before it
answers, as :class:`lakesync.local.moto._Isolation` does.
"""

from __future__ import annotations

import logging
from collections.abc import Iterable
from typing import Any

logger = logging.getLogger(__name__)

_NO_BODY = frozenset({204, 304})
_FRAMING = frozenset({"content-length", "transfer-encoding", "connection"})


def keep_alive_handler() -> type[Any]:
    """Moto's ``MotoRequestHandler`` writing whole responses on kept-alive connections (see the module docstring)."""
    from moto.moto_server.werkzeug_app import MotoRequestHandler

    class KeepAlive(MotoRequestHandler):
        protocol_version = "HTTP/1.1"

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
