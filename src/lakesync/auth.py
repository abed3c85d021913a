"""JWT (HS256) verification and minting, wire-compatible with the original LakeSync (reference §12.3).

Invariants:

* A token is a compact JWS whose header decodes to JSON with ``alg == "HS256"`` and ``typ == "JWT"`` (extra header
  fields are tolerated). Every other algorithm -- ``none``, RS256, HS512 -- is refused before any key is used.
* :func:`verify_token` runs the original's checks in the original's order and raises
  :class:`~lakesync.core.errors.AuthError` with the original's exact messages: segments, empty segment, header
  base64url, header alg/typ, signature base64url, HMAC, payload base64url, payload JSON (must be truthy), ``exp``
  present and a number, ``exp <= floor(now_ms / 1000)`` is expired, then (ours) the lifetime below, ``sub`` then
  ``gw`` non-empty strings. ``nbf``, ``iss`` and ``aud`` are not checked, as in the original.
* :func:`sign_token` writes the header ``{"alg":"HS256","typ":"JWT"}`` and the payload as ``JSON.stringify`` does
  (insertion order, compact), with ``role: "client"`` then ``exp: floor(now / 1000) + 3600`` appended when absent,
  all unpadded base64url: for ASCII payloads the token is byte-identical to the original's ``signToken``.
* Secrets shorter than :data:`MIN_SECRET_BYTES` UTF-8 bytes are refused before any token parsing or crypto.
* A deployment's signing keys (the settings, Secrets Manager, rotation, the local key file, ``lakesync token``) are
  held to :data:`MIN_KEY_BYTES` (32) by :func:`check_signing_key`; the lower :data:`MIN_SECRET_BYTES` is only the
  verifier's floor, kept so that the original's wire vectors still verify.

Our semantics (where we deliberately differ from the original):

* A token may not live longer than a maximum lifetime (:data:`DEFAULT_MAX_LIFETIME_S`, 24 hours, unless the caller
  or its :class:`TokenKeys` says otherwise): ``exp - iat`` above it (when ``iat`` is a number), or ``exp`` more than
  the maximum plus :data:`LIFETIME_LEEWAY_S` ahead of now, is refused with ``JWT lifetime exceeds the maximum (N s)``.
  The original accepts any ``exp``, so a leaked ten-year token would be a ten-year credential.

* Rotation takes any number of secrets ``[primary, previous, ...]`` (the original: exactly two). The first secret
  whose HMAC matches decides. If none matches the error is ``Invalid JWT signature``; if one matches, its claim
  error is raised (e.g. ``JWT has expired`` for an expired token signed with the previous secret). The original
  returns the *previous* secret's result whenever the primary fails, which reports ``Invalid JWT signature`` for an
  expired token signed with the primary. Checks before the HMAC do not depend on the secret, so they are run once.
* base64url decoding accepts exactly what the original's ``atob`` accepts (both alphabets, optional correct
  padding, non-zero trailing bits ignored) except ASCII whitespace, which ``atob`` silently strips and we refuse.
* Payloads are encoded as UTF-8 when signing; the original's ``btoa`` throws on characters above U+00FF and
  encodes U+0080..U+00FF as Latin-1, producing tokens its own verifier decodes differently.
* The original's JavaScript objects put integer-like keys (``"0"``, ``"42"``) first; we keep pure insertion order,
  so a payload with such claim keys signs differently (no LakeSync claim is integer-like).
"""

from __future__ import annotations

import base64
import functools
import hashlib
import hmac
import json
import re
import secrets as _secrets
import time
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any, Final, TypeGuard, overload

from lakesync.core.canonical import js_stringify
from lakesync.core.claims import ClaimValue
from lakesync.core.errors import AuthError

__all__ = [
    "DEFAULT_MAX_LIFETIME_S",
    "DEFAULT_TTL_S",
    "LIFETIME_LEEWAY_S",
    "MIN_KEY_BYTES",
    "MIN_SECRET_BYTES",
    "AuthClaims",
    "ClaimValue",
    "TokenKeys",
    "check_signing_key",
    "generate_secret",
    "mint_token",
    "parse_bearer",
    "sign_token",
    "verify_token",
]

MIN_SECRET_BYTES: Final = 18
"""Shortest accepted HMAC secret, in UTF-8 bytes.

RFC 7518 §3.2 asks for 32 bytes (the SHA-256 output size), but the original's rotation vectors use the 18-byte
secret ``"new-primary-secret"`` (the others are 19 and 28 bytes), and the contract must keep verifying them; 18 is
therefore the strongest minimum we can enforce. Secrets made by :func:`generate_secret` are 32 random bytes.
"""

MIN_KEY_BYTES: Final = 32
"""Shortest signing key a deployment may configure, in UTF-8 bytes: RFC 7518 §3.2's minimum for HS256 (the hash's
output size). Checked by :func:`check_signing_key` wherever a key is set up, rotated in or loaded for verification."""

DEFAULT_TTL_S: Final = 3600
"""Lifetime given to tokens signed without an ``exp`` claim."""

DEFAULT_MAX_LIFETIME_S: Final = 86_400
"""The longest lifetime a token may claim unless configured otherwise (``LAKESYNC_MAX_TOKEN_LIFETIME_S``): 24 hours,
long enough for a day's offline work on one token, short enough that a leaked token is not a standing credential."""

LIFETIME_LEEWAY_S: Final = 60
"""Clock skew allowed between a token's minter and the verifier when a token has no ``iat`` (its ``exp`` may lie up
to the maximum lifetime plus this many seconds ahead)."""

_RESERVED_CLAIMS: Final = frozenset({"sub", "gw", "exp", "iat", "iss", "aud", "role"})
_MINT_RESERVED: Final = frozenset({"sub", "gw", "role", "exp"})
_HEADER_SEGMENT: Final = "eyJhbGciOiJIUzI1NiIsInR5cCI6IkpXVCJ9"  # base64url of {"alg":"HS256","typ":"JWT"}
# Secrets shaped like asymmetric keys are refused as HMAC keys (PyJWT's rule): a PEM block or an OpenSSH public key.
_ASYMMETRIC_KEY = re.compile(
    rb"-----BEGIN [A-Z0-9 ]+-----|\A\s*(ssh-(rsa|dss|ed25519|ed448)|ecdsa-sha2-nistp\d+)\b|-cert-v01@openssh\.com"
)


def _hs256(key: bytes, message: bytes) -> bytes:
    return hmac.new(key, message, hashlib.sha256).digest()


# What atob accepts once "-"/"_" are mapped and the segment is padded to a multiple of four (whitespace aside).
_PADDED_BASE64: Final = re.compile(r"(?:[A-Za-z0-9+/]{4})*(?:[A-Za-z0-9+/]{2}==|[A-Za-z0-9+/]{3}=)?")
# JavaScript's \s and \S (ECMAScript WhiteSpace + LineTerminator), which differ from Python's.
_JS_SPACE: Final = "\t\n\v\f\r \u00a0\u1680\u2000-\u200a\u2028\u2029\u202f\u205f\u3000\ufeff"
_BEARER: Final = re.compile(f"Bearer[{_JS_SPACE}]+([^{_JS_SPACE}]+)")
_SHORT_SECRET: Final = f"JWT secret must be at least {MIN_SECRET_BYTES} bytes"


@dataclass(frozen=True, slots=True)
class AuthClaims:
    """The identity a verified token grants.

    Attributes:
        client_id: The ``sub`` claim.
        gateway_id: The ``gw`` claim: the only gateway this token may use.
        role: The ``role`` claim if it is a non-empty string, else ``"client"``.
        custom_claims: Claims for sync rules and action context: every payload key except ``sub, gw, exp, iat,
            iss, aud, role`` whose value is a string or an all-string array (as a tuple), in payload order, then
            ``sub``. Treat as read-only.
        expires_at: The ``exp`` claim in Unix seconds, as given (an int or a float).
    """

    client_id: str
    gateway_id: str
    role: str
    custom_claims: Mapping[str, ClaimValue] = field(hash=False)
    expires_at: int | float


@dataclass(frozen=True, slots=True)
class TokenKeys(Sequence[str]):
    """The keys tokens may be signed with, primary first, and the longest lifetime a token may claim.

    A sequence of the secrets, so it goes wherever a ``Sequence[str]`` of secrets does; :func:`verify_token` applies
    its ``max_lifetime_s``.
    """

    secrets: tuple[str, ...]
    max_lifetime_s: int = DEFAULT_MAX_LIFETIME_S

    @overload
    def __getitem__(self, index: int) -> str: ...

    @overload
    def __getitem__(self, index: slice) -> Sequence[str]: ...

    def __getitem__(self, index: int | slice) -> str | Sequence[str]:
        return self.secrets[index]

    def __len__(self) -> int:
        return len(self.secrets)


def parse_bearer(header: str | None) -> str:
    """The token of an ``Authorization`` header matching ``^Bearer\\s+(\\S+)$`` (JavaScript ``\\s``).

    Raises:
        AuthError: ``Missing Bearer token`` if the header is absent or does not match ("Bearer" is case-sensitive).
    """
    match = _BEARER.fullmatch(header) if header is not None else None
    if match is None:
        raise AuthError("Missing Bearer token")
    return match.group(1)


def verify_token(
    token: str, secret: str | Sequence[str], *, now_ms: int | None = None, max_lifetime_s: int | None = None
) -> AuthClaims:
    """Verify an HS256 token and return its claims.

    Args:
        token: The compact JWT ``header.payload.signature``.
        secret: The secret, or ``[primary, previous, ...]`` during a rotation (the first matching one wins); a
            :class:`TokenKeys` brings its maximum lifetime.
        now_ms: The current time in Unix milliseconds; the wall clock if omitted.
        max_lifetime_s: The longest lifetime accepted; default the :class:`TokenKeys`' or
            :data:`DEFAULT_MAX_LIFETIME_S`.

    Raises:
        AuthError: The token is malformed, unsupported, badly signed, expired or lacks ``sub``/``gw``, with the
            original's message; it claims a lifetime over the maximum; or a secret is shorter than
            :data:`MIN_SECRET_BYTES` or none is given.
    """
    keys = _verification_keys(secret)
    header_b64, payload_b64, signature_b64 = _segments(token)
    _check_header(header_b64)
    _check_signature(keys, header_b64, payload_b64, signature_b64)
    claims = _payload(payload_b64)
    exp = claims.get("exp")
    if not _is_number(exp):
        raise AuthError('Missing or invalid "exp" claim (expiry)')
    now_s = _now_ms(now_ms) // 1000
    if exp <= now_s:
        raise AuthError("JWT has expired")
    _check_lifetime(claims, exp, now_s, _max_lifetime(secret, max_lifetime_s))
    return _auth_claims(claims, exp)


def _segments(token: str) -> tuple[str, str, str]:
    parts = token.split(".")
    if len(parts) != 3:
        raise AuthError("Malformed JWT: expected three dot-separated segments")
    if not all(parts):
        raise AuthError("Malformed JWT: empty segment")
    return parts[0], parts[1], parts[2]


def _check_header(header_b64: str) -> None:
    header_bytes = _b64url_decode(header_b64)
    if header_bytes is None:
        raise AuthError("Malformed JWT: invalid base64url in header")
    header = _parse_json(header_bytes)
    if not isinstance(header, dict) or header.get("alg") != "HS256" or header.get("typ") != "JWT":
        raise AuthError('Unsupported JWT: header must be {"alg":"HS256","typ":"JWT"}')


def _check_signature(keys: Sequence[bytes], header_b64: str, payload_b64: str, signature_b64: str) -> None:
    signature = _b64url_decode(signature_b64)
    if signature is None:
        raise AuthError("Malformed JWT: invalid base64url in signature")
    signing_input = f"{header_b64}.{payload_b64}".encode("utf-8", "surrogatepass")
    if not any(hmac.compare_digest(_hs256(key, signing_input), signature) for key in keys):
        raise AuthError("Invalid JWT signature")


def _payload(payload_b64: str) -> dict[str, Any]:
    payload_bytes = _b64url_decode(payload_b64)
    if payload_bytes is None:
        raise AuthError("Malformed JWT: invalid base64url in payload")
    payload = _parse_json(payload_bytes)
    if _js_falsy(payload):
        raise AuthError("Malformed JWT: payload is not valid JSON")
    return payload if isinstance(payload, dict) else {}


def _auth_claims(claims: Mapping[str, Any], exp: int | float) -> AuthClaims:
    sub = claims.get("sub")
    if not isinstance(sub, str) or not sub:
        raise AuthError('Missing or invalid "sub" claim (clientId)')
    gw = claims.get("gw")
    if not isinstance(gw, str) or not gw:
        raise AuthError('Missing or invalid "gw" claim (gatewayId)')
    custom: dict[str, ClaimValue] = {}
    for key, value in claims.items():
        if key in _RESERVED_CLAIMS:
            continue
        if isinstance(value, str):
            custom[key] = value
        elif isinstance(value, list) and all(isinstance(v, str) for v in value):
            custom[key] = tuple(value)
    custom["sub"] = sub
    role = claims.get("role")
    return AuthClaims(
        client_id=sub,
        gateway_id=gw,
        role=role if isinstance(role, str) and role else "client",
        custom_claims=custom,
        expires_at=exp,
    )


def _max_lifetime(secret: str | Sequence[str], given: int | None) -> int:
    if given is not None:
        return given
    return secret.max_lifetime_s if isinstance(secret, TokenKeys) else DEFAULT_MAX_LIFETIME_S


def _check_lifetime(claims: Mapping[str, Any], exp: int | float, now_s: int, max_lifetime_s: int) -> None:
    iat = claims.get("iat")
    too_long = _is_number(iat) and exp - iat > max_lifetime_s
    if too_long or exp - now_s > max_lifetime_s + LIFETIME_LEEWAY_S:
        raise AuthError(f"JWT lifetime exceeds the maximum ({max_lifetime_s} s)")


def sign_token(payload: Mapping[str, Any], secret: str, *, now_ms: int | None = None) -> str:
    """Sign claims as the original's ``signToken`` does.

    Args:
        payload: JSON-compatible claims, written in insertion order; ``role: "client"`` and
            ``exp: floor(now / 1000) + 3600`` are appended when their keys are absent.
        secret: The HMAC secret.
        now_ms: The current time in Unix milliseconds; the wall clock if omitted.

    Returns:
        The compact token ``header.payload.signature``.

    Raises:
        ValueError: The secret is shorter than :data:`MIN_SECRET_BYTES` or unusable as an HMAC key.
        TypeError: A payload value is not JSON.
    """
    key = _signing_key(secret)
    claims = dict(payload)
    if "role" not in claims:
        claims["role"] = "client"
    if "exp" not in claims:
        claims["exp"] = _now_ms(now_ms) // 1000 + DEFAULT_TTL_S
    # PyJWT's jwt.encode cannot produce the original's bytes (json.dumps escapes non-ASCII, prints floats
    # differently, and warns about keys under 32 bytes), so only its HMAC primitive is used.
    signing_input = _HEADER_SEGMENT + "." + _b64url_encode(js_stringify(claims).encode("utf-8"))
    # PyJWT's HMAC implementation signs; it is imported here, off the verification path (it loads `cryptography`).
    from jwt.algorithms import HMACAlgorithm

    signature = HMACAlgorithm(HMACAlgorithm.SHA256).sign(signing_input.encode("ascii"), key)
    return signing_input + "." + _b64url_encode(signature)


def mint_token(
    sub: str,
    gw: str,
    secret: str,
    *,
    role: str = "client",
    ttl_s: int = DEFAULT_TTL_S,
    claims: Mapping[str, Any] | None = None,
    now_ms: int | None = None,
) -> str:
    """Mint a LakeSync token ``{sub, gw, ...claims, role, exp: floor(now / 1000) + ttl_s}``.

    Raises:
        ValueError: ``sub``, ``gw`` or ``role`` is empty, ``ttl_s`` is not a positive integer, ``claims`` repeats
            ``sub``/``gw``/``role``/``exp``, or the secret is too short.
    """
    _signing_key(secret)
    for name, value in (("sub", sub), ("gw", gw), ("role", role)):
        if not isinstance(value, str) or not value:
            raise ValueError(f"{name} must be a non-empty string")
    if isinstance(ttl_s, bool) or not isinstance(ttl_s, int) or ttl_s <= 0:
        raise ValueError("ttl_s must be a positive integer")
    extra = dict(claims or {})
    clash = sorted(_MINT_RESERVED.intersection(extra))
    if clash:
        raise ValueError(f"claims must not set {', '.join(clash)}; use the parameters")
    payload = {"sub": sub, "gw": gw, **extra, "role": role, "exp": _now_ms(now_ms) // 1000 + ttl_s}
    return sign_token(payload, secret)


def generate_secret() -> str:
    """A new signing secret: 32 random bytes, base64url without padding (43 characters, 43 bytes)."""
    return _secrets.token_urlsafe(32)


def check_signing_key(secret: str, name: str = "JWT secret") -> None:
    """Raise unless ``secret`` is fit to be a deployment's signing key.

    Args:
        secret: The key.
        name: What to call it in the error (a variable, a file, a secret's id); never its value.

    Raises:
        ValueError: It is shorter than :data:`MIN_KEY_BYTES` UTF-8 bytes or is not usable as an HMAC key.
    """
    if not isinstance(secret, str):
        raise ValueError(f"{name} must be a string")
    size = len(secret.encode("utf-8", "surrogatepass"))
    if size < MIN_KEY_BYTES:
        raise ValueError(
            f"{name} must be at least {MIN_KEY_BYTES} bytes (it has {size}); generate one with"
            " `python -c 'import secrets; print(secrets.token_urlsafe(32))'`"
        )
    try:
        _hmac_key(secret)
    except ValueError as exc:
        raise ValueError(f"{name}: {exc}") from None


def _now_ms(now_ms: int | None) -> int:
    return time.time_ns() // 1_000_000 if now_ms is None else now_ms


@functools.lru_cache(maxsize=16)
def _hmac_key(secret: str) -> bytes:
    key_bytes = secret.encode("utf-8", "surrogatepass")
    if len(key_bytes) < MIN_SECRET_BYTES:
        raise ValueError(_SHORT_SECRET)
    if _ASYMMETRIC_KEY.search(key_bytes):
        raise ValueError(
            "JWT secret is not usable as an HMAC key: it looks like an asymmetric key (PEM or SSH); use a random secret"
        )
    return key_bytes


def _signing_key(secret: str) -> bytes:
    if not isinstance(secret, str):
        raise ValueError("JWT secret must be a string")
    return _hmac_key(secret)


def _verification_keys(secret: str | Sequence[str]) -> list[bytes]:
    candidates = [secret] if isinstance(secret, str) else list(secret)
    if not candidates:
        raise AuthError("No JWT secret configured")
    try:
        return [_signing_key(s) for s in candidates]
    except ValueError as exc:
        raise AuthError(str(exc)) from exc


def _b64url_encode(data: bytes) -> str:
    return base64.urlsafe_b64encode(data).rstrip(b"=").decode("ascii")


def _b64url_decode(segment: str) -> bytes | None:
    padded = segment.replace("-", "+").replace("_", "/")
    padded += "=" * (-len(padded) % 4)
    if not _PADDED_BASE64.fullmatch(padded):
        return None
    return base64.b64decode(padded)


_INVALID: Final = object()


def _reject_constant(name: str) -> Any:
    raise ValueError(f"{name} is not JSON")


def _parse_json(data: bytes) -> Any:
    """``JSON.parse(new TextDecoder().decode(data))``, or ``_INVALID`` where that throws."""
    text = data.decode("utf-8", "replace").removeprefix("\ufeff")
    try:
        return json.loads(text, parse_constant=_reject_constant)
    except ValueError:
        return _INVALID


def _is_number(value: object) -> TypeGuard[int | float]:
    return isinstance(value, int | float) and not isinstance(value, bool)


def _js_falsy(value: Any) -> bool:
    """JavaScript falsiness of a parsed JSON value (an unparsable one counts as falsy)."""
    if value is _INVALID or value is None or value is False or value == "":
        return True
    return _is_number(value) and value == 0
