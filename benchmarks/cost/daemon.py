"""Spark's Python worker daemon with the cost meter installed (``spark.python.daemon.module``).

Spark starts ``python -m <this module>``; the meter is installed before :func:`pyspark.daemon.manager` forks the
workers, so every boto3 client a Spark task makes (the flush's read tasks) is counted. Each priced call is appended as
one JSON line to ``$LAKESYNC_COST_DIR/worker-<pid>.jsonl`` (:meth:`benchmarks.cost.meter.Meter.drain_files` adds them
to the benchmark's current phase). Nothing may be printed on stdout: the daemon reports its port there.
"""

from __future__ import annotations

import os
from pathlib import Path


def main() -> None:
    """Install the meter (when ``LAKESYNC_COST_DIR`` is set), then run PySpark's own daemon."""
    directory = os.environ.get("LAKESYNC_COST_DIR")
    if directory:
        from benchmarks.cost.meter import Meter

        meter = Meter(file_sink=Path(directory))
        meter.phase = "worker"
        meter.install()
    from pyspark.daemon import manager

    manager()  # type: ignore[no-untyped-call]


if __name__ == "__main__":
    main()
