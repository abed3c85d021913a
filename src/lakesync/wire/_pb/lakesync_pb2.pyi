from google.protobuf.internal import containers as _containers
from google.protobuf.internal import enum_type_wrapper as _enum_type_wrapper
from google.protobuf import descriptor as _descriptor
from google.protobuf import message as _message
from collections.abc import Iterable as _Iterable, Mapping as _Mapping
from typing import ClassVar as _ClassVar, Optional as _Optional, Union as _Union

DESCRIPTOR: _descriptor.FileDescriptor

class DeltaOp(int, metaclass=_enum_type_wrapper.EnumTypeWrapper):
    __slots__ = ()
    DELTA_OP_UNSPECIFIED: _ClassVar[DeltaOp]
    DELTA_OP_INSERT: _ClassVar[DeltaOp]
    DELTA_OP_UPDATE: _ClassVar[DeltaOp]
    DELTA_OP_DELETE: _ClassVar[DeltaOp]
DELTA_OP_UNSPECIFIED: DeltaOp
DELTA_OP_INSERT: DeltaOp
DELTA_OP_UPDATE: DeltaOp
DELTA_OP_DELETE: DeltaOp

class ColumnDelta(_message.Message):
    __slots__ = ("column", "value")
    COLUMN_FIELD_NUMBER: _ClassVar[int]
    VALUE_FIELD_NUMBER: _ClassVar[int]
    column: str
    value: bytes
    def __init__(self, column: _Optional[str] = ..., value: _Optional[bytes] = ...) -> None: ...

class RowDelta(_message.Message):
    __slots__ = ("op", "table", "row_id", "columns", "hlc", "client_id", "delta_id")
    OP_FIELD_NUMBER: _ClassVar[int]
    TABLE_FIELD_NUMBER: _ClassVar[int]
    ROW_ID_FIELD_NUMBER: _ClassVar[int]
    COLUMNS_FIELD_NUMBER: _ClassVar[int]
    HLC_FIELD_NUMBER: _ClassVar[int]
    CLIENT_ID_FIELD_NUMBER: _ClassVar[int]
    DELTA_ID_FIELD_NUMBER: _ClassVar[int]
    op: DeltaOp
    table: str
    row_id: str
    columns: _containers.RepeatedCompositeFieldContainer[ColumnDelta]
    hlc: int
    client_id: str
    delta_id: str
    def __init__(self, op: _Optional[_Union[DeltaOp, str]] = ..., table: _Optional[str] = ..., row_id: _Optional[str] = ..., columns: _Optional[_Iterable[_Union[ColumnDelta, _Mapping]]] = ..., hlc: _Optional[int] = ..., client_id: _Optional[str] = ..., delta_id: _Optional[str] = ...) -> None: ...

class SyncPush(_message.Message):
    __slots__ = ("client_id", "deltas", "last_seen_hlc")
    CLIENT_ID_FIELD_NUMBER: _ClassVar[int]
    DELTAS_FIELD_NUMBER: _ClassVar[int]
    LAST_SEEN_HLC_FIELD_NUMBER: _ClassVar[int]
    client_id: str
    deltas: _containers.RepeatedCompositeFieldContainer[RowDelta]
    last_seen_hlc: int
    def __init__(self, client_id: _Optional[str] = ..., deltas: _Optional[_Iterable[_Union[RowDelta, _Mapping]]] = ..., last_seen_hlc: _Optional[int] = ...) -> None: ...

class SyncPull(_message.Message):
    __slots__ = ("client_id", "since_hlc", "max_deltas")
    CLIENT_ID_FIELD_NUMBER: _ClassVar[int]
    SINCE_HLC_FIELD_NUMBER: _ClassVar[int]
    MAX_DELTAS_FIELD_NUMBER: _ClassVar[int]
    client_id: str
    since_hlc: int
    max_deltas: int
    def __init__(self, client_id: _Optional[str] = ..., since_hlc: _Optional[int] = ..., max_deltas: _Optional[int] = ...) -> None: ...

class SyncResponse(_message.Message):
    __slots__ = ("deltas", "server_hlc", "has_more")
    DELTAS_FIELD_NUMBER: _ClassVar[int]
    SERVER_HLC_FIELD_NUMBER: _ClassVar[int]
    HAS_MORE_FIELD_NUMBER: _ClassVar[int]
    deltas: _containers.RepeatedCompositeFieldContainer[RowDelta]
    server_hlc: int
    has_more: bool
    def __init__(self, deltas: _Optional[_Iterable[_Union[RowDelta, _Mapping]]] = ..., server_hlc: _Optional[int] = ..., has_more: _Optional[bool] = ...) -> None: ...

class Action(_message.Message):
    __slots__ = ("action_id", "client_id", "hlc", "connector", "action_type", "params", "idempotency_key")
    ACTION_ID_FIELD_NUMBER: _ClassVar[int]
    CLIENT_ID_FIELD_NUMBER: _ClassVar[int]
    HLC_FIELD_NUMBER: _ClassVar[int]
    CONNECTOR_FIELD_NUMBER: _ClassVar[int]
    ACTION_TYPE_FIELD_NUMBER: _ClassVar[int]
    PARAMS_FIELD_NUMBER: _ClassVar[int]
    IDEMPOTENCY_KEY_FIELD_NUMBER: _ClassVar[int]
    action_id: str
    client_id: str
    hlc: int
    connector: str
    action_type: str
    params: bytes
    idempotency_key: str
    def __init__(self, action_id: _Optional[str] = ..., client_id: _Optional[str] = ..., hlc: _Optional[int] = ..., connector: _Optional[str] = ..., action_type: _Optional[str] = ..., params: _Optional[bytes] = ..., idempotency_key: _Optional[str] = ...) -> None: ...

class ActionPush(_message.Message):
    __slots__ = ("client_id", "actions")
    CLIENT_ID_FIELD_NUMBER: _ClassVar[int]
    ACTIONS_FIELD_NUMBER: _ClassVar[int]
    client_id: str
    actions: _containers.RepeatedCompositeFieldContainer[Action]
    def __init__(self, client_id: _Optional[str] = ..., actions: _Optional[_Iterable[_Union[Action, _Mapping]]] = ...) -> None: ...

class ActionResultMsg(_message.Message):
    __slots__ = ("action_id", "data", "server_hlc")
    ACTION_ID_FIELD_NUMBER: _ClassVar[int]
    DATA_FIELD_NUMBER: _ClassVar[int]
    SERVER_HLC_FIELD_NUMBER: _ClassVar[int]
    action_id: str
    data: bytes
    server_hlc: int
    def __init__(self, action_id: _Optional[str] = ..., data: _Optional[bytes] = ..., server_hlc: _Optional[int] = ...) -> None: ...

class ActionErrorMsg(_message.Message):
    __slots__ = ("action_id", "code", "message", "retryable")
    ACTION_ID_FIELD_NUMBER: _ClassVar[int]
    CODE_FIELD_NUMBER: _ClassVar[int]
    MESSAGE_FIELD_NUMBER: _ClassVar[int]
    RETRYABLE_FIELD_NUMBER: _ClassVar[int]
    action_id: str
    code: str
    message: str
    retryable: bool
    def __init__(self, action_id: _Optional[str] = ..., code: _Optional[str] = ..., message: _Optional[str] = ..., retryable: _Optional[bool] = ...) -> None: ...

class ActionResponseEntry(_message.Message):
    __slots__ = ("success", "error")
    SUCCESS_FIELD_NUMBER: _ClassVar[int]
    ERROR_FIELD_NUMBER: _ClassVar[int]
    success: ActionResultMsg
    error: ActionErrorMsg
    def __init__(self, success: _Optional[_Union[ActionResultMsg, _Mapping]] = ..., error: _Optional[_Union[ActionErrorMsg, _Mapping]] = ...) -> None: ...

class ActionResponse(_message.Message):
    __slots__ = ("results", "server_hlc")
    RESULTS_FIELD_NUMBER: _ClassVar[int]
    SERVER_HLC_FIELD_NUMBER: _ClassVar[int]
    results: _containers.RepeatedCompositeFieldContainer[ActionResponseEntry]
    server_hlc: int
    def __init__(self, results: _Optional[_Iterable[_Union[ActionResponseEntry, _Mapping]]] = ..., server_hlc: _Optional[int] = ...) -> None: ...
