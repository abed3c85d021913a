"""GET /v1/sync/{gw}/checkpoint[?chunk=i][&checkpoint=id][&format=columns]: auth → query params → checkpoint service.

200 is the framed checkpoint stream (``application/x-lakesync-checkpoint-stream``: ``uint32`` big-endian length +
``SyncResponse``, repeated) filtered by the token's claims, with ``X-Checkpoint-Id``, ``X-Checkpoint-Cursor`` (pull
from it next), ``X-Checkpoint-Hlc`` (or ``since`` it) and ``X-Checkpoint-Chunks``. 404 without a checkpoint; 400 for a
bad ``chunk`` or ``checkpoint``; 413 when the checkpoint is too large to send whole (fetch it chunk by chunk, pinned
with ``checkpoint=<X-Checkpoint-Id>``). Semantics: :mod:`lakesync.gateway.checkpoint`.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from aws_lambda_powertools.logging import correlation_paths
from aws_lambda_powertools.metrics import MetricUnit
from aws_lambda_powertools.utilities.typing import LambdaContext

from functions import _http as http
from functions._runtime import get_deps, logger, metrics, one_at_a_time, tracer
from lakesync.core.errors import ValidationError
from lakesync.gateway import checkpoint as service
from lakesync.router import Response

_MAX_INDEX_DIGITS = 9

app = http.new_app()


def parse_chunk(params: Mapping[str, str] | None) -> int | None:
    """The ``chunk`` query parameter: absent, or a decimal index.

    Raises:
        ValidationError: anything but digits (signs, spaces, exponents, too many digits).
    """
    raw = (params or {}).get("chunk")
    if raw is None:
        return None
    if not (raw.isascii() and raw.isdigit() and len(raw) <= _MAX_INDEX_DIGITS):
        raise ValidationError("Invalid 'chunk' parameter: expected a chunk index (0, 1, ...)")
    return int(raw)


def parse_format(params: Mapping[str, str] | None) -> bool:
    """The ``format`` query parameter: absent or ``stream`` (the framed stream), or ``columns``; True for columns.

    Raises:
        ValidationError: any other value.
    """
    raw = (params or {}).get("format")
    if raw is None or raw == "stream":
        return False
    if raw == "columns":
        return True
    raise ValidationError("Invalid 'format' parameter: expected 'stream' or 'columns'")


@app.get("/v1/sync/{gw}/checkpoint")
def checkpoint(gw: str) -> Response:
    """The latest checkpoint (or one chunk of it) as the caller may see it."""
    claims = http.authorize(app, gw)
    params = app.current_event.query_string_parameters
    chunk = parse_chunk(params)
    columns = parse_format(params)
    payload = service.serve(
        get_deps(), gw, claims.custom_claims, chunk, checkpoint_id=(params or {}).get("checkpoint"), columns=columns
    )
    metrics.add_metric(name="CheckpointBytes", unit=MetricUnit.Bytes, value=len(payload.body))
    return Response(200, payload.content_type, payload.body, headers=payload.headers)


@one_at_a_time
@logger.inject_lambda_context(correlation_id_path=correlation_paths.API_GATEWAY_HTTP, clear_state=True)
@tracer.capture_lambda_handler(capture_response=False)
@metrics.log_metrics(capture_cold_start_metric=True)
def lambda_handler(event: dict[str, Any], context: LambdaContext) -> dict[str, Any]:
    """The Lambda entry point."""
    return app.resolve(event, context)
