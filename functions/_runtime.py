"""What the handlers share: the composition root of :mod:`lakesync.aws.lambda_runtime` (observability singletons,
settings, stores and secrets built on first use, the per-process invocation lock)."""

from lakesync.aws.lambda_runtime import (
    get_broadcast_deps,
    get_deps,
    get_materialise_deps,
    get_realtime,
    get_settings,
    jwt_secrets,
    logger,
    metrics,
    one_at_a_time,
    reset_runtime,
    tracer,
    use_materialise_deps,
)

__all__ = [
    "get_broadcast_deps",
    "get_deps",
    "get_materialise_deps",
    "get_realtime",
    "get_settings",
    "jwt_secrets",
    "logger",
    "metrics",
    "one_at_a_time",
    "reset_runtime",
    "tracer",
    "use_materialise_deps",
]
