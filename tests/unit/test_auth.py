"""JWT HS256: the original's vectors, check order and messages, rotation, key length, Bearer parsing, minting."""

from __future__ import annotations

import base64
import hashlib
import hmac
import json
from pathlib import Path
from typing import Any

import jwt
import pytest
from hypothesis import given
from hypothesis import strategies as st

from lakesync import auth
from lakesync.core.errors import AuthError

VECTORS = json.loads((Path(__file__).parent.parent / "vectors" / "jwt.json").read_text(encoding="utf-8"))
NOW_MS: int = VECTORS["now_ms"]
NOW_S = NOW_MS // 1000
SECRET: str = VECTORS["secret"]
PREVIOUS = "previous-secret-for-rotation"
HS256_JWT = {"alg": "HS256", "typ": "JWT"}


def b64url(data: bytes) -> str:
    return base64.urlsafe_b64encode(data).rstrip(b"=").decode("ascii")


def b64url_json(value: Any) -> str:
    return b64url(json.dumps(value, separators=(",", ":")).encode("utf-8"))


def hand_token(header: Any, payload: Any, secret: str = SECRET, *, raw_payload: str | None = None) -> str:
    """A token built independently of lakesync.auth, HMAC-signed over whatever segments it is given."""
    header_seg = header if isinstance(header, str) else b64url_json(header)
    payload_seg = raw_payload if raw_payload is not None else b64url_json(payload)
    signing_input = f"{header_seg}.{payload_seg}"
    signature = hmac.new(secret.encode(), signing_input.encode(), hashlib.sha256).digest()
    return f"{signing_input}.{b64url(signature)}"


def auth_message(token: str, secret: str | list[str] = SECRET, now_ms: int | None = NOW_MS) -> str:
    with pytest.raises(AuthError) as excinfo:
        auth.verify_token(token, secret, now_ms=now_ms)
    return excinfo.value.message


def valid_payload(**extra: Any) -> dict[str, Any]:
    return {"sub": "client-1", "gw": "gateway-1", "exp": NOW_S + 60, **extra}


def all_vector_secrets() -> list[str]:
    found = [VECTORS["secret"]]
    for case in VECTORS["sign"] + VECTORS["verify"]:
        found.extend([case["secret"]] if isinstance(case["secret"], str) else case["secret"])
    return sorted(set(found))


# --- vectors ---------------------------------------------------------------------------------------------------


@pytest.mark.parametrize("case", VECTORS["sign"], ids=[c["name"] for c in VECTORS["sign"]])
def test_sign_token_reproduces_vector_token_byte_for_byte(case):
    token = auth.sign_token(case["payload"], case["secret"], now_ms=NOW_MS)

    assert token == case["expected_token"]
    payload_seg = token.split(".")[1]
    assert (
        base64.urlsafe_b64decode(payload_seg + "=" * (-len(payload_seg) % 4)).decode() == case["expected_payload_json"]
    )


@pytest.mark.parametrize("case", VECTORS["verify"], ids=[c["name"] for c in VECTORS["verify"]])
def test_verify_token_matches_vector(case):
    expected = case["expected"]
    if not expected["ok"]:
        assert auth_message(case["token"], case["secret"]) == expected["message"]
        return

    claims = auth.verify_token(case["token"], case["secret"], now_ms=NOW_MS)

    want = expected["claims"]
    assert claims.client_id == want["clientId"]
    assert claims.gateway_id == want["gatewayId"]
    assert claims.role == want["role"]
    assert dict(claims.custom_claims) == {
        k: tuple(v) if isinstance(v, list) else v for k, v in want["customClaims"].items()
    }
    assert list(claims.custom_claims) == list(want["customClaims"])
    payload_seg = case["token"].split(".")[1]
    exp = json.loads(base64.urlsafe_b64decode(payload_seg + "=" * (-len(payload_seg) % 4)))["exp"]
    assert claims.expires_at == exp


def test_vector_secrets_all_meet_the_minimum_and_the_minimum_is_tight():
    secrets = all_vector_secrets()

    lengths = [len(s.encode("utf-8")) for s in secrets]
    assert min(lengths) >= auth.MIN_SECRET_BYTES >= 16
    assert auth.MIN_SECRET_BYTES == min(lengths)


# --- check order and messages ----------------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("token", "message"),
    [
        ("a.b.c.d", "Malformed JWT: expected three dot-separated segments"),
        ("nodots", "Malformed JWT: expected three dot-separated segments"),
        ("..", "Malformed JWT: empty segment"),
        ("a..c", "Malformed JWT: empty segment"),
        ("eyJhbGciOiJIUzI1NiIsInR5cCI6IkpXVCJ9.e30.", "Malformed JWT: empty segment"),
        ("!!!.e30.sig", "Malformed JWT: invalid base64url in header"),
        ("a.e30.sig", "Malformed JWT: invalid base64url in header"),
        ("eyJh bGci.e30.sig", "Malformed JWT: invalid base64url in header"),
        ("eyJ===.e30.sig", "Malformed JWT: invalid base64url in header"),
        (f"{b64url(b'not json')}.e30.sig", 'Unsupported JWT: header must be {"alg":"HS256","typ":"JWT"}'),
        (f"{b64url_json(['HS256'])}.e30.sig", 'Unsupported JWT: header must be {"alg":"HS256","typ":"JWT"}'),
        (f"{b64url_json(HS256_JWT)}.e30.!!!", "Malformed JWT: invalid base64url in signature"),
        (f"{b64url_json(HS256_JWT)}.e30.{b64url(b'x' * 32)}", "Invalid JWT signature"),
    ],
    ids=[
        "four segments",
        "one segment",
        "all empty",
        "empty payload",
        "empty signature",
        "header outside alphabet",
        "header bad length",
        "header with whitespace",
        "header over-padded",
        "header not JSON",
        "header not an object",
        "signature outside alphabet",
        "signature mismatch",
    ],
)
def test_verify_token_structural_failures_have_original_messages(token, message):
    assert auth_message(token) == message


@pytest.mark.parametrize(
    "header",
    [
        {"alg": "none", "typ": "JWT"},
        {"alg": "RS256", "typ": "JWT"},
        {"alg": "HS512", "typ": "JWT"},
        {"alg": "hs256", "typ": "JWT"},
        {"alg": "HS256", "typ": "jwt"},
        {"typ": "JWT"},
    ],
    ids=["none", "RS256", "HS512", "lowercase alg", "lowercase typ", "no alg"],
)
def test_verify_token_rejects_other_algorithms_even_when_hmac_matches(header):
    token = hand_token(header, valid_payload())

    assert auth_message(token) == 'Unsupported JWT: header must be {"alg":"HS256","typ":"JWT"}'


def test_verify_token_rejects_alg_none_with_empty_signature_as_empty_segment():
    token = f"{b64url_json({'alg': 'none', 'typ': 'JWT'})}.{b64url_json(valid_payload())}."

    assert auth_message(token) == "Malformed JWT: empty segment"


def test_verify_token_accepts_extra_header_fields():
    token = hand_token({"typ": "JWT", "kid": "k1", "alg": "HS256"}, valid_payload())

    assert auth.verify_token(token, SECRET, now_ms=NOW_MS).client_id == "client-1"


def test_verify_token_rejects_tampered_payload():
    good = auth.sign_token({"sub": "client-1", "gw": "gateway-1", "role": "client"}, SECRET, now_ms=NOW_MS)
    header_seg, _, signature_seg = good.split(".")
    forged = b64url_json({"sub": "client-1", "gw": "gateway-1", "role": "admin", "exp": NOW_S + 3600})

    assert auth_message(f"{header_seg}.{forged}.{signature_seg}") == "Invalid JWT signature"


def test_verify_token_rejects_tampered_signature():
    good = auth.sign_token({"sub": "c", "gw": "g"}, SECRET, now_ms=NOW_MS)
    signature = base64.urlsafe_b64decode(good.split(".")[2] + "=")
    flipped = b64url(bytes([signature[0] ^ 1]) + signature[1:])

    assert auth_message(good.rsplit(".", 1)[0] + "." + flipped) == "Invalid JWT signature"


def test_verify_token_signature_checked_before_payload_decoding():
    unsigned = f"{b64url_json(HS256_JWT)}.!!!.{b64url(b'x' * 32)}"
    signed = hand_token(HS256_JWT, None, raw_payload="!!!")

    assert auth_message(unsigned) == "Invalid JWT signature"
    assert auth_message(signed) == "Malformed JWT: invalid base64url in payload"


@pytest.mark.parametrize("payload_json", ["null", "false", "0", '""', "-0", "NaN", "Infinity"])
def test_verify_token_falsy_or_non_json_payload_is_not_valid_json(payload_json):
    token = hand_token(HS256_JWT, None, raw_payload=b64url(payload_json.encode()))

    assert auth_message(token) == "Malformed JWT: payload is not valid JSON"


@pytest.mark.parametrize("payload_json", ["[]", "{}", "1", '"text"', "true", '[{"exp":9999999999}]'])
def test_verify_token_truthy_non_claims_payload_lacks_exp(payload_json):
    token = hand_token(HS256_JWT, None, raw_payload=b64url(payload_json.encode()))

    assert auth_message(token) == 'Missing or invalid "exp" claim (expiry)'


@pytest.mark.parametrize("exp", ["1800000000", None, True, [1800000000], {"v": 1}], ids=repr)
def test_verify_token_non_number_exp_is_invalid(exp):
    token = hand_token(HS256_JWT, {"sub": "c", "gw": "g", "exp": exp})

    assert auth_message(token) == 'Missing or invalid "exp" claim (expiry)'


def test_verify_token_checks_exp_before_sub_and_gw():
    token = hand_token(HS256_JWT, {"exp": NOW_S})

    assert auth_message(token) == "JWT has expired"


@pytest.mark.parametrize(
    ("payload", "message"),
    [
        ({"sub": "", "gw": "g"}, 'Missing or invalid "sub" claim (clientId)'),
        ({"sub": 7, "gw": "g"}, 'Missing or invalid "sub" claim (clientId)'),
        ({"gw": ""}, 'Missing or invalid "sub" claim (clientId)'),
        ({"sub": "c", "gw": ""}, 'Missing or invalid "gw" claim (gatewayId)'),
        ({"sub": "c", "gw": ["g"]}, 'Missing or invalid "gw" claim (gatewayId)'),
    ],
    ids=["empty sub", "number sub", "sub checked before gw", "empty gw", "array gw"],
)
def test_verify_token_required_identity_claims(payload, message):
    token = hand_token(HS256_JWT, {**payload, "exp": NOW_S + 60})

    assert auth_message(token) == message


# --- expiry boundary -------------------------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("exp_offset_s", "now_extra_ms", "valid"),
    [(0, 0, False), (1, 0, True), (0, 999, False), (1, 999, True), (-1, 0, False)],
    ids=["exp == now", "exp == now+1", "exp == floor(now) with ms", "now+1 with ms", "past"],
)
def test_verify_token_expiry_is_exp_le_floor_now_seconds(exp_offset_s, now_extra_ms, valid):
    token = hand_token(HS256_JWT, {"sub": "c", "gw": "g", "exp": NOW_S + exp_offset_s})
    now_ms = NOW_S * 1000 + now_extra_ms

    if valid:
        assert auth.verify_token(token, SECRET, now_ms=now_ms).expires_at == NOW_S + exp_offset_s
    else:
        assert auth_message(token, now_ms=now_ms) == "JWT has expired"


def test_verify_token_fractional_exp_compares_exactly():
    token = hand_token(HS256_JWT, {"sub": "c", "gw": "g", "exp": NOW_S + 0.5})

    assert auth.verify_token(token, SECRET, now_ms=NOW_MS + 999).expires_at == NOW_S + 0.5


def test_verify_token_defaults_to_wall_clock():
    fresh = auth.mint_token("c", "g", SECRET, ttl_s=60)
    stale = auth.mint_token("c", "g", SECRET, ttl_s=60, now_ms=NOW_MS)

    assert auth.verify_token(fresh, SECRET).client_id == "c"
    assert auth_message(stale, now_ms=None) == "JWT has expired"


# --- claims ----------------------------------------------------------------------------------------------------


def test_verify_token_custom_claims_keep_strings_and_string_arrays_in_order_then_sub():
    payload = {
        "org": "acme",
        "sub": "client-1",
        "teams": ["a", "b"],
        "none": [],
        "mixed": ["a", 1],
        "n": 5,
        "flag": True,
        "obj": {"k": "v"},
        "nil": None,
        "gw": "gateway-1",
        "iat": "x",
        "iss": "issuer",
        "aud": "aud",
        "role": "admin",
        "exp": NOW_S + 60,
        "region": "eu",
    }

    claims = auth.verify_token(hand_token(HS256_JWT, payload), SECRET, now_ms=NOW_MS)

    assert list(claims.custom_claims.items()) == [
        ("org", "acme"),
        ("teams", ("a", "b")),
        ("none", ()),
        ("region", "eu"),
        ("sub", "client-1"),
    ]
    assert claims.role == "admin"


@pytest.mark.parametrize("role", ["", 1, None, ["admin"]], ids=repr)
def test_verify_token_role_defaults_to_client_unless_non_empty_string(role):
    token = hand_token(HS256_JWT, valid_payload(role=role))

    assert auth.verify_token(token, SECRET, now_ms=NOW_MS).role == "client"


def test_verify_token_ignores_leading_bom_and_tolerates_invalid_utf8_in_strings():
    raw = b"\xef\xbb\xbf" + json.dumps(valid_payload(note="x")).encode().replace(b'"x"', b'"\xff"')
    token = hand_token(HS256_JWT, None, raw_payload=b64url(raw))

    assert auth.verify_token(token, SECRET, now_ms=NOW_MS).custom_claims["note"] == "\ufffd"


def test_auth_claims_are_frozen_and_hashable():
    claims = auth.verify_token(hand_token(HS256_JWT, valid_payload()), SECRET, now_ms=NOW_MS)

    with pytest.raises(AttributeError):
        claims.role = "admin"  # type: ignore[misc]
    assert hash(claims) == hash(auth.verify_token(hand_token(HS256_JWT, valid_payload()), SECRET, now_ms=NOW_MS))


def test_verify_token_accepts_standard_base64_alphabet_and_padding():
    payload_seg = base64.b64encode(json.dumps(valid_payload(pad="??>")).encode()).decode()
    token = hand_token(HS256_JWT, None, raw_payload=payload_seg)

    assert "+" in payload_seg or "/" in payload_seg or "=" in payload_seg
    assert auth.verify_token(token, SECRET, now_ms=NOW_MS).custom_claims["pad"] == "??>"


# --- rotation --------------------------------------------------------------------------------------------------


def test_verify_token_rotation_accepts_token_signed_with_previous_secret():
    token = auth.mint_token("client-1", "gateway-1", PREVIOUS, now_ms=NOW_MS)

    assert auth.verify_token(token, [SECRET, PREVIOUS], now_ms=NOW_MS).client_id == "client-1"
    assert auth_message(token, SECRET) == "Invalid JWT signature"


def test_verify_token_rotation_accepts_token_signed_with_primary_secret():
    token = auth.mint_token("client-1", "gateway-1", SECRET, now_ms=NOW_MS)

    assert auth.verify_token(token, (SECRET, PREVIOUS), now_ms=NOW_MS).gateway_id == "gateway-1"


def test_verify_token_rotation_accepts_any_number_of_secrets():
    oldest = "the-oldest-secret-still-valid"
    token = auth.mint_token("c", "g", oldest, now_ms=NOW_MS)

    assert auth.verify_token(token, [SECRET, PREVIOUS, oldest], now_ms=NOW_MS).client_id == "c"


@pytest.mark.parametrize("signer", [SECRET, PREVIOUS], ids=["primary", "previous"])
def test_verify_token_rotation_reports_claim_error_of_the_matching_secret(signer):
    token = auth.mint_token("c", "g", signer, ttl_s=1, now_ms=NOW_MS - 1000)

    assert auth_message(token, [SECRET, PREVIOUS]) == "JWT has expired"


def test_verify_token_rotation_without_match_is_invalid_signature():
    token = auth.mint_token("c", "g", "a-third-secret-nobody-has", now_ms=NOW_MS)

    assert auth_message(token, [SECRET, PREVIOUS]) == "Invalid JWT signature"


def test_verify_token_with_no_secrets_fails():
    token = auth.mint_token("c", "g", SECRET, now_ms=NOW_MS)

    assert auth_message(token, []) == "No JWT secret configured"


# --- lifetime --------------------------------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("claims", "accepted"),
    [
        ({"exp": NOW_S + 86_400}, True),  # no iat: exp at most the maximum ahead
        ({"exp": NOW_S + 86_400 + auth.LIFETIME_LEEWAY_S}, True),  # plus the clock-skew leeway
        ({"exp": NOW_S + 86_400 + auth.LIFETIME_LEEWAY_S + 1}, False),
        ({"exp": NOW_S + 10 * 365 * 86_400}, False),  # the ten-year token
        ({"iat": NOW_S - 82_800, "exp": NOW_S + 3600}, True),  # issued 23 h ago, 1 h left: exactly 24 h
        ({"iat": NOW_S - 82_801, "exp": NOW_S + 3600}, False),  # a second more: refused though 1 h is left
        ({"iat": NOW_S + 10 * 86_400, "exp": NOW_S + 10 * 86_400 + 60}, False),  # a future iat buys nothing
        ({"iat": "yesterday", "exp": NOW_S + 3600}, True),  # a non-numeric iat is not a lifetime
    ],
)
def test_verify_token_refuses_lifetimes_over_the_maximum(claims, accepted):
    token = hand_token(HS256_JWT, {"sub": "c", "gw": "g", **claims})

    if accepted:
        assert auth.verify_token(token, SECRET, now_ms=NOW_MS).client_id == "c"
    else:
        assert auth_message(token) == f"JWT lifetime exceeds the maximum ({auth.DEFAULT_MAX_LIFETIME_S} s)"


def test_verify_token_lifetime_comes_from_the_argument_then_the_key_set():
    token = auth.mint_token("c", "g", SECRET, ttl_s=3600, now_ms=NOW_MS)
    keys = auth.TokenKeys((PREVIOUS, SECRET), max_lifetime_s=600)

    assert auth.verify_token(token, SECRET, now_ms=NOW_MS).client_id == "c"
    with pytest.raises(AuthError, match=r"maximum \(600 s\)"):
        auth.verify_token(token, keys, now_ms=NOW_MS)
    assert auth.verify_token(token, keys, now_ms=NOW_MS, max_lifetime_s=3600).client_id == "c"
    assert list(keys) == [PREVIOUS, SECRET] and len(keys) == 2 and keys[1] == SECRET


def test_verify_token_lifetime_is_checked_after_expiry_and_before_identity():
    expired = hand_token(HS256_JWT, {"exp": NOW_S - 1, "iat": NOW_S - 10**9})
    anonymous = hand_token(HS256_JWT, {"exp": NOW_S + 10**9})

    assert auth_message(expired) == "JWT has expired"
    assert auth_message(anonymous).startswith("JWT lifetime exceeds the maximum")


# --- key length ------------------------------------------------------------------------------------------------


@pytest.mark.parametrize("size", [0, 18, 31])
def test_check_signing_key_refuses_keys_under_32_bytes_without_echoing_them(size):
    key = "k" * size

    with pytest.raises(ValueError) as refused:
        auth.check_signing_key(key, "LAKESYNC_JWT_SECRET")

    assert str(refused.value).startswith(f"LAKESYNC_JWT_SECRET must be at least 32 bytes (it has {size})")
    assert size == 0 or key not in str(refused.value)


def test_check_signing_key_accepts_32_bytes_and_generated_keys():
    auth.check_signing_key("k" * auth.MIN_KEY_BYTES)
    auth.check_signing_key("é" * (auth.MIN_KEY_BYTES // 2))  # UTF-8 bytes count
    auth.check_signing_key(auth.generate_secret())
    with pytest.raises(ValueError, match="asymmetric"):
        auth.check_signing_key("-----BEGIN PUBLIC KEY-----" + "A" * 40)


def test_verify_token_refuses_short_secret_before_parsing():
    short = "s" * (auth.MIN_SECRET_BYTES - 1)

    assert auth_message("not-a-token", short) == f"JWT secret must be at least {auth.MIN_SECRET_BYTES} bytes"


def test_verify_token_refuses_short_previous_secret_even_when_primary_matches():
    token = auth.mint_token("c", "g", SECRET, now_ms=NOW_MS)

    assert auth_message(token, [SECRET, "short"]) == f"JWT secret must be at least {auth.MIN_SECRET_BYTES} bytes"


def test_secret_length_counts_utf8_bytes():
    multibyte = "é" * (auth.MIN_SECRET_BYTES // 2)  # 2 bytes each

    token = auth.mint_token("c", "g", multibyte, now_ms=NOW_MS)

    assert len(multibyte) < auth.MIN_SECRET_BYTES <= len(multibyte.encode())
    assert auth.verify_token(token, multibyte, now_ms=NOW_MS).client_id == "c"


def test_minimum_length_secret_is_accepted():
    exact = "k" * auth.MIN_SECRET_BYTES

    token = auth.sign_token({"sub": "c", "gw": "g"}, exact, now_ms=NOW_MS)

    assert auth.verify_token(token, exact, now_ms=NOW_MS).client_id == "c"


@pytest.mark.parametrize("secret", ["", "short", "x" * 17], ids=["empty", "5 bytes", "17 bytes"])
def test_sign_and_mint_refuse_short_secret(secret):
    with pytest.raises(ValueError, match="at least"):
        auth.sign_token({"sub": "c", "gw": "g"}, secret, now_ms=NOW_MS)
    with pytest.raises(ValueError, match="at least"):
        auth.mint_token("c", "g", secret, now_ms=NOW_MS)


def test_sign_token_refuses_pem_shaped_secret():
    pem = "-----BEGIN PUBLIC KEY-----\nMFkwEwYHKoZIzj0CAQYIKoZIzj0DAQcDQgAE\n-----END PUBLIC KEY-----"

    with pytest.raises(ValueError, match="HMAC key"):
        auth.sign_token({"sub": "c", "gw": "g"}, pem, now_ms=NOW_MS)
    assert "HMAC key" in auth_message("a.b.c", pem)


def test_generate_secret_is_32_random_urlsafe_bytes():
    first, second = auth.generate_secret(), auth.generate_secret()

    assert first != second
    assert len(base64.urlsafe_b64decode(first + "=")) == 32
    assert set(first) <= set("ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789-_")
    assert auth.verify_token(auth.mint_token("c", "g", first, now_ms=NOW_MS), first, now_ms=NOW_MS).role == "client"


# --- signing and minting ---------------------------------------------------------------------------------------


def test_sign_token_keeps_given_role_and_exp_in_place():
    token = auth.sign_token({"exp": NOW_S + 5, "sub": "c", "role": "admin", "gw": "g"}, SECRET, now_ms=NOW_MS)

    payload_seg = token.split(".")[1]
    payload_json = base64.urlsafe_b64decode(payload_seg + "=" * (-len(payload_seg) % 4)).decode()
    assert payload_json == json.dumps({"exp": NOW_S + 5, "sub": "c", "role": "admin", "gw": "g"}, separators=(",", ":"))


def test_sign_token_writes_non_ascii_as_utf8_and_round_trips():
    token = auth.sign_token({"sub": "zoë", "gw": "g", "team": "日本"}, SECRET, now_ms=NOW_MS)

    claims = auth.verify_token(token, SECRET, now_ms=NOW_MS)
    payload_seg = token.split(".")[1]
    assert "日本".encode() in base64.urlsafe_b64decode(payload_seg + "=" * (-len(payload_seg) % 4))
    assert (claims.client_id, claims.custom_claims["team"]) == ("zoë", "日本")


def test_sign_token_is_readable_by_pyjwt():
    strong = auth.generate_secret()
    token = auth.sign_token({"sub": "c", "gw": "g"}, strong, now_ms=NOW_MS)

    decoded = jwt.decode(token, strong, algorithms=["HS256"], options={"verify_exp": False})

    assert decoded == {"sub": "c", "gw": "g", "role": "client", "exp": NOW_S + 3600}
    assert jwt.get_unverified_header(token) == HS256_JWT


def test_mint_token_orders_claims_and_applies_ttl():
    token = auth.mint_token("c", "g", SECRET, role="admin", ttl_s=90, claims={"org": "acme"}, now_ms=NOW_MS)

    claims = auth.verify_token(token, SECRET, now_ms=NOW_MS)
    assert (claims.role, claims.expires_at) == ("admin", NOW_S + 90)
    assert list(claims.custom_claims.items()) == [("org", "acme"), ("sub", "c")]


@pytest.mark.parametrize(
    "kwargs",
    [
        {"sub": ""},
        {"gw": ""},
        {"role": ""},
        {"ttl_s": 0},
        {"ttl_s": True},
        {"claims": {"exp": 1}},
        {"claims": {"sub": "other"}},
    ],
    ids=["empty sub", "empty gw", "empty role", "zero ttl", "bool ttl", "claims exp", "claims sub"],
)
def test_mint_token_rejects_bad_arguments(kwargs):
    args = {"sub": "c", "gw": "g", **kwargs}
    sub, gw = args.pop("sub"), args.pop("gw")

    with pytest.raises(ValueError):
        auth.mint_token(sub, gw, SECRET, now_ms=NOW_MS, **args)


claim_text = st.text(min_size=1, max_size=12)
extra_claims = st.dictionaries(
    st.text(min_size=1, max_size=8).filter(lambda k: k not in {"sub", "gw", "exp", "iat", "iss", "aud", "role"}),
    st.one_of(claim_text, st.lists(claim_text, max_size=3)),
    max_size=4,
)


@given(sub=claim_text, gw=claim_text, role=claim_text, extra=extra_claims, ttl_s=st.integers(1, 10**6))
def test_mint_then_verify_round_trips(sub, gw, role, extra, ttl_s):
    token = auth.mint_token(sub, gw, SECRET, role=role, ttl_s=ttl_s, claims=extra, now_ms=NOW_MS)

    claims = auth.verify_token(token, [PREVIOUS, SECRET], now_ms=NOW_MS, max_lifetime_s=10**6)

    assert (claims.client_id, claims.gateway_id, claims.role, claims.expires_at) == (sub, gw, role, NOW_S + ttl_s)
    expected = {k: tuple(v) if isinstance(v, list) else v for k, v in extra.items()} | {"sub": sub}
    assert dict(claims.custom_claims) == expected


# --- Bearer ----------------------------------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("header", "token"),
    [
        ("Bearer abc.def.ghi", "abc.def.ghi"),
        ("Bearer    tok", "tok"),
        ("Bearer\ttok", "tok"),
        ("Bearer\u00a0tok", "tok"),
    ],
    ids=["single space", "many spaces", "tab", "nbsp (JS whitespace)"],
)
def test_parse_bearer_extracts_token(header, token):
    assert auth.parse_bearer(header) == token


@pytest.mark.parametrize(
    "header",
    [
        None,
        "",
        "Bearer",
        "Bearer ",
        "bearer tok",
        "BEARER tok",
        "Basic dXNlcjpwdw==",
        "Bearer a b",
        " Bearer tok",
        "Bearer tok ",
        "Bearer tok\n",
        "Bearertok",
    ],
    ids=repr,
)
def test_parse_bearer_rejects_other_headers(header):
    with pytest.raises(AuthError) as excinfo:
        auth.parse_bearer(header)

    assert excinfo.value.message == "Missing Bearer token"
    assert (excinfo.value.status, excinfo.value.api_code) == (401, "AUTH_ERROR")
