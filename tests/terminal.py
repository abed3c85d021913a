"""What a developer's terminal should not show: the lines of `lakesync local` and the demo that are not their story."""

from __future__ import annotations

import re

__all__ = ["noise"]

_SPARK_LOG = re.compile(r"^\d\d/\d\d/\d\d \d\d:\d\d:\d\d (TRACE|DEBUG|INFO|WARN) ")
_BANNERS = ("Setting default log level", "To adjust logging level", "log4j", "NativeCodeLoader", "Using Spark's")


def noise(lines: list[str]) -> list[str]:
    """The lines that are not part of a story told to a developer's terminal."""
    return [
        line
        for line in lines
        if '"_aws"' in line
        or line.lstrip().startswith("{")
        or _SPARK_LOG.match(line)
        or any(banner in line for banner in _BANNERS)
        or line.startswith("Traceback")
    ]
