"""What a failed AWS request says, read in one place. Loads no boto3 (only botocore's exceptions), so a module on a
handler's import path may use it: clients are made on first use (:mod:`lakesync.aws.clients`)."""

from __future__ import annotations

from botocore.exceptions import ClientError


def error_code(exc: BaseException) -> str:
    """The AWS error code of a failed request (``ConditionalCheckFailedException``...): ``"Unknown"`` for a refusal
    that names none, the exception's class name for a failure that is not a refusal (a timeout, a closed socket)."""
    if isinstance(exc, ClientError):
        return str(exc.response.get("Error", {}).get("Code") or "Unknown")
    return type(exc).__name__


def condition_failed(exc: BaseException) -> bool:
    """Whether a single-item write failed its condition (someone else's write got there first)."""
    return error_code(exc) == "ConditionalCheckFailedException"
