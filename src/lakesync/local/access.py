"""Who may reach the embedded default's own endpoints: this machine (:func:`is_loopback_host`) and, with AWS
Signature Version 4, the holder of one random credential per instance.

moto's server accepts any credentials, and API Gateway's management API is IAM-signed on AWS. ``lakesync local``
gives each of its servers a fresh :class:`LocalCredentials` and checks every request against it with
:func:`verify`: the ``Authorization`` header's access key must be the instance's and its signature must be the one
that key's secret gives (the header form only; presigned URLs are refused). :func:`sign` makes the header for
callers that are not boto3 (moto's control API).

The canonical request is SigV4's: the method, the path as sent (S3) or normalised and encoded once more (every
other service, as botocore does), the query's names and values re-encoded and sorted, the signed headers trimmed, and
the ``x-amz-content-sha256`` header or the body's SHA-256 as the payload hash.
"""

from __future__ import annotations

import hashlib
import hmac
import ipaddress
import posixpath
import re
import secrets
import string
from collections.abc import Mapping
from dataclasses import dataclass, field
from datetime import UTC, datetime
from typing import Final
from urllib.parse import quote, unquote, urlsplit

__all__ = ["ALGORITHM", "LocalCredentials", "SignatureRefused", "is_loopback_host", "sign", "verify"]

ALGORITHM: Final = "AWS4-HMAC-SHA256"
_KEY_ALPHABET: Final = string.ascii_uppercase + string.digits
_SHA256_HEX: Final = re.compile(r"[0-9a-f]{64}")


def is_loopback_host(host: str) -> bool:
    """Whether ``host`` names a loopback address (``localhost``, 127.0.0.0/8, ``::1``)."""
    if host == "localhost":
        return True
    try:
        return ipaddress.ip_address(host.strip("[]")).is_loopback
    except ValueError:
        return False


@dataclass(frozen=True, slots=True)
class LocalCredentials:
    """An access key pair of one local server.

    Attributes:
        access_key_id: The key id (``LSLOCAL`` and 13 random characters, shaped like an AWS key id).
        secret_access_key: The signing secret (40 random URL-safe characters); never printed.
    """

    access_key_id: str
    secret_access_key: str = field(repr=False)

    @classmethod
    def generate(cls) -> LocalCredentials:
        """A fresh random pair."""
        key_id = "LSLOCAL" + "".join(secrets.choice(_KEY_ALPHABET) for _ in range(13))
        return cls(key_id, secrets.token_urlsafe(30))


class SignatureRefused(Exception):
    """A request is not signed with the instance's credential.

    Attributes:
        code: An AWS error code (``MissingAuthenticationToken``, ``InvalidClientTokenId``, ``SignatureDoesNotMatch``).
        message: Why, without any secret.
    """

    def __init__(self, code: str, message: str) -> None:
        super().__init__(f"{code}: {message}")
        self.code = code
        self.message = message


def verify(credentials: LocalCredentials, method: str, target: str, headers: Mapping[str, str], body: bytes) -> None:
    """Raise unless the request carries a valid SigV4 ``Authorization`` header made with ``credentials``.

    Args:
        credentials: The instance's key pair.
        method: The HTTP method.
        target: The request target as sent (path and query, still percent-encoded).
        headers: The request headers, names in lower case.
        body: The whole body.

    Raises:
        SignatureRefused: no or malformed signature, another access key, or a signature that does not match.
    """
    header = headers.get("authorization")
    if not header:
        if "x-amz-credential=" in target.lower() or "signature=" in target.lower():
            raise SignatureRefused("AccessDenied", "presigned requests are not accepted by this local endpoint")
        raise SignatureRefused("MissingAuthenticationToken", "the request is not signed (AWS SigV4)")
    fields = _parse_authorization(header)
    scope = fields["Credential"].split("/")
    if len(scope) != 5 or scope[4] != "aws4_request":
        raise SignatureRefused("IncompleteSignature", "malformed Credential in the Authorization header")
    if not hmac.compare_digest(scope[0].encode(), credentials.access_key_id.encode()):
        raise SignatureRefused(
            "InvalidClientTokenId", "the access key is not this local instance's (see `lakesync local`'s output)"
        )
    expected = _signature(
        credentials.secret_access_key,
        method,
        target,
        headers,
        body,
        signed=fields["SignedHeaders"].split(";"),
        scope=scope[1:4],
    )
    if not hmac.compare_digest(expected.encode(), fields["Signature"].encode()):
        raise SignatureRefused("SignatureDoesNotMatch", "the request signature does not match")
    declared = headers.get("x-amz-content-sha256", "")
    if _SHA256_HEX.fullmatch(declared) and not hmac.compare_digest(declared, hashlib.sha256(body).hexdigest()):
        raise SignatureRefused("XAmzContentSHA256Mismatch", "the body is not the one the request was signed with")


def sign(
    credentials: LocalCredentials,
    method: str,
    url: str,
    body: bytes = b"",
    *,
    region: str = "us-east-1",
    service: str = "moto",
    now: datetime | None = None,
) -> dict[str, str]:
    """The headers (``Host``, ``X-Amz-Date``, ``X-Amz-Content-SHA256``, ``Authorization``) that sign a request."""
    parts = urlsplit(url)
    target = (parts.path or "/") + (f"?{parts.query}" if parts.query else "")
    amz_date = (now or datetime.now(UTC)).strftime("%Y%m%dT%H%M%SZ")
    headers = {"host": parts.netloc, "x-amz-date": amz_date, "x-amz-content-sha256": hashlib.sha256(body).hexdigest()}
    signed = sorted(headers)
    scope = [amz_date[:8], region, service]
    signature = _signature(credentials.secret_access_key, method, target, headers, body, signed=signed, scope=scope)
    credential = "/".join([credentials.access_key_id, *scope, "aws4_request"])
    authorization = f"{ALGORITHM} Credential={credential}, SignedHeaders={';'.join(signed)}, Signature={signature}"
    return {
        "Host": headers["host"],
        "X-Amz-Date": amz_date,
        "X-Amz-Content-SHA256": headers["x-amz-content-sha256"],
        "Authorization": authorization,
    }


def _parse_authorization(header: str) -> dict[str, str]:
    algorithm, _, rest = header.strip().partition(" ")
    if algorithm != ALGORITHM:
        raise SignatureRefused("IncompleteSignature", f"only {ALGORITHM} signatures are accepted")
    fields: dict[str, str] = {}
    for part in rest.split(","):
        name, _, value = part.strip().partition("=")
        fields[name] = value
    if not all(fields.get(name) for name in ("Credential", "SignedHeaders", "Signature")):
        raise SignatureRefused(
            "IncompleteSignature", "the Authorization header lacks Credential, SignedHeaders or Signature"
        )
    return fields


def _signature(
    secret: str,
    method: str,
    target: str,
    headers: Mapping[str, str],
    body: bytes,
    *,
    signed: list[str],
    scope: list[str],
) -> str:
    date, region, service = scope
    amz_date = headers.get("x-amz-date", "")
    if not amz_date or any(name not in headers for name in signed):
        raise SignatureRefused("IncompleteSignature", "a signed header (or X-Amz-Date) is missing")
    path, _, query = target.partition("?")
    canonical = "\n".join(
        [
            method.upper(),
            _canonical_path(path or "/", service),
            _canonical_query(query),
            "".join(f"{name}:{' '.join(headers[name].split())}\n" for name in signed),
            ";".join(signed),
            headers.get("x-amz-content-sha256") or hashlib.sha256(body).hexdigest(),
        ]
    )
    to_sign = "\n".join(
        [ALGORITHM, amz_date, f"{date}/{region}/{service}/aws4_request", hashlib.sha256(canonical.encode()).hexdigest()]
    )
    key = ("AWS4" + secret).encode()
    for part in (date, region, service, "aws4_request"):
        key = hmac.new(key, part.encode(), hashlib.sha256).digest()
    return hmac.new(key, to_sign.encode(), hashlib.sha256).hexdigest()


def _canonical_path(path: str, service: str) -> str:
    if service == "s3":
        return path
    normalized = posixpath.normpath(path) if path not in ("", "/") else "/"
    if path.endswith("/") and normalized != "/":
        normalized += "/"
    return quote(normalized.replace("//", "/"), safe="/~")


def _canonical_query(query: str) -> str:
    if not query:
        return ""
    pairs = []
    for part in query.split("&"):
        name, _, value = part.partition("=")
        pairs.append((quote(unquote(name), safe="-_.~"), quote(unquote(value), safe="-_.~")))
    return "&".join(f"{name}={value}" for name, value in sorted(pairs))
