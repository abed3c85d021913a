"""functions.rotate_secret.lambda_handler on the moto server: the four steps from the sample events rotate the JWT
secret (AWSCURRENT new, AWSPREVIOUS the old value, no AWSPENDING left), each step is idempotent, tokens minted before
the rotation still verify, and bad events or secret states fail with a clear error and change nothing.

moto's Secrets Manager supports every call the function makes (DescribeSecret, GetSecretValue by stage and
version, PutSecretValue with stages, UpdateSecretVersionStage moving AWSPREVIOUS along with AWSCURRENT as AWS does).
Its ``RotateSecret`` cannot invoke a rotation function (that needs moto's Docker-based Lambda) and, without one, stages
the new, valueless version AWSCURRENT at once; :meth:`Secret.start_rotation` therefore puts the stages back where AWS
leaves them before calling ``createSecret`` -- rotation enabled, current and previous unchanged, the new version
staged AWSPENDING without a value -- using public calls only.
"""

from __future__ import annotations

import json
import uuid
from pathlib import Path
from typing import Any

import pytest
from aws_lambda_powertools.utilities.data_classes import SecretsManagerEvent

import functions.rotate_secret as rotate_fn
from lakesync.auth import MIN_KEY_BYTES, MIN_SECRET_BYTES, mint_token, verify_token
from lakesync.aws.rotation import STEPS, RotationError, SecretRotator, emergency_rotate, parse_rotation_event
from lakesync.aws.secrets import fetch_jwt_secrets, secretsmanager_client
from lakesync.core.errors import AuthError, StorageError
from lakesync.local.front import LambdaContext

EVENTS = Path(__file__).resolve().parent.parent.parent / "events"
STEP_EVENTS = ["rotate_secret_create", "rotate_secret_set", "rotate_secret_test", "rotate_secret_finish"]
ORIGINAL = "the-original-jwt-secret-0123456789"


class Secret:
    """One JWT secret on moto and the rotation in progress."""

    def __init__(self, client: Any, name: str) -> None:
        self.client = client
        self.name = name
        self.token = ""

    def start_rotation(self) -> str:
        """What Secrets Manager does before it calls ``createSecret`` (see the module docstring)."""
        before = self.stages()
        current = next(v for v, stages in before.items() if "AWSCURRENT" in stages)
        previous = next((v for v, stages in before.items() if "AWSPREVIOUS" in stages), None)
        token: str = self.client.rotate_secret(
            SecretId=self.name, RotationRules={"AutomaticallyAfterDays": 30}, RotateImmediately=True
        )["VersionId"]
        update = self.client.update_secret_version_stage
        update(SecretId=self.name, VersionStage="AWSCURRENT", MoveToVersionId=current, RemoveFromVersionId=token)
        update(SecretId=self.name, VersionStage="AWSPREVIOUS", RemoveFromVersionId=token)
        if previous is not None:
            update(SecretId=self.name, VersionStage="AWSPREVIOUS", MoveToVersionId=previous)
        update(SecretId=self.name, VersionStage="AWSPENDING", MoveToVersionId=token)
        assert self.stages() == {**before, token: ["AWSPENDING"]}
        assert self.client.describe_secret(SecretId=self.name)["RotationEnabled"]
        self.token = token
        return token

    def stages(self) -> dict[str, list[str]]:
        versions: dict[str, list[str]] = self.client.describe_secret(SecretId=self.name)["VersionIdsToStages"]
        return {version: sorted(stages) for version, stages in versions.items() if stages}

    def value(self, stage: str, version_id: str | None = None) -> str:
        kwargs = {"VersionId": version_id} if version_id else {}
        value: str = self.client.get_secret_value(SecretId=self.name, VersionStage=stage, **kwargs)["SecretString"]
        return value

    def event(self, name: str, **overrides: Any) -> dict[str, Any]:
        event: dict[str, Any] = json.loads((EVENTS / f"{name}.json").read_text(encoding="utf-8"))
        event.update(SecretId=self.name, ClientRequestToken=self.token)
        event.update(overrides)
        return event


@pytest.fixture
def secret(aws_env: None) -> Any:
    """A JWT secret with its original value, rotation not started; a cold rotation function."""
    client = secretsmanager_client()
    name = f"lakesync-jwt-{uuid.uuid4().hex[:8]}"
    client.create_secret(Name=name, SecretString=ORIGINAL)
    rotate_fn.get_rotator.cache_clear()
    yield Secret(client, name)
    rotate_fn.get_rotator.cache_clear()


def _invoke(event: dict[str, Any]) -> None:
    context = LambdaContext(
        function_name="lakesync-rotate-secret",
        aws_request_id="c0ffee00-0000-4000-8000-0000000005ec",
        invoked_function_arn="arn:aws:lambda:eu-west-1:123456789012:function:lakesync-rotate-secret",
        memory_limit_in_mb=256,
    )
    assert rotate_fn.lambda_handler(event, context) is None


def _rotate(secret: Secret) -> str:
    token = secret.start_rotation()
    for name in STEP_EVENTS:
        _invoke(secret.event(name))
    return token


@pytest.mark.parametrize("name", STEP_EVENTS)
def test_rotate_secret_sample_events_are_rotation_events(name):
    raw = json.loads((EVENTS / f"{name}.json").read_text(encoding="utf-8"))
    event = SecretsManagerEvent(raw)
    assert event.step == STEPS[STEP_EVENTS.index(name)]
    assert event.secret_id.startswith("arn:aws:secretsmanager:") and event.client_request_token
    assert set(raw) == {"SecretId", "ClientRequestToken", "Step"}


def test_rotate_secret_four_steps_rotate_the_secret(secret, capsys):
    # Given a secret with its original value and a rotation started by Secrets Manager
    original_version = next(iter(secret.stages()))
    # When the four steps run in order
    token = _rotate(secret)
    # Then the new version is current with a fresh usable value, the original is previous, and nothing is pending
    assert secret.stages() == {token: ["AWSCURRENT"], original_version: ["AWSPREVIOUS"]}
    new = secret.value("AWSCURRENT")
    assert new != ORIGINAL and len(new.encode()) >= MIN_SECRET_BYTES
    assert secret.value("AWSPREVIOUS") == ORIGINAL
    assert '"SecretRotations"' in capsys.readouterr().out


def test_rotate_secret_keeps_tokens_minted_before_the_rotation_valid(secret):
    # Given a token minted with the original secret
    before = mint_token("client-a", "default", ORIGINAL)
    # When the secret is rotated
    _rotate(secret)
    # Then the gateway's secrets (current, previous) verify it and a token minted with the new one
    secrets = fetch_jwt_secrets(secret.client, secret.name)
    assert secrets == (secret.value("AWSCURRENT"), ORIGINAL)
    assert verify_token(before, secrets).client_id == "client-a"
    assert verify_token(mint_token("client-b", "default", secrets[0]), secrets).client_id == "client-b"


def test_rotate_secret_second_rotation_retires_the_original(secret):
    first = _rotate(secret)
    first_value = secret.value("AWSCURRENT")
    second = _rotate(secret)
    assert second != first
    assert secret.stages() == {second: ["AWSCURRENT"], first: ["AWSPREVIOUS"]}
    assert fetch_jwt_secrets(secret.client, secret.name) == (secret.value("AWSCURRENT"), first_value)
    assert ORIGINAL not in fetch_jwt_secrets(secret.client, secret.name)


def test_rotate_secret_every_step_is_idempotent(secret):
    # Given a rotation in progress
    token = secret.start_rotation()
    # When createSecret runs twice
    _invoke(secret.event("rotate_secret_create"))
    pending = secret.value("AWSPENDING", token)
    _invoke(secret.event("rotate_secret_create"))
    # Then the pending value was generated once
    assert secret.value("AWSPENDING", token) == pending
    # And repeating each later step, even after the rotation finished, changes nothing more
    for name in ("rotate_secret_set", "rotate_secret_set", "rotate_secret_test", "rotate_secret_test"):
        _invoke(secret.event(name))
    _invoke(secret.event("rotate_secret_finish"))
    done = secret.stages()
    for name in STEP_EVENTS:
        _invoke(secret.event(name))
    assert secret.stages() == done
    assert secret.value("AWSCURRENT") == pending


@pytest.mark.parametrize(
    ("overrides", "fragment"),
    [
        ({"SecretId": ""}, "'SecretId' must be a non-empty string"),
        ({"ClientRequestToken": None}, "'ClientRequestToken' must be a non-empty string"),
        ({"Step": "rollbackSecret"}, "'Step' must be one of createSecret, setSecret, testSecret, finishSecret"),
        ({"ClientRequestToken": "00000000-0000-4000-8000-000000000000"}, "has no version"),
    ],
    ids=["no-secret", "no-token", "wrong-step", "unknown-token"],
)
@pytest.mark.parametrize("name", ["rotate_secret_create", "rotate_secret_finish"])
def test_rotate_secret_bad_event_is_a_clear_error_and_changes_nothing(secret, name, overrides, fragment):
    # Given a rotation in progress
    secret.start_rotation()
    before = secret.stages()
    # When a step arrives with a bad event
    with pytest.raises(RotationError, match=fragment):
        _invoke(secret.event(name, **overrides))
    # Then nothing changed: no pending value, the original still current
    assert secret.stages() == before
    assert secret.value("AWSCURRENT") == ORIGINAL
    with pytest.raises(secret.client.exceptions.ResourceNotFoundException):
        secret.value("AWSPENDING", secret.token)


def test_rotate_secret_token_of_an_old_version_is_refused(secret):
    # Given a finished rotation, and a step naming the version that is now previous
    original_version = next(iter(secret.stages()))
    _rotate(secret)
    before = secret.stages()
    secret.token = original_version
    # When it arrives, Then it is refused and nothing changes
    with pytest.raises(RotationError, match="is not staged AWSPENDING"):
        _invoke(secret.event("rotate_secret_finish"))
    assert secret.stages() == before


def test_rotate_secret_refuses_a_secret_without_rotation(secret):
    # Given a secret with a pending version but rotation never enabled
    secret.token = str(uuid.uuid4())
    secret.client.put_secret_value(
        SecretId=secret.name, ClientRequestToken=secret.token, SecretString="x" * 40, VersionStages=["AWSPENDING"]
    )
    before = secret.stages()
    with pytest.raises(RotationError, match="Rotation is not enabled"):
        _invoke(secret.event("rotate_secret_finish"))
    assert secret.stages() == before


@pytest.mark.parametrize(
    "value", ["too-short", "-----BEGIN RSA PRIVATE KEY-----\nMIIBOgIBAAJBAK\n-----END RSA PRIVATE KEY-----\n"]
)
def test_rotate_secret_test_step_fails_an_unusable_pending_value(secret, value):
    # Given a rotation whose pending value was set by someone else to something that cannot sign HS256 tokens
    token = secret.start_rotation()
    secret.client.put_secret_value(
        SecretId=secret.name, ClientRequestToken=token, SecretString=value, VersionStages=["AWSPENDING"]
    )
    # When createSecret finds it and testSecret checks it
    _invoke(secret.event("rotate_secret_create"))
    with pytest.raises(RotationError, match="pending secret"):
        _invoke(secret.event("rotate_secret_test"))
    # Then it was kept as it was and the original is still current
    assert secret.value("AWSPENDING", token) == value
    assert secret.value("AWSCURRENT") == ORIGINAL


def test_rotate_secret_missing_secret_is_a_storage_error(secret):
    secret.start_rotation()
    with pytest.raises(StorageError, match="DescribeSecret failed: ResourceNotFoundException"):
        _invoke(secret.event("rotate_secret_create", SecretId="lakesync-no-such-secret"))


# --- emergency rotation -------------------------------------------------------------------------------------------


def test_emergency_rotation_leaves_only_the_new_key_to_verify_with(secret):
    # Given an ordinary rotation done (the original is AWSPREVIOUS) and a token minted with each key
    _rotate(secret)
    current = secret.value("AWSCURRENT")
    tokens = [mint_token("client-a", "default", key) for key in (ORIGINAL, current)]
    assert len(fetch_jwt_secrets(secret.client, secret.name)) == 2
    # When the key is rotated in an emergency
    done = emergency_rotate(secret.client, secret.name)
    # Then the new version alone is staged, alone is fetched, and neither earlier token verifies
    new = secret.value("AWSCURRENT")
    assert secret.stages() == {done.current_version: ["AWSCURRENT"]}
    assert fetch_jwt_secrets(secret.client, secret.name) == (new,)
    assert new not in (ORIGINAL, current) and len(new.encode()) >= MIN_KEY_BYTES
    for token in tokens:
        with pytest.raises(AuthError, match="Invalid JWT signature"):
            verify_token(token, fetch_jwt_secrets(secret.client, secret.name))
    assert verify_token(mint_token("c", "default", new), (new,)).client_id == "c"


def test_emergency_rotation_cancels_a_rotation_in_progress(secret):
    # Given a rotation whose pending value exists but is not current yet
    token = secret.start_rotation()
    _invoke(secret.event("rotate_secret_create"))
    # When the key is rotated in an emergency
    done = emergency_rotate(secret.client, secret.name)
    # Then nothing but the new key is staged: the pending version can never be finished into use
    assert done.dropped_versions and token not in secret.stages()
    # (moto may list a moved stage twice on the version it moved to)
    assert {version: set(stages) for version, stages in secret.stages().items()} == {
        done.current_version: {"AWSCURRENT"}
    }
    with pytest.raises(RotationError, match="not staged AWSPENDING"):
        _invoke(secret.event("rotate_secret_finish"))


def test_emergency_rotation_refuses_a_short_generated_key_and_changes_nothing(secret):
    before = secret.stages()

    with pytest.raises(RotationError, match="at least 32 bytes"):
        emergency_rotate(secret.client, secret.name, generate=lambda: "k" * 31)

    assert secret.stages() == before


def test_rotation_refuses_to_create_a_key_under_32_bytes(secret):
    secret.start_rotation()
    rotate_fn.get_rotator.cache_clear()
    rotator = SecretRotator(secret.client, generate=lambda: "k" * 31)

    with pytest.raises(RotationError, match="at least 32 bytes"):
        rotator.rotate(parse_rotation_event(secret.event("rotate_secret_create")))

    assert secret.stages()[secret.token] == ["AWSPENDING"]


# --- the first rotation, during the deploy ------------------------------------------------------------------------


@pytest.fixture
def deployed_secret(aws_env: None) -> Any:
    """The JWT secret as the stack creates it seconds before its rotation schedule: a value Secrets Manager
    generates with the construct's settings (no value of ours, no previous version), rotation not yet enabled."""
    from lakesync_infra.secrets import SECRET_LENGTH

    client = secretsmanager_client()
    name = f"lakesync-jwt-{uuid.uuid4().hex[:8]}"
    value = client.get_random_password(PasswordLength=SECRET_LENGTH, ExcludePunctuation=True, IncludeSpace=False)
    client.create_secret(Name=name, SecretString=value["RandomPassword"])
    rotate_fn.get_rotator.cache_clear()
    yield Secret(client, name)
    rotate_fn.get_rotator.cache_clear()


def test_rotate_secret_deploy_time_test_of_a_new_secret_passes_and_changes_nothing(deployed_secret):
    # Given the secret just created, and its rotation schedule created without an immediate rotation: Secrets
    # Manager enables rotation and runs testSecret alone, on an AWSPENDING version holding the current value, which
    # it removes afterwards (RotateSecret, RotateImmediately=false:
    # https://docs.aws.amazon.com/secretsmanager/latest/apireference/API_RotateSecret.html)
    secret = deployed_secret
    (original_version,) = secret.stages()
    generated = secret.value("AWSCURRENT")
    token = secret.start_rotation()
    secret.client.put_secret_value(
        SecretId=secret.name, ClientRequestToken=token, SecretString=generated, VersionStages=["AWSPENDING"]
    )
    # When the rotation function runs that step, Then it passes
    _invoke(secret.event("rotate_secret_test"))
    # And wrote nothing: once Secrets Manager removes the test's version, the generated value is the only one staged,
    # no rotation is left in progress to block the first scheduled one, and no earlier key verifies
    assert secret.stages() == {original_version: ["AWSCURRENT"], token: ["AWSPENDING"]}
    assert secret.value("AWSPENDING", token) == generated
    secret.client.update_secret_version_stage(
        SecretId=secret.name, VersionStage="AWSPENDING", RemoveFromVersionId=token
    )
    assert secret.stages() == {original_version: ["AWSCURRENT"]}
    assert fetch_jwt_secrets(secret.client, secret.name) == (generated,)


def test_rotate_secret_four_steps_pass_on_a_secret_created_seconds_earlier(deployed_secret):
    # Given the secret just created with its generated value (a single version, never rotated)
    secret = deployed_secret
    (original_version,) = secret.stages()
    generated = secret.value("AWSCURRENT")
    assert len(generated.encode()) >= MIN_KEY_BYTES
    # When rotation is enabled with an immediate rotation and the four steps run at once
    token = _rotate(secret)
    # Then the rotation completed: a new current key, the generated one previous, nothing pending
    assert secret.stages() == {token: ["AWSCURRENT"], original_version: ["AWSPREVIOUS"]}
    new = secret.value("AWSCURRENT")
    assert new != generated and len(new.encode()) >= MIN_SECRET_BYTES
    assert fetch_jwt_secrets(secret.client, secret.name) == (new, generated)
