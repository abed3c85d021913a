"""The claims of a verified token, as the rules read them."""

from __future__ import annotations

from collections.abc import Mapping, Sequence

__all__ = ["ClaimValue", "Claims"]

ClaimValue = str | tuple[str, ...]
"""A custom-claim value of a verified token: a string or an array of strings."""

Claims = Mapping[str, str | Sequence[str]]
"""Resolved JWT claims: each a string or a list of strings."""
