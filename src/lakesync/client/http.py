"""A small, dependency-free HTTP client for the LakeSync API (JSON), used by the CLI, demos and benchmarks."""

from __future__ import annotations

import json
import urllib.error
import urllib.parse
import urllib.request
from collections.abc import Mapping, Sequence
from typing import Any

from lakesync.core.delta import RowDelta


class ApiError(Exception):
    """A non-2xx answer from the API, with its status and ``{"error", "code"}`` body."""

    def __init__(self, status: int, body: Mapping[str, Any]) -> None:
        super().__init__(f"{status} {body.get('code')}: {body.get('error')}")
        self.status = status
        self.body = dict(body)


class SyncClient:
    """Talks to one gateway as one authenticated client.

    Args:
        base_url: e.g. ``http://127.0.0.1:8787``.
        gateway: The gateway id in the routes.
        token: A JWT minted for this client (``lakesync token``).
        client_id: The token's ``sub``.
        timeout: Seconds per request.
    """

    def __init__(self, base_url: str, gateway: str, token: str, client_id: str, *, timeout: float = 30.0) -> None:
        self.base_url = base_url.rstrip("/")
        self.gateway = gateway
        self.token = token
        self.client_id = client_id
        self.timeout = timeout

    def request(self, method: str, path: str, *, body: object = None, query: Mapping[str, Any] | None = None) -> Any:
        """Send one request and return the decoded JSON body; raises :class:`ApiError` on 4xx/5xx."""
        url = self.base_url + path
        if query:
            url += "?" + urllib.parse.urlencode({k: v for k, v in query.items() if v is not None})
        data = None if body is None else json.dumps(body, separators=(",", ":")).encode()
        req = urllib.request.Request(url, data=data, method=method)
        req.add_header("Authorization", f"Bearer {self.token}")
        if data is not None:
            req.add_header("Content-Type", "application/json")
        try:
            with urllib.request.urlopen(req, timeout=self.timeout) as resp:
                return json.loads(resp.read() or b"null")
        except urllib.error.HTTPError as exc:
            raw = exc.read()
            try:
                payload = json.loads(raw)
            except ValueError:
                payload = {"error": raw.decode(errors="replace"), "code": "UNKNOWN"}
            raise ApiError(exc.code, payload if isinstance(payload, dict) else {"error": str(payload)}) from None

    def push(self, deltas: Sequence[RowDelta], last_seen_hlc: int = 0) -> Any:
        """Push deltas; returns ``{serverHlc, accepted, deltas, receipts}``."""
        body = {
            "clientId": self.client_id,
            "deltas": [d.to_json() for d in deltas],
            "lastSeenHlc": str(last_seen_hlc),
        }
        return self.request("POST", f"/v1/sync/{self.gateway}/push", body=body)

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

        req = urllib.request.Request(f"{self.base_url}/v1/sync/{self.gateway}/checkpoint", method="GET")
        req.add_header("Authorization", f"Bearer {self.token}")
        try:
            with urllib.request.urlopen(req, timeout=self.timeout) as resp:
                body = resp.read()
                cursor = resp.headers.get("X-Checkpoint-Cursor")
        except urllib.error.HTTPError as exc:
            if exc.code == 404:
                return [], None
            raise ApiError(exc.code, json.loads(exc.read() or b"{}")) from None
        deltas = [delta for response in iter_checkpoint_responses(body) for delta in response.deltas]
        return deltas, cursor

    def admin(self, method: str, what: str, body: object = None) -> Any:
        """Call an admin route, e.g. ``admin("POST", "sync-rules", rules)``."""
        return self.request(method, f"/v1/admin/{what}/{self.gateway}", body=body)
