"""What the local vendor API servers share: a threaded HTTP server on a free local port holding the fake vendor's
state (``self.server.state`` in a handler), served on a thread for the length of a ``with`` block."""

from __future__ import annotations

import threading
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Generic, TypeVar

S = TypeVar("S")


class StateServer(ThreadingHTTPServer, Generic[S]):
    """A threaded local server whose handlers read and change ``state``."""

    daemon_threads = True

    def __init__(self, handler: type[BaseHTTPRequestHandler], state: S) -> None:
        super().__init__(("127.0.0.1", 0), handler)
        self.state = state


@contextmanager
def serving(handler: type[BaseHTTPRequestHandler], state: S, on_url: Callable[[str], None]) -> Iterator[str]:
    """Serve ``state`` with ``handler`` on a free port; ``on_url`` gets the base URL before the first request."""
    server = StateServer(handler, state)
    url = f"http://127.0.0.1:{server.server_address[1]}"
    on_url(url)
    thread = threading.Thread(target=server.serve_forever, kwargs={"poll_interval": 0.05}, daemon=True)
    thread.start()
    try:
        yield url
    finally:
        server.shutdown()
        server.server_close()
        thread.join(5)
