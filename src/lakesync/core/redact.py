"""The one redaction helper: what may reach an error body, a log line or a metric (pure).

Every message built from a connector's, a destination's or a vendor's error goes through :class:`Redactor` (the
secret values it was told of, in every encoding they travel in) and :func:`redact` (credential *shapes* whatever
their value: a URL's user-info password, ``password=...`` in a libpq keyword string or a query string, a JSON
``"password": ...``, an ``Authorization`` header). Locations are shown with :func:`mask_url` / :func:`mask_conninfo`,
which keep only what says *where* (scheme, host, port, database), never a credential.
"""

from __future__ import annotations

import re
from collections.abc import Iterable
from typing import Final
from urllib.parse import parse_qsl, quote, quote_plus, urlsplit, urlunsplit

__all__ = ["MASK", "Redactor", "mask_conninfo", "mask_url", "redact"]

MASK: Final = "***"

_CREDENTIAL_KEY: Final = (
    r"(?:password|passwd|pwd|pass|secret|client_secret|token|access_token|refresh_token|api_?key|apitoken|"
    r"sslpassword|private_?key|authorization|auth|sig|signature|credentials?)"
)
# scheme://user:password@host -> scheme://user:***@host (the password may hold anything but '@' before the host).
_URL_USERINFO: Final = re.compile(r"(?P<head>[A-Za-z][A-Za-z0-9+.-]*://[^/\s:@]*):(?P<pw>[^@\s]*)@")
# key=value in a libpq keyword string, a query string or a form body; value quoted ('...' with \' escapes) or bare.
_KEY_VALUE: Final = re.compile(
    rf"(?P<key>\b{_CREDENTIAL_KEY})(?P<eq>\s*=\s*)(?P<value>'(?:[^'\\]|\\.)*'?|[^\s&;,'\"]*)", re.IGNORECASE
)
# "password": "value" in JSON (or a Python repr's 'password': 'value').
_JSON_VALUE: Final = re.compile(
    rf"(?P<key>[\"']{_CREDENTIAL_KEY}[\"']\s*:\s*)(?P<value>\"(?:[^\"\\]|\\.)*\"|'(?:[^'\\]|\\.)*')", re.IGNORECASE
)
_AUTH_HEADER: Final = re.compile(r"\b(?P<scheme>Bearer|Basic|Token)\s+[A-Za-z0-9._~+/=-]{8,}", re.IGNORECASE)
_CONNINFO_PAIR: Final = re.compile(r"(?P<key>[A-Za-z_]+)\s*=\s*(?P<value>'(?:[^'\\]|\\.)*'|\S*)")
_LOCATION_KEYS: Final = ("host", "port", "dbname")


def redact(text: str, secrets: Iterable[str] = ()) -> str:
    """``text`` with the given ``secrets`` and every credential-shaped value replaced by ``***``."""
    text = Redactor(secrets).known(text)
    text = _URL_USERINFO.sub(lambda m: f"{m['head']}:{MASK}@", text)
    text = _JSON_VALUE.sub(lambda m: f'{m["key"]}"{MASK}"', text)
    text = _KEY_VALUE.sub(lambda m: f"{m['key']}{m['eq']}{MASK}", text)
    return _AUTH_HEADER.sub(lambda m: f"{m['scheme']} {MASK}", text)


class Redactor:
    """Replaces known secret values with ``***`` (and, called, every credential shape :func:`redact` knows)."""

    def __init__(self, secrets: Iterable[str | None] = ()) -> None:
        self._secrets: set[str] = set()
        self.add(*secrets)

    def add(self, *secrets: str | None) -> None:
        """Also hide these values (short values are ignored: hiding ``"a"`` would mangle every message)."""
        for s in secrets:
            if s and len(s) >= 4:
                # The value itself, percent-encoded (a form body, a URL) and as a libpq quoted value would show it.
                self._secrets.update({s, quote(s, safe=""), quote_plus(s), s.replace("\\", "\\\\").replace("'", "\\'")})

    def known(self, text: str) -> str:
        """``text`` with the known secrets replaced (no pattern matching)."""
        for s in sorted(self._secrets, key=len, reverse=True):
            if s in text:
                text = text.replace(s, MASK)
        return text

    def __call__(self, text: str) -> str:
        """``text`` with every known secret and credential shape replaced."""
        return redact(self.known(text))


def mask_url(url: str) -> str:
    """``url`` with its password (and every query value) replaced by ``***``; safe to log."""
    try:
        parts = urlsplit(url)
    except ValueError:
        return "<unparseable url>"
    netloc = parts.netloc
    if "@" in netloc:
        userinfo, host = netloc.rsplit("@", 1)
        user = userinfo.split(":", 1)[0]
        netloc = f"{user}:{MASK}@{host}" if ":" in userinfo else f"{user}@{host}"
    query = "&".join(f"{k}={MASK}" for k, _ in parse_qsl(parts.query, keep_blank_values=True))
    return urlunsplit((parts.scheme, netloc, parts.path, query, ""))


def mask_conninfo(conninfo: str) -> str:
    """A database connection string (URL or libpq ``key=value`` form) as a location safe to show: a masked URL, or
    ``host=... port=... dbname=...`` and nothing else of a keyword string."""
    text = conninfo.strip()
    if "://" in text.split("=", 1)[0] or re.match(r"\A[A-Za-z][A-Za-z0-9+.-]*://", text):
        return mask_url(text)
    pairs = {m["key"].lower(): m["value"] for m in _CONNINFO_PAIR.finditer(text)}
    shown = [f"{key}={pairs[key]}" for key in _LOCATION_KEYS if key in pairs]
    return " ".join(shown) if shown else "<connection string>"
