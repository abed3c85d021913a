"""The one exception hierarchy of LakeSync.

Every error a caller can cause carries the API code and HTTP status of the wire contract, so the edges
(Lambda handlers, the local HTTP front, the CLI) map errors to responses in one place::

    LakeSyncError                         INTERNAL_ERROR     500
    ├── ValidationError                   VALIDATION_ERROR   400
    │   ├── CodecError                    VALIDATION_ERROR   400  (domain code CODEC_ERROR)
    │   ├── SyncRuleError                 VALIDATION_ERROR   400  (domain code SYNC_RULE_ERROR)
    │   ├── ActionValidationError         VALIDATION_ERROR   400  (domain code ACTION_VALIDATION_ERROR)
    │   └── PayloadTooLargeError          VALIDATION_ERROR   413
    ├── SchemaError                       SCHEMA_ERROR       422  (a delta breaks the table schema)
    │   └── SchemaDefinitionError         SCHEMA_ERROR       400  (a schema document is invalid)
    ├── ClockDriftError                   CLOCK_DRIFT        409
    ├── ConflictError                     VALIDATION_ERROR   409  (domain code CONFLICT)
    │   └── AlreadyExistsError            VALIDATION_ERROR   409  (domain code ALREADY_EXISTS)
    ├── AuthError                         AUTH_ERROR         401
    ├── ForbiddenError                    FORBIDDEN          403
    ├── NotFoundError                     NOT_FOUND          404
    │   └── AdapterNotFoundError          NOT_FOUND          404  (domain code ADAPTER_NOT_FOUND)
    ├── CursorExpiredError                CURSOR_EXPIRED     410  (the log behind the position was released)
    ├── RateLimitedError                  RATE_LIMITED       429
    │   └── CallerRateLimitedError        RATE_LIMITED       429  (a caller over its own limit; ``Retry-After``)
    ├── BackpressureError                 BACKPRESSURE_ERROR 503
    │   └── GatewayRestoringError         BACKPRESSURE_ERROR 503  (domain code RESTORING: rebuilt from the lake)
    ├── AdapterError                      ADAPTER_ERROR      502
    │   └── DestinationError              ADAPTER_ERROR      502  (domain code DESTINATION_ERROR; materialisation)
    ├── FlushError                        FLUSH_ERROR        500
    ├── StorageError                      INTERNAL_ERROR     500
    │   ├── CommitConflictError           INTERNAL_ERROR     503  (optimistic commit kept losing; retry)
    │   └── StorageBusyError              INTERNAL_ERROR     503  (the store is throttling; retry later)
    └── ActionError                       (results inside a 200 ActionResponse, never an HTTP status)
        ├── ActionNotSupportedError       code ACTION_NOT_SUPPORTED
        ├── ActionForbiddenError          code ACTION_FORBIDDEN (the connector's action policy refuses the caller)
        └── ActionExecutionError          code ACTION_EXECUTION_ERROR, with ``retryable``
"""

from __future__ import annotations

from typing import Any, ClassVar

API_ERROR_CODES = (
    "VALIDATION_ERROR",
    "SCHEMA_ERROR",
    "BACKPRESSURE_ERROR",
    "CLOCK_DRIFT",
    "AUTH_ERROR",
    "FORBIDDEN",
    "NOT_FOUND",
    "CURSOR_EXPIRED",
    "RATE_LIMITED",
    "ADAPTER_ERROR",
    "FLUSH_ERROR",
    "INTERNAL_ERROR",
)


class LakeSyncError(Exception):
    """Root of every LakeSync error.

    Attributes:
        message: Human-readable description, sent to clients as ``error``.
        code: Domain code (e.g. ``CLOCK_DRIFT``, ``CODEC_ERROR``).
        api_code: One of :data:`API_ERROR_CODES`, sent to clients as ``code``.
        status: HTTP status the edges answer with.
    """

    code: ClassVar[str] = "INTERNAL_ERROR"
    api_code: ClassVar[str] = "INTERNAL_ERROR"
    status: ClassVar[int] = 500

    def __init__(self, message: str) -> None:
        super().__init__(message)
        self.message = message

    def to_body(self) -> dict[str, Any]:
        """The JSON error body of the wire contract: ``{"error", "code"}``."""
        return {"error": self.message, "code": self.api_code}


class ValidationError(LakeSyncError):
    """A request is malformed or breaks a documented limit."""

    code = "VALIDATION_ERROR"
    api_code = "VALIDATION_ERROR"
    status = 400


class CodecError(ValidationError):
    """Bytes or JSON could not be decoded into a wire message."""

    code = "CODEC_ERROR"


class SyncRuleError(ValidationError):
    """A sync-rules document is invalid."""

    code = "SYNC_RULE_ERROR"


class ActionValidationError(ValidationError):
    """An action is malformed."""

    code = "ACTION_VALIDATION_ERROR"


class PayloadTooLargeError(ValidationError):
    """A request body exceeds the size limit."""

    status = 413


class SchemaError(LakeSyncError):
    """A delta does not fit the table's identifier rules or schema."""

    code = "SCHEMA_MISMATCH"
    api_code = "SCHEMA_ERROR"
    status = 422


class SchemaDefinitionError(SchemaError):
    """A table schema document is invalid or an unsafe evolution."""

    code = "SCHEMA_ERROR"
    status = 400


class ClockDriftError(LakeSyncError):
    """A remote HLC is further ahead of the local physical clock than allowed."""

    code = "CLOCK_DRIFT"
    api_code = "CLOCK_DRIFT"
    status = 409


class ConflictError(LakeSyncError):
    """Two deltas for different rows were asked to merge."""

    code = "CONFLICT"
    api_code = "VALIDATION_ERROR"
    status = 409


class AlreadyExistsError(ConflictError):
    """A named resource (a materialisation destination, a connector) is already registered."""

    code = "ALREADY_EXISTS"


class AuthError(LakeSyncError):
    """Missing, malformed, expired or badly signed credentials."""

    code = "AUTH_ERROR"
    api_code = "AUTH_ERROR"
    status = 401


class ForbiddenError(LakeSyncError):
    """Valid credentials that do not grant this request."""

    code = "FORBIDDEN"
    api_code = "FORBIDDEN"
    status = 403


class NotFoundError(LakeSyncError):
    """The route, gateway or resource does not exist."""

    code = "NOT_FOUND"
    api_code = "NOT_FOUND"
    status = 404


class AdapterNotFoundError(NotFoundError):
    """A named source adapter is not registered."""

    code = "ADAPTER_NOT_FOUND"


class CursorExpiredError(LakeSyncError):
    """A pull position is behind the part of the log the flush job released; reload the checkpoint."""

    code = "CURSOR_EXPIRED"
    api_code = "CURSOR_EXPIRED"
    status = 410


class RateLimitedError(LakeSyncError):
    """The caller sent too many requests."""

    code = "RATE_LIMITED"
    api_code = "RATE_LIMITED"
    status = 429


class CallerRateLimitedError(RateLimitedError):
    """One caller (gateway and client) is over its rate limit: it may come back after ``retry_after_s`` seconds
    (the edges send it as ``Retry-After``)."""

    def __init__(self, message: str, *, retry_after_s: int) -> None:
        super().__init__(message)
        self.retry_after_s = retry_after_s


class BackpressureError(LakeSyncError):
    """The buffer is over its limit until a flush releases it."""

    code = "BACKPRESSURE"
    api_code = "BACKPRESSURE_ERROR"
    status = 503


class GatewayRestoringError(BackpressureError):
    """The gateway's buffer is being rebuilt from the lake (``lakesync restore``); retrying later succeeds."""

    code = "RESTORING"


class AdapterError(LakeSyncError):
    """An external system behind an adapter failed."""

    code = "ADAPTER_ERROR"
    api_code = "ADAPTER_ERROR"
    status = 502


class DestinationError(AdapterError):
    """A materialisation destination (a query database) refused or failed a write; nothing of it was committed.

    Attributes:
        retryable: Whether trying again later may succeed (connection lost, deadlock, serialization failure).
    """

    code = "DESTINATION_ERROR"

    def __init__(self, message: str, *, retryable: bool = True) -> None:
        super().__init__(message)
        self.retryable = retryable


class FlushError(LakeSyncError):
    """A flush could not be requested or run."""

    code = "FLUSH_ERROR"
    api_code = "FLUSH_ERROR"
    status = 500


class FlushBusyError(FlushError):
    """Another flush run holds the lease: this one did nothing and may try again once it is free."""


class StorageError(LakeSyncError):
    """The storage layer failed unexpectedly."""

    code = "STORAGE_ERROR"


class CommitConflictError(StorageError):
    """An optimistic commit lost every retry to concurrent writers."""

    code = "COMMIT_CONFLICT"
    status = 503


class StorageBusyError(StorageError):
    """The store throttled a request (capacity exceeded); retrying later may succeed."""

    code = "STORAGE_BUSY"
    status = 503


class ActionError(LakeSyncError):
    """An action failed; reported as an error result, not an HTTP error."""

    code = "ACTION_ERROR"
    retryable: bool = False


class ActionNotSupportedError(ActionError):
    """No handler for the connector, or the handler does not support the action type."""

    code = "ACTION_NOT_SUPPORTED"


class ActionForbiddenError(ActionError):
    """The connector's action policy does not let the caller run this action (it was not run)."""

    code = "ACTION_FORBIDDEN"


class ActionExecutionError(ActionError):
    """A handler failed to execute an action."""

    code = "ACTION_EXECUTION_ERROR"

    def __init__(self, message: str, *, retryable: bool = False) -> None:
        super().__init__(message)
        self.retryable = retryable
