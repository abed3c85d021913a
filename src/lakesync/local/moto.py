"""moto in server mode, in this process, as the embedded default's AWS.

:class:`MotoServer` runs moto's WSGI app on 127.0.0.1 (one request at a time, see :class:`_OneRequestAtATime`) and
hands out what boto3 needs to reach it
(:class:`AwsEndpoint`), without touching ``os.environ``: callers pass ``client_kwargs()`` to ``boto3.client`` or
``env()`` to a subprocess, as they choose.

Invariants:

* moto keeps its state in module globals: every server in a process (and every ``mock_aws`` block) shares it, and
  :meth:`MotoServer.reset` (``POST /moto-api/reset``) clears all of it.
* No AWS call leaves the machine: the endpoint is the local server and the credentials are fake.
* Werkzeug's per-request log lines stay out of stderr unless the caller configures the ``werkzeug`` logger.
* Readiness and reset use plain HTTP; this module does not import boto3.
* Transactions cost what they cost on DynamoDB, not more as tables grow (:mod:`lakesync.local.moto_fast`).
"""

from __future__ import annotations

import errno
import logging
import socket
import threading
import urllib.request
from dataclasses import dataclass
from types import TracebackType
from typing import Any, Self

from werkzeug.serving import BaseWSGIServer

from lakesync.local.moto_fast import install_fast_transactions

__all__ = ["DEFAULT_REGION", "AwsEndpoint", "MotoServer"]

logger = logging.getLogger(__name__)

DEFAULT_REGION = "us-east-1"


@dataclass(frozen=True, slots=True)
class AwsEndpoint:
    """Where and as whom boto3 clients talk to a local AWS.

    Attributes:
        endpoint_url: Base URL of the server, e.g. ``http://127.0.0.1:5000``.
        region: AWS region name.
        access_key_id: Fake access key.
        secret_access_key: Fake secret key.
    """

    endpoint_url: str
    region: str = DEFAULT_REGION
    access_key_id: str = "testing"
    secret_access_key: str = "testing"

    def client_kwargs(self) -> dict[str, str]:
        """Keyword arguments for ``boto3.client(service, **kwargs)`` (or ``session.client``)."""
        return {
            "endpoint_url": self.endpoint_url,
            "region_name": self.region,
            "aws_access_key_id": self.access_key_id,
            "aws_secret_access_key": self.secret_access_key,
        }

    def env(self) -> dict[str, str]:
        """Environment variables that point the AWS SDKs and CLI of a child process at this endpoint."""
        return {
            "AWS_ENDPOINT_URL": self.endpoint_url,
            "AWS_REGION": self.region,
            "AWS_DEFAULT_REGION": self.region,
            "AWS_ACCESS_KEY_ID": self.access_key_id,
            "AWS_SECRET_ACCESS_KEY": self.secret_access_key,
            # botocore's account-id-based DynamoDB endpoints off, as moto expects (DynamoDB Streams need it).
            "AWS_ACCOUNT_ID_ENDPOINT_MODE": "disabled",
        }


class MotoServer:
    """moto's server mode in a background thread.

    Usage::

        with MotoServer() as moto:
            dynamodb = boto3.client("dynamodb", **moto.aws().client_kwargs())
    """

    def __init__(self, host: str = "127.0.0.1", port: int = 0, *, region: str = DEFAULT_REGION) -> None:
        """Configure the server; nothing listens until :meth:`start`.

        Args:
            host: Address to bind.
            port: Port to bind; 0 picks a free one.
            region: Region reported by :meth:`aws`.
        """
        self.host = host
        self.region = region
        self._requested_port = port
        self._server: BaseWSGIServer | None = None
        self._thread: threading.Thread | None = None
        self._port: int | None = None

    @property
    def port(self) -> int:
        """The bound port (only while started)."""
        if self._port is None:
            raise RuntimeError("MotoServer is not started")
        return self._port

    @property
    def endpoint_url(self) -> str:
        """Base URL of the running server."""
        host = self.host if ":" not in self.host else f"[{self.host}]"
        return f"http://{host}:{self.port}"

    def aws(self) -> AwsEndpoint:
        """Endpoint, region and fake credentials for clients of this server."""
        return AwsEndpoint(endpoint_url=self.endpoint_url, region=self.region)

    def start(self) -> Self:
        """Bind and serve in a background thread.

        Raises:
            RuntimeError: Already started.
            OSError: The requested port is taken.
        """
        if self._server is not None:
            raise RuntimeError("MotoServer is already started")
        if self._requested_port:
            # ThreadedMotoServer.start() waits forever when its thread fails to bind: check first.
            _check_bindable(self.host, self._requested_port)
        _quiet_werkzeug()
        install_fast_transactions()
        from moto.moto_server.werkzeug_app import (
            DomainDispatcherApplication,
            MotoRequestHandler,
            create_backend_app,
        )
        from werkzeug.serving import make_server

        app = _OneRequestAtATime(DomainDispatcherApplication(create_backend_app))
        server = make_server(self.host, self._requested_port, app, threaded=True, request_handler=MotoRequestHandler)
        thread = threading.Thread(target=server.serve_forever, name="moto-server", daemon=True)
        thread.start()
        self._server = server
        self._thread = thread
        self._port = server.server_address[1]
        logger.info("moto server listening on %s", self.endpoint_url)
        return self

    def stop(self) -> None:
        """Stop the server and release its port. Idempotent; moto's state stays until :meth:`reset`."""
        server, self._server, self._port = self._server, None, None
        if server is not None:
            server.shutdown()
            server.server_close()
            if self._thread is not None:
                self._thread.join(10)
                self._thread = None

    def reset(self) -> None:
        """Clear every moto backend of this process (``POST /moto-api/reset``)."""
        request = urllib.request.Request(f"{self.endpoint_url}/moto-api/reset", data=b"", method="POST")
        with urllib.request.urlopen(request, timeout=30) as response:
            response.read()

    def __enter__(self) -> Self:
        return self.start()

    def __exit__(
        self, exc_type: type[BaseException] | None, exc: BaseException | None, tb: TracebackType | None
    ) -> None:
        self.stop()


class _OneRequestAtATime:
    """WSGI middleware running each request (body included) under one lock.

    DynamoDB isolates every request; moto's threaded server does not: a transaction that fails a condition restores
    a snapshot of whole tables, wiping writes that other requests made meanwhile. Serialising requests restores
    DynamoDB's per-request isolation (found by the gateway's concurrency test).
    """

    def __init__(self, app: Any) -> None:
        self.app = app
        self.lock = threading.Lock()

    def __call__(self, environ: Any, start_response: Any) -> list[bytes]:
        with self.lock:
            return list(self.app(environ, start_response))


def _check_bindable(host: str, port: int) -> None:
    family = socket.AF_INET6 if ":" in host else socket.AF_INET
    with socket.socket(family, socket.SOCK_STREAM) as probe:
        # The server sets SO_REUSEADDR too, so a port in TIME_WAIT is not "taken".
        probe.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
        try:
            probe.bind((host, port))
        except OSError as e:
            raise OSError(e.errno or errno.EADDRINUSE, f"cannot bind moto server to {host}:{port}: {e}") from e


def _quiet_werkzeug() -> None:
    # Werkzeug sets its logger to INFO and adds a stderr handler on first use unless a level is configured.
    werkzeug_logger = logging.getLogger("werkzeug")
    if werkzeug_logger.level == logging.NOTSET:
        werkzeug_logger.setLevel(logging.WARNING)
