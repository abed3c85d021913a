"""lakesync.aws.rotation without AWS: the rotation event's fields, where a rotation stands from the secret's version
stages, and what makes a pending value a usable HS256 secret.
"""

from __future__ import annotations

import pytest

from lakesync.auth import MIN_KEY_BYTES, MIN_SECRET_BYTES, generate_secret
from lakesync.aws.rotation import (
    STEPS,
    RotationError,
    RotationRequest,
    check_usable,
    parse_rotation_event,
    rotation_state,
)

SECRET_ID = "arn:aws:secretsmanager:eu-west-1:123456789012:secret:lakesync-jwt-AbCdEf"
TOKEN = "3f2b8c1e-9d4a-4e6b-8c7f-1a2b3c4d5e6f"
OLD = "0b9e2c6a-1111-4e6b-8c7f-1a2b3c4d5e6f"


@pytest.mark.parametrize("step", STEPS)
def test_parse_rotation_event_reads_each_step(step):
    event = {"SecretId": SECRET_ID, "ClientRequestToken": TOKEN, "Step": step}
    assert parse_rotation_event(event) == RotationRequest(SECRET_ID, TOKEN, step)


@pytest.mark.parametrize(
    ("event", "fragments"),
    [
        ({"ClientRequestToken": TOKEN, "Step": "createSecret"}, ["'SecretId' must be a non-empty string"]),
        ({"SecretId": SECRET_ID, "ClientRequestToken": " ", "Step": "setSecret"}, ["'ClientRequestToken'"]),
        ({"SecretId": SECRET_ID, "ClientRequestToken": 7, "Step": "setSecret"}, ["'ClientRequestToken'"]),
        ({"SecretId": SECRET_ID, "ClientRequestToken": TOKEN, "Step": "deleteSecret"}, ["got 'deleteSecret'"]),
        ({"SecretId": SECRET_ID, "ClientRequestToken": TOKEN}, ["'Step' must be one of createSecret"]),
        ({}, ["'SecretId'", "'ClientRequestToken'", "'Step'"]),
    ],
    ids=["no-secret", "blank-token", "token-not-string", "unknown-step", "no-step", "empty"],
)
def test_parse_rotation_event_lists_every_problem(event, fragments):
    with pytest.raises(RotationError) as err:
        parse_rotation_event(event)
    for fragment in fragments:
        assert fragment in err.value.message


@pytest.mark.parametrize("event", [None, [], "createSecret"], ids=["none", "list", "string"])
def test_parse_rotation_event_rejects_a_non_object(event):
    with pytest.raises(RotationError, match="expected an object"):
        parse_rotation_event(event)


def test_rotation_state_pending_token_has_work_to_do():
    versions = {OLD: ["AWSCURRENT"], TOKEN: ["AWSPENDING"]}
    assert rotation_state(SECRET_ID, TOKEN, rotation_enabled=True, versions=versions) == "pending"


def test_rotation_state_current_token_is_complete():
    versions = {OLD: ["AWSPREVIOUS"], TOKEN: ["AWSCURRENT", "AWSPENDING"]}
    assert rotation_state(SECRET_ID, TOKEN, rotation_enabled=True, versions=versions) == "complete"
    assert rotation_state(SECRET_ID, TOKEN, rotation_enabled=True, versions={TOKEN: ["AWSCURRENT"]}) == "complete"


@pytest.mark.parametrize(
    ("enabled", "versions", "fragment"),
    [
        (False, {OLD: ["AWSCURRENT"], TOKEN: ["AWSPENDING"]}, "Rotation is not enabled"),
        (True, {OLD: ["AWSCURRENT"]}, f"has no version {TOKEN}"),
        (True, {OLD: ["AWSCURRENT"], TOKEN: ["AWSPREVIOUS"]}, "is not staged AWSPENDING"),
        (True, {OLD: ["AWSCURRENT"], TOKEN: []}, "is not staged AWSPENDING"),
    ],
    ids=["disabled", "unknown-token", "previous", "unstaged"],
)
def test_rotation_state_refuses_what_is_not_a_rotation_in_progress(enabled, versions, fragment):
    with pytest.raises(RotationError, match=fragment):
        rotation_state(SECRET_ID, TOKEN, rotation_enabled=enabled, versions=versions)


def test_check_usable_accepts_a_generated_secret():
    check_usable(generate_secret())


@pytest.mark.parametrize(
    ("secret", "fragment"),
    [
        ("x" * (MIN_SECRET_BYTES - 1), f"at least {MIN_KEY_BYTES} bytes"),
        ("x" * (MIN_KEY_BYTES - 1), f"at least {MIN_KEY_BYTES} bytes \\(it has {MIN_KEY_BYTES - 1}\\)"),
        ("-----BEGIN PUBLIC KEY-----\nMFkwEwYHKoZIzj0CAQYIKoZIzj0DAQcDQgAE\n", "not usable as an HMAC key"),
    ],
    ids=["short", "under-32-bytes", "pem"],
)
def test_check_usable_refuses_what_cannot_sign(secret, fragment):
    with pytest.raises(RotationError, match=fragment):
        check_usable(secret)


def test_rotation_error_is_a_validation_error_with_its_own_code():
    error = RotationError("x")
    assert (error.code, error.api_code, error.status) == ("ROTATION_ERROR", "VALIDATION_ERROR", 400)
