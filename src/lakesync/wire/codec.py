"""Protobuf codec for the messages of ``proto/lakesync/v1/lakesync.proto``.

Two entry points over the same schema:

* the generic :func:`encode` / :func:`decode`, between bytes and the JSON API shape of any message of the .proto;
* typed helpers for the hot path, between bytes and the domain objects (:class:`RowDelta`, :class:`SyncPush`,
  :class:`SyncPull`, :class:`SyncResponse`) without a dict detour.

Wire rules (byte-compatible with the original codec):

* every ``bytes`` field (``ColumnDelta.value``, ``Action.params``, ``ActionResultMsg.data``) holds the UTF-8 of
  ``JSON.stringify(value)`` (:func:`~lakesync.core.canonical.js_stringify`: insertion-ordered keys, compact, JS
  number formatting) and is read back as JSON;
* every ``fixed64`` field is an HLC, a decimal string in the JSON shape;
* ``DeltaOp`` is ``"INSERT" | "UPDATE" | "DELETE"``; UNSPECIFIED or an unknown number fails the decode;
* proto3 defaults are omitted on the wire, so empty input decodes to all defaults;
* ``Action.idempotencyKey`` ``""`` means "no key": the key is absent from the decoded dict;
* ``ActionResponse.results`` are flat dicts: an entry is the ``success`` member iff it has both ``data`` and
  ``serverHlc`` keys, otherwise the ``error`` member (``actionId, code, message, retryable``).

Errors: any bad input to a decoder raises :class:`~lakesync.core.errors.CodecError` ``"Failed to decode <Message>"``
(``<Message>`` is the message asked for; the cause is chained) -- never anything else. Our stricter semantics than the
original: value bytes that are not valid UTF-8 or not strict JSON (see ``lakesync.wire._json``: no NaN, finite
numbers, nesting ≤ 64) fail the decode instead of being patched with U+FFFD; an ``ActionResponseEntry`` with neither
member set fails too. :func:`encode` checks the dict and raises :class:`~lakesync.core.errors.ValidationError` naming
the bad field (``SyncPush.deltas[0].hlc``); the typed encoders raise ``CodecError("Failed to encode <Message>")`` for
domain objects that cannot be serialised. An unknown message name is a programming error (:class:`ValueError`).

The generated ``*_pb2`` classes are private to this package, and loaded on first use: a process that only speaks JSON
never imports protobuf (about a seventh of a handler's cold import).
"""

from __future__ import annotations

import functools
from collections.abc import Callable, Iterable, Mapping
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any, Final, TypeVar

from lakesync.core import hlc as hlc_mod
from lakesync.core.canonical import JsonValue, js_stringify
from lakesync.core.delta import ColumnDelta, DeltaOp, RowDelta
from lakesync.core.errors import CodecError, ValidationError
from lakesync.core.messages import MAX_UINT32, SyncPull, SyncPush, SyncResponse
from lakesync.wire import _json

if TYPE_CHECKING:
    from google.protobuf.message import Message

_T = TypeVar("_T")

MESSAGE_NAMES: Final[tuple[str, ...]] = (
    "ColumnDelta",
    "RowDelta",
    "SyncPush",
    "SyncPull",
    "SyncResponse",
    "Action",
    "ActionPush",
    "ActionResultMsg",
    "ActionErrorMsg",
    "ActionResponseEntry",
    "ActionResponse",
)
"""The message names :func:`encode` and :func:`decode` accept, in .proto order (checked against the generated code
when it loads)."""

# protobuf's field type numbers (descriptor.proto's FieldDescriptorProto.Type) and the .proto's DeltaOp numbers, so
# that the hot path needs no lookup; checked against the generated code when it loads.
_TYPE_FIXED64: Final = 6
_TYPE_BOOL: Final = 8
_TYPE_STRING: Final = 9
_TYPE_MESSAGE: Final = 11
_TYPE_BYTES: Final = 12
_TYPE_UINT32: Final = 13
_TYPE_ENUM: Final = 14
_OP_TO_PB: Final[dict[DeltaOp, int]] = {DeltaOp.INSERT: 1, DeltaOp.UPDATE: 2, DeltaOp.DELETE: 3}
DELTA_OP_BY_NUMBER: Final[dict[int, DeltaOp]] = {number: op for op, number in _OP_TO_PB.items()}
"""The .proto's ``DeltaOp`` numbers (UNSPECIFIED, 0, is none of them); for this package's decoders."""

_ENTRY = "ActionResponseEntry"
_EMPTY_MEANS_ABSENT: Final[frozenset[tuple[str, str]]] = frozenset({("Action", "idempotency_key")})
_BYTES_LIKE = bytes | bytearray | memoryview
_ENCODE_ERRORS = (TypeError, ValueError, KeyError, ArithmeticError, RuntimeError)


@dataclass(frozen=True, slots=True)
class _Protobuf:
    """The generated code, loaded on first use: a JSON-only request never pays protobuf's import."""

    pb: Any
    decode_errors: tuple[type[BaseException], ...]


def protobuf_module() -> Any:
    """The generated ``lakesync_pb2`` module, loaded (and checked) on first use; for this package's decoders."""
    return _protobuf().pb


@functools.cache
def _protobuf() -> _Protobuf:
    """Load the generated classes and check that this codec maps every field of the .proto (else ImportError: it
    cannot be silently wrong)."""
    from google.protobuf.descriptor import FieldDescriptor
    from google.protobuf.message import DecodeError

    from lakesync.wire._pb import lakesync_pb2 as pb

    names = tuple(pb.DESCRIPTOR.message_types_by_name)
    if names != MESSAGE_NAMES:
        raise ImportError(f"lakesync.wire knows the messages {MESSAGE_NAMES}, the .proto has {names}")
    numbers = {
        _TYPE_FIXED64: FieldDescriptor.TYPE_FIXED64,
        _TYPE_BOOL: FieldDescriptor.TYPE_BOOL,
        _TYPE_STRING: FieldDescriptor.TYPE_STRING,
        _TYPE_MESSAGE: FieldDescriptor.TYPE_MESSAGE,
        _TYPE_BYTES: FieldDescriptor.TYPE_BYTES,
        _TYPE_UINT32: FieldDescriptor.TYPE_UINT32,
        _TYPE_ENUM: FieldDescriptor.TYPE_ENUM,
    }
    ops = {DeltaOp.INSERT: pb.DELTA_OP_INSERT, DeltaOp.UPDATE: pb.DELTA_OP_UPDATE, DeltaOp.DELETE: pb.DELTA_OP_DELETE}
    if any(ours != theirs for ours, theirs in numbers.items()) or ops != _OP_TO_PB:
        raise ImportError("lakesync.wire's protobuf type or DeltaOp numbers differ from the generated code's")
    for name in names:
        for field in getattr(pb, name).DESCRIPTOR.fields:
            if field.type not in numbers:
                raise ImportError(f"lakesync.wire cannot map {field.full_name} (protobuf type {field.type})")
            enum = field.enum_type
            if field.type == _TYPE_ENUM and (enum is None or enum.name != "DeltaOp"):
                raise ImportError(f"lakesync.wire cannot map the enum of {field.full_name}")
    # RuntimeError covers RecursionError
    return _Protobuf(pb=pb, decode_errors=(DecodeError, ValueError, RuntimeError))


# -- JSON inside bytes fields ---------------------------------------------------------------------------------------


def _json_bytes(value: JsonValue) -> bytes:
    """UTF-8 of ``JSON.stringify(value)``."""
    text = js_stringify(value)
    try:
        return text.encode("utf-8")
    except UnicodeEncodeError:
        # js_stringify escapes lone surrogates but keeps well-formed pairs, which only strings decoded with
        # "surrogatepass" contain; joining each pair into its code point gives the UTF-8 JavaScript writes.
        return text.encode("utf-16-le", "surrogatepass").decode("utf-16-le").encode("utf-8")


def _json_value(data: bytes) -> JsonValue:
    """``JSON.parse`` of UTF-8 bytes, strictly. Raises ValueError."""
    if data[:3] == b"\xef\xbb\xbf":  # TextDecoder drops a leading byte-order mark
        data = data[3:]
    return _json.parse(data.decode("utf-8"))


# -- generic dict <-> message ---------------------------------------------------------------------------------------


def _require_str(value: object, path: str) -> str:
    if not isinstance(value, str):
        raise ValidationError(f"{path} must be a string")
    try:
        value.encode("utf-8")
    except UnicodeEncodeError:
        raise ValidationError(f"{path} must be valid Unicode (it holds a lone surrogate)") from None
    return value


def _require_hlc(value: object, path: str) -> int:
    if isinstance(value, int) and not isinstance(value, bool):
        if not 0 <= value <= hlc_mod.MAX_HLC:
            raise ValidationError(f"{path} is out of range for a 64-bit HLC")
        return value
    return hlc_mod.parse(value, field=path)


def _require_json(value: object, path: str) -> bytes:
    """Check that ``value`` is a JSON value (finite numbers, string keys, bounded nesting) and encode it.

    Strings may hold lone surrogates here: JSON escapes them (``"\\ud800"``), as ``JSON.stringify`` does.
    """
    stack: list[tuple[object, int]] = [(value, 0)]
    while stack:
        item, depth = stack.pop()
        if item is None or isinstance(item, bool | str):
            continue
        if isinstance(item, int | float):
            if not _json.is_finite_number(item):
                raise ValidationError(f"{path} must hold finite numbers only")
            continue
        if isinstance(item, list | tuple):
            children: Iterable[object] = item
        elif isinstance(item, Mapping):
            if not all(isinstance(key, str) for key in item):
                raise ValidationError(f"{path} has a non-string object key")
            children = item.values()
        else:
            raise ValidationError(f"{path} must be a JSON value, not {type(item).__name__}")
        if item and depth >= _json.MAX_DEPTH:  # also stops self-referencing containers
            raise ValidationError(f"{path} is nested too deeply")
        stack.extend((child, depth + 1) for child in children)
    return _json_bytes(value)


def _scalar_to_pb(kind: int, value: object, path: str) -> object:
    if kind == _TYPE_STRING:
        return _require_str(value, path)
    if kind == _TYPE_BYTES:
        return _require_json(value, path)
    if kind == _TYPE_FIXED64:
        return _require_hlc(value, path)
    if kind == _TYPE_BOOL:
        if not isinstance(value, bool):
            raise ValidationError(f"{path} must be a boolean")
        return value
    if kind == _TYPE_UINT32:
        if isinstance(value, bool) or not isinstance(value, int) or not 0 <= value <= MAX_UINT32:
            raise ValidationError(f"{path} must be an integer between 0 and {MAX_UINT32}")
        return value
    # TYPE_ENUM: DeltaOp (checked when the generated code loads)
    if not isinstance(value, str) or value not in DeltaOp.__members__:
        raise ValidationError(f"{path} must be one of INSERT, UPDATE, DELETE")
    return _OP_TO_PB[DeltaOp(value)]


def _fill(msg: Message, obj: object, path: str) -> None:
    """Copy the JSON API shape ``obj`` into ``msg``; absent keys keep proto3 defaults, unknown keys are ignored."""
    if not isinstance(obj, Mapping):
        raise ValidationError(f"{path} must be an object")
    desc = msg.DESCRIPTOR
    if desc.name == _ENTRY:
        member = "success" if "data" in obj and "serverHlc" in obj else "error"
        getattr(msg, member).SetInParent()
        _fill(getattr(msg, member), obj, path)
        return
    for field in desc.fields:
        key = field.json_name
        fpath = f"{path}.{key}"
        if key not in obj or (obj[key] is None and (desc.name, field.name) in _EMPTY_MEANS_ABSENT):
            if field.type in (_TYPE_BYTES, _TYPE_ENUM):
                # No usable default: empty bytes are not JSON and op 0 is UNSPECIFIED, so both would not decode.
                raise ValidationError(f"{fpath} is required")
            continue
        value = obj[key]
        if field.is_repeated:
            if not isinstance(value, list | tuple):
                raise ValidationError(f"{fpath} must be an array")
            container = getattr(msg, field.name)
            for i, item in enumerate(value):
                if field.type == _TYPE_MESSAGE:
                    _fill(container.add(), item, f"{fpath}[{i}]")
                else:
                    container.append(_scalar_to_pb(field.type, item, f"{fpath}[{i}]"))
        elif field.type == _TYPE_MESSAGE:
            sub = getattr(msg, field.name)
            sub.SetInParent()
            _fill(sub, value, fpath)
        else:
            setattr(msg, field.name, _scalar_to_pb(field.type, value, fpath))


def _scalar_from_pb(kind: int, value: Any) -> JsonValue:
    if kind == _TYPE_FIXED64:
        return str(value)
    if kind == _TYPE_BYTES:
        return _json_value(value)
    if kind == _TYPE_ENUM:
        op = DELTA_OP_BY_NUMBER.get(value)
        if op is None:
            raise ValueError(f"Unknown or unspecified DeltaOp: {value}")
        return op.value
    return value


def _to_json(msg: Message) -> dict[str, Any]:
    desc = msg.DESCRIPTOR
    if desc.name == _ENTRY:
        member = msg.WhichOneof("result")
        if member is None:
            raise ValueError("ActionResponseEntry has neither success nor error")
        return _to_json(getattr(msg, member))
    out: dict[str, Any] = {}
    for field in desc.fields:
        value = getattr(msg, field.name)
        if field.is_repeated:
            if field.type == _TYPE_MESSAGE:
                out[field.json_name] = [_to_json(item) for item in value]
            else:
                out[field.json_name] = [_scalar_from_pb(field.type, item) for item in value]
        elif field.type == _TYPE_MESSAGE:
            out[field.json_name] = _to_json(value)
        elif value == "" and (desc.name, field.name) in _EMPTY_MEANS_ABSENT:
            continue
        else:
            out[field.json_name] = _scalar_from_pb(field.type, value)
    return out


def _message_class(message: str) -> type[Message]:
    if message not in MESSAGE_NAMES:
        raise ValueError(f"unknown wire message {message!r}; known: {', '.join(MESSAGE_NAMES)}")
    cls: type[Message] = getattr(protobuf_module(), message)
    return cls


def encode(message: str, obj: Mapping[str, Any]) -> bytes:
    """Serialise the JSON API shape of a message.

    Args:
        message: A message name of the .proto, e.g. ``"SyncPush"`` (see :data:`MESSAGE_NAMES`).
        obj: The JSON API shape: camelCase keys, HLCs as decimal strings (ints are accepted too), ``op`` as
            ``"INSERT"``..., JSON values for value/params/data. Absent keys take proto3 defaults except the JSON
            bytes fields and ``op``, which are required; unknown keys are ignored.

    Returns:
        The protobuf bytes.

    Raises:
        ValidationError: naming the first field of the wrong type or range.
        ValueError: if ``message`` is not a message of the .proto.
    """
    msg = _message_class(message)()
    _fill(msg, obj, message)
    return msg.SerializeToString()


def decode(message: str, data: bytes) -> dict[str, Any]:
    """Parse protobuf bytes into the JSON API shape of a message (every field present, except an absent
    ``idempotencyKey``).

    Raises:
        CodecError: ``Failed to decode <message>`` for any malformed input.
        ValueError: if ``message`` is not a message of the .proto.
    """
    msg = _parse(_message_class(message), data, message)
    return _guard(message, lambda: _to_json(msg))


# -- decode guards and the typed hot path ------------------------------------------------------------------------


def _parse(cls: type[Message], data: object, name: str) -> Any:
    if not isinstance(data, _BYTES_LIKE):
        raise CodecError(f"Failed to decode {name}")
    msg = cls()
    try:
        msg.ParseFromString(bytes(data))
    except _protobuf().decode_errors as exc:
        raise CodecError(f"Failed to decode {name}") from exc
    return msg


def _guard(name: str, build: Callable[[], _T]) -> _T:
    try:
        return build()
    except _protobuf().decode_errors as exc:
        raise CodecError(f"Failed to decode {name}") from exc


def _fill_row(row: Any, delta: RowDelta) -> None:
    row.op = _OP_TO_PB[delta.op]
    row.table = delta.table
    row.row_id = delta.row_id
    row.hlc = delta.hlc
    row.client_id = delta.client_id
    row.delta_id = delta.delta_id
    add_column = row.columns.add
    for col in delta.columns:
        add_column(column=col.column, value=_json_bytes(col.value))


def _add_rows(container: Any, deltas: tuple[RowDelta, ...]) -> None:
    add_row = container.add
    for delta in deltas:
        _fill_row(add_row(), delta)


def _row_from_pb(row: Any) -> RowDelta:
    op = DELTA_OP_BY_NUMBER.get(row.op)
    if op is None:
        raise ValueError(f"Unknown or unspecified DeltaOp: {row.op}")
    return RowDelta(
        op=op,
        table=row.table,
        row_id=row.row_id,
        client_id=row.client_id,
        columns=tuple(ColumnDelta(col.column, _json_value(col.value)) for col in row.columns),
        hlc=row.hlc,
        delta_id=row.delta_id,
    )


def _serialise(name: str, build: Callable[[], Any]) -> bytes:
    try:
        data: bytes = build().SerializeToString()
    except _ENCODE_ERRORS as exc:
        raise CodecError(f"Failed to encode {name}") from exc
    return data


def encode_row_delta(delta: RowDelta) -> bytes:
    """Serialise one :class:`RowDelta`.

    Raises:
        CodecError: ``Failed to encode RowDelta`` if a field cannot be serialised (non-JSON value, HLC out of range,
            lone surrogate in a string).
    """

    def build() -> Any:
        msg = protobuf_module().RowDelta()
        _fill_row(msg, delta)
        return msg

    return _serialise("RowDelta", build)


def decode_row_delta(data: bytes) -> RowDelta:
    """Parse one :class:`RowDelta`.

    Only the encoding is checked here: an unset string decodes as ``""`` (the proto3 default) and a value's JSON may
    hold a lone-surrogate escape. The gateway judges the fields of every pushed delta, JSON or protobuf alike, with
    :func:`lakesync.core.delta.validate_row_delta`.

    Raises:
        CodecError: ``Failed to decode RowDelta``.
    """
    msg = _parse(protobuf_module().RowDelta, data, "RowDelta")
    return _guard("RowDelta", lambda: _row_from_pb(msg))


def encode_sync_push(push: SyncPush) -> bytes:
    """Serialise a :class:`SyncPush`.

    Raises:
        CodecError: ``Failed to encode SyncPush``.
    """

    def build() -> Any:
        msg = protobuf_module().SyncPush(client_id=push.client_id, last_seen_hlc=push.last_seen_hlc)
        _add_rows(msg.deltas, push.deltas)
        return msg

    return _serialise("SyncPush", build)


def decode_sync_push(data: bytes) -> SyncPush:
    """Parse a :class:`SyncPush` (its deltas' fields are judged by the gateway, as for :func:`decode_row_delta`).

    Raises:
        CodecError: ``Failed to decode SyncPush``.
    """
    msg = _parse(protobuf_module().SyncPush, data, "SyncPush")
    return _guard(
        "SyncPush",
        lambda: SyncPush(
            client_id=msg.client_id,
            deltas=tuple(_row_from_pb(row) for row in msg.deltas),
            last_seen_hlc=msg.last_seen_hlc,
        ),
    )


def encode_sync_pull(pull: SyncPull) -> bytes:
    """Serialise a :class:`SyncPull`.

    Raises:
        CodecError: ``Failed to encode SyncPull`` (e.g. ``max_deltas`` outside uint32).
    """
    return _serialise(
        "SyncPull",
        lambda: protobuf_module().SyncPull(
            client_id=pull.client_id, since_hlc=pull.since_hlc, max_deltas=pull.max_deltas
        ),
    )


def decode_sync_pull(data: bytes) -> SyncPull:
    """Parse a :class:`SyncPull`.

    Raises:
        CodecError: ``Failed to decode SyncPull``.
    """
    msg = _parse(protobuf_module().SyncPull, data, "SyncPull")
    return SyncPull(client_id=msg.client_id, since_hlc=msg.since_hlc, max_deltas=msg.max_deltas)


def encode_sync_response(response: SyncResponse) -> bytes:
    """Serialise a :class:`SyncResponse`.

    Raises:
        CodecError: ``Failed to encode SyncResponse``.
    """

    def build() -> Any:
        msg = protobuf_module().SyncResponse(server_hlc=response.server_hlc, has_more=response.has_more)
        _add_rows(msg.deltas, response.deltas)
        return msg

    return _serialise("SyncResponse", build)


def decode_sync_response(data: bytes) -> SyncResponse:
    """Parse a :class:`SyncResponse`.

    Raises:
        CodecError: ``Failed to decode SyncResponse``.
    """
    msg = _parse(protobuf_module().SyncResponse, data, "SyncResponse")
    return _guard(
        "SyncResponse",
        lambda: SyncResponse(
            deltas=tuple(_row_from_pb(row) for row in msg.deltas),
            server_hlc=msg.server_hlc,
            has_more=msg.has_more,
        ),
    )


__all__ = [
    "MESSAGE_NAMES",
    "decode",
    "decode_row_delta",
    "decode_sync_pull",
    "decode_sync_push",
    "decode_sync_response",
    "encode",
    "encode_row_delta",
    "encode_sync_pull",
    "encode_sync_push",
    "encode_sync_response",
]
