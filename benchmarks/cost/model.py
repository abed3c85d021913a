"""The arithmetic of the cost benchmark, without I/O: DynamoDB item sizes and capacity units, and how each AWS service
meters what a workload does (:mod:`benchmarks.cost` measures, :mod:`benchmarks.cost.prices` holds the prices).

DynamoDB (https://docs.aws.amazon.com/amazondynamodb/latest/developerguide/CapacityUnitCalculations.html):

* An item's size is the sum of its attribute names and values: a string is its UTF-8 bytes, a binary its raw
  bytes, a number about one byte per two significant digits plus one, a boolean or null one byte, a list or map
  3 bytes plus its elements, each element one byte more (a map element's size includes its name), a set the sum of
  its elements.
* A write is ``ceil(size / 1 KB)`` write units (at least 1) of the larger of the item before and after it (a delete:
  the deleted item); a transactional write is charged twice. A read is ``ceil(size / 4 KB)`` units, halved when
  eventually consistent, doubled when transactional; a missing item still costs the minimum. ``Query`` and ``Scan``
  are charged on the summed size of the items they evaluate (before any filter or projection), rounded up to 4 KB
  per request; ``BatchGetItem`` per item.
* A secondary index entry is written when a base-table write creates it, changes it (a changed index key costs a
  delete plus a put) or removes it (https://docs.aws.amazon.com/amazondynamodb/latest/developerguide/LSI.html and
  GSI.html, "Provisioned throughput considerations"); its size is the projected attributes plus the keys.
"""

from __future__ import annotations

import math
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from decimal import Decimal, InvalidOperation
from typing import Any

KB = 1024
WRITE_UNIT_BYTES = 1 * KB
READ_UNIT_BYTES = 4 * KB
HTTP_API_METERING_BYTES = 512 * KB
SQS_CHUNK_BYTES = 64 * KB

AttributeValue = Mapping[str, Any]
Item = Mapping[str, AttributeValue]


# -- item sizes -------------------------------------------------------------------------------------------------------
def number_size(text: str) -> int:
    """Bytes of a DynamoDB number: one per two significant digits, plus one (plus one more when negative).

    Leading and trailing zeros are not significant (``1000`` and ``0.001`` both have one significant digit).
    """
    try:
        value = Decimal(text)
    except InvalidOperation as exc:
        raise ValueError(f"not a DynamoDB number: {text!r}") from exc
    digits = format(value.copy_abs(), "f").replace(".", "").strip("0") or "0"
    size = math.ceil(len(digits) / 2) + 1
    return size + 1 if value < 0 else size


def value_size(value: AttributeValue) -> int:
    """Bytes of one attribute value (without its name), by the rules in the module docstring."""
    if len(value) != 1:
        raise ValueError(f"an attribute value has exactly one type key, got {sorted(value)}")
    ((kind, inner),) = value.items()
    if kind == "S":
        return len(str(inner).encode("utf-8"))
    if kind == "N":
        return number_size(str(inner))
    if kind == "B":
        return len(_raw_bytes(inner))
    if kind in ("BOOL", "NULL"):
        return 1
    if kind == "SS":
        return sum(len(str(s).encode("utf-8")) for s in inner)
    if kind == "NS":
        return sum(number_size(str(n)) for n in inner)
    if kind == "BS":
        return sum(len(_raw_bytes(b)) for b in inner)
    if kind == "L":
        return 3 + sum(value_size(v) + 1 for v in inner)
    if kind == "M":
        return 3 + sum(len(k.encode("utf-8")) + value_size(v) + 1 for k, v in inner.items())
    raise ValueError(f"unknown DynamoDB attribute type {kind!r}")


def _raw_bytes(value: Any) -> bytes:
    if isinstance(value, bytes | bytearray):
        return bytes(value)
    if isinstance(value, str):  # base64 text, as on the wire
        import base64

        return base64.b64decode(value)
    raise ValueError(f"not a binary value: {type(value).__name__}")


def item_size(item: Item) -> int:
    """Bytes of an item: every attribute's name (UTF-8) plus its value."""
    return sum(len(name.encode("utf-8")) + value_size(value) for name, value in item.items())


# -- capacity units ---------------------------------------------------------------------------------------------------
def write_units(size: int, *, transactional: bool = False) -> int:
    """Write units of one item write: ``ceil(size / 1 KB)``, at least 1; doubled in a transaction."""
    units = max(1, math.ceil(size / WRITE_UNIT_BYTES))
    return 2 * units if transactional else units


def read_units(size: int, *, consistent: bool, transactional: bool = False) -> float:
    """Read units of reading ``size`` bytes in one item read or one Query/Scan page: ``ceil(size / 4 KB)``, at least
    1; half when eventually consistent; a transactional read is two strongly consistent ones."""
    units = max(1, math.ceil(size / READ_UNIT_BYTES))
    if transactional:
        return 2.0 * units
    return float(units) if consistent else units / 2


@dataclass(frozen=True, slots=True)
class IndexSpec:
    """A secondary index as DescribeTable tells it.

    Attributes:
        name: The index name.
        keys: Its key attributes (partition, and sort when it has one).
        projection: ``ALL``, ``KEYS_ONLY`` or ``INCLUDE``.
        included: The non-key attributes of an ``INCLUDE`` projection.
    """

    name: str
    keys: tuple[str, ...]
    projection: str = "ALL"
    included: tuple[str, ...] = ()


def index_entry(item: Item | None, table_keys: Sequence[str], index: IndexSpec) -> dict[str, AttributeValue] | None:
    """The index entry an item has (``None``: the item is absent or lacks an index key attribute, a sparse index)."""
    if item is None or any(k not in item for k in index.keys):
        return None
    if index.projection == "ALL":
        return dict(item)
    wanted = {*table_keys, *index.keys}
    if index.projection == "INCLUDE":
        wanted.update(index.included)
    return {k: v for k, v in item.items() if k in wanted}


def index_write_units(
    before: Item | None, after: Item | None, table_keys: Sequence[str], index: IndexSpec, *, transactional: bool
) -> int:
    """Write units the index costs for one base-table write from ``before`` to ``after`` (``None``: absent).

    A new entry is one write of its size, a removed one a write of the old size, a changed index key a delete plus a
    put; an entry whose projected attributes changed but not its key is one write of the larger size; an unchanged
    entry (or none before and after) costs nothing. Index writes made by a transaction are doubled like the item's.
    """
    old = index_entry(before, table_keys, index)
    new = index_entry(after, table_keys, index)
    units = 0
    if old is None and new is None:
        return 0
    if old is None and new is not None:
        units = write_units(item_size(new))
    elif new is None and old is not None:
        units = write_units(item_size(old))
    elif old is not None and new is not None:
        if any(old.get(k) != new.get(k) for k in index.keys):
            units = write_units(item_size(old)) + write_units(item_size(new))
        elif old != new:
            units = write_units(max(item_size(old), item_size(new)))
    return 2 * units if transactional else units


# -- other services' metering -----------------------------------------------------------------------------------------
def http_api_requests(request_bytes: int, response_bytes: int) -> int:
    """HTTP API requests billed for one call: metered in 512 KB increments (the larger of request and response)."""
    return max(1, math.ceil(max(request_bytes, response_bytes) / HTTP_API_METERING_BYTES))


def sqs_requests(payload_bytes: int) -> int:
    """SQS requests billed for one API call: every 64 KB chunk of its payload is one request (at least one)."""
    return max(1, math.ceil(payload_bytes / SQS_CHUNK_BYTES))


def lambda_gb_seconds(duration_s: float, memory_mb: int) -> float:
    """GB-seconds of one invocation: the duration rounded up to the millisecond, times the memory in GB."""
    billed_ms = math.ceil(duration_s * 1000 - 1e-9)
    return max(1, billed_ms) / 1000 * memory_mb / 1024


def glue_billed_seconds(run_seconds: float, *, minimum_s: float = 60.0) -> float:
    """Billed seconds of one Glue job run: per second, at least ``minimum_s`` (1 minute for Glue 2.0 and later)."""
    return max(minimum_s, float(math.ceil(run_seconds)))


def glue_dpu_hours(run_seconds: float, dpus: float, *, minimum_s: float = 60.0) -> float:
    """DPU-hours of one run of ``dpus`` DPUs (G.1X: one DPU per worker)."""
    return glue_billed_seconds(run_seconds, minimum_s=minimum_s) * dpus / 3600


def glue_dpus(worker_type: str, workers: int) -> float:
    """DPUs of a job: G.1X workers are 1 DPU each, G.2X 2, G.4X 4, G.8X 8."""
    per_worker = {"G.1X": 1.0, "G.2X": 2.0, "G.4X": 4.0, "G.8X": 8.0}
    if worker_type not in per_worker:
        raise ValueError(f"unknown Glue worker type {worker_type!r}")
    return per_worker[worker_type] * workers


def runs_per_month(expression: str, *, days: float = 30.0) -> float:
    """Runs per month of an EventBridge Scheduler ``rate(N unit)`` expression (``cron(...)``: not supported here).

    Raises:
        ValueError: not a rate expression.
    """
    text = expression.strip()
    if not (text.startswith("rate(") and text.endswith(")")):
        raise ValueError(f"only rate(...) expressions are priced, got {expression!r}")
    amount_text, unit = text[5:-1].split()
    amount = int(amount_text)
    unit = unit.rstrip("s")
    seconds = {"minute": 60, "hour": 3600, "day": 86400}
    if unit not in seconds or amount <= 0:
        raise ValueError(f"unsupported rate {expression!r}")
    return days * 86400 / (amount * seconds[unit])


def flush_runs_per_run(tick_ratio: float, wanted: float) -> float:
    """Flush runs' worth of deltas one downstream run (compaction, checkpoint) carries at steady traffic (a flush on
    every flush tick): it starts on the first of its own ticks (one per ``tick_ratio`` flush ticks) at which
    ``wanted`` flush runs have finished since its last run (at least one)."""
    per_tick = max(1.0, tick_ratio)
    return math.ceil(max(1.0, wanted) / per_tick - 1e-9) * per_tick


def compaction_wants(min_flush_runs: int, max_wait_minutes: float, flush_interval_minutes: float) -> float:
    """Flush runs after which the compaction policy makes a run due: ``min_flush_runs``, or as many as the flush
    schedule completes in ``max_wait_minutes`` after the first of them (whichever is fewer)."""
    return max(1.0, min(float(min_flush_runs), 1.0 + max_wait_minutes / flush_interval_minutes))
