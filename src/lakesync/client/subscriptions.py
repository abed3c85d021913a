"""Stream subscriptions: the client's record of the streams it subscribes to, and their exchange with the gateway.

``_lakesync_subscriptions`` holds one row per stream and parameters, in one of four states (see
:class:`~lakesync.client.model.StreamSubscription`): ``pending`` (recorded, not yet acknowledged), ``active`` (the
gateway answered 201; ``expires_at`` is its expiry and ``renew_at`` when the sync loop subscribes again to refresh
it; ``NULL`` when the gateway gave no expiry: never renewed), ``refused`` (the gateway refused it: ``refusal`` and
``reason``) and ``removing`` (unsubscribed, the ``DELETE`` not yet acknowledged). The app's calls only write the
table, offline or not; :meth:`Subscriptions.sync`, a step of the sync cycle, sends what is due, so a subscription
recorded before a crash or while offline is sent at the next cycle, and a ``POST`` whose answer was lost is sent again
(the gateway treats the same stream and parameters as the same subscription). The ``id`` is the gateway's: 32 hex
digits of a SHA-256 of the stream and its parameters (docs/streams.md, "Subscribing"), so a subscription sent but
never acknowledged can still be deleted.
"""

from __future__ import annotations

import hashlib
import json
import logging
from collections.abc import Mapping
from typing import Any, Final, cast

from lakesync.client.database import Database
from lakesync.client.http import ApiError, SyncClient
from lakesync.client.model import StreamSubscription, SubscriptionState
from lakesync.core.hlc import Clock

logger = logging.getLogger(__name__)

MAX_TTL_SECONDS: Final = 2**31 - 1
"""The largest ``ttl`` the gateway takes (the stream's own maximum cuts it further)."""
RENEW_AT_FRACTION: Final = 2 / 3
"""An active subscription is renewed once this fraction of its lifetime (as granted) has passed."""
MIN_RENEW_MS: Final = 1000
"""The soonest a renewal follows an acknowledgement, so a clock far off the gateway's does not renew at every cycle."""
GUESSED_LIFETIME_MS: Final = 60_000
"""The lifetime assumed when the granted expiry is already past by the local clock (a clock ahead of the gateway's)."""
_REFUSED_STATUS: Final = frozenset({400, 404, 422})
"""Answers that refuse a subscribe for good even without a ``refusal`` code (a malformed request, a gateway without
the route)."""

_COLUMNS: Final = "key, stream, params, ttl, state, server_id, expires_at, refusal, reason"
_ID_CHARS: Final = 32


def subscription_key(stream: str, params: Mapping[str, str]) -> str:
    """The subscription's id as the gateway derives it: 32 hex digits of the SHA-256 of ``[stream, params]`` with
    the parameters as ``[name, value]`` pairs sorted by name."""
    text = json.dumps([stream, sorted(params.items())], separators=(",", ":"), ensure_ascii=False)
    return hashlib.sha256(text.encode()).hexdigest()[:_ID_CHARS]


def checked(stream: str, params: Mapping[str, str] | None, ttl: int | None) -> dict[str, str]:
    """The parameters as a dict, once the request's shape is one the gateway takes.

    Raises:
        ValueError: an empty stream name, a parameter that is not a non-empty string, a ttl that is not an integer
            from 1 to :data:`MAX_TTL_SECONDS`.
    """
    if not isinstance(stream, str) or not stream:
        raise ValueError("a stream name must be a non-empty string")
    given = dict(params or {})
    for name, value in given.items():
        if not isinstance(name, str) or not name or not isinstance(value, str) or not value:
            raise ValueError(f"parameter {name!r} must be a non-empty string named by a non-empty string")
    if ttl is not None and (type(ttl) is not int or not 1 <= ttl <= MAX_TTL_SECONDS):
        raise ValueError(f"ttl must be an integer number of seconds from 1 to {MAX_TTL_SECONDS}")
    return given


class Subscriptions:
    """The ``_lakesync_subscriptions`` table and the requests that keep the gateway's subscriptions in step with it.

    The app's calls (:meth:`add`, :meth:`remove`, :meth:`held`) take the store's lock; :meth:`sync` runs in the sync
    cycle and sends its requests outside the lock.
    """

    def __init__(self, db: Database, http: SyncClient, clock: Clock) -> None:
        self._db = db
        self._http = http
        self._clock = clock

    # -- the app's side ----------------------------------------------------------------------------------------------
    def add(self, stream: str, params: Mapping[str, str] | None, ttl: int | None) -> StreamSubscription:
        """Record a subscription to send (``pending``); an active one of the same ttl stays as it is."""
        given = checked(stream, params, ttl)
        key = subscription_key(stream, given)
        with self._db.tx() as conn:
            held = self._get(key)
            if held is None:
                conn.execute(
                    "INSERT INTO _lakesync_subscriptions (key, stream, params, ttl, state) VALUES (?, ?, ?, ?, ?)",
                    (key, stream, _params_text(given), ttl, "pending"),
                )
            elif held.state != "active" or held.ttl != ttl:
                conn.execute(
                    "UPDATE _lakesync_subscriptions SET ttl = ?, state = 'pending', refusal = NULL, reason = NULL "
                    "WHERE key = ?",
                    (ttl, key),
                )
            got = self._get(key)
        assert got is not None
        return got

    def remove(self, stream: str, params: Mapping[str, str] | None) -> bool:
        """Unsubscribe: a subscription the gateway may hold turns ``removing`` (deleted there at the next cycle); one
        it never got, or refused, is dropped at once. False when there is no such subscription."""
        key = subscription_key(stream, checked(stream, params, None))
        with self._db.tx() as conn:
            row = conn.execute("SELECT state, attempted FROM _lakesync_subscriptions WHERE key = ?", (key,)).fetchone()
            if row is None:
                return False
            state, attempted = row
            if state == "refused" or (state == "pending" and not attempted):
                conn.execute("DELETE FROM _lakesync_subscriptions WHERE key = ?", (key,))
            else:
                conn.execute("UPDATE _lakesync_subscriptions SET state = 'removing' WHERE key = ?", (key,))
        return True

    def held(self) -> list[StreamSubscription]:
        """Every recorded subscription, by stream and parameters."""
        with self._db.lock:
            self._db.check_open()
            rows = self._db.conn.execute(f"SELECT {_COLUMNS} FROM _lakesync_subscriptions").fetchall()
        return sorted((_subscription(row) for row in rows), key=lambda s: (s.stream, sorted(s.params.items())))

    def renewal_in(self) -> float | None:
        """Seconds until the next renewal is due (0 when one is), or None when no active subscription expires."""
        with self._db.lock:
            if self._db.closed:
                return None
            (due,) = self._db.conn.execute(
                "SELECT MIN(renew_at) FROM _lakesync_subscriptions WHERE state = 'active'"
            ).fetchone()
        return None if due is None else max(0.0, (due - self._clock()) / 1000)

    # -- the sync cycle's side -----------------------------------------------------------------------------------------
    def sync(self) -> list[StreamSubscription]:
        """Send what is due: the ``DELETE`` of each ``removing`` subscription first (freeing room under the gateway's
        bound), then the ``POST`` of each ``pending`` one and each active one due for renewal. Returns those the
        gateway refused.

        Raises:
            ApiError, OSError...: as the other steps of the cycle, for an answer that is not a refusal (the rest is
                sent at the next cycle).
        """
        with self._db.lock:
            self._db.check_open()
            rows = self._db.conn.execute(
                f"SELECT {_COLUMNS} FROM _lakesync_subscriptions WHERE state IN ('pending', 'removing') "
                "OR (state = 'active' AND renew_at <= ?) ORDER BY state = 'removing' DESC, key",
                (self._clock(),),
            ).fetchall()
        refused = []
        for row in rows:
            key, held = row[0], _subscription(row)
            if held.state == "removing":
                self._delete(key, held)
            else:
                refusal = self._post(key, held)
                if refusal is not None:
                    refused.append(refusal)
        return refused

    def _delete(self, key: str, held: StreamSubscription) -> None:
        try:
            self._http.request("DELETE", f"/v1/sync/{self._http.gateway}/subscriptions/{held.id}")
        except ApiError as exc:
            if exc.status != 404:  # 404: not held there (never stored, run out, or already deleted)
                raise
        with self._db.tx() as conn:
            conn.execute("DELETE FROM _lakesync_subscriptions WHERE key = ? AND state = 'removing'", (key,))

    def _post(self, key: str, held: StreamSubscription) -> StreamSubscription | None:
        with self._db.tx() as conn:
            conn.execute("UPDATE _lakesync_subscriptions SET attempted = 1 WHERE key = ?", (key,))
        body: dict[str, Any] = {"stream": held.stream, "params": held.params}
        if held.ttl is not None:
            body["ttlSeconds"] = held.ttl
        try:
            answer = self._http.request("POST", f"/v1/sync/{self._http.gateway}/subscriptions", body=body)
        except ApiError as exc:
            refusal = exc.body.get("refusal")
            if not isinstance(refusal, str) and exc.status not in _REFUSED_STATUS:
                raise
            code = refusal if isinstance(refusal, str) else exc.code or str(exc.status)
            return self._refused(key, held, code, str(exc.body.get("error") or exc))
        self._acknowledged(key, held, answer)
        return None

    def _acknowledged(self, key: str, held: StreamSubscription, answer: Any) -> None:
        doc = answer if isinstance(answer, dict) else {}
        server_id = doc.get("id") if isinstance(doc.get("id"), str) else held.id
        expires_at = doc.get("expiresAt") if type(doc.get("expiresAt")) is int else None
        now = self._clock()
        renew_at = None if expires_at is None else now + _renewal_delay(expires_at - now, held.ttl)
        with self._db.tx() as conn:
            # Unsubscribed meanwhile: stays removing (now with the id the gateway gave), deleted at the next cycle.
            conn.execute(
                "UPDATE _lakesync_subscriptions SET server_id = ?, state = CASE WHEN state = 'removing' THEN state "
                "ELSE 'active' END, expires_at = ?, renew_at = ?, refusal = NULL, reason = NULL WHERE key = ?",
                (server_id, expires_at, renew_at, key),
            )

    def _refused(self, key: str, held: StreamSubscription, code: str, reason: str) -> StreamSubscription | None:
        logger.warning("subscription to %s %s refused: %s %s", held.stream, held.params, code, reason)
        with self._db.tx() as conn:
            conn.execute(
                "UPDATE _lakesync_subscriptions SET state = 'refused', refusal = ?, reason = ?, expires_at = NULL, "
                "renew_at = NULL WHERE key = ? AND state IN ('pending', 'active')",
                (code, reason, key),
            )
            got = self._get(key)
        return got if got is not None and got.state == "refused" else None

    def _get(self, key: str) -> StreamSubscription | None:
        row = self._db.conn.execute(f"SELECT {_COLUMNS} FROM _lakesync_subscriptions WHERE key = ?", (key,)).fetchone()
        return None if row is None else _subscription(row)


def _renewal_delay(granted_ms: int, ttl: int | None) -> int:
    """How long after an acknowledgement to renew: :data:`RENEW_AT_FRACTION` of the lifetime granted (measured on
    the local clock; the ttl asked bounds it, a clock ahead of the gateway's has it guessed)."""
    lifetime = granted_ms if granted_ms > 0 else (ttl * 1000 if ttl is not None else GUESSED_LIFETIME_MS)
    if ttl is not None:
        lifetime = min(lifetime, ttl * 1000)
    return max(MIN_RENEW_MS, int(lifetime * RENEW_AT_FRACTION))


def _params_text(params: Mapping[str, str]) -> str:
    return json.dumps(dict(sorted(params.items())), separators=(",", ":"), ensure_ascii=False)


def _subscription(row: tuple[Any, ...]) -> StreamSubscription:
    key, stream, params, ttl, state, server_id, expires_at, refusal, reason = row
    return StreamSubscription(
        stream=stream,
        params=json.loads(params),
        ttl=ttl,
        state=cast(SubscriptionState, state),
        id=server_id or key,
        expires_at=expires_at,
        refusal=refusal,
        reason=reason,
    )


__all__ = ["MAX_TTL_SECONDS", "Subscriptions", "checked", "subscription_key"]
