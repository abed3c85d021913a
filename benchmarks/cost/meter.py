"""Count what the code under test asks of AWS, by hooking every boto3 client it makes (botocore's event system).

:meth:`Meter.install` registers three handlers on boto3's default session, before any client exists, so every client
made through ``boto3.client`` -- the handlers' (``lakesync.aws.clients``), the flush job's, the publisher's, the
materialiser's -- inherits them (a botocore client copies its session's handlers when it is made):

* ``provide-client-params``: keeps the call's parameters;
* ``before-call``: reads, on a separate client without these handlers (so nothing it does is counted), what DynamoDB
  charges depend on but the call does not carry: the items a write replaces or deletes, and the items a ``Query`` or
  ``Scan`` with a projection or a filter evaluates;
* ``after-call`` (also made for calls that failed, such as a conditional write whose condition was false): prices
  the call in the units its service bills (:mod:`benchmarks.cost.model`) and adds them to the current phase.

Nothing is counted while :attr:`Meter.phase` is ``None`` (setup). Tables are described once each (keys, secondary
indexes and their projections, TTL) on the uncounted client, so index writes are charged as DynamoDB charges them
for whatever layout the code creates. Figures are kept by physical table name; :meth:`Meter.logical` maps them to
the logical names the benchmark registered (``TableNames.as_dict()``), so labels follow the code's tables.

Spark's Python workers are separate processes: :mod:`benchmarks.cost.daemon` installs a meter there too, which
appends one JSON line per call to a file (``LAKESYNC_COST_DIR``); :meth:`Meter.drain_files` adds them to the
current phase.
"""

from __future__ import annotations

import contextlib
import json
import os
import re
import threading
import time
from collections.abc import Iterator, Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any
from urllib.parse import urlsplit

from benchmarks.cost.model import (
    IndexSpec,
    index_write_units,
    item_size,
    read_units,
    sqs_requests,
    write_units,
)

Key = tuple[str, str, str, str, str]
"""(phase, service, resource, operation, metric)."""

_S3_FREE = ("Delete",)
_S3_TIER1 = ("Put", "Copy", "Post", "List", "Create", "Complete", "Upload", "Restore")
_NAMES = re.compile(r"#[A-Za-z0-9_]+")
_VALUES = re.compile(r":[A-Za-z0-9_]+")


@dataclass(frozen=True, slots=True)
class TableInfo:
    """What DynamoDB charges of a table depend on."""

    keys: tuple[str, ...]
    indexes: tuple[IndexSpec, ...]
    ttl_attribute: str | None


class Meter:
    """Counts AWS usage per phase (see the module docstring).

    Args:
        file_sink: A directory to append one JSON line per priced call to (Spark workers); ``None`` keeps the
            figures in :attr:`totals`.
    """

    def __init__(self, file_sink: Path | None = None) -> None:
        self.phase: str | None = None
        self.totals: dict[Key, float] = {}
        self.lookup_seconds = 0.0
        self.worker_lines = 0
        self._file_sink = file_sink
        self._file: Any = None
        self._file_pid = 0
        self._lock = threading.RLock()
        self._tables: dict[str, TableInfo] = {}
        self._logical: dict[str, str] = {}
        self._raw: dict[tuple[str, str, str], Any] = {}
        self._offsets: dict[Path, int] = {}
        self._installed = False

    # -- installation ------------------------------------------------------------------------------------------------
    def install(self) -> None:
        """Hook boto3's default session (every client made afterwards through ``boto3.client`` is counted)."""
        import boto3

        if self._installed:
            return
        if boto3.DEFAULT_SESSION is None:
            boto3.setup_default_session()
        assert boto3.DEFAULT_SESSION is not None
        events = boto3.DEFAULT_SESSION._session.get_component("event_emitter")
        events.register("provide-client-params", self._on_params, unique_id=f"cost-params-{id(self)}")
        events.register("before-call", self._on_before, unique_id=f"cost-before-{id(self)}")
        events.register("after-call", self._on_after, unique_id=f"cost-after-{id(self)}")
        self._installed = True

    def register_tables(self, logical_to_physical: Mapping[str, str]) -> None:
        """Name the figures of these physical tables by their logical names."""
        with self._lock:
            for logical, physical in logical_to_physical.items():
                self._logical[physical] = logical

    def logical(self, resource: str) -> str:
        """A resource's label: a registered table's logical name (``table/index`` for an index), else as is."""
        table, sep, index = resource.partition("/")
        name = self._logical.get(table, table)
        return f"{name}{sep}{index}"

    @contextlib.contextmanager
    def measuring(self, phase: str) -> Iterator[None]:
        """Count into ``phase`` while inside the block (and add what Spark workers recorded meanwhile)."""
        self.drain_files(discard=True)  # what workers recorded before the block belongs to no phase
        previous, self.phase = self.phase, phase
        try:
            yield
        finally:
            self.drain_files()
            self.phase = previous

    def snapshot(self, phase: str) -> dict[tuple[str, str, str, str], float]:
        """``{(service, resource label, operation, metric): value}`` of one phase."""
        out: dict[tuple[str, str, str, str], float] = {}
        with self._lock:
            for (p, service, resource, op, metric), value in self.totals.items():
                if p == phase:
                    key = (service, self.logical(resource), op, metric)
                    out[key] = out.get(key, 0.0) + value
        return out

    # -- worker files ------------------------------------------------------------------------------------------------
    def drain_files(self, directory: Path | None = None, *, discard: bool = False) -> int:
        """Add the lines Spark workers appended since the last drain to the current phase (or drop them when
        ``discard`` or outside a phase); returns how many were added."""
        folder = directory or _env_dir()
        if folder is None or not folder.exists():
            return 0
        discard = discard or self.phase is None
        added = 0
        for path in sorted(folder.glob("worker-*.jsonl")):
            start = self._offsets.get(path, 0)
            with path.open("rb") as f:
                f.seek(start)
                data = f.read()
            complete = data[: data.rfind(b"\n") + 1]
            self._offsets[path] = start + len(complete)
            if discard:
                continue
            for line in complete.decode("utf-8").splitlines():
                record = json.loads(line)
                self._add(record["service"], record["resource"], record["op"], record["metric"], record["value"])
                added += 1
        self.worker_lines += added
        return added

    # -- handlers ----------------------------------------------------------------------------------------------------
    def _on_params(self, params: Mapping[str, Any], model: Any, context: dict[str, Any], **_: Any) -> None:
        if self.phase is not None:
            context["lakesync_cost"] = {"params": params, "phase": self.phase}

    def _on_before(self, model: Any, params: Mapping[str, Any], context: dict[str, Any], **_: Any) -> None:
        state = context.get("lakesync_cost")
        if state is None:
            return
        state["endpoint"] = _endpoint(str(params.get("url", "")))
        state["region"] = str(context.get("client_region") or os.environ.get("AWS_REGION") or "us-east-1")
        if model.service_model.service_name != "dynamodb":
            return
        started = time.perf_counter()
        try:
            self._dynamodb_before(model.name, state)
        finally:
            self.lookup_seconds += time.perf_counter() - started

    def _on_after(
        self, http_response: Any, parsed: Mapping[str, Any], model: Any, context: dict[str, Any], **_: Any
    ) -> None:
        state = context.get("lakesync_cost")
        if state is None:
            return
        service = model.service_model.service_name
        op = model.name
        params = state["params"]
        failed = getattr(http_response, "status_code", 200) >= 300
        started = time.perf_counter()
        try:
            if service == "dynamodb":
                self._dynamodb_after(op, params, parsed, state, failed)
            elif service == "sqs":
                self._sqs(op, params, parsed)
            elif service == "s3":
                tier = "free" if op.startswith(_S3_FREE) else "put" if op.startswith(_S3_TIER1) else "get"
                self._add("s3", str(params.get("Bucket", "*")), op, f"requests:{tier}", 1)
            else:
                self._add(service, str(params.get("JobName") or "*"), op, "calls", 1)
        finally:
            self.lookup_seconds += time.perf_counter() - started

    # -- accounting --------------------------------------------------------------------------------------------------
    def _add(self, service: str, resource: str, op: str, metric: str, value: float) -> None:
        if self._file_sink is not None:
            self._write_line({"service": service, "resource": resource, "op": op, "metric": metric, "value": value})
            return
        phase = self.phase
        if phase is None:
            return
        with self._lock:
            key = (phase, service, resource, op, metric)
            self.totals[key] = self.totals.get(key, 0.0) + value

    def _write_line(self, record: Mapping[str, Any]) -> None:
        assert self._file_sink is not None
        with self._lock:
            if self._file is None or self._file_pid != os.getpid():
                self._file_sink.mkdir(parents=True, exist_ok=True)
                self._file = (self._file_sink / f"worker-{os.getpid()}.jsonl").open("a", encoding="utf-8")
                self._file_pid = os.getpid()
            self._file.write(json.dumps(record) + "\n")
            self._file.flush()

    # -- the uncounted client ----------------------------------------------------------------------------------------
    def raw(self, service: str, endpoint: str, region: str) -> Any:
        """A client of ``service`` at ``endpoint`` made from a fresh session: none of the meter's handlers."""
        key = (service, endpoint, region)
        with self._lock:
            client = self._raw.get(key)
            if client is None:
                import boto3
                from botocore.config import Config

                session = boto3.session.Session()
                client = session.client(
                    service,  # type: ignore[call-overload]
                    endpoint_url=endpoint or None,
                    region_name=region,
                    aws_access_key_id=os.environ.get("AWS_ACCESS_KEY_ID", "testing"),
                    aws_secret_access_key=os.environ.get("AWS_SECRET_ACCESS_KEY", "testing"),
                    config=Config(retries={"max_attempts": 3, "mode": "standard"}, read_timeout=120),
                )
                self._raw[key] = client
            return client

    def table(self, state: Mapping[str, Any], name: str) -> TableInfo:
        """Keys, indexes and TTL attribute of a table (described once, uncounted)."""
        with self._lock:
            info = self._tables.get(name)
        if info is not None:
            return info
        db = self.raw("dynamodb", state["endpoint"], state["region"])
        described = db.describe_table(TableName=name)["Table"]
        keys = tuple(k["AttributeName"] for k in described["KeySchema"])
        indexes = []
        for group in ("LocalSecondaryIndexes", "GlobalSecondaryIndexes"):
            for index in described.get(group, []):
                projection = index.get("Projection", {})
                indexes.append(
                    IndexSpec(
                        name=index["IndexName"],
                        keys=tuple(k["AttributeName"] for k in index["KeySchema"]),
                        projection=projection.get("ProjectionType", "ALL"),
                        included=tuple(projection.get("NonKeyAttributes", [])),
                    )
                )
        ttl = None
        with contextlib.suppress(Exception):
            spec = db.describe_time_to_live(TableName=name)["TimeToLiveDescription"]
            if spec.get("TimeToLiveStatus") in ("ENABLED", "ENABLING"):
                ttl = spec.get("AttributeName")
        info = TableInfo(keys, tuple(indexes), ttl)
        with self._lock:
            self._tables[name] = info
        return info

    def _get_items(self, state: Mapping[str, Any], keys: Sequence[tuple[str, dict[str, Any]]]) -> dict[str, Any]:
        """Current items by :func:`_key_id` (absent ones missing), read consistently on the uncounted client."""
        db = self.raw("dynamodb", state["endpoint"], state["region"])
        found: dict[str, Any] = {}
        unique = list({_key_id(t, k): (t, k) for t, k in keys}.values())
        for start in range(0, len(unique), 100):
            request: dict[str, Any] = {}
            for table, key in unique[start : start + 100]:
                request.setdefault(table, {"Keys": [], "ConsistentRead": True})["Keys"].append(key)
            while request:
                out = db.batch_get_item(RequestItems=request)
                for table, items in out.get("Responses", {}).items():
                    info = self.table(state, table)
                    for item in items:
                        found[_key_id(table, {k: item[k] for k in info.keys})] = item
                request = dict(out.get("UnprocessedKeys") or {})
        return found

    # -- DynamoDB ----------------------------------------------------------------------------------------------------
    def _dynamodb_before(self, op: str, state: dict[str, Any]) -> None:
        params = state["params"]
        if op in ("PutItem", "UpdateItem", "DeleteItem", "BatchWriteItem", "TransactWriteItems"):
            state["before"] = self._get_items(state, [(t, k) for t, k, _, _ in self._writes(op, params, state)])
        elif op in ("Query", "Scan") and _hides_evaluated_items(params):
            state["evaluated"] = self._shadow_page(op, params, state)

    def _shadow_page(self, op: str, params: Mapping[str, Any], state: Mapping[str, Any]) -> list[Any]:
        """The items the same page evaluates: the request without projection, filter or select, uncounted."""
        request = {
            k: v
            for k, v in params.items()
            if k not in ("ProjectionExpression", "FilterExpression", "Select", "AttributesToGet", "QueryFilter")
            and k not in ("ScanFilter", "ConditionalOperator", "ReturnConsumedCapacity")
        }
        used = " ".join(str(request.get(k, "")) for k in ("KeyConditionExpression",))
        if "ExpressionAttributeNames" in request:
            names = {n: v for n, v in request["ExpressionAttributeNames"].items() if n in set(_NAMES.findall(used))}
            request["ExpressionAttributeNames"] = names
            if not names:
                del request["ExpressionAttributeNames"]
        if "ExpressionAttributeValues" in request:
            values = {n: v for n, v in request["ExpressionAttributeValues"].items() if n in set(_VALUES.findall(used))}
            request["ExpressionAttributeValues"] = values
            if not values:
                del request["ExpressionAttributeValues"]
        db = self.raw("dynamodb", state["endpoint"], state["region"])
        out = db.query(**request) if op == "Query" else db.scan(**request)
        return list(out.get("Items", []))

    def _writes(
        self, op: str, params: Mapping[str, Any], state: Mapping[str, Any]
    ) -> list[tuple[str, dict[str, Any], str, Any]]:
        """``(table, key, kind, item or None)`` of every item a write request touches (kind: put/update/delete/check;
        the item is the one a put writes)."""
        out: list[tuple[str, dict[str, Any], str, Any]] = []

        def put(table: str, item: Mapping[str, Any]) -> None:
            info = self.table(state, table)
            out.append((table, {k: item[k] for k in info.keys}, "put", item))

        if op == "PutItem":
            put(params["TableName"], params["Item"])
        elif op == "UpdateItem":
            out.append((params["TableName"], dict(params["Key"]), "update", None))
        elif op == "DeleteItem":
            out.append((params["TableName"], dict(params["Key"]), "delete", None))
        elif op == "BatchWriteItem":
            for table, requests in params["RequestItems"].items():
                for request in requests:
                    if "PutRequest" in request:
                        put(table, request["PutRequest"]["Item"])
                    else:
                        out.append((table, dict(request["DeleteRequest"]["Key"]), "delete", None))
        elif op == "TransactWriteItems":
            for action in params["TransactItems"]:
                ((kind, body),) = action.items()
                if kind == "Put":
                    put(body["TableName"], body["Item"])
                else:
                    label = {"Update": "update", "Delete": "delete", "ConditionCheck": "check"}[kind]
                    out.append((body["TableName"], dict(body["Key"]), label, None))
        return out

    def _dynamodb_after(
        self, op: str, params: Mapping[str, Any], parsed: Mapping[str, Any], state: dict[str, Any], failed: bool
    ) -> None:
        self._add("dynamodb", "*", op, "calls", 1)
        if op in ("PutItem", "UpdateItem", "DeleteItem", "BatchWriteItem", "TransactWriteItems"):
            self._charge_writes(op, params, parsed, state, failed)
        elif op == "GetItem":
            self._charge_gets(params["TableName"], [dict(params["Key"])], params, parsed, state, "get", failed)
        elif op == "BatchGetItem":
            unprocessed = parsed.get("UnprocessedKeys") or {}
            for table, request in params["RequestItems"].items():
                skipped = {_key_id(table, k) for k in unprocessed.get(table, {}).get("Keys", [])}
                keys = [dict(k) for k in request["Keys"] if _key_id(table, k) not in skipped]
                found = parsed.get("Responses", {}).get(table, [])
                self._charge_gets(table, keys, request, {"Items": found}, state, "batch-get", failed)
        elif op == "TransactGetItems":
            for action in params["TransactItems"]:
                body = action["Get"]
                self._charge_gets(body["TableName"], [dict(body["Key"])], body, {}, state, "get (tx)", failed)
        elif op in ("Query", "Scan") and not failed:
            items = state.get("evaluated")
            if items is None:
                items = list(parsed.get("Items", []))
            table = params["TableName"]
            resource = f"{table}/{params['IndexName']}" if params.get("IndexName") else table
            consistent = bool(params.get("ConsistentRead", False))
            self._add(
                "dynamodb", resource, op.lower(), "RRU", read_units(sum(map(item_size, items)), consistent=consistent)
            )
            self._add("dynamodb", resource, op.lower(), "items", len(items))

    def _charge_gets(
        self,
        table: str,
        keys: list[dict[str, Any]],
        request: Mapping[str, Any],
        parsed: Mapping[str, Any],
        state: Mapping[str, Any],
        label: str,
        failed: bool,
    ) -> None:
        if failed:
            return
        projected = "ProjectionExpression" in request or "AttributesToGet" in request or label == "get (tx)"
        if projected:
            current = self._get_items(state, [(table, k) for k in keys])
        else:
            info = self.table(state, table)
            items = parsed.get("Items") if "Items" in parsed else [parsed["Item"]] if parsed.get("Item") else []
            current = {_key_id(table, {k: i[k] for k in info.keys}): i for i in items or []}
        consistent = bool(request.get("ConsistentRead", False)) or label == "get (tx)"
        for key in keys:
            item = current.get(_key_id(table, key))
            size = item_size(item) if item is not None else 0
            units = read_units(size, consistent=consistent, transactional=label == "get (tx)")
            self._add("dynamodb", table, label, "RRU", units)
            self._add("dynamodb", table, label, "items", 1)

    def _charge_writes(
        self, op: str, params: Mapping[str, Any], parsed: Mapping[str, Any], state: dict[str, Any], failed: bool
    ) -> None:
        writes = self._writes(op, params, state)
        if op == "BatchWriteItem":
            unprocessed = parsed.get("UnprocessedItems") or {}
            skipped = set()
            for table, requests in unprocessed.items():
                info = self.table(state, table)
                for request in requests:
                    if "PutRequest" in request:
                        item = request["PutRequest"]["Item"]
                        skipped.add(_key_id(table, {k: item[k] for k in info.keys}))
                    else:
                        skipped.add(_key_id(table, request["DeleteRequest"]["Key"]))
            writes = [w for w in writes if _key_id(w[0], w[1]) not in skipped]
        if failed and op == "BatchWriteItem":
            return  # a rejected batch (validation, throttling) writes nothing
        before: dict[str, Any] = state.get("before", {})
        after: dict[str, Any] = {}
        updated = [(t, k) for t, k, kind, _ in writes if kind == "update"]
        if updated and not failed:
            after = self._get_items(state, updated)
        transactional = op == "TransactWriteItems"
        suffix = " (tx)" if transactional else " (batch)" if op == "BatchWriteItem" else ""
        for table, key, kind, item in writes:
            info = self.table(state, table)
            ident = _key_id(table, key)
            old = before.get(ident)
            # A failed conditional write (or a cancelled transaction) is charged on the existing item (at least one
            # unit); a put or update on the larger of the item before and after; a delete on the deleted item.
            new = old if failed or kind in ("check", "delete") else item if kind == "put" else after.get(ident)
            if kind == "delete" and not failed:
                new = None
            size = max(item_size(old) if old is not None else 0, item_size(new) if new is not None else 0)
            label = f"{kind}{suffix}{' (failed)' if failed else ''}"
            self._add("dynamodb", table, label, "WRU", write_units(size, transactional=transactional))
            self._add("dynamodb", table, label, "items", 1)
            if info.ttl_attribute and new is not None and info.ttl_attribute in new:
                self._add("dynamodb", table, "expires by TTL (free delete)", "items", 1)
            for index in info.indexes:
                units = index_write_units(old, new, info.keys, index, transactional=transactional)
                if units:
                    self._add("dynamodb", f"{table}/{index.name}", label, "WRU", units)
                    self._add("dynamodb", f"{table}/{index.name}", label, "items", 1)

    # -- SQS ---------------------------------------------------------------------------------------------------------
    def _sqs(self, op: str, params: Mapping[str, Any], parsed: Mapping[str, Any]) -> None:
        queue = str(params.get("QueueUrl", "*")).rsplit("/", 1)[-1]
        payload = 0
        if op == "SendMessage":
            payload = _message_bytes(params)
        elif op == "SendMessageBatch":
            payload = sum(_message_bytes(e) for e in params.get("Entries", []))
        elif op == "ReceiveMessage":
            payload = sum(_message_bytes(m) for m in parsed.get("Messages", []))
            if not parsed.get("Messages"):
                op = "ReceiveMessage (empty)"
        self._add("sqs", queue, op, "requests", sqs_requests(payload))
        self._add("sqs", queue, op, "calls", 1)


def _message_bytes(message: Mapping[str, Any]) -> int:
    body = message.get("MessageBody", message.get("Body", ""))
    size = len(str(body).encode("utf-8"))
    for name, value in (message.get("MessageAttributes") or {}).items():
        size += len(name.encode("utf-8")) + len(str(value.get("DataType", "")).encode("utf-8"))
        size += len(str(value.get("StringValue", "")).encode("utf-8")) + len(value.get("BinaryValue", b"") or b"")
    return size


def _hides_evaluated_items(params: Mapping[str, Any]) -> bool:
    """Whether a Query/Scan response leaves out items or attributes it was charged for."""
    keys = ("ProjectionExpression", "FilterExpression", "Select", "AttributesToGet", "QueryFilter", "ScanFilter")
    return any(k in params for k in keys)


def _key_id(table: str, key: Mapping[str, Any]) -> str:
    return table + "|" + json.dumps({k: _plain(v) for k, v in sorted(key.items())}, sort_keys=True)


def _plain(value: Any) -> Any:
    if isinstance(value, bytes | bytearray):
        return value.hex()
    if isinstance(value, Mapping):
        return {k: _plain(v) for k, v in value.items()}
    if isinstance(value, list):
        return [_plain(v) for v in value]
    return value


def _endpoint(url: str) -> str:
    parts = urlsplit(url)
    return f"{parts.scheme}://{parts.netloc}" if parts.netloc else ""


def _env_dir() -> Path | None:
    value = os.environ.get("LAKESYNC_COST_DIR")
    return Path(value) if value else None
