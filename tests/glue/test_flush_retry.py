"""The flush's write side when Spark retries a read task (lakesync.spark.flush.append_records).

Focus: a read task that fails after it has read, converted and handed over part of its ranges is retried; the commit
then holds every planned entry exactly once, and the per-shard figures the heads' byte counters are advanced with are
exact (not counting the failed attempt's reads). The test session's Spark does not retry tasks (``local[2]``), so this
runs in its own process with ``local[2,4]`` (up to four attempts per task) and a fresh local catalog.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

SCRIPT = r'''
import json
import sys
from pathlib import Path

from pyspark import TaskContext

from lakesync.core.log import ShardHead, ShardId
from lakesync.lake.tables import delta_log_ddl
from lakesync.spark.flush import append_records, plan_flush, records_frame
from lakesync.spark.session import build_session

root = Path(sys.argv[1])
marker = root / "failed-attempt"


def record(shard, seq):
    gateway, table, _ = shard.split("#")
    return {
        "gateway": gateway, "tbl": table, "row_id": f"r{seq}", "op": "INSERT", "client_id": "c", "hlc": seq << 16,
        "delta_id": f"{seq:064x}", "columns": [{"name": "n", "value": str(seq)}], "shard": shard, "seq": seq,
        "commit_hlc": (1_767_268_800_000 + seq) << 16, "commit_ms": 1_767_268_800_000 + seq, "size": 100 + seq,
    }


def flaky_reader():
    """Reads ranges; the first attempt of the first task fails at its second range, after handing over the first."""
    context = TaskContext.get()
    first_attempt = context.partitionId() == 0 and context.attemptNumber() == 0
    reads = []

    def read(shard_range):
        reads.append(shard_range)
        if first_attempt and len(reads) == 2:
            marker.write_text(f"{reads[0]}")
            raise RuntimeError("simulated executor loss")
        return [record(shard_range.shard, seq) for seq in range(shard_range.lo + 1, shard_range.hi + 1)]

    return read


spark = build_session(
    app_name="lakesync-flush-retry",
    warehouse=str(root / "warehouse"),
    catalog="local",
    catalog_uri=str(root / "catalog.db"),
    master="local[2,4]",
    log_level="ERROR",
)
spark.sql("CREATE NAMESPACE lake.retry")
spark.sql(delta_log_ddl("lake", "retry"))
ends = {"g#a#0": 30, "g#a#1": 14, "g#b#0": 9}
plan = plan_flush({}, {ShardId.parse(k): ShardHead(ShardId.parse(k), seq=n) for k, n in ends.items()})
ranges = plan.ranges(4)
records = records_frame(spark, ranges, flaky_reader)
snapshot, figures = append_records(spark, records, plan, "lake.retry.deltas", "r", None)
rows = spark.sql("SELECT shard, seq FROM lake.retry.deltas").collect()
print(json.dumps({
    "tasks": spark.sparkContext.defaultParallelism,
    "ranges": len(ranges),
    "failed_after": marker.read_text() if marker.exists() else None,
    "figures": figures,
    "rows": sorted([r["shard"], r["seq"]] for r in rows),
    "snapshots": spark.sql("SELECT count(*) FROM lake.retry.deltas.snapshots").collect()[0][0],
}))
spark.stop()
'''


@pytest.mark.spark
def test_append_records_after_a_retried_read_task_holds_each_entry_once_with_exact_figures(tmp_path: Path) -> None:
    # Given a plan of three shards, and a read task whose first attempt fails after handing over its first range
    script = tmp_path / "retry.py"
    script.write_text(SCRIPT)

    # When the records are appended on a Spark that retries failed tasks
    done = subprocess.run(
        [sys.executable, str(script), str(tmp_path)],
        capture_output=True,
        text=True,
        timeout=600,
        env={**os.environ, "SPARK_LOCAL_IP": "127.0.0.1"},
        check=False,
    )
    assert done.returncode == 0, done.stderr[-4000:]
    result = json.loads(done.stdout.strip().splitlines()[-1])

    # Then a task really failed part-way and was retried
    assert result["failed_after"] is not None and result["failed_after"].startswith("ShardRange(")
    # And the table holds every planned entry exactly once, in one snapshot
    ends = {"g#a#0": 30, "g#a#1": 14, "g#b#0": 9}
    assert result["rows"] == sorted([shard, seq] for shard, end in ends.items() for seq in range(1, end + 1))
    assert result["snapshots"] == 1
    # And the figures count each entry and its bytes once
    assert result["figures"] == {shard: [end, sum(100 + s for s in range(1, end + 1))] for shard, end in ends.items()}
