"""Rotation of the JWT signing secret by Secrets Manager's four-step protocol.

Secrets Manager calls the rotation function with ``{"SecretId", "ClientRequestToken", "Step"}`` for each step; the
token is the id of the new version, which ``RotateSecret`` created with the ``AWSPENDING`` stage and no value:

* ``createSecret`` -- give the pending version a value: a new random secret (:func:`lakesync.auth.generate_secret`,
  32 random bytes as 43 base64url characters), unless it already has one.
* ``setSecret`` -- nothing: the secret is a signing key and lives nowhere else.
* ``testSecret`` -- the pending value is a usable HS256 secret: at least :data:`~lakesync.auth.MIN_KEY_BYTES` (32
  bytes, :func:`~lakesync.auth.check_signing_key`), and a token minted with it verifies with it
  (:mod:`lakesync.auth`).
* ``finishSecret`` -- move ``AWSCURRENT`` to the new version (Secrets Manager moves ``AWSPREVIOUS`` to the old one)
  and take ``AWSPENDING`` off it, leaving no rotation in progress.

Invariants: every step is idempotent (a repeated call finds its work done and changes nothing), and nothing is
written before the event and the secret's state are checked: the event must name a secret, a token and one of the
four steps; rotation must be enabled; the token must be a version of the secret staged ``AWSPENDING`` -- or already
``AWSCURRENT``, in which case the rotation is complete and every step does nothing. The gateway accepts tokens signed
with ``AWSCURRENT`` or ``AWSPREVIOUS`` (:mod:`lakesync.aws.secrets`), so tokens minted before a rotation stay valid
through one rotation.

:func:`emergency_rotate` is the other way, for a key that leaked: a new ``AWSCURRENT`` now, and no ``AWSPREVIOUS`` (nor
``AWSPENDING``) left, so tokens signed with any earlier key fail as soon as a function re-reads the secret (at once
for a new function instance, within :data:`lakesync.aws.lambda_runtime.SECRET_TTL_S` for a warm one).
"""

from __future__ import annotations

import uuid
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any, Final, Literal

from botocore.exceptions import BotoCoreError, ClientError

from lakesync.auth import check_signing_key, generate_secret, mint_token, verify_token
from lakesync.aws.errors import error_code
from lakesync.aws.secrets import CURRENT, PREVIOUS
from lakesync.core.errors import AuthError, StorageError, ValidationError

if TYPE_CHECKING:
    from mypy_boto3_secretsmanager import SecretsManagerClient

__all__ = [
    "PENDING",
    "STEPS",
    "EmergencyRotation",
    "RotationError",
    "RotationRequest",
    "SecretRotator",
    "Step",
    "check_usable",
    "emergency_rotate",
    "parse_rotation_event",
    "rotation_state",
    "start_rotation",
]

PENDING: Final = "AWSPENDING"
Step = Literal["createSecret", "setSecret", "testSecret", "finishSecret"]
STEPS: Final[tuple[Step, ...]] = ("createSecret", "setSecret", "testSecret", "finishSecret")

_TEST_SUBJECT: Final = "lakesync-rotation-test"
_TEST_TTL_S: Final = 300
_MISSING_VALUE: Final = frozenset({"ResourceNotFoundException"})


class RotationError(ValidationError):
    """A rotation event, or the secret's state, does not allow the step; nothing was changed."""

    code = "ROTATION_ERROR"


@dataclass(frozen=True, slots=True)
class RotationRequest:
    """One rotation step to run.

    Attributes:
        secret_id: The secret's ARN or name.
        token: ``ClientRequestToken``: the id of the version being rotated in.
        step: The step.
    """

    secret_id: str
    token: str
    step: Step


def parse_rotation_event(event: object) -> RotationRequest:
    """The step a Secrets Manager rotation event asks for.

    Raises:
        RotationError: listing every missing or invalid field.
    """
    if not isinstance(event, Mapping):
        raise RotationError("Invalid rotation event: expected an object with SecretId, ClientRequestToken and Step")
    problems = [
        f"'{name}' must be a non-empty string"
        for name in ("SecretId", "ClientRequestToken")
        if not isinstance(event.get(name), str) or not event[name].strip()
    ]
    raw_step = event.get("Step")
    step = next((s for s in STEPS if s == raw_step), None)
    if step is None:
        problems.append(f"'Step' must be one of {', '.join(STEPS)}, got {raw_step!r}")
    if problems or step is None:
        raise RotationError("Invalid rotation event: " + "; ".join(problems))
    return RotationRequest(secret_id=event["SecretId"], token=event["ClientRequestToken"], step=step)


def rotation_state(
    secret_id: str, token: str, *, rotation_enabled: bool, versions: Mapping[str, Sequence[str]]
) -> Literal["pending", "complete"]:
    """Where the rotation of version ``token`` stands, from ``DescribeSecret``'s answer.

    Returns:
        ``pending`` if the token is staged ``AWSPENDING`` (the steps have work to do), ``complete`` if it is already
        ``AWSCURRENT``.

    Raises:
        RotationError: rotation is disabled, the token is no version of the secret, or it is neither stage.
    """
    if not rotation_enabled:
        raise RotationError(f"Rotation is not enabled for secret {secret_id}")
    if token not in versions:
        raise RotationError(f"Secret {secret_id} has no version {token} to rotate to")
    stages = versions[token]
    if CURRENT in stages:
        return "complete"
    if PENDING not in stages:
        raise RotationError(f"Version {token} of secret {secret_id} is not staged {PENDING}")
    return "pending"


def check_usable(secret: str) -> None:
    """Raise unless ``secret`` signs HS256 tokens that verify with it.

    Raises:
        RotationError: the value is too short, not usable as an HMAC key, or the round trip fails.
    """
    try:
        check_signing_key(secret, "The pending secret")
    except ValueError as exc:
        raise RotationError(str(exc)) from None
    try:
        claims = verify_token(mint_token(_TEST_SUBJECT, _TEST_SUBJECT, secret, ttl_s=_TEST_TTL_S), secret)
    except (ValueError, AuthError) as exc:
        raise RotationError(f"The pending secret is not a usable HS256 secret: {exc}") from exc
    if (claims.client_id, claims.gateway_id) != (_TEST_SUBJECT, _TEST_SUBJECT):
        raise RotationError("The pending secret's test token verified with the wrong claims")


class SecretRotator:
    """Runs rotation steps on Secrets Manager; the client and the secret generator are injected."""

    def __init__(self, client: SecretsManagerClient, *, generate: Callable[[], str] = generate_secret) -> None:
        self.client = client
        self._generate = generate

    def rotate(self, request: RotationRequest) -> str:
        """Run one step; returns what it did (``created``, ``exists``, ``set``, ``tested``, ``finished``,
        ``complete``).

        Raises:
            RotationError: the secret's state does not allow the step, or the pending value fails the test.
            StorageError: Secrets Manager failed.
        """
        described = self._call("DescribeSecret", self.client.describe_secret, SecretId=request.secret_id)
        versions: Mapping[str, Sequence[str]] = described.get("VersionIdsToStages") or {}
        state = rotation_state(
            request.secret_id,
            request.token,
            rotation_enabled=bool(described.get("RotationEnabled")),
            versions=versions,
        )
        if state == "complete":
            if request.step == "finishSecret":
                self._unstage_pending(request, versions)
            return "complete"
        if request.step == "createSecret":
            return self._create(request)
        if request.step == "setSecret":
            return "set"
        if request.step == "testSecret":
            pending = self._value(request.secret_id, version_id=request.token, stage=PENDING)
            if pending is None:
                raise RotationError(f"Version {request.token} of secret {request.secret_id} has no value to test")
            check_usable(pending)
            return "tested"
        return self._finish(request, versions)

    def _create(self, request: RotationRequest) -> str:
        if self._value(request.secret_id, stage=CURRENT) is None:
            raise RotationError(f"Secret {request.secret_id} has no {CURRENT} value to rotate from")
        if self._value(request.secret_id, version_id=request.token, stage=PENDING) is not None:
            return "exists"
        secret = self._generate()
        check_usable(secret)
        self._call(
            "PutSecretValue",
            self.client.put_secret_value,
            SecretId=request.secret_id,
            ClientRequestToken=request.token,
            SecretString=secret,
            VersionStages=[PENDING],
        )
        return "created"

    def _finish(self, request: RotationRequest, versions: Mapping[str, Sequence[str]]) -> str:
        current = next((version for version, stages in versions.items() if CURRENT in stages), None)
        move: dict[str, str] = {"RemoveFromVersionId": current} if current else {}
        self._call(
            "UpdateSecretVersionStage",
            self.client.update_secret_version_stage,
            SecretId=request.secret_id,
            VersionStage=CURRENT,
            MoveToVersionId=request.token,
            **move,
        )
        self._unstage_pending(request, {**versions, request.token: [*versions[request.token], CURRENT]})
        return "finished"

    def _unstage_pending(self, request: RotationRequest, versions: Mapping[str, Sequence[str]]) -> None:
        if PENDING in versions.get(request.token, ()):
            self._call(
                "UpdateSecretVersionStage",
                self.client.update_secret_version_stage,
                SecretId=request.secret_id,
                VersionStage=PENDING,
                RemoveFromVersionId=request.token,
            )

    def _value(self, secret_id: str, *, stage: str, version_id: str | None = None) -> str | None:
        """The string value of a version (by stage, and id if given); ``None`` if it has none."""
        try:
            if version_id is None:
                response = self.client.get_secret_value(SecretId=secret_id, VersionStage=stage)
            else:
                response = self.client.get_secret_value(SecretId=secret_id, VersionId=version_id, VersionStage=stage)
        except ClientError as exc:
            if error_code(exc) in _MISSING_VALUE:
                return None
            raise _storage_error("GetSecretValue", exc) from exc
        except BotoCoreError as exc:
            raise _storage_error("GetSecretValue", exc) from exc
        return response.get("SecretString") or None

    @staticmethod
    def _call(operation: str, method: Callable[..., Any], **kwargs: Any) -> Any:
        try:
            return method(**kwargs)
        except (ClientError, BotoCoreError) as exc:
            raise _storage_error(operation, exc) from exc


def start_rotation(client: SecretsManagerClient, secret_id: str) -> None:
    """Start an ordinary rotation now (``RotateSecret``: the rotation function runs the four steps).

    Raises:
        StorageError: Secrets Manager refused (no rotation function configured, no access, ...).
    """
    SecretRotator._call("RotateSecret", client.rotate_secret, SecretId=secret_id)


@dataclass(frozen=True, slots=True)
class EmergencyRotation:
    """What :func:`emergency_rotate` did.

    Attributes:
        current_version: The new key's version id, now ``AWSCURRENT``.
        dropped_versions: The versions taken out of verification (their ``AWSPREVIOUS`` or ``AWSPENDING`` stage
            removed).
    """

    current_version: str
    dropped_versions: tuple[str, ...]


def emergency_rotate(
    client: SecretsManagerClient,
    secret_id: str,
    *,
    generate: Callable[[], str] = generate_secret,
    version_id: str | None = None,
) -> EmergencyRotation:
    """Replace a leaked signing key at once: a new ``AWSCURRENT`` and no other version left that verifies.

    A scheduled rotation keeps the old key as ``AWSPREVIOUS`` so that tokens minted just before it stay valid; here
    that version loses the stage (and a rotation in progress loses its ``AWSPENDING`` version), so every token signed
    before now fails once the functions re-read the secret.

    Args:
        client: A Secrets Manager client with ``PutSecretValue``, ``DescribeSecret`` and ``UpdateSecretVersionStage``
            on the secret.
        secret_id: The secret's ARN or name.
        generate: Makes the new key (32 random bytes by default).
        version_id: The new version's id (``ClientRequestToken``); a random UUID by default.

    Raises:
        RotationError: the generated key is not usable. StorageError: Secrets Manager failed.
    """
    secret = generate()
    check_usable(secret)
    token = version_id or str(uuid.uuid4())
    call = SecretRotator._call
    call(
        "PutSecretValue",
        client.put_secret_value,
        SecretId=secret_id,
        ClientRequestToken=token,
        SecretString=secret,
        VersionStages=[CURRENT],
    )
    dropped: list[str] = []
    # Moving AWSCURRENT stages AWSPREVIOUS on the version it leaves: clean up after the move, from a fresh read.
    for stages_to_drop in ((CURRENT,), (PREVIOUS, PENDING)):
        described = call("DescribeSecret", client.describe_secret, SecretId=secret_id)
        versions: Mapping[str, Sequence[str]] = described.get("VersionIdsToStages") or {}
        for version, stages in versions.items():
            for stage in stages_to_drop:
                if version != token and stage in stages:
                    move = {"MoveToVersionId": token} if stage == CURRENT else {}
                    call(
                        "UpdateSecretVersionStage",
                        client.update_secret_version_stage,
                        SecretId=secret_id,
                        VersionStage=stage,
                        RemoveFromVersionId=version,
                        **move,
                    )
                    dropped.append(version)
    return EmergencyRotation(current_version=token, dropped_versions=tuple(dict.fromkeys(dropped)))


def _storage_error(operation: str, exc: ClientError | BotoCoreError) -> StorageError:
    return StorageError(f"Secrets Manager {operation} failed: {error_code(exc)}")
