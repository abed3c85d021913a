"""moto in server mode, in this process, as the embedded default's AWS.

:class:`MotoServer` runs moto's WSGI app on 127.0.0.1, many requests at once, and hands out what boto3 needs to
reach it (:class:`AwsEndpoint`), without touching ``os.environ``: callers pass ``client_kwargs()`` to ``boto3.client``
or ``env()`` to a subprocess, as they choose.

Invariants:

* The server listens on a loopback address only (another host is refused), and answers only requests signed (AWS
  SigV4, :mod:`lakesync.local.access`) with its own credential: a random key pair per server unless the caller gives
  one. Anything else -- unsigned, another key (moto itself takes any), a bad signature, a presigned URL -- is
  refused 403 before moto sees it, ``/moto-api`` (reset, dashboard, state manager) included.
* moto keeps its state in module globals: every server in a process (and every ``mock_aws`` block) shares it, and
  :meth:`MotoServer.reset` (``POST /moto-api/reset``) clears all of it.
* No AWS call leaves the machine: the endpoint is the local server and the credentials are valid nowhere else.
* Werkzeug's per-request log lines stay out of stderr unless the caller configures the ``werkzeug`` logger.
* Readiness and reset use plain HTTP; this module does not import boto3.
* Transactions cost what they cost on DynamoDB, not more as tables grow (:mod:`lakesync.local.moto_fast`).
* DynamoDB requests are isolated from each other as DynamoDB isolates them: moto handles them one at a time (see
  :class:`_Isolation`); S3, SQS and the rest are served concurrently, as is all HTTP parsing and body reading.
* With a journal attached (:meth:`MotoServer.set_journal`, :mod:`lakesync.local.journal`), every successful item
  write (and object write to a journaled bucket) is in the journal, in the order moto applied them, before its
  response is sent.
* A successful DynamoDB item write calls the listeners of the tables it wrote (:meth:`MotoServer.on_write`), after
  moto applied it (its stream records are readable) and before its response is sent.
"""

from __future__ import annotations

import contextlib
import errno
import io
import json
import logging
import socket
import threading
import urllib.request
from collections.abc import Callable, Iterable, Iterator
from dataclasses import dataclass
from types import TracebackType
from typing import TYPE_CHECKING, Any, Self

from werkzeug.serving import BaseWSGIServer

from lakesync.local.access import LocalCredentials, SignatureRefused, is_loopback_host, sign, verify
from lakesync.local.journal import RecordedRequest, journaled
from lakesync.local.keep_alive import keep_alive_handler
from lakesync.local.moto_fast import install_fast_transactions
from lakesync.local.moto_requests import install_fast_requests

if TYPE_CHECKING:
    from lakesync.local.journal import Journal

__all__ = ["DEFAULT_REGION", "AwsEndpoint", "MotoServer"]

logger = logging.getLogger(__name__)

DEFAULT_REGION = "us-east-1"


@dataclass(frozen=True, slots=True)
class AwsEndpoint:
    """Where and as whom boto3 clients talk to a local AWS.

    Attributes:
        endpoint_url: Base URL of the server, e.g. ``http://127.0.0.1:5000``.
        region: AWS region name.
        access_key_id: The server's access key id.
        secret_access_key: The server's secret key.
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

    def __init__(
        self,
        host: str = "127.0.0.1",
        port: int = 0,
        *,
        region: str = DEFAULT_REGION,
        credentials: LocalCredentials | None = None,
    ) -> None:
        """Configure the server; nothing listens until :meth:`start`.

        Args:
            host: Loopback address to bind.
            port: Port to bind; 0 picks a free one.
            region: Region reported by :meth:`aws`.
            credentials: The only key pair requests may be signed with; a random one by default.

        Raises:
            ValueError: ``host`` is not a loopback address.
        """
        if not is_loopback_host(host):
            raise ValueError(f"the moto server listens on loopback only, not {host!r}: every table and bucket is there")
        self.host = host
        self.region = region
        self.credentials = credentials or LocalCredentials.generate()
        self._requested_port = port
        self._server: BaseWSGIServer | None = None
        self._handler: Any = None
        self._thread: threading.Thread | None = None
        self._port: int | None = None
        self._app: _Isolation | None = None

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
        """Endpoint, region and this server's credentials for its clients."""
        return AwsEndpoint(
            endpoint_url=self.endpoint_url,
            region=self.region,
            access_key_id=self.credentials.access_key_id,
            secret_access_key=self.credentials.secret_access_key,
        )

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
        install_fast_requests()
        from moto.moto_server.werkzeug_app import DomainDispatcherApplication, create_backend_app
        from werkzeug.serving import make_server

        app = _Isolation(DomainDispatcherApplication(create_backend_app), self.credentials)
        self._handler = keep_alive_handler()
        server = make_server(self.host, self._requested_port, app, threaded=True, request_handler=self._handler)
        thread = threading.Thread(target=server.serve_forever, name="moto-server", daemon=True)
        thread.start()
        self._server = server
        self._thread = thread
        self._app = app
        self._port = server.server_address[1]
        logger.info("moto server listening on %s", self.endpoint_url)
        return self

    def stop(self) -> None:
        """Stop the server and release its port. Idempotent; moto's state stays until :meth:`reset`."""
        server, self._server, self._port = self._server, None, None
        if server is not None:
            server.shutdown()
            server.server_close()
            self._handler.close_all()  # kept connections would go on being served by their threads
            if self._thread is not None:
                self._thread.join(10)
                self._thread = None

    def reset(self) -> None:
        """Clear every moto backend of this process (``POST /moto-api/reset``)."""
        url = f"{self.endpoint_url}/moto-api/reset"
        headers = sign(self.credentials, "POST", url, region=self.region)
        request = urllib.request.Request(url, data=b"", method="POST", headers=headers)
        with urllib.request.urlopen(request, timeout=30) as response:
            response.read()

    def apply(self, request: RecordedRequest) -> int:
        """Serve ``request`` in this process, bypassing HTTP and the journal (restores and replays); its status."""
        app = self._isolation()
        with app.lock:
            return app.serve_inner(request.to_environ(self.host, self.port))

    @contextlib.contextmanager
    def exclusive(self) -> Iterator[None]:
        """Hold the DynamoDB isolation lock: no DynamoDB request (nor journaled write) runs meanwhile."""
        with self._isolation().lock:
            yield

    def set_journal(
        self,
        journal: Journal | None,
        buckets: frozenset[str] = frozenset(),
        compact_bytes: int = 0,
        on_full: Callable[[], None] | None = None,
    ) -> Journal | None:
        """Journal successful writes from now on (``None``: stop); call inside :meth:`exclusive`. Returns the old
        journal.

        Args:
            journal: Where records go.
            buckets: S3 buckets whose object writes are journaled too.
            compact_bytes: Journal size above which ``on_full`` is called after a write (0: never).
            on_full: Called (outside the lock) when the journal grew past ``compact_bytes``.
        """
        app = self._isolation()
        previous, app.journal = app.journal, journal
        app.buckets, app.compact_bytes, app.on_full = buckets, compact_bytes, on_full
        return previous

    def on_write(self, table: str, listener: Callable[[], None]) -> Callable[[], None]:
        """Call ``listener`` after each successful item write to ``table`` (``PutItem``, ``UpdateItem``,
        ``DeleteItem``, ``BatchWriteItem``, ``TransactWriteItems``), on the writing request's thread: it must not
        block. Returns a function that removes it."""
        app = self._isolation()
        with app.listeners_lock:
            app.listeners.setdefault(table, []).append(listener)

        def remove() -> None:
            with app.listeners_lock:
                if listener in app.listeners.get(table, ()):
                    app.listeners[table].remove(listener)

        return remove

    def _isolation(self) -> _Isolation:
        if self._app is None or self._server is None:
            raise RuntimeError("MotoServer is not started")
        return self._app

    def __enter__(self) -> Self:
        return self.start()

    def __exit__(
        self, exc_type: type[BaseException] | None, exc: BaseException | None, tb: TracebackType | None
    ) -> None:
        self.stop()


class _Isolation:
    """WSGI middleware giving DynamoDB requests DynamoDB's isolation, and journaling successful writes.

    DynamoDB isolates every request; moto's threaded server does not: a ``TransactWriteItems`` that fails a
    condition restores a backup of the whole tables it touched, wiping writes other requests made meanwhile, and a
    read can see a transaction half-applied. So DynamoDB requests run one at a time under :attr:`lock` (found by the
    gateway's concurrency test: without the lock it loses acknowledged commits). The body is read before the lock
    is taken, so a slow client never holds it. S3, SQS (whose long polls would otherwise block every other request)
    and the moto API run concurrently; object writes to journaled buckets take the lock too, to order the journal.
    """

    def __init__(self, app: Any, credentials: LocalCredentials) -> None:
        self.app = app
        self.credentials = credentials
        self.lock = threading.Lock()
        self.journal: Journal | None = None
        self.buckets: frozenset[str] = frozenset()
        self.compact_bytes = 0
        self.on_full: Callable[[], None] | None = None
        self.listeners: dict[str, list[Callable[[], None]]] = {}
        self.listeners_lock = threading.Lock()

    def __call__(self, environ: dict[str, Any], start_response: Any) -> list[bytes]:
        body = _read_body(environ)
        refused = _refusal(self.credentials, environ, body)
        if refused is not None:
            return refused(start_response)
        environ["wsgi.input"] = io.BytesIO(body)
        environ["CONTENT_LENGTH"] = str(len(body))
        target = str(environ.get("HTTP_X_AMZ_TARGET", ""))
        journal = self.journal
        request = RecordedRequest.from_environ(environ, body) if journal is not None else None
        keep = request is not None and journaled(request, self.buckets)
        if not (keep or target.startswith("DynamoDB") or str(environ.get("PATH_INFO", "")).startswith("/moto-api")):
            return list(self.app(environ, start_response))
        upto = 0
        with self.lock:
            journal = self.journal  # a checkpoint may have switched journals while this request waited
            status, headers, out = self._serve(environ)
            if keep and journal is not None and request is not None and status.startswith("2"):
                upto = journal.append(request.encode())
        if self.listeners and target in _ITEM_WRITES and status.startswith("2"):
            self._notify(_written_tables(target, body))
        if upto and journal is not None:
            journal.sync(upto)  # outside the lock: one fsync serves every request that appended before it
            if self.compact_bytes and journal.size > self.compact_bytes and self.on_full is not None:
                self.on_full()
        start_response(status, headers)
        return out

    def _notify(self, tables: Iterable[str]) -> None:
        with self.listeners_lock:
            called = [listener for table in tables for listener in self.listeners.get(table, ())]
        for listener in called:
            try:
                listener()
            except Exception:  # a listener's failure is not the write's: the write has happened
                logger.exception("a write listener failed")

    def serve_inner(self, environ: dict[str, Any]) -> int:
        """Serve ``environ`` with moto's app (the caller holds :attr:`lock`); the HTTP status."""
        status, _headers, _out = self._serve(environ)
        return int(status.split(" ", 1)[0])

    def _serve(self, environ: dict[str, Any]) -> tuple[str, list[tuple[str, str]], list[bytes]]:
        started: list[tuple[str, list[tuple[str, str]]]] = []

        def start_response(status: str, headers: list[tuple[str, str]], exc_info: Any = None) -> Any:
            started[:] = [(status, headers)]
            return lambda data: None

        out = list(self.app(environ, start_response))
        status, headers = started[0]
        return status, headers, out


_ITEM_WRITES = frozenset(
    f"DynamoDB_20120810.{op}" for op in ("PutItem", "UpdateItem", "DeleteItem", "BatchWriteItem", "TransactWriteItems")
)


def _written_tables(target: str, body: bytes) -> set[str]:
    """The tables an item write (``target``, its JSON ``body``) wrote to."""
    try:
        request = json.loads(body)
    except ValueError:
        return set()
    if target.endswith(".BatchWriteItem"):
        return set(request.get("RequestItems") or {})
    if target.endswith(".TransactWriteItems"):
        return {
            str(action["TableName"])
            for item in request.get("TransactItems") or []
            for kind, action in item.items()
            if kind != "ConditionCheck" and isinstance(action, dict) and "TableName" in action
        }
    return {str(request["TableName"])} if "TableName" in request else set()


def _read_body(environ: dict[str, Any]) -> bytes:
    stream = environ.get("wsgi.input")
    if stream is None:
        return b""
    length = str(environ.get("CONTENT_LENGTH") or "").strip()
    if length.isdigit():
        return bytes(stream.read(int(length))) if int(length) else b""
    if environ.get("wsgi.input_terminated"):
        return bytes(stream.read())
    return b""


def _refusal(
    credentials: LocalCredentials, environ: dict[str, Any], body: bytes
) -> Callable[[Any], list[bytes]] | None:
    """``None`` when the request is signed with the server's credential, else the 403 answering it."""
    headers = {
        name[5:].replace("_", "-").lower(): str(value) for name, value in environ.items() if name.startswith("HTTP_")
    }
    for name in ("CONTENT_TYPE", "CONTENT_LENGTH"):
        if environ.get(name):
            headers[name.replace("_", "-").lower()] = str(environ[name])
    target = str(environ.get("RAW_URI") or environ.get("REQUEST_URI") or environ.get("PATH_INFO") or "/")
    try:
        verify(credentials, str(environ.get("REQUEST_METHOD", "GET")), target, headers, body)
    except SignatureRefused as refused:
        logger.warning("moto server refused a request: %s", refused)
        if "x-amz-target" in headers:
            kind, payload = (
                "application/x-amz-json-1.0",
                json.dumps({"__type": refused.code, "message": refused.message}),
            )
        else:
            kind = "application/xml"
            payload = f"<Error><Code>{refused.code}</Code><Message>{refused.message}</Message></Error>"
        data = payload.encode()

        def answer(start_response: Any) -> list[bytes]:
            start_response("403 Forbidden", [("Content-Type", kind), ("Content-Length", str(len(data)))])
            return [data]

        return answer
    return None


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
