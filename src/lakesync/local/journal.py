"""Durability of the embedded default: a redo journal of the write requests moto served, plus snapshots.

moto keeps its state in memory. :class:`DurableState` makes the part of it LakeSync needs survive ``kill -9``, a
crash or a power cut of ``lakesync local``:

* Every DynamoDB item write (``PutItem``, ``UpdateItem``, ``DeleteItem``, ``BatchWriteItem``,
  ``TransactWriteItems``) and every S3 object write to a journaled bucket that moto **answered with 2xx** is appended
  to ``journal-<generation>.log`` as the request itself (method, path, headers, body), inside moto's DynamoDB
  isolation lock (:mod:`lakesync.local.moto`), so the journal's order is the order moto applied the requests in,
  and no other request can observe a write before it is in the journal. The response leaves only after the record
  is fsync'd (group commit: one fsync covers every record appended before it).
* ``snapshot.json`` (:mod:`lakesync.aws.snapshot`) holds every item and journaled object as of the start of journal
  generation ``g``. Recovery loads the snapshot, then replays journals ``g, g+1, ...`` in order through moto's own
  request handling. Requests that succeeded in order from a state succeed again with the same effect (conditions and
  update expressions are functions of the item and the request), so replay rebuilds exactly the acknowledged state:
  nothing lost, nothing applied twice.
* A checkpoint captures moto's state under the lock, switches writes to journal ``g+1``, writes snapshot ``g+1``
  atomically (temporary file, fsync, rename, fsync of the directory) and only then deletes older journals. A crash
  at any point leaves either the old snapshot with every journal since, or the new one: both recover the same
  state. Checkpoints run at start (after recovery), when the journal passes ``compact_bytes``, and at a clean stop.
* Records carry their length and CRC-32: a torn tail (power cut during a write) ends the journal there; it was never
  acknowledged.

Files are created 0600. Requests that fail (a condition check, a cancelled transaction) change nothing and are not
journaled; reads are never journaled.
"""

from __future__ import annotations

import base64
import contextlib
import json
import logging
import os
import re
import struct
import threading
import zlib
from collections.abc import Callable, Iterator
from contextlib import AbstractContextManager
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Protocol
from urllib.parse import quote

from lakesync.aws.snapshot import Snapshot, read_snapshot, write_snapshot


class MotoServer(Protocol):
    """What the durable state needs of the moto server it keeps (:class:`lakesync.local.moto.MotoServer`)."""

    region: str

    def apply(self, request: RecordedRequest) -> int:
        """Serve ``request`` bypassing the journal; its HTTP status."""
        ...

    def exclusive(self) -> AbstractContextManager[None]:
        """Hold the lock no DynamoDB request runs beside."""
        ...

    def set_journal(
        self,
        journal: Journal | None,
        buckets: frozenset[str] = ...,
        compact_bytes: int = ...,
        on_full: Callable[[], None] | None = ...,
    ) -> Journal | None:
        """Journal writes from now on (``None``: stop); the old journal."""
        ...


__all__ = ["DurableState", "Journal", "RecordedRequest", "RecoveryReport"]

logger = logging.getLogger(__name__)

SNAPSHOT_FILE = "snapshot.json"
LEGACY_SNAPSHOT_FILE = "dynamodb.json"
_JOURNAL = re.compile(r"journal-(\d+)\.log")
_HEADER = struct.Struct(">II")  # payload length, CRC-32 of the payload
_META = struct.Struct(">I")  # length of the JSON metadata inside a payload
_DYNAMODB_TARGET = "DynamoDB_20120810."
_DYNAMODB_ITEM_WRITES = frozenset({"PutItem", "UpdateItem", "DeleteItem", "BatchWriteItem", "TransactWriteItems"})
# moto does not check signatures; it reads the service from the credential scope.
_FAKE_SIGNATURE = (
    "AWS4-HMAC-SHA256 Credential=testing/20000101/us-east-1/{service}/aws4_request, SignedHeaders=host, Signature=0"
)
DEFAULT_COMPACT_BYTES = 64 * 1024 * 1024


@dataclass(frozen=True, slots=True)
class RecordedRequest:
    """One HTTP request to moto as its WSGI app saw it, enough to serve it again.

    Attributes:
        method: HTTP method.
        path: ``PATH_INFO``.
        query: ``QUERY_STRING``.
        headers: The request's CGI-style header keys (``HTTP_*``, ``CONTENT_TYPE``) and values, except the host.
        body: The whole body.
    """

    method: str
    path: str
    query: str
    headers: tuple[tuple[str, str], ...]
    body: bytes

    @classmethod
    def from_environ(cls, environ: dict[str, Any], body: bytes) -> RecordedRequest:
        """The request of a WSGI ``environ`` whose body was read into ``body``."""
        headers = tuple(
            (key, str(value))
            for key, value in environ.items()
            if (key.startswith("HTTP_") and key != "HTTP_HOST") or key == "CONTENT_TYPE"
        )
        return cls(
            str(environ.get("REQUEST_METHOD", "GET")),
            str(environ.get("PATH_INFO", "/")),
            str(environ.get("QUERY_STRING", "")),
            headers,
            body,
        )

    def to_environ(self, host: str, port: int) -> dict[str, Any]:
        """A WSGI environ serving this request on ``host:port``."""
        import io
        import sys

        environ: dict[str, Any] = {
            "REQUEST_METHOD": self.method,
            "SCRIPT_NAME": "",
            "PATH_INFO": self.path,
            "QUERY_STRING": self.query,
            "SERVER_NAME": host,
            "SERVER_PORT": str(port),
            "SERVER_PROTOCOL": "HTTP/1.1",
            "REMOTE_ADDR": "127.0.0.1",
            "HTTP_HOST": f"{host}:{port}",
            "CONTENT_LENGTH": str(len(self.body)),
            "wsgi.version": (1, 0),
            "wsgi.url_scheme": "http",
            "wsgi.input": io.BytesIO(self.body),
            "wsgi.errors": sys.stderr,
            "wsgi.multithread": True,
            "wsgi.multiprocess": False,
            "wsgi.run_once": False,
        }
        environ.update(self.headers)
        return environ

    def encode(self) -> bytes:
        """The journal payload: metadata length, JSON metadata, body."""
        meta = json.dumps({"m": self.method, "p": self.path, "q": self.query, "h": self.headers}).encode()
        return _META.pack(len(meta)) + meta + self.body

    @classmethod
    def decode(cls, payload: bytes) -> RecordedRequest:
        """Inverse of :meth:`encode`."""
        (length,) = _META.unpack_from(payload)
        meta = json.loads(payload[_META.size : _META.size + length])
        headers = tuple((str(k), str(v)) for k, v in meta["h"])
        return cls(meta["m"], meta["p"], meta["q"], headers, payload[_META.size + length :])

    @classmethod
    def dynamodb(cls, operation: str, body: dict[str, Any]) -> RecordedRequest:
        """A DynamoDB JSON request (used to restore snapshots)."""
        return cls(
            "POST",
            "/",
            "",
            (
                ("CONTENT_TYPE", "application/x-amz-json-1.0"),
                ("HTTP_X_AMZ_TARGET", _DYNAMODB_TARGET + operation),
                ("HTTP_AUTHORIZATION", _FAKE_SIGNATURE.format(service="dynamodb")),
            ),
            json.dumps(body).encode(),
        )

    @classmethod
    def s3_put(cls, bucket: str, key: str, body: bytes, content_type: str) -> RecordedRequest:
        """An S3 ``PutObject`` (used to restore snapshots)."""
        return cls(
            "PUT",
            f"/{bucket}/{quote(key, safe='/~')}",
            "",
            (("CONTENT_TYPE", content_type), ("HTTP_AUTHORIZATION", _FAKE_SIGNATURE.format(service="s3"))),
            body,
        )


def journaled(request: RecordedRequest, buckets: frozenset[str]) -> bool:
    """Whether a successful ``request`` changes state the journal keeps (item writes, object writes to ``buckets``)."""
    headers = dict(request.headers)
    target = headers.get("HTTP_X_AMZ_TARGET", "")
    if target.startswith(_DYNAMODB_TARGET):
        return target[len(_DYNAMODB_TARGET) :] in _DYNAMODB_ITEM_WRITES
    if request.method not in ("PUT", "POST", "DELETE") or "/s3/" not in headers.get("HTTP_AUTHORIZATION", ""):
        return False
    bucket, _, key = request.path.lstrip("/").partition("/")
    # Object writes and DeleteObjects (POST /bucket?delete); bucket creation is the runner's job at every start.
    return bucket in buckets and (bool(key) or request.method == "POST")


class Journal:
    """An append-only file of CRC-framed records with group-committed fsync.

    :meth:`append` is called under the caller's ordering lock and only writes (a ``kill -9`` after it cannot lose
    the record: it is in the page cache); :meth:`sync` is called after that lock is released and fsyncs unless a
    later fsync already covered the record.
    """

    def __init__(self, path: Path, *, fsync: bool = True) -> None:
        """Open (create 0600, append) ``path``."""
        self.path = path
        self._fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_APPEND, 0o600)
        self._fsync = fsync
        self._written = os.fstat(self._fd).st_size
        self._synced = self._written
        self._sync_lock = threading.Lock()
        self._closed = False

    @property
    def size(self) -> int:
        """Bytes written so far."""
        return self._written

    def append(self, payload: bytes) -> int:
        """Write one record; returns the offset :meth:`sync` must reach for it to be durable."""
        record = _HEADER.pack(len(payload), zlib.crc32(payload)) + payload
        view = memoryview(record)
        while view:
            view = view[os.write(self._fd, view) :]
        self._written += len(record)
        return self._written

    def sync(self, upto: int) -> None:
        """Make every record up to ``upto`` durable (one fsync may serve many callers)."""
        if not self._fsync or self._synced >= upto:
            return
        with self._sync_lock:
            if self._closed or self._synced >= upto:
                return
            target = self._written
            os.fsync(self._fd)
            self._synced = max(self._synced, target)

    def close(self) -> None:
        """Fsync and close; later :meth:`sync` calls return at once."""
        with self._sync_lock:
            if self._closed:
                return
            self._closed = True
            os.fsync(self._fd)
            self._synced = self._written
            os.close(self._fd)

    @staticmethod
    def read(path: Path) -> Iterator[bytes]:
        """The records of ``path`` in order, up to the first torn or corrupt one."""
        data = path.read_bytes()
        offset = 0
        while offset + _HEADER.size <= len(data):
            length, crc = _HEADER.unpack_from(data, offset)
            start = offset + _HEADER.size
            payload = data[start : start + length]
            if len(payload) < length or zlib.crc32(payload) != crc:
                logger.warning("%s: torn record at byte %d; the journal ends there", path, offset)
                return
            yield payload
            offset = start + length


@dataclass(frozen=True, slots=True)
class RecoveryReport:
    """What :meth:`DurableState.recover` found.

    Attributes:
        snapshot_items: Items and objects loaded from the snapshot.
        replayed: Journal records served again.
        diverged: Replayed records moto did not answer with 2xx (0 unless the files were tampered with).
        journals: Journal files read.
    """

    snapshot_items: int
    replayed: int
    diverged: int
    journals: int


class DurableState:
    """Snapshot + journal of a :class:`~lakesync.local.moto.MotoServer`'s DynamoDB tables and some S3 buckets.

    Usage (tables and buckets must exist, empty, before :meth:`recover`)::

        state = DurableState(data_dir, tables={"deltas": "lakesync-deltas"}, buckets=("checkpoints",))
        state.recover(moto)      # snapshot + journals -> moto
        state.start(moto)        # checkpoint, then journal every write
        ...
        state.stop(moto)         # final checkpoint
    """

    def __init__(
        self,
        data_dir: Path,
        *,
        tables: dict[str, str],
        buckets: tuple[str, ...] = (),
        fsync: bool = True,
        compact_bytes: int = DEFAULT_COMPACT_BYTES,
    ) -> None:
        """Configure; nothing is read or written yet.

        Args:
            data_dir: Where ``snapshot.json`` and ``journal-*.log`` live.
            tables: Logical name (as stored in the snapshot) to physical DynamoDB table name.
            buckets: S3 buckets whose objects are kept.
            fsync: Fsync journal records before the response (off: survives ``kill -9``, not a power cut).
            compact_bytes: Journal size that triggers a checkpoint in the background.
        """
        self.data_dir = data_dir
        self.tables = dict(tables)
        self.buckets = frozenset(buckets)
        self.fsync = fsync
        self.compact_bytes = compact_bytes
        self.generation = 0
        self.checkpoints = 0
        self._checkpoint_lock = threading.Lock()
        self._compact_wanted = threading.Event()
        self._stop = threading.Event()
        self._thread: threading.Thread | None = None

    # ---- files

    def _journal_path(self, generation: int) -> Path:
        return self.data_dir / f"journal-{generation:08d}.log"

    def _journals(self) -> list[tuple[int, Path]]:
        found = []
        for path in self.data_dir.iterdir():
            match = _JOURNAL.fullmatch(path.name)
            if match:
                found.append((int(match.group(1)), path))
        return sorted(found)

    def _load_snapshot(self) -> Snapshot | None:
        for name in (SNAPSHOT_FILE, LEGACY_SNAPSHOT_FILE):
            path = self.data_dir / name
            if path.exists():
                return read_snapshot(path)
        return None

    # ---- recovery

    def recover(self, server: MotoServer) -> RecoveryReport:
        """Load the snapshot and replay the journals since it into ``server`` (nothing may be serving yet)."""
        snapshot = self._load_snapshot()
        loaded = 0
        base = 0
        if snapshot is not None:
            base = snapshot.generation
            loaded = self._restore(server, snapshot)
        replayed = diverged = 0
        journals = [(g, p) for g, p in self._journals() if g >= base]
        for _generation, path in journals:
            for payload in Journal.read(path):
                status = server.apply(RecordedRequest.decode(payload))
                replayed += 1
                if not 200 <= status < 300:
                    diverged += 1
        if diverged:
            logger.warning("%d journal records did not apply again (files edited?)", diverged)
        self.generation = max([base] + [g for g, _ in self._journals()])
        return RecoveryReport(loaded, replayed, diverged, len(journals))

    def _restore(self, server: MotoServer, snapshot: Snapshot) -> int:
        count = 0
        for logical, items in snapshot.tables.items():
            physical = self.tables.get(logical)
            if physical is None:
                logger.warning("snapshot has a table %r this version does not have; skipped", logical)
                continue
            for start in range(0, len(items), 25):
                batch = [{"PutRequest": {"Item": item}} for item in items[start : start + 25]]
                status = server.apply(RecordedRequest.dynamodb("BatchWriteItem", {"RequestItems": {physical: batch}}))
                if status != 200:
                    raise RuntimeError(f"restoring {logical} failed with HTTP {status}")
            count += len(items)
        for bucket, objects in snapshot.objects.items():
            for key, (body, content_type) in objects.items():
                status = server.apply(RecordedRequest.s3_put(bucket, key, body, content_type))
                if status != 200:
                    raise RuntimeError(f"restoring s3://{bucket}/{key} failed with HTTP {status}")
                count += 1
        return count

    # ---- running

    def start(self, server: MotoServer) -> None:
        """Checkpoint what :meth:`recover` rebuilt, then journal every write and compact in the background."""
        self.checkpoint(server)
        self._stop.clear()
        self._thread = threading.Thread(target=self._compactor, args=(server,), name="lakesync-journal", daemon=True)
        self._thread.start()

    def stop(self, server: MotoServer) -> None:
        """Write a final snapshot (nothing else may write any more) and stop journaling."""
        self._stop.set()
        self._compact_wanted.set()
        if self._thread is not None:
            self._thread.join()
            self._thread = None
        self.checkpoint(server, final=True)

    def journal_full(self) -> None:
        """Called by the server when the journal passed ``compact_bytes``: compact soon, off the request path."""
        self._compact_wanted.set()

    def _compactor(self, server: MotoServer) -> None:
        while True:
            self._compact_wanted.wait()
            if self._stop.is_set():
                return
            self._compact_wanted.clear()
            try:
                self.checkpoint(server)
            except Exception:  # a full disk, say: keep journaling (nothing is lost) and try again later
                logger.exception("journal compaction failed")

    def checkpoint(self, server: MotoServer, *, final: bool = False) -> None:
        """Snapshot moto's state as generation ``g+1`` and drop older journals (see the module docstring)."""
        with self._checkpoint_lock:
            generation = self.generation + 1
            with server.exclusive():
                snapshot = capture(self.tables, self.buckets, generation, server.region)
                journal = None if final else Journal(self._journal_path(generation), fsync=self.fsync)
                previous = server.set_journal(journal, self.buckets, self.compact_bytes, self.journal_full)
            if previous is not None:
                previous.close()
            write_snapshot(self.data_dir / SNAPSHOT_FILE, snapshot)
            self.generation = generation
            self.checkpoints += 1
            for old, path in self._journals():
                if old < generation or final:
                    path.unlink(missing_ok=True)
            with contextlib.suppress(FileNotFoundError):
                (self.data_dir / LEGACY_SNAPSHOT_FILE).unlink()
            if final:
                _fsync_dir(self.data_dir)


def capture(tables: dict[str, str], buckets: frozenset[str], generation: int, region: str) -> Snapshot:
    """moto's current items and objects (call with moto's isolation lock held, so the capture is consistent).

    Reads moto's backends in this process: the same process serves the HTTP API.
    """
    from moto.core.models import DEFAULT_ACCOUNT_ID
    from moto.dynamodb.models import dynamodb_backends
    from moto.s3.models import s3_backends

    dynamodb = dynamodb_backends[DEFAULT_ACCOUNT_ID][region]
    items: dict[str, list[dict[str, Any]]] = {}
    for logical, physical in tables.items():
        table = dynamodb.tables.get(physical)
        items[logical] = [] if table is None else [_wire(item.to_json()["Attributes"]) for item in table.all_items()]
    objects: dict[str, dict[str, tuple[bytes, str]]] = {}
    s3 = s3_backends[DEFAULT_ACCOUNT_ID]["aws"]
    for name in sorted(buckets):
        bucket = s3.buckets.get(name)
        if bucket is None:
            continue
        objects[name] = {
            key: (bytes(obj.value), str(obj.metadata.get("content-type") or "binary/octet-stream"))
            for key, obj in bucket.keys.items()
            if obj is not None and not getattr(obj, "is_delete_marker", False)
        }
    return Snapshot(generation=generation, tables=items, objects=objects)


def _wire(value: Any) -> Any:
    """An item as moto holds it, in DynamoDB's JSON wire form: binary values (``B``/``BS``) as base64 text."""
    if isinstance(value, dict):
        return {
            key: (
                base64.b64encode(inner).decode("ascii")
                if key == "B" and isinstance(inner, bytes | bytearray)
                else [base64.b64encode(b).decode("ascii") if isinstance(b, bytes | bytearray) else b for b in inner]
                if key == "BS"
                else _wire(inner)
            )
            for key, inner in value.items()
        }
    if isinstance(value, list):
        return [_wire(inner) for inner in value]
    return value


def _fsync_dir(path: Path) -> None:
    fd = os.open(path, os.O_RDONLY)
    try:
        os.fsync(fd)
    finally:
        os.close(fd)
