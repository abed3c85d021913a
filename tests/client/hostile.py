"""A scripted gateway for hostile-input tests: a real HTTP server (stdlib, in a thread) whose answers per route the
test chooses, recording what it was sent."""

from __future__ import annotations

import json
import threading
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Any


@dataclass
class Answer:
    """One scripted answer: ``close`` drops the connection without answering; ``delay`` waits first; ``drip`` sends
    the body a byte at a time, that many seconds apart."""

    status: int = 200
    body: bytes = b""
    headers: dict[str, str] = field(default_factory=dict)
    close: bool = False
    delay: float = 0.0
    drip: float = 0.0


def json_answer(doc: Any, status: int = 200) -> Answer:
    """A JSON answer."""
    return Answer(status, json.dumps(doc).encode(), {"Content-Type": "application/json"})


@dataclass(frozen=True)
class Seen:
    """A request the gateway received."""

    method: str
    route: str
    query: str
    body: bytes
    headers: dict[str, str]


Route = Callable[[Seen], Answer]


class ScriptedGateway:
    """Routes by the last path segment (``push``, ``pull``, ``checkpoint``); unscripted routes answer 404."""

    def __init__(self) -> None:
        self.routes: dict[str, Route] = {}
        self.seen: list[Seen] = []
        gateway = self

        class Handler(BaseHTTPRequestHandler):
            protocol_version = "HTTP/1.1"

            def log_message(self, *_args: Any) -> None:
                pass

            def _serve(self) -> None:
                path, _, query = self.path.partition("?")
                length = int(self.headers.get("Content-Length") or 0)
                body = self.rfile.read(length)
                seen = Seen(self.command, path.rsplit("/", 1)[-1], query, body, dict(self.headers.items()))
                gateway.seen.append(seen)
                route = gateway.routes.get(seen.route)
                answer = route(seen) if route is not None else json_answer({"error": "no", "code": "NOT_FOUND"}, 404)
                if answer.delay:
                    time.sleep(answer.delay)
                if answer.close:
                    self.close_connection = True
                    return
                self.send_response(answer.status)
                headers = {"Content-Length": str(len(answer.body)), **answer.headers}
                for name, value in headers.items():
                    self.send_header(name, value)
                self.end_headers()
                if not answer.drip:
                    self.wfile.write(answer.body)
                    return
                self.wfile.flush()
                for byte in answer.body:
                    time.sleep(answer.drip)
                    try:
                        self.wfile.write(bytes((byte,)))
                        self.wfile.flush()
                    except OSError:  # the client gave up
                        self.close_connection = True
                        return

            do_GET = do_POST = _serve

        self.server = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
        self.server.daemon_threads = True
        self.url = f"http://127.0.0.1:{self.server.server_address[1]}"
        self._thread = threading.Thread(target=self.server.serve_forever, daemon=True)

    def __enter__(self) -> ScriptedGateway:
        self._thread.start()
        return self

    def __exit__(self, *exc: object) -> None:
        self.server.shutdown()
        self.server.server_close()

    def sent(self, route: str) -> list[Seen]:
        """The requests of one route, in order."""
        return [s for s in self.seen if s.route == route]


def empty_pull(_seen: Seen) -> Answer:
    """A valid last pull page with nothing in it."""
    return json_answer({"deltas": [], "serverHlc": "0", "hasMore": False, "cursor": "c1"})


def sent_delta_ids(seen: Seen) -> list[str]:
    """The deltaIds of a JSON push, in order."""
    return [d["deltaId"] for d in json.loads(seen.body)["deltas"]]


def good_push(seen: Seen) -> Answer:
    """What a gateway answers a push it applied: one receipt per delta, in order."""
    ids = sent_delta_ids(seen)
    receipts = [{"deltaId": i, "duplicate": False, "columns": []} for i in ids]
    return json_answer({"serverHlc": "1", "accepted": len(ids), "deltas": [], "receipts": receipts})
