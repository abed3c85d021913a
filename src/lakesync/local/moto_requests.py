"""Fixes for the moto artifacts that make every DynamoDB request cost milliseconds DynamoDB does not charge.

moto 5.x spends most of a read's time on work that has nothing to do with the read. :func:`install_fast_requests`
removes three such costs, each without changing any response:

* **The response serializer.** Every response is written by a generic serializer driven by botocore's service
  model, which looks every attribute of every item up by several candidate names and dispatches on its shape: about
  a millisecond per item returned. The item-bearing members of the item operations' responses (:data:`ITEM_MEMBERS`:
  attribute-value maps of items or keys) are written with :func:`json.dumps` instead. moto holds them in wire form
  already; the only thing the model adds is base64 for binary values (``B``, ``BS``), which the encoder does too. The
  rest of each response (capacity, counts, unprocessed keys, status and headers) still goes through moto's
  serializer.
* **A sort of the whole table on every Query.** moto's ``Query`` lists every item of the table in key order, then
  keeps the partition it was asked for, so its cost grows with the table (the embedded default's tables only grow).
  A Query of the table or of a local secondary index (whose partition key is the table's) now lists only its
  partition's items; moto filters and sorts them as before.
* **A list of every DynamoDB object ever made.** moto's models append each instance they create to a class-wide list
  (``instances_tracked``) that only its dashboard reads, and never drop it: every item version written, every item a
  Query copies out, every stream record and shard iterator stays alive for the life of the process. For the
  embedded default that is memory growing with every request (a broadcast to 100 sessions kept 100 items more), and
  every full collection of the garbage collector walks all of it, holding the interpreter for 50-500 ms on a loaded
  machine, the tail of the real-time latency. DynamoDB and DynamoDB Streams objects are no longer tracked (nothing
  of ours serves the dashboard; the S3 models, whose reset reads the list, still are).
* **Per-request dispatch lookups.** Routing a request lists moto's package directory (a ``stat`` per service) and
  inspects the handler class for its methods, each time. Both answers are fixed for the life of the process and are
  now computed once.

A wrong fast response is never kept silently: the first :data:`VERIFY_FIRST` of each operation are also written the
stock way and compared exactly (as parsed JSON, the types of numbers included) before the answer goes out; on any
difference the stock response is sent instead. One in :data:`VERIFY_EVERY` after that is compared the same way on
a thread of its own once the answer has gone: the stock serializer costs about a millisecond per item, and done on
the request it held moto's DynamoDB lock for 50-100 ms every fiftieth read of a hundred items, stalling every other
request behind it. Either way a difference switches the fast serializer off for the life of the process, and
:func:`fast_responses_disabled` says why (the test suite fails on it).

The patches are process-wide (moto keeps its handlers in module globals) and idempotent. They apply to the moto
line the project pins (5.x); where moto's internals are not the ones they expect, they leave moto alone and say so.
"""

from __future__ import annotations

import base64
import contextlib
import contextvars
import functools
import json
import logging
import queue
import threading
from collections.abc import Callable, Mapping
from typing import Any, ClassVar, Final

logger = logging.getLogger(__name__)

ITEM_MEMBERS: Final[Mapping[str, tuple[str, ...]]] = {
    "GetItem": ("Item",),
    "Query": ("Items", "LastEvaluatedKey"),
    "Scan": ("Items", "LastEvaluatedKey"),
    "BatchGetItem": ("Responses",),
    "TransactGetItems": ("Responses",),
    "PutItem": ("Attributes",),
    "UpdateItem": ("Attributes",),
    "DeleteItem": ("Attributes",),
    "ExecuteStatement": ("Items", "LastEvaluatedKey"),
}
"""Per operation, the response members made only of attribute-value maps (of items, of keys, or lists and maps of
them), which the fast serializer writes itself."""
VERIFY_FIRST: Final = 20
"""Fast responses of each operation also written the stock way and compared, from the start."""
VERIFY_EVERY: Final = 50
"""After those, one fast response in this many is compared too."""

_LOCK = threading.Lock()
_installed = False
_PARTITION: contextvars.ContextVar[Any] = contextvars.ContextVar("lakesync_moto_query_partition", default=None)


class _State:
    """What the fast serializer did in this process."""

    counts: ClassVar[dict[str, int]] = {}
    disabled: ClassVar[str | None] = None


def fast_responses_disabled() -> str | None:
    """Why the fast serializer was switched off (a fast response differed from moto's own), or ``None``."""
    return _State.disabled


def fast_response_counts() -> dict[str, int]:
    """How many responses of each operation the fast serializer has written in this process."""
    return dict(_State.counts)


def install_fast_requests() -> bool:
    """Patch moto (see the module docstring). Returns whether every patch is in place."""
    global _installed
    with _LOCK:
        if _installed:
            return True
        try:
            from moto import backends
            from moto.core import responses as core_responses
            from moto.core.common_models import BaseModel
            from moto.dynamodb.models.table import Table
            from moto.dynamodb.responses import DynamoResult
        except ImportError:  # pragma: no cover - moto is a dependency of the local extra
            return False
        expected = (
            callable(getattr(DynamoResult, "execute_result", None)),
            callable(getattr(Table, "query", None)),
            callable(getattr(Table, "all_items", None)),
            callable(getattr(backends, "list_of_moto_modules", None)),
            callable(getattr(core_responses, "method_names_from_class", None)),
            "__new__" in vars(BaseModel),
        )
        if not all(expected):
            logger.warning("moto's internals changed; its requests stay unpatched (slower)")
            return False
        _patch_serializer(DynamoResult)
        _patch_query(Table)
        _patch_dispatch(backends, core_responses)
        _untrack_dynamodb(BaseModel)
        _installed = True
        return True


def _binary(value: object) -> str:
    if isinstance(value, bytes | bytearray):
        return base64.b64encode(value).decode("ascii")
    raise TypeError(f"{type(value).__name__} is not an attribute value moto's serializer writes")


def _canonical(body: str | bytes) -> str:
    return json.dumps(json.loads(body), sort_keys=True)


def _disable(reason: str) -> None:
    if _State.disabled is None:
        _State.disabled = reason
        logger.error("fast moto responses switched off: %s", reason)


def _patch_serializer(result_class: Any) -> None:
    stock = result_class.execute_result

    def execute_result(self: Any, context: Any) -> Any:
        result = self.result
        operation = context.operation_model.name
        members = ITEM_MEMBERS.get(operation)
        if _State.disabled is not None or members is None or not isinstance(result, dict):
            return stock(self, context)
        items = {name: result[name] for name in members if name in result}
        if not items:
            return stock(self, context)
        rest = result_class.__new__(result_class)
        rest._result = {name: value for name, value in result.items() if name not in items}
        try:
            status, headers, body = stock(rest, context)
            document = json.loads(body)
            document.update(items)
            fast_body = json.dumps(document, default=_binary)
        except (TypeError, ValueError) as exc:
            _disable(f"{operation}: {exc}")
            return stock(self, context)
        count = _State.counts.get(operation, 0) + 1
        _State.counts[operation] = count
        fast = (status, headers, fast_body)
        if count <= VERIFY_FIRST:
            answer = stock(self, context)
            return fast if _same(operation, answer, fast) else answer
        if count % VERIFY_EVERY == 0:
            sent = (status, dict(headers), fast_body)  # as sent: moto adds to the headers once this returns
            _verify_later(lambda: _same(operation, stock(self, context), sent))
        return fast

    result_class.execute_result = execute_result


def _same(operation: str, stock: tuple[Any, Any, Any], fast: tuple[Any, Any, Any]) -> bool:
    """Whether the fast response equals moto's own; switches the fast path off when it does not."""
    (stock_status, stock_headers, stock_body), (status, headers, fast_body) = stock, fast
    if (stock_status, stock_headers, _canonical(stock_body)) == (status, headers, _canonical(fast_body)):
        return True
    _disable(f"{operation} differed from moto's response: {stock_body[:300]!r} != {fast_body[:300]!r}")
    return False


_CHECKS: queue.Queue[Callable[[], object]] = queue.Queue(maxsize=16)
_checker: threading.Thread | None = None


def _verify_later(check: Callable[[], object]) -> None:
    """Run ``check`` on the verifier thread (started on first use); dropped when 16 are waiting already."""
    global _checker
    with _LOCK:
        if _checker is None:
            _checker = threading.Thread(target=_run_checks, name="moto-fast-response-checks", daemon=True)
            _checker.start()
    with contextlib.suppress(queue.Full):
        _CHECKS.put_nowait(check)


def _run_checks() -> None:
    while True:
        check = _CHECKS.get()
        try:
            check()
        except Exception as exc:  # the stock serializer failing where the fast one did not is a difference too
            _disable(f"moto's own serializer failed on a response the fast one wrote: {exc!r}")


def verified() -> None:
    """Wait until every sampled check handed to the verifier thread so far has run (tests)."""
    done = threading.Event()
    _CHECKS.put(done.set)
    done.wait(60)


def _patch_query(table_class: Any) -> None:
    stock_query = table_class.query
    stock_all_items = table_class.all_items

    def query(
        self: Any,
        hash_key: Any,
        range_comparison: Any,
        range_objs: Any,
        limit: Any,
        exclusive_start_key: Any,
        scan_index_forward: Any,
        projection_expressions: Any,
        index_name: str | None = None,
        *args: Any,
        **kwargs: Any,
    ) -> Any:
        partition = _partition(self, hash_key, index_name, kwargs.get("hash_key_conditions"))
        token = _PARTITION.set(None if partition is None else (self, partition))
        try:
            return stock_query(
                self,
                hash_key,
                range_comparison,
                range_objs,
                limit,
                exclusive_start_key,
                scan_index_forward,
                projection_expressions,
                index_name,
                *args,
                **kwargs,
            )
        finally:
            _PARTITION.reset(token)

    def all_items(self: Any) -> list[Any]:
        hint = _PARTITION.get()
        if hint is None or hint[0] is not self:
            return stock_all_items(self)  # type: ignore[no-any-return]
        # Unsorted: the Query sorts its candidates itself, by the table's or the index's keys.
        return list(self.items.get(hint[1], {}).values())

    table_class.query = query
    table_class.all_items = all_items


UNTRACKED_MODULES: Final = ("moto.dynamodb.", "moto.dynamodbstreams.")
"""moto's packages whose model instances are not kept in ``instances_tracked``."""


def _untrack_dynamodb(base_model: Any) -> None:
    tracked_new = base_model.__new__

    def __new__(cls: Any, *args: Any, **kwargs: Any) -> Any:
        if cls.__module__.startswith(UNTRACKED_MODULES):
            return object.__new__(cls)
        return tracked_new(cls, *args, **kwargs)

    base_model.__new__ = __new__


def _partition(table: Any, hash_key: Any, index_name: str | None, conditions: Any) -> Any:
    """The partition key value moto's Query keeps candidates of, when that is all it keeps; else ``None``.

    A table Query keeps the items whose partition key is ``hash_key``; a local index's Query keeps those that meet its
    one hash-key condition, on the table's partition key. Any other Query (a global index's, a table without a sort
    key) lists the whole table as before."""
    if not table.range_key_attr:
        return None
    if index_name is None:
        return hash_key
    if not any(index.name == index_name for index in table.indexes):
        return None
    if not isinstance(conditions, list) or len(conditions) != 1:
        return None
    ((name, value),) = conditions
    return value if name == table.hash_key_attr else None


def _patch_dispatch(backends: Any, core_responses: Any) -> None:
    modules = tuple(backends.list_of_moto_modules())
    backends.list_of_moto_modules = lambda: modules
    stock_method_names = core_responses.method_names_from_class

    @functools.cache
    def method_names(clazz: type) -> tuple[str, ...]:
        return tuple(stock_method_names(clazz))

    core_responses.method_names_from_class = lambda clazz: list(method_names(clazz))
