"""Tokens (issue 40, item 6): a maximum lifetime, signing keys of at least 32 bytes, an emergency rotation.

Through the Lambda handlers on the moto server (the ``api`` fixture: real DynamoDB and Secrets Manager calls), over
real HTTP and WebSocket against ``lakesync local``, and through the ``lakesync`` command itself.
"""

from __future__ import annotations

import json
import time
import urllib.error
import urllib.request
import uuid
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import boto3
import pytest
from websockets.exceptions import InvalidStatus
from websockets.sync.client import connect

import functions.pull as pull_fn
from functions._runtime import reset_runtime
from lakesync import cli
from lakesync.auth import DEFAULT_MAX_LIFETIME_S, MIN_KEY_BYTES, generate_secret, mint_token, verify_token
from lakesync.aws.rotation import RotationError, check_usable
from lakesync.aws.secrets import load_jwt_secrets
from lakesync.aws.settings.api import Settings
from lakesync.aws.settings.env import SettingsError
from lakesync.core.errors import AuthError, StorageError
from lakesync.local.runner import (
    PREVIOUS_SECRET_FILE,
    SECRET_FILE,
    LocalKeyError,
    LocalStack,
    load_or_create_secret,
    rotate_local_key,
)
from tests.conftest import FAKE_AWS
from tests.functions.conftest import SECRET, Api, api, aws_env

__all__ = ["api", "aws_env"]

pytestmark = pytest.mark.integration

TEN_YEARS_S = 10 * 365 * 86_400
REFUSED = {"error": f"JWT lifetime exceeds the maximum ({DEFAULT_MAX_LIFETIME_S} s)", "code": "AUTH_ERROR"}


def _http(url: str, token: str) -> tuple[int, Any]:
    request = urllib.request.Request(url, headers={"Authorization": f"Bearer {token}"})
    try:
        with urllib.request.urlopen(request, timeout=30) as response:
            return response.status, json.loads(response.read())
    except urllib.error.HTTPError as exc:
        return exc.code, json.loads(exc.read())


def _pull(stack: LocalStack, token: str, sub: str = "alice") -> tuple[int, Any]:
    return _http(f"{stack.url}/v1/sync/default/pull?clientId={sub}&since=0", token)


AUTHORIZER_REFUSAL = (403, {"message": "Forbidden"})
"""API Gateway's answer when the HTTP API's authorizer refuses a token before any function runs (``lakesync local``
runs the same authorizer in front of the HTTP routes); the functions themselves answer 401 ``AUTH_ERROR``."""


# --- Lifetime: the Lambda handlers on moto -------------------------------------------------------------------------


def test_a_ten_year_token_is_refused_by_the_handler_and_a_day_long_one_is_served(api: Api) -> None:
    ten_years = api.token(ttl_s=TEN_YEARS_S)
    one_day = api.token(ttl_s=DEFAULT_MAX_LIFETIME_S)

    refused = api.call(pull_fn, api.event("pull", token=ten_years))
    served = api.call(pull_fn, api.event("pull", token=one_day))

    assert (refused.status, refused.json()) == (401, REFUSED)
    assert served.status == 200


def test_a_long_lifetime_is_refused_by_iat_even_when_little_of_it_is_left(api: Api) -> None:
    now = int(time.time())
    # Issued two days ago, one hour left: 49 hours of lifetime.
    long_lived = mint_token("client-a", "default", SECRET, claims={"iat": now - 2 * 86_400}, ttl_s=3600)
    # Issued 23 hours ago, one hour left: exactly the maximum.
    day_long = mint_token("client-a", "default", SECRET, claims={"iat": now - 23 * 3600}, ttl_s=3600)

    reply = api.call(pull_fn, api.event("pull", token=long_lived))

    assert (reply.status, reply.json()) == (401, REFUSED)
    assert api.call(pull_fn, api.event("pull", token=day_long)).status == 200


def test_the_configured_maximum_applies(api: Api, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("LAKESYNC_MAX_TOKEN_LIFETIME_S", "600")
    reset_runtime()

    hour = api.call(pull_fn, api.event("pull", token=api.token(ttl_s=3600)))
    minutes = api.call(pull_fn, api.event("pull", token=api.token(ttl_s=600)))

    assert (hour.status, hour.json()) == (
        401,
        {"error": "JWT lifetime exceeds the maximum (600 s)", "code": "AUTH_ERROR"},
    )
    assert minutes.status == 200


# --- Lifetime: real HTTP against lakesync local --------------------------------------------------------------------


@pytest.fixture
def stack(tmp_path: Path) -> Iterator[LocalStack]:
    # Not shared with the handler tests: a running stack points this process's AWS environment at its own moto.
    with LocalStack(tmp_path / "data", port=0, persist=False, materialise=False) as running:
        yield running


def test_lakesync_local_refuses_a_ten_year_token_over_http_and_on_the_socket(stack: LocalStack) -> None:
    ten_years = mint_token("alice", "default", stack.secret, ttl_s=TEN_YEARS_S)

    assert _pull(stack, ten_years) == AUTHORIZER_REFUSAL
    assert _pull(stack, mint_token("alice", "default", stack.secret, ttl_s=3600))[0] == 200
    socket_url = stack.url.replace("http://", "ws://") + "/v1/sync/default/ws"
    with pytest.raises(InvalidStatus) as refused:
        connect(socket_url, additional_headers={"Authorization": f"Bearer {ten_years}"}).close()
    response = refused.value.response
    assert (response.status_code, json.loads(response.body or b"{}")) == (401, REFUSED)  # $connect: the function


# --- lakesync token ------------------------------------------------------------------------------------------------


def test_lakesync_token_refuses_a_ttl_beyond_the_maximum(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    monkeypatch.delenv("LAKESYNC_MAX_TOKEN_LIFETIME_S", raising=False)
    monkeypatch.setenv("LAKESYNC_JWT_SECRET", SECRET)

    code = cli.main(["token", "--sub", "alice", "--ttl", str(TEN_YEARS_S), "--data-dir", str(tmp_path)])
    out, err = capsys.readouterr()

    assert code == 2 and out == ""
    assert f"--ttl {TEN_YEARS_S} is outside 1..{DEFAULT_MAX_LIFETIME_S} s" in err
    assert SECRET not in err


def test_lakesync_token_follows_the_configured_maximum(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    monkeypatch.setenv("LAKESYNC_JWT_SECRET", SECRET)
    monkeypatch.setenv("LAKESYNC_MAX_TOKEN_LIFETIME_S", "600")

    refused = cli.main(["token", "--sub", "alice", "--data-dir", str(tmp_path)])  # the default --ttl, 3600
    assert refused == 2 and "outside 1..600 s" in capsys.readouterr().err
    minted = cli.main(["token", "--sub", "alice", "--ttl", "600", "--data-dir", str(tmp_path)])
    token = capsys.readouterr().out.strip()

    assert minted == 0
    assert verify_token(token, SECRET, max_lifetime_s=600).client_id == "alice"


# --- Keys of at least 32 bytes -------------------------------------------------------------------------------------


def test_short_keys_are_refused_by_the_settings_rotation_and_the_cli(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    short = "k" * (MIN_KEY_BYTES - 1)  # long enough for the verifier's wire-compatible floor, not for a deployment
    with pytest.raises(SettingsError, match="LAKESYNC_JWT_SECRET must be at least 32 bytes"):
        Settings.from_env({"LAKESYNC_TABLE_PREFIX": "t", "LAKESYNC_JWT_SECRET": short})
    with pytest.raises(SettingsError, match="LAKESYNC_JWT_SECRET_PREVIOUS must be at least 32 bytes"):
        Settings.from_env(
            {"LAKESYNC_TABLE_PREFIX": "t", "LAKESYNC_JWT_SECRET": SECRET, "LAKESYNC_JWT_SECRET_PREVIOUS": short}
        )
    with pytest.raises(RotationError, match="at least 32 bytes"):
        check_usable(short)
    monkeypatch.setenv("LAKESYNC_JWT_SECRET", short)
    assert cli.main(["token", "--sub", "alice", "--data-dir", str(tmp_path)]) == 2
    err = capsys.readouterr().err
    assert "LAKESYNC_JWT_SECRET must be at least 32 bytes" in err and short not in err


def test_a_short_key_in_secrets_manager_is_never_used(aws_env: None) -> None:
    client = boto3.client("secretsmanager", **FAKE_AWS)
    arn = client.create_secret(Name=f"jwt-{uuid.uuid4().hex}", SecretString="k" * 20)["ARN"]

    with pytest.raises(StorageError, match="must be at least 32 bytes") as refused:
        load_jwt_secrets(arn)
    assert "k" * 20 not in str(refused.value)


def test_a_short_local_key_file_stops_lakesync_local_and_token_with_the_fix(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    monkeypatch.delenv("LAKESYNC_JWT_SECRET", raising=False)
    (tmp_path / SECRET_FILE).write_text("an-old-short-key\n")

    with pytest.raises(LocalKeyError, match="rotate-key --emergency"):
        load_or_create_secret(tmp_path)
    assert cli.main(["local", "--data-dir", str(tmp_path), "--port", "0", "--lake-interval", "0"]) == 2
    assert cli.main(["token", "--sub", "alice", "--data-dir", str(tmp_path)]) == 2
    err = capsys.readouterr().err
    assert err.count("must be at least 32 bytes") == 2 and "an-old-short-key" not in err
    rotate_local_key(tmp_path, emergency=True)
    assert len(load_or_create_secret(tmp_path).encode()) >= MIN_KEY_BYTES


# --- Emergency rotation --------------------------------------------------------------------------------------------


def test_emergency_rotation_on_aws_drops_the_previous_key_at_once(
    api: Api, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    # Given the functions on a Secrets Manager key that went through an ordinary rotation (old key AWSPREVIOUS)
    client = boto3.client("secretsmanager", **FAKE_AWS)
    old, current = generate_secret(), generate_secret()
    arn = client.create_secret(Name=f"jwt-{uuid.uuid4().hex}", SecretString=old)["ARN"]
    client.put_secret_value(SecretId=arn, SecretString=current)
    monkeypatch.delenv("LAKESYNC_JWT_SECRET")
    monkeypatch.setenv("LAKESYNC_JWT_SECRET_ARN", arn)
    reset_runtime()
    assert api.call(pull_fn, api.event("pull", token=api.token(secret=old))).status == 200
    assert api.call(pull_fn, api.event("pull", token=api.token(secret=current))).status == 200

    # When the operator runs the documented command
    assert cli.main(["rotate-key", "--secret-id", arn, "--emergency"]) == 0
    printed = capsys.readouterr().out
    reset_runtime()  # a function that reads the secret now (a new instance, or a warm one past SECRET_TTL_S)

    # Then tokens of both earlier keys are refused, and the new key works
    for stale in (old, current):
        reply = api.call(pull_fn, api.event("pull", token=api.token(secret=stale)))
        assert (reply.status, reply.json()) == (401, {"error": "Invalid JWT signature", "code": "AUTH_ERROR"})
    new = client.get_secret_value(SecretId=arn)["SecretString"]
    assert new not in (old, current) and len(new.encode()) >= MIN_KEY_BYTES
    assert api.call(pull_fn, api.event("pull", token=api.token(secret=new))).status == 200
    assert load_jwt_secrets(arn) == (new,)
    assert new not in printed and "AWSCURRENT" in printed


def test_emergency_rotation_of_lakesync_local_drops_the_previous_key(tmp_path: Path) -> None:
    data = tmp_path / "data"
    with LocalStack(data, port=0, persist=False, materialise=False) as first:
        original = first.secret
    rotate_local_key(data)  # ordinary: the replaced key stays valid
    with LocalStack(data, port=0, persist=False, materialise=False) as second:
        assert _pull(second, mint_token("alice", "default", original))[0] == 200
        assert _pull(second, mint_token("alice", "default", second.secret))[0] == 200
        rotated = second.secret

    assert cli.main(["rotate-key", "--emergency", "--data-dir", str(data)]) == 0
    assert not (data / PREVIOUS_SECRET_FILE).exists()
    with LocalStack(data, port=0, persist=False, materialise=False) as third:
        for stale in (original, rotated):
            assert _pull(third, mint_token("alice", "default", stale)) == AUTHORIZER_REFUSAL
        assert _pull(third, mint_token("alice", "default", third.secret))[0] == 200


def test_verification_refuses_a_key_dropped_from_the_key_set() -> None:
    old, new = generate_secret(), generate_secret()
    token = mint_token("c", "g", old)

    assert verify_token(token, [new, old]).client_id == "c"
    with pytest.raises(AuthError, match="Invalid JWT signature"):
        verify_token(token, [new])
