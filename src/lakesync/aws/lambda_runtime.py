"""The composition root of the Lambda functions: observability singletons, settings, stores and secrets
(the handlers in ``functions/`` import it through ``functions._runtime``).

Nothing here touches AWS at import time. :func:`get_settings` validates the environment on first use (a bad
configuration fails every request with a logged :class:`~lakesync.aws.settings.env.SettingsError`, never at
import, so the module stays importable for tooling); :func:`get_deps` builds the boto3 client and the DynamoDB
stores on first use; the JWT secret is read from the environment or from Secrets Manager
(:class:`lakesync.aws.secrets.CachedSecrets`, re-read every :data:`SECRET_TTL_S`, so a rotation reaches warm
functions). :func:`reset_runtime` forgets all of it (tests, the local runner).

:func:`one_at_a_time` serialises invocations within a process. Lambda never runs two at once in one process, and
the handlers rely on it: the Logger's appended keys, the metric set (shared by every ``Metrics`` instance) and each
function's router event are process-wide state. On Lambda the lock is never contended. The embedded default serves
concurrent requests from several handler processes (:mod:`lakesync.local.workers`), one invocation at a time each,
as Lambda does; the lock still guards in-process callers (``workers=0``, the local materialiser thread).
"""

from __future__ import annotations

import functools
import gc
import logging
import os
import threading
from collections.abc import Callable, Mapping
from typing import TYPE_CHECKING, Any, Final, ParamSpec, TypeVar

from aws_lambda_powertools import Logger, Metrics
from aws_lambda_powertools.metrics.functions import is_metrics_disabled
from aws_lambda_powertools.metrics.provider.cloudwatch_emf.cloudwatch import AmazonCloudWatchEMFProvider

from lakesync.auth import TokenKeys
from lakesync.aws.settings.api import Settings
from lakesync.aws.settings.materialise import MaterialiseSettings
from lakesync.aws.settings.realtime import BroadcastSettings, RealtimeSettings
from lakesync.aws.tracing import OptionalTracer
from lakesync.lazy import Lazy

if TYPE_CHECKING:
    from lakesync.aws.secrets import CachedSecrets
    from lakesync.aws.wiring import Realtime
    from lakesync.gateway.deps import GatewayDeps
    from lakesync.gateway.materialise import MaterialiseDeps
    from lakesync.gateway.realtime import BroadcastDeps

SERVICE: Final = "lakesync"
NAMESPACE: Final = "LakeSync"
SECRET_TTL_S: Final = 60.0
"""How long a warm function trusts its copy of the JWT keys: the most an emergency rotation (which drops the previous
key, docs/deployment.md) waits to reach every function; two ``GetSecretValue`` calls per function per minute at most."""


def apply_configured_log_level(environ: Mapping[str, str]) -> None:
    """Apply a ``POWERTOOLS_LOG_LEVEL`` stricter than Lambda's application log level.

    The deployment keeps Lambda's filter (``AWS_LAMBDA_LOG_LEVEL``) at INFO or DEBUG so that the metrics' EMF lines,
    which carry no level, reach CloudWatch; Powertools lets that filter's level win over its own setting, so a
    configured WARNING or ERROR is set here, on the standard logger the Powertools one writes through (the package's
    module loggers are its children)."""
    configured = logging.getLevelName(environ.get("POWERTOOLS_LOG_LEVEL", "").strip().upper())
    service_logger = logging.getLogger(SERVICE)
    if isinstance(configured, int) and configured > service_logger.getEffectiveLevel():
        service_logger.setLevel(configured)


class _EMFProvider(AmazonCloudWatchEMFProvider):
    """Powertools' CloudWatch EMF provider, whose cold-start metric also honours ``POWERTOOLS_METRICS_DISABLED``.

    ``capture_cold_start_metric`` writes the ColdStart metric as a blob of its own through ``single_metric``, which
    prints whether or not metrics are disabled (Powertools 3.37); every other metric is flushed only when they are
    enabled. Deployed, the variable is unset and the blob is written as before; the embedded default sets it. Disabled,
    the metrics of an invocation are dropped at its end, as printing them would drop them."""

    def add_cold_start_metric(self, context: Any) -> None:
        if not is_metrics_disabled():
            super().add_cold_start_metric(context)

    def flush_metrics(self, raise_on_empty_metrics: bool = False) -> None:
        # Disabled, Powertools neither prints nor clears the set: a long-running local worker's would grow for ever.
        if is_metrics_disabled() and self.metric_set:
            self.clear_metrics()
            return
        super().flush_metrics(raise_on_empty_metrics)


def _metrics() -> Metrics:
    """The functions' ``Metrics``, on the metric set every ``Metrics`` instance of the process shares."""
    shared = Metrics(namespace=NAMESPACE, service=SERVICE)
    provider = _EMFProvider(
        namespace=NAMESPACE,
        service=SERVICE,
        metric_set=shared.metric_set,
        dimension_set=shared.dimension_set,
        metadata_set=shared.metadata_set,
        default_dimensions=shared.default_dimensions,
    )
    return Metrics(provider=provider)


logger = Logger(service=SERVICE)
apply_configured_log_level(os.environ)
tracer = OptionalTracer(SERVICE)
metrics = _metrics()

_P = ParamSpec("_P")
_R = TypeVar("_R")
_INVOCATION_LOCK = threading.Lock()


@functools.lru_cache(maxsize=1)
def get_settings() -> Settings:
    """The validated settings of this process (raises ``SettingsError`` until the environment is fixed)."""
    return Settings.from_env(os.environ)


@functools.lru_cache(maxsize=1)
def get_deps() -> GatewayDeps:
    """The services' dependencies over DynamoDB and S3 (:func:`lakesync.aws.wiring.gateway_deps`), built on first
    use."""
    from lakesync.aws.settings.connectors import ConnectorSettings
    from lakesync.aws.wiring import gateway_deps

    return gateway_deps(get_settings(), ConnectorSettings.from_env(os.environ))


def _materialise_deps() -> MaterialiseDeps:
    from lakesync.aws.wiring import materialise_deps

    return materialise_deps(MaterialiseSettings.from_env(os.environ))


def _close_destinations(deps: MaterialiseDeps) -> None:
    close = getattr(deps.destinations, "close", None)
    if close is not None:
        close()


_materialise = Lazy(_materialise_deps, _close_destinations)
get_materialise_deps = _materialise.get
"""The materialise consumer's dependencies (:func:`lakesync.aws.wiring.materialise_deps`), built on first use from its
own settings; destination connections live as long as the process."""
use_materialise_deps = _materialise.use
"""Make the materialise handler use other dependencies (the embedded default adds its local database)."""


@functools.lru_cache(maxsize=1)
def get_realtime() -> Realtime:
    """The WebSocket functions' sessions and sender (:func:`lakesync.aws.wiring.realtime`), built on first use from
    :class:`~lakesync.aws.settings.realtime.RealtimeSettings` (the sender only where a callback URL is set)."""
    from lakesync.aws.wiring import realtime

    return realtime(RealtimeSettings.from_env(os.environ))


@functools.lru_cache(maxsize=1)
def get_broadcast_deps() -> BroadcastDeps:
    """The broadcaster's dependencies (:func:`lakesync.aws.wiring.broadcast_deps`), built on first use."""
    from lakesync.aws.wiring import broadcast_deps

    return broadcast_deps(BroadcastSettings.from_env(os.environ))


def jwt_secrets() -> TokenKeys:
    """The secrets tokens may be signed with, primary first, with the configured maximum token lifetime.

    Raises:
        StorageError: Secrets Manager cannot be read and no earlier value is cached.
    """
    settings = get_settings()
    if settings.jwt_secret_arn is None:
        secrets = settings.jwt_secrets
    else:
        secrets = _secret_source(settings.jwt_secret_arn).get()
    return TokenKeys(secrets, settings.max_token_lifetime_s)


@functools.lru_cache(maxsize=4)
def _secret_source(arn: str) -> CachedSecrets:
    from lakesync.aws.secrets import CachedSecrets, load_jwt_secrets

    def stale() -> None:
        logger.warning("JWT secret refresh failed; keeping the cached value", exc_info=True)

    return CachedSecrets(lambda: load_jwt_secrets(arn), ttl_s=SECRET_TTL_S, on_stale=stale)


def reset_runtime() -> None:
    """Forget settings, clients, stores and cached secrets (closing the connectors' and destinations' connections);
    the next request rebuilds them from the environment."""
    if get_deps.cache_info().currsize:
        close = getattr(get_deps().connectors, "close", None)
        if close is not None:
            close()
    get_settings.cache_clear()
    get_deps.cache_clear()
    get_realtime.cache_clear()
    get_broadcast_deps.cache_clear()
    _materialise.reset()
    _secret_source.cache_clear()


def one_at_a_time(handler: Callable[_P, _R]) -> Callable[_P, _R]:
    """Run ``handler`` under a process-wide lock (see the module docstring). Its metrics are cleared after it: where
    metrics are disabled (the embedded default) Powertools keeps them, and a hundred would force a flush mid-call."""

    @functools.wraps(handler)
    def wrapper(*args: _P.args, **kwargs: _P.kwargs) -> _R:
        with _INVOCATION_LOCK:
            try:
                return handler(*args, **kwargs)
            finally:
                metrics.clear_metrics()
                _freeze_once()

    return wrapper


_frozen = False


def _freeze_once() -> None:
    """After the process's first invocation: move everything alive (modules, the SDK's service models, the wired
    stores) out of the collector's view, so the full collections of later requests do not walk it again (one costs
    about 60 ms over a pull page's objects otherwise). Refcounting still frees what is frozen; only cycles among
    frozen objects that die later stay, a bounded one-time amount."""
    global _frozen
    if not _frozen:
        _frozen = True
        gc.freeze()
