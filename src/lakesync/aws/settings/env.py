"""One reader of the functions' ``LAKESYNC_*`` variables: typed values, with the problems collected.

:class:`Env` keeps the non-empty ``LAKESYNC_*`` variables of an environment (an empty one counts as unset) and reads
them as text, integers in a range, flags, JSON objects, bucket names or names matching a pattern. A problem does not
stop the reading: it is recorded in :attr:`Env.errors`, naming the variable, so that the settings
(:mod:`lakesync.aws.settings`) can report every one at once, in one :class:`SettingsError` (:meth:`Env.check`).
"""

from __future__ import annotations

import json
import re
from collections.abc import Mapping
from typing import Any

_BUCKET_NAME = re.compile(r"[a-z0-9][a-z0-9.-]{1,61}[a-z0-9]")


def flag_problem(var: str, raw: str, note: str = "") -> str | None:
    """The problem with ``raw`` as the flag ``var`` (``true`` or ``false``, any case), or ``None``."""
    if raw.strip().lower() in ("true", "false"):
        return None
    return f"{var} must be true or false" + (f" ({note})" if note else "")


class SettingsError(ValueError):
    """The environment does not describe a usable configuration."""


class Env:
    """The ``LAKESYNC_*`` variables of ``environ`` being read, with the problems found so far."""

    def __init__(self, environ: Mapping[str, str], prefix: str = "LAKESYNC_") -> None:
        self.values: dict[str, str] = {k: v for k, v in environ.items() if k.startswith(prefix) and v.strip()}
        self.errors: list[str] = []

    def __contains__(self, var: str) -> bool:
        return var in self.values

    def problem(self, message: str) -> None:
        """Record a problem."""
        self.errors.append(message)

    def check(self) -> None:
        """Raise every problem recorded, in order, in one :class:`SettingsError`."""
        if self.errors:
            raise SettingsError("Invalid LakeSync configuration: " + "; ".join(self.errors))

    def raw(self, var: str) -> str | None:
        """The value as set (not stripped), or ``None`` when unset."""
        return self.values.get(var)

    def text(self, var: str, default: str = "") -> str:
        """The value stripped, or ``default`` when unset."""
        return self.values.get(var, default).strip()

    def optional(self, var: str) -> str | None:
        """The value stripped, or ``None`` when unset."""
        return self.text(var) or None

    def required(self, var: str, alternative: str = "") -> str:
        """The value stripped; ``missing {var}`` (naming an ``alternative`` variable) when unset."""
        value = self.text(var)
        if not value:
            self.problem(f"missing {var}" + (f" (or {alternative})" if alternative else ""))
        return value

    def name(self, var: str, pattern: re.Pattern[str], what: str, default: str = "") -> str:
        """The value stripped (or ``default``); ``{var} {value!r} is not {what}`` unless empty or matching."""
        value = self.text(var, default)
        if value and not pattern.fullmatch(value):
            self.problem(f"{var} {value!r} is not {what}")
        return value

    def flag(self, var: str, default: str = "", note: str = "") -> bool:
        """``true`` or ``false`` (any case); anything else, or unset without a ``default``, is a problem (false)."""
        raw = self.values.get(var, default)
        problem = flag_problem(var, raw, note)
        if problem is not None:
            self.problem(problem)
        return raw.strip().lower() == "true"

    def optional_integer(self, var: str, minimum: int) -> int | None:
        """The value as a decimal integer of at least ``minimum``, or ``None`` when unset or invalid."""
        raw = self.values.get(var)
        if raw is None:
            return None
        text = raw.strip()
        if not (text.isascii() and text.isdigit()) or int(text) < minimum:
            self.problem(f"{var} must be an integer >= {minimum}, got {raw!r}")
            return None
        return int(text)

    def integer(self, var: str, default: int, minimum: int, maximum: int | None = None, unit: str = "bytes") -> int:
        """The value as an integer in ``minimum..maximum`` (``unit`` names it in the message), else ``default``."""
        value = self.optional_integer(var, minimum)
        if value is not None and maximum is not None and value > maximum:
            self.problem(f"{var} must be at most {maximum:,} {unit}, got {value:,}")
            return default
        return default if value is None else value

    def json_object(self, var: str, shape: str) -> dict[str, Any] | None:
        """The value parsed as a JSON object (``shape`` shows one in the message), or ``None`` when unset or not."""
        raw = self.values.get(var)
        if raw is None:
            return None
        try:
            doc = json.loads(raw)
        except ValueError:
            doc = None
        if not isinstance(doc, dict):
            self.problem(f"{var} must be a JSON object {shape}, got {raw!r}")
            return None
        return doc

    def bucket(self, var: str) -> str | None:
        """An S3 bucket name (stripped), or ``None`` when unset."""
        raw = self.values.get(var)
        if raw is None:
            return None
        name = raw.strip()
        if not _BUCKET_NAME.fullmatch(name) or ".." in name:
            self.problem(f"{var} {raw!r} is not a valid S3 bucket name")
        return name
