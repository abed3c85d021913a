"""How the functions' log lines read in the terminal of the embedded default.

Deployed, the functions write each record as one JSON object (Powertools' ``LambdaPowertoolsFormatter``), which
CloudWatch parses. ``lakesync local`` plays the Lambda runtime in a developer's terminal, so there the same records,
at the same levels (``POWERTOOLS_LOG_LEVEL``, WARNING by default), are written as ``LEVEL message (key=value ...)``,
as the CLI writes its own, with a traceback after an exception. The handlers log exactly as deployed: only the
formatter of the ``lakesync`` logger's handler differs, and it stays a Powertools formatter, so appended keys and
``clear_state`` work as before (they are not printed).
"""

from __future__ import annotations

import logging
from collections.abc import Callable

from aws_lambda_powertools.logging.formatter import LambdaPowertoolsFormatter

__all__ = ["TerminalFormatter", "readable_function_logs"]

_RECORD_KEYS = frozenset(vars(logging.makeLogRecord({}))) | {"message", "asctime", "taskName"}


class TerminalFormatter(LambdaPowertoolsFormatter):
    """One line a record: level, message and the record's ``extra`` keys; a traceback follows an exception."""

    def format(self, record: logging.LogRecord) -> str:
        line = f"{record.levelname} {record.getMessage()}"
        extras = " ".join(f"{key}={value}" for key, value in vars(record).items() if key not in _RECORD_KEYS)
        if extras:
            line = f"{line} ({extras})"
        if record.exc_info:
            line = f"{line}\n{self.formatException(record.exc_info)}"
        return line


def readable_function_logs() -> Callable[[], None]:
    """Write the functions' log records (the ``lakesync`` logger's) with :class:`TerminalFormatter` in this process.

    Returns:
        A function that puts the replaced formatter back.
    """
    from lakesync.aws.lambda_runtime import logger

    handler = logger.registered_handler
    previous = handler.formatter
    handler.setFormatter(TerminalFormatter())
    return lambda: handler.setFormatter(previous)
