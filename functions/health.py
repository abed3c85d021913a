"""GET /health (liveness) and GET /v1/openapi.json (the API document): without auth and without any AWS call."""

from __future__ import annotations

from typing import Any

from aws_lambda_powertools.logging import correlation_paths
from aws_lambda_powertools.utilities.typing import LambdaContext

from functions import _http as http
from functions._runtime import logger, metrics, one_at_a_time, tracer
from lakesync import openapi
from lakesync.router import Response

app = http.new_app()


@app.get("/health")
def health() -> Response:
    """200 ``{"status": "ok"}``."""
    return http.json_response({"status": "ok"})


@app.get(openapi.OPENAPI_PATH)
def openapi_document() -> Response:
    """200 with the OpenAPI 3.1 document of the routes (:mod:`lakesync.openapi`)."""
    return Response(200, "application/json", openapi.document_json())


@one_at_a_time
@logger.inject_lambda_context(correlation_id_path=correlation_paths.API_GATEWAY_HTTP, clear_state=True)
@tracer.capture_lambda_handler(capture_response=False)
@metrics.log_metrics(capture_cold_start_metric=True)
def lambda_handler(event: dict[str, Any], context: LambdaContext) -> dict[str, Any]:
    """The Lambda entry point."""
    return app.resolve(event, context)
