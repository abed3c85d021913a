"""The composition root of the Lambda functions: observability singletons, settings, stores and secrets.

Nothing here touches AWS at import time. :func:`get_settings` validates the environment on first use (a bad
configuration fails every request with a logged :class:`~functions._settings.SettingsError`, never at import, so
the module stays importable for tooling); :func:`get_deps` builds the boto3 client and the DynamoDB stores on first
use; the JWT secret is read from the environment or from Secrets Manager (cached for :data:`SECRET_TTL_S`, so a
rotation reaches warm functions). :func:`reset_runtime` forgets all of it (tests, the local runner).

:func:`one_at_a_time` serialises invocations within a process. Lambda never runs two at once in one process, but
the local runner serves requests on threads, and Powertools keeps the current event, log keys and metric set in
process-wide state.
"""

from __future__ import annotations

import functools
import os
import threading
import time
from collections.abc import Callable, Mapping
from typing import TYPE_CHECKING, Final, ParamSpec, TypeVar, cast

from aws_lambda_powertools import Logger, Metrics, Tracer

from functions._settings import Settings
from lakesync.core.errors import StorageError

if TYPE_CHECKING:
    from lakesync.gateway.deps import GatewayDeps

SERVICE: Final = "lakesync"
NAMESPACE: Final = "LakeSync"
SECRET_TTL_S: Final = 300.0

_F = TypeVar("_F", bound=Callable[..., object])


def tracing_enabled(environ: Mapping[str, str] = os.environ) -> bool:
    """X-Ray tracing runs on Lambda unless ``POWERTOOLS_TRACE_DISABLED`` is set."""
    disabled = environ.get("POWERTOOLS_TRACE_DISABLED", "").strip().lower() in {"1", "true", "yes", "on"}
    return "AWS_LAMBDA_FUNCTION_NAME" in environ and not disabled


class _OptionalTracer:
    """Powertools' Tracer when tracing runs, otherwise nothing.

    Building a Tracer imports the X-Ray SDK (about 0.7 s of a cold start) even when tracing is disabled, so it is
    only built where it will trace.
    """

    def __init__(self) -> None:
        self.tracer: Tracer | None = Tracer(service=SERVICE) if tracing_enabled() else None

    def capture_lambda_handler(self, *, capture_response: bool = True) -> Callable[[_F], _F]:
        def decorate(handler: _F) -> _F:
            if self.tracer is None:
                return handler
            return cast(_F, self.tracer.capture_lambda_handler(handler, capture_response=capture_response))

        return decorate


logger = Logger(service=SERVICE)
tracer = _OptionalTracer()
metrics = Metrics(namespace=NAMESPACE, service=SERVICE)

_P = ParamSpec("_P")
_R = TypeVar("_R")
_INVOCATION_LOCK = threading.Lock()
_SECRET_LOCK = threading.Lock()
_secret_cache: dict[str, tuple[float, tuple[str, ...]]] = {}


@functools.lru_cache(maxsize=1)
def get_settings() -> Settings:
    """The validated settings of this process (raises ``SettingsError`` until the environment is fixed)."""
    return Settings.from_env(os.environ)


@functools.lru_cache(maxsize=1)
def get_deps() -> GatewayDeps:
    """The services' dependencies over DynamoDB (and S3 for checkpoints, its client made on first use), built on
    first use (boto3 honours ``AWS_ENDPOINT_URL``)."""
    from lakesync.aws.clients import dynamodb_client
    from lakesync.aws.dynamodb import DynamoDBActionStore, DynamoDBBufferStore, DynamoDBConfigStore
    from lakesync.aws.objects import S3ObjectStore
    from lakesync.gateway.deps import GatewayDeps

    settings = get_settings()
    client = dynamodb_client()
    return GatewayDeps(
        buffer=DynamoDBBufferStore(client, settings.tables),
        config=DynamoDBConfigStore(client, settings.tables),
        actions=DynamoDBActionStore(client, settings.tables),
        settings=settings.gateway_settings(),
        objects=S3ObjectStore(settings.checkpoint_bucket) if settings.checkpoint_bucket else None,
    )


def jwt_secrets() -> tuple[str, ...]:
    """The secrets tokens may be signed with, primary first.

    Raises:
        StorageError: Secrets Manager cannot be read and no earlier value is cached.
    """
    settings = get_settings()
    if settings.jwt_secret_arn is None:
        return settings.jwt_secrets
    arn = settings.jwt_secret_arn
    with _SECRET_LOCK:
        cached = _secret_cache.get(arn)
        if cached is not None and cached[0] > time.monotonic():
            return cached[1]
        try:
            secrets = _fetch_secrets(arn)
        except StorageError:
            if cached is None:
                raise
            logger.warning("JWT secret refresh failed; keeping the cached value", exc_info=True)
            secrets = cached[1]
        _secret_cache[arn] = (time.monotonic() + SECRET_TTL_S, secrets)
        return secrets


def _fetch_secrets(arn: str) -> tuple[str, ...]:
    from lakesync.auth import MIN_SECRET_BYTES
    from lakesync.aws.secrets import fetch_jwt_secrets, secretsmanager_client

    secrets = fetch_jwt_secrets(secretsmanager_client(), arn)
    if any(len(s.encode("utf-8", "surrogatepass")) < MIN_SECRET_BYTES for s in secrets):
        raise StorageError(f"JWT secret {arn} is shorter than {MIN_SECRET_BYTES} bytes")
    return secrets


def reset_runtime() -> None:
    """Forget settings, clients, stores and cached secrets; the next request rebuilds them from the environment."""
    get_settings.cache_clear()
    get_deps.cache_clear()
    with _SECRET_LOCK:
        _secret_cache.clear()


def one_at_a_time(handler: Callable[_P, _R]) -> Callable[_P, _R]:
    """Run ``handler`` under a process-wide lock (see the module docstring)."""

    @functools.wraps(handler)
    def wrapper(*args: _P.args, **kwargs: _P.kwargs) -> _R:
        with _INVOCATION_LOCK:
            return handler(*args, **kwargs)

    return wrapper
