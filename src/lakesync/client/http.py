"""A small, dependency-free HTTP client for the LakeSync API (JSON), used by the CLI, demos and benchmarks."""

from __future__ import annotations

import http.client
import io
import json
import threading
import time
import urllib.error
import urllib.parse
import urllib.request
import zlib
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass
from typing import Any

from lakesync.core.delta import RowDelta

CHECKPOINT_MEDIA_TYPE = "application/x-lakesync-checkpoint-stream"
COLUMNS_MEDIA_TYPE = "application/x-lakesync-checkpoint-columns+json"
MAX_ANSWER_BYTES = 256 * 1024 * 1024
"""The largest answer a :class:`SyncClient` accepts by default."""


class _NoRedirects(urllib.request.HTTPRedirectHandler):
    """Answers a redirect as the error it is instead of following it: urllib would re-send a push as a GET without
    its body (and take that answer for the push's), and send the token to whatever host ``Location`` names."""

    def redirect_request(self, *_args: Any) -> None:
        return None


_OPENER = urllib.request.build_opener(_NoRedirects)


class ApiError(Exception):
    """A non-2xx answer from the API, with its status and ``{"error", "code"}`` body."""

    def __init__(self, status: int, body: Mapping[str, Any]) -> None:
        super().__init__(f"{status} {body.get('code')}: {body.get('error')}")
        self.status = status
        self.body = dict(body)

    @property
    def code(self) -> str | None:
        """The body's ``code`` (``CURSOR_EXPIRED``, ``AUTH_ERROR``, ...)."""
        code = self.body.get("code")
        return code if isinstance(code, str) else None

    @property
    def refused_by_authorizer(self) -> bool:
        """API Gateway's own 403 ``{"message": "Forbidden"}``: its token authorizer refused the token (signed with a
        key an emergency rotation dropped, or living longer than the deployment allows) before any function ran. A
        fresh token may pass, as after a 401."""
        return self.status == 403 and self.body == {"message": "Forbidden"}


@dataclass(frozen=True, slots=True)
class CheckpointStream:
    """A checkpoint as served: the bodies (one entry per response fetched) and its headers.

    Attributes:
        frames: The bodies of the responses, each a checkpoint stream (``uint32`` length + SyncResponse frames), or
            where ``columnar`` says so, a columnar JSON document (:mod:`lakesync.wire.checkpoint_columns`).
        cursor: ``X-Checkpoint-Cursor``: pull from it next.
        checkpoint_id: ``X-Checkpoint-Id``.
        server_hlc: ``X-Checkpoint-Hlc`` (0 when absent).
        columnar: Per body, whether the gateway sent it as a columnar JSON document.
    """

    frames: tuple[bytes, ...]
    cursor: str | None
    checkpoint_id: str | None
    server_hlc: int
    columnar: tuple[bool, ...] = ()


class SyncClient:
    """Talks to one gateway as one authenticated client.

    Args:
        base_url: e.g. ``http://127.0.0.1:8787``.
        gateway: The gateway id in the routes.
        token: A JWT minted for this client (``lakesync token``).
        client_id: The token's ``sub``.
        timeout: Seconds per request.
        get_token: Called for a fresh token when a request is answered 401; the request is then sent once more (as
            the original client's transport does). Thread-safe: concurrent 401s share one refresh.
        max_answer_bytes: The largest answer accepted, as sent and once un-gzipped (the gateway's are a few MB: a
            Lambda answers at most 6 MB); a larger one raises ValueError.
    """

    def __init__(
        self,
        base_url: str,
        gateway: str,
        token: str,
        client_id: str,
        *,
        timeout: float = 30.0,
        get_token: Callable[[], str] | None = None,
        max_answer_bytes: int = MAX_ANSWER_BYTES,
    ) -> None:
        self.base_url = base_url.rstrip("/")
        self.gateway = gateway
        self.token = token
        self.client_id = client_id
        self.timeout = timeout
        self.max_answer_bytes = max_answer_bytes
        self.get_token = get_token
        self._refresh_lock = threading.Lock()

    def refresh_token(self, stale: str) -> bool:
        """Replace the token ``stale`` through ``get_token``; False without ``get_token``. A token another thread
        already replaced is kept (one refresh per expiry)."""
        if self.get_token is None:
            return False
        with self._refresh_lock:
            if self.token == stale:
                self.token = self.get_token()
        return True

    def _open(self, req: urllib.request.Request) -> tuple[bytes, Mapping[str, str]]:
        """Send ``req`` with the current token (once more after a refresh on 401); the body and headers. The body is
        read within ``timeout`` seconds of the request, plus a second per :data:`MIN_BYTES_PER_SECOND` received.

        Raises:
            ApiError: a non-2xx answer (the second one, after a refresh); redirects are not followed.
            urllib.error.URLError, OSError: the gateway is unreachable; TimeoutError: the answer took too long.
            http.client.HTTPException: the connection broke mid-answer.
        """
        for attempt in (0, 1):
            token = self.token
            req.add_header("Authorization", f"Bearer {token}")
            req.add_header("Accept-Encoding", "gzip")
            deadline = time.monotonic() + self.timeout
            try:
                with _OPENER.open(req, timeout=self.timeout) as resp:
                    body = _read_body(resp, deadline, self.max_answer_bytes)
                    return _decoded(body, resp.headers.get("Content-Encoding"), self.max_answer_bytes), resp.headers
            except urllib.error.HTTPError as exc:
                if exc.code == 401 and attempt == 0 and self.refresh_token(token):
                    exc.close()
                    continue
                error = _api_error(exc, deadline, self.max_answer_bytes)
                if error.refused_by_authorizer and attempt == 0 and self.refresh_token(token):
                    continue
                raise error from None
        raise AssertionError("unreachable")  # pragma: no cover

    def request(self, method: str, path: str, *, body: object = None, query: Mapping[str, Any] | None = None) -> Any:
        """Send one request and return the decoded JSON body; raises :class:`ApiError` on 4xx/5xx."""
        url = self.base_url + path
        if query:
            url += "?" + urllib.parse.urlencode({k: v for k, v in query.items() if v is not None})
        data = None if body is None else json.dumps(body, separators=(",", ":")).encode()
        req = urllib.request.Request(url, data=data, method=method)
        if data is not None:
            req.add_header("Content-Type", "application/json")
        raw, _ = self._open(req)
        return json.loads(raw or b"null")

    def push(self, deltas: Sequence[RowDelta], last_seen_hlc: int = 0) -> Any:
        """Push deltas; returns ``{serverHlc, accepted, deltas, receipts}``."""
        body = {
            "clientId": self.client_id,
            "deltas": [d.to_json() for d in deltas],
            "lastSeenHlc": str(last_seen_hlc),
        }
        return self.request("POST", f"/v1/sync/{self.gateway}/push", body=body)

    def push_wire(self, deltas: Sequence[str], last_seen_hlc: int = 0) -> Any:
        """Push deltas given as their wire JSON texts (as a local outbox keeps them); same answer as :meth:`push`."""
        body = (
            '{"clientId":'
            + json.dumps(self.client_id)
            + ',"deltas":['
            + ",".join(deltas)
            + '],"lastSeenHlc":"'
            + str(last_seen_hlc)
            + '"}'
        ).encode()
        req = urllib.request.Request(f"{self.base_url}/v1/sync/{self.gateway}/push", data=body, method="POST")
        req.add_header("Content-Type", "application/json")
        raw, _ = self._open(req)
        return json.loads(raw or b"null")

    def pull(self, *, cursor: str | None = None, since: int | None = None, limit: int = 1000) -> Any:
        """One pull page: from ``cursor`` (exactly once; ``None`` and no ``since``: from the beginning), or, as the
        original client pulls, ``since`` a server HLC."""
        query: dict[str, Any] = {"clientId": self.client_id, "limit": limit}
        if since is not None and cursor is None:
            query["since"] = str(since)
        else:
            query["cursor"] = cursor or ""
        return self.request("GET", f"/v1/sync/{self.gateway}/pull", query=query)

    def pull_all(self, cursor: str | None = None, *, limit: int = 1000) -> tuple[list[RowDelta], str | None]:
        """Pull until ``hasMore`` is false; returns the deltas and the final cursor."""
        deltas: list[RowDelta] = []
        while True:
            page = self.pull(cursor=cursor, limit=limit)
            deltas.extend(RowDelta.from_json(d) for d in page["deltas"])
            cursor = page.get("cursor")
            if not page["hasMore"]:
                return deltas, cursor

    def checkpoint(self) -> tuple[list[RowDelta], str | None]:
        """Load the latest checkpoint (filtered by this client's sync rules): its deltas and the cursor to pull from.

        Returns ``([], None)`` when the gateway has no checkpoint yet.
        """
        from lakesync.wire.framing import iter_checkpoint_responses

        stream = self.checkpoint_stream()
        if stream is None:
            return [], None
        deltas = [
            delta for body in stream.frames for response in iter_checkpoint_responses(body) for delta in response.deltas
        ]
        return deltas, stream.cursor

    def checkpoint_stream(self, *, columns: bool = False) -> CheckpointStream | None:
        """The latest checkpoint's raw bodies, whole, or chunk by chunk (pinned to one checkpoint) when the gateway
        answers 413 because it is too large to send whole. ``None`` when the gateway has no checkpoint (404).

        Args:
            columns: Ask for the columnar JSON documents (``format=columns``); a gateway without them sends the
                stream, and the result says which it got (``columnar``).

        Raises:
            ApiError: any other non-2xx answer; 409 when a chunk of another checkpoint is served.
        """
        base = {"format": "columns"} if columns else {}
        first = self._checkpoint_get(base)
        if first is None:
            return None
        body, headers = first
        if body is not None:
            return _stream((body,), headers, (_columnar(headers),))
        # Too large to send whole: chunk 0 names the checkpoint and its chunk count; the rest are pinned to it.
        got = self._checkpoint_get({**base, "chunk": 0})
        if got is None:
            return None
        first_chunk, headers = got
        if first_chunk is None:
            raise ApiError(413, {"error": "Checkpoint chunk 0 too large to serve", "code": "VALIDATION_ERROR"})
        checkpoint_id = headers.get("X-Checkpoint-Id")
        count = int(headers.get("X-Checkpoint-Chunks") or 1)
        frames: list[bytes] = [first_chunk]
        columnar = [_columnar(headers)]
        for index in range(1, count):
            more = self._checkpoint_get({**base, "chunk": index, "checkpoint": checkpoint_id})
            if more is None or more[0] is None:
                raise ApiError(
                    404, {"error": f"Checkpoint {checkpoint_id} vanished while it was read", "code": "NOT_FOUND"}
                )
            served = more[1].get("X-Checkpoint-Id")
            if served is not None and served != checkpoint_id:
                # A gateway that does not pin (or a cache in front of it) served another checkpoint's chunk: mixing
                # them would skip the changes between the two. Retried later, from chunk 0.
                raise ApiError(
                    409,
                    {
                        "error": f"Checkpoint {checkpoint_id} was replaced by {served} while it was read",
                        "code": "CONFLICT",
                    },
                )
            frames.append(more[0])
            columnar.append(_columnar(more[1]))
        return _stream(tuple(frames), headers, tuple(columnar))

    def _checkpoint_get(self, query: Mapping[str, Any]) -> tuple[bytes | None, Mapping[str, str]] | None:
        """One checkpoint request: ``(body, headers)``; ``(None, {})`` on 413; ``None`` on 404."""
        url = f"{self.base_url}/v1/sync/{self.gateway}/checkpoint"
        if query:
            url += "?" + urllib.parse.urlencode(query)
        req = urllib.request.Request(url, method="GET")
        accept = f"{COLUMNS_MEDIA_TYPE}, {CHECKPOINT_MEDIA_TYPE};q=0.5" if "format" in query else CHECKPOINT_MEDIA_TYPE
        req.add_header("Accept", accept)
        try:
            body, headers = self._open(req)
        except ApiError as exc:
            if exc.status == 404:
                return None
            if exc.status == 413:
                return None, {}
            raise
        return body, headers

    def admin(self, method: str, what: str, body: object = None) -> Any:
        """Call an admin route, e.g. ``admin("POST", "sync-rules", rules)``."""
        return self.request(method, f"/v1/admin/{what}/{self.gateway}", body=body)


def _decoded(body: bytes, content_encoding: str | None, limit: int) -> bytes:
    """The body as sent, un-gzipped when the gateway compressed it (``Content-Encoding: gzip``).

    Raises:
        ValueError: it un-gzips to more than ``limit`` bytes (read no further). zlib.error: bad or cut gzip.
    """
    if (content_encoding or "").strip().lower() != "gzip":
        return body
    inflate = zlib.decompressobj(16 + zlib.MAX_WBITS)
    out = inflate.decompress(body, limit + 1)
    if len(out) > limit:
        raise ValueError(f"The gateway's answer un-gzips to more than {limit:,} bytes")
    if not inflate.eof:
        raise zlib.error("The gateway's gzip answer is cut short")
    return out


def _read_body(resp: Any, deadline: float, limit: int) -> bytes:
    """An answer's body, read piece by piece until ``deadline`` (``time.monotonic()``) plus a second per
    :data:`MIN_BYTES_PER_SECOND` received: a large answer on a slow link arrives, one sent drop by drop times out.

    Raises:
        TimeoutError: the body came slower than that. ValueError: it is longer than ``limit`` bytes.
        http.client.IncompleteRead: the connection closed before the ``Content-Length`` announced.
    """
    parts = []
    received = 0
    while chunk := resp.read1(_READ_PIECE):
        parts.append(chunk)
        received += len(chunk)
        if received > limit:
            raise ValueError(f"The gateway's answer is longer than {limit:,} bytes")
        if time.monotonic() > deadline + received / MIN_BYTES_PER_SECOND:
            raise TimeoutError("The gateway's answer came slower than the request timeout allows")
    body = b"".join(parts)
    if getattr(resp, "length", None):  # what the Content-Length announced and never came
        raise http.client.IncompleteRead(body, resp.length)
    return body


MIN_BYTES_PER_SECOND = 16 * 1024
"""Past a request's ``timeout``, how fast its answer must keep coming."""
_READ_PIECE = 1 << 16


def _api_error(exc: urllib.error.HTTPError, deadline: float, limit: int) -> ApiError:
    """The :class:`ApiError` of an HTTP error answer (its body read until ``deadline`` and the response closed)."""
    with exc:
        raw = _decoded(_read_body(exc.fp or io.BytesIO(), deadline, limit), exc.headers.get("Content-Encoding"), limit)
    try:
        payload = json.loads(raw)
    except ValueError:
        payload = {"error": raw.decode(errors="replace"), "code": "UNKNOWN"}
    return ApiError(exc.code, payload if isinstance(payload, dict) else {"error": str(payload)})


def _columnar(headers: Mapping[str, str]) -> bool:
    return (headers.get("Content-Type") or "").startswith(COLUMNS_MEDIA_TYPE)


def _stream(frames: tuple[bytes, ...], headers: Mapping[str, str], columnar: tuple[bool, ...]) -> CheckpointStream:
    hlc = headers.get("X-Checkpoint-Hlc") or "0"
    return CheckpointStream(
        frames=frames,
        cursor=headers.get("X-Checkpoint-Cursor"),
        checkpoint_id=headers.get("X-Checkpoint-Id"),
        server_hlc=int(hlc) if hlc.isdigit() else 0,
        columnar=columnar,
    )
