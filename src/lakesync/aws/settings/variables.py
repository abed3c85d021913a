"""Every ``LAKESYNC_*`` variable the functions read, which function reads which (:data:`FUNCTION_ENV_VARS`, the
subset the CDK app sets), and the limits on their values. The settings classes of :mod:`lakesync.aws.settings` read
them."""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import fields
from typing import Final

from lakesync.aws.tables import TableNames
from lakesync.gateway.deps import MIB

GATEWAY_IDS: Final = "LAKESYNC_GATEWAY_IDS"
TABLE_PREFIX: Final = "LAKESYNC_TABLE_PREFIX"
TABLE_VARS: Final = {f.name: f"LAKESYNC_TABLE_{f.name.upper()}" for f in fields(TableNames)}
JWT_SECRET: Final = "LAKESYNC_JWT_SECRET"
JWT_SECRET_PREVIOUS: Final = "LAKESYNC_JWT_SECRET_PREVIOUS"
JWT_SECRET_ARN: Final = "LAKESYNC_JWT_SECRET_ARN"
MAX_TOKEN_LIFETIME_S: Final = "LAKESYNC_MAX_TOKEN_LIFETIME_S"
MIN_TOKEN_LIFETIME_LIMIT_S: Final = 60
MAX_TOKEN_LIFETIME_LIMIT_S: Final = 30 * 86_400
FLUSH_THRESHOLD_BYTES: Final = "LAKESYNC_FLUSH_THRESHOLD_BYTES"
BACKPRESSURE_BYTES: Final = "LAKESYNC_BACKPRESSURE_BYTES"
SUB_SHARDS: Final = "LAKESYNC_SUB_SHARDS"
MAX_BODY_BYTES: Final = "LAKESYNC_MAX_BODY_BYTES"
CHECKPOINT_BUCKET: Final = "LAKESYNC_CHECKPOINT_BUCKET"
FLUSH_JOB_NAME: Final = "LAKESYNC_FLUSH_JOB_NAME"
COMPACT_JOB_NAME: Final = "LAKESYNC_COMPACT_JOB_NAME"
CHECKPOINT_JOB_NAME: Final = "LAKESYNC_CHECKPOINT_JOB_NAME"
JOB_NAME_VARS: Final = {"flush": FLUSH_JOB_NAME, "compact": COMPACT_JOB_NAME, "checkpoint": CHECKPOINT_JOB_NAME}
"""The lake job -> the variable naming its Glue job."""
FLUSH_PUBLISHES: Final = "LAKESYNC_FLUSH_PUBLISHES"
FLUSH_FUNCTION_NAME: Final = "LAKESYNC_FLUSH_FUNCTION_NAME"
FLUSH_FUNCTION_TIMEOUT_S: Final = "LAKESYNC_FLUSH_FUNCTION_TIMEOUT_S"
FLUSH_FUNCTION_MAX_BACKLOG: Final = "LAKESYNC_FLUSH_FUNCTION_MAX_BACKLOG"
COMPACT_MIN_FLUSH_RUNS: Final = "LAKESYNC_COMPACT_MIN_FLUSH_RUNS"
COMPACT_MAX_WAIT_MINUTES: Final = "LAKESYNC_COMPACT_MAX_WAIT_MINUTES"
MAX_COMPACT_MIN_FLUSH_RUNS: Final = 25
"""The most flush runs a compaction may wait for: the flush function's run records keep the newest 30, which the tick
counts."""
LAKE_WAREHOUSE: Final = "LAKESYNC_LAKE_WAREHOUSE"
LAKE_CATALOG: Final = "LAKESYNC_LAKE_CATALOG"
LAKE_CATALOG_URI: Final = "LAKESYNC_LAKE_CATALOG_URI"
LAKE_NAMESPACE: Final = "LAKESYNC_LAKE_NAMESPACE"
MATERIALISE_QUEUE_URL: Final = "LAKESYNC_MATERIALISE_QUEUE_URL"
FLUSH_RETENTION_MS: Final = "LAKESYNC_FLUSH_RETENTION_MS"
FLUSH_MAX_DELTAS: Final = "LAKESYNC_FLUSH_MAX_DELTAS"
CLAIM_CHECK_BUCKET: Final = "LAKESYNC_CLAIM_CHECK_BUCKET"
CONNECTIONS_TABLE: Final = "LAKESYNC_CONNECTIONS_TABLE"
WS_CALLBACK_URL: Final = "LAKESYNC_WS_CALLBACK_URL"
PULL_BASIS_TTL_MS: Final = "LAKESYNC_PULL_BASIS_TTL_MS"
RATE_LIMITS: Final = "LAKESYNC_RATE_LIMITS"
DEFAULT_PULL_BASIS_TTL_MS: Final = 1_000
MAX_PULL_BASIS_TTL_MS: Final = 60_000

CONNECTOR_SCHEDULER: Final = "LAKESYNC_CONNECTOR_SCHEDULER"
CONNECTOR_SCHEDULE_GROUP: Final = "LAKESYNC_CONNECTOR_SCHEDULE_GROUP"
CONNECTOR_POLL_FUNCTION_ARN: Final = "LAKESYNC_CONNECTOR_POLL_FUNCTION_ARN"
CONNECTOR_SCHEDULER_ROLE_ARN: Final = "LAKESYNC_CONNECTOR_SCHEDULER_ROLE_ARN"
CONNECTOR_SECRETS_DIR: Final = "LAKESYNC_CONNECTOR_SECRETS_DIR"
CONNECTOR_SECRET_PREFIX: Final = "LAKESYNC_CONNECTOR_SECRET_PREFIX"
CONNECTOR_ENV_VARS: Final = frozenset(
    {
        CONNECTOR_SCHEDULER,
        CONNECTOR_SCHEDULE_GROUP,
        CONNECTOR_POLL_FUNCTION_ARN,
        CONNECTOR_SCHEDULER_ROLE_ARN,
        CONNECTOR_SECRETS_DIR,
        CONNECTOR_SECRET_PREFIX,
    }
)
"""Read by the functions that open connectors (:class:`~lakesync.aws.settings.connectors.ConnectorSettings`), all
optional."""

ALLOWED_NETWORKS: Final = "LAKESYNC_ALLOWED_NETWORKS"
ALLOW_PLAIN_HTTP: Final = "LAKESYNC_ALLOW_PLAIN_HTTP"
NETWORK_ENV_VARS: Final = frozenset({ALLOWED_NETWORKS, ALLOW_PLAIN_HTTP})
"""Where connectors and destinations may connect (:func:`~lakesync.aws.settings.validators.network_policy`), read by
the functions that open them."""
DESTINATION_SECRET_PREFIX: Final = "LAKESYNC_DESTINATION_SECRET_PREFIX"
"""Name prefix of the destinations' secrets: a destination's ``secretArn`` must lie under ``{prefix}{gateway}/``
(checked by ``admin`` at registration and by ``materialise`` before reading it)."""

API_ENV_VARS: Final = frozenset(
    {
        GATEWAY_IDS,
        TABLE_PREFIX,
        *TABLE_VARS.values(),
        JWT_SECRET,
        JWT_SECRET_PREVIOUS,
        JWT_SECRET_ARN,
        MAX_TOKEN_LIFETIME_S,
        FLUSH_THRESHOLD_BYTES,
        BACKPRESSURE_BYTES,
        SUB_SHARDS,
        MAX_BODY_BYTES,
        CHECKPOINT_BUCKET,
        PULL_BASIS_TTL_MS,
        RATE_LIMITS,
        # every API function builds its deps with the registered connectors (all optional)
        *CONNECTOR_ENV_VARS,
        *NETWORK_ENV_VARS,
        DESTINATION_SECRET_PREFIX,
    }
)
"""Every variable an API function may read (some are alternatives: table names or prefix, secret or ARN)."""
_BUFFER_TABLE_VARS: Final = frozenset({TABLE_PREFIX, *TABLE_VARS.values()})


FUNCTION_ENV_VARS: Final[Mapping[str, frozenset[str]]] = {
    "health": frozenset(),
    "push": API_ENV_VARS,
    "pull": API_ENV_VARS,
    "actions": API_ENV_VARS,
    "admin": API_ENV_VARS,
    "checkpoint": API_ENV_VARS,
    "flush_trigger": frozenset(
        {
            GATEWAY_IDS,
            FLUSH_JOB_NAME,
            FLUSH_FUNCTION_NAME,
            FLUSH_FUNCTION_TIMEOUT_S,
            FLUSH_FUNCTION_MAX_BACKLOG,
            *_BUFFER_TABLE_VARS,
        }
    ),
    "flush": frozenset(
        {
            GATEWAY_IDS,
            *_BUFFER_TABLE_VARS,
            LAKE_WAREHOUSE,
            LAKE_CATALOG,
            LAKE_CATALOG_URI,
            LAKE_NAMESPACE,
            CHECKPOINT_BUCKET,
            CLAIM_CHECK_BUCKET,
            MATERIALISE_QUEUE_URL,
            FLUSH_RETENTION_MS,
            FLUSH_MAX_DELTAS,
        }
    ),
    "materialise": frozenset(
        {TABLE_PREFIX, *TABLE_VARS.values(), CLAIM_CHECK_BUCKET, *NETWORK_ENV_VARS, DESTINATION_SECRET_PREFIX}
    ),
    "rotate_secret": frozenset(),
    "lake_tick": frozenset(
        {
            GATEWAY_IDS,
            TABLE_PREFIX,
            *TABLE_VARS.values(),
            CHECKPOINT_BUCKET,
            FLUSH_PUBLISHES,
            *JOB_NAME_VARS.values(),
            FLUSH_FUNCTION_NAME,
            FLUSH_FUNCTION_TIMEOUT_S,
            FLUSH_FUNCTION_MAX_BACKLOG,
            COMPACT_MIN_FLUSH_RUNS,
            COMPACT_MAX_WAIT_MINUTES,
        }
    ),
    # $connect authenticates (the API settings: gateways, secret) and records the session.
    "ws_connect": API_ENV_VARS | {CONNECTIONS_TABLE},
    # $default serves frames with the gateway services and closes sessions through the management API.
    "ws_message": API_ENV_VARS | {CONNECTIONS_TABLE, WS_CALLBACK_URL},
    # the broadcaster: sync rules (config table), the sessions, the management API; the membership tables (the
    # buffer, the checkpoints, the sub-shards).
    "ws_broadcast": _BUFFER_TABLE_VARS | {CONNECTIONS_TABLE, WS_CALLBACK_URL, CHECKPOINT_BUCKET, SUB_SHARDS},
    # the HTTP API's authorizer: the API settings (it reads the JWT keys and their lifetime).
    "authorizer": API_ENV_VARS,
    # connectors: the API functions that open them, and the scheduled poller.
    "connector_poll": API_ENV_VARS,
}
"""Handler module (``functions.<name>``) -> the LakeSync variables it reads; CDK sets a subset of these."""

DEFAULT_MAX_BODY_BYTES: Final = MIB
LAMBDA_PAYLOAD_BYTES: Final = 6 * MIB
"""Lambda's synchronous invocation payload quota ("6 MB"): Invoke refuses a request that is not smaller than
6,291,456 bytes (``RequestEntityTooLargeException``); a response may be up to 6,291,556 bytes."""
EVENT_OVERHEAD_BYTES: Final = 64 * 1024
"""What an HTTP API (payload 2.0) event may hold besides the body: the request line and header values are at most
10,240 bytes (an HTTP API quota) and appear in the event up to three times (``rawPath``/``requestContext.http.path``/
``pathParameters``, ``rawQueryString``/``queryStringParameters``, the ``user-agent`` header/``http.userAgent``), each
at most doubled by JSON escaping (``"`` and ``\\``): 61,440 bytes, plus 4,096 for the fixed fields."""
MAX_BODY_BYTES_LIMIT: Final = 3 * ((LAMBDA_PAYLOAD_BYTES - 1 - EVENT_OVERHEAD_BYTES) // 4)
"""The largest ``LAKESYNC_MAX_BODY_BYTES``: 4,669,437 bytes (4.45 MiB). HTTP API base64-encodes a binary (protobuf)
body, ``4 * ceil(n / 3)`` characters, and that plus :data:`EVENT_OVERHEAD_BYTES` stays smaller than
:data:`LAMBDA_PAYLOAD_BYTES` -- a bigger body would be refused by Lambda before the function could answer 413."""
