"""X-Ray tracing for the Lambda functions, only where it traces.

Building Powertools' ``Tracer`` imports the X-Ray SDK (about 0.7 s of a cold start) even when tracing is disabled, so
:class:`OptionalTracer` builds one only on Lambda with tracing on, and is a no-op decorator everywhere else.
"""

from __future__ import annotations

import os
from collections.abc import Callable, Mapping
from typing import TypeVar, cast

from aws_lambda_powertools import Tracer

_F = TypeVar("_F", bound=Callable[..., object])


def tracing_enabled(environ: Mapping[str, str] = os.environ) -> bool:
    """X-Ray tracing runs on Lambda unless ``POWERTOOLS_TRACE_DISABLED`` is set."""
    disabled = environ.get("POWERTOOLS_TRACE_DISABLED", "").strip().lower() in {"1", "true", "yes", "on"}
    return "AWS_LAMBDA_FUNCTION_NAME" in environ and not disabled


class OptionalTracer:
    """Powertools' Tracer for ``service`` when tracing runs, otherwise nothing."""

    def __init__(self, service: str) -> None:
        self.tracer: Tracer | None = Tracer(service=service) if tracing_enabled() else None

    def capture_lambda_handler(self, *, capture_response: bool = True) -> Callable[[_F], _F]:
        """Powertools' ``capture_lambda_handler``, or the handler unchanged when not tracing."""

        def decorate(handler: _F) -> _F:
            if self.tracer is None:
                return handler
            return cast(_F, self.tracer.capture_lambda_handler(handler, capture_response=capture_response))

        return decorate
