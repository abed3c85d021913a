"""Shared fixtures for the whole suite."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest

VECTORS = Path(__file__).parent / "vectors"


def load_vectors(name: str) -> dict[str, Any]:
    """One vector file of tests/vectors as a dict."""
    with (VECTORS / name).open(encoding="utf-8") as f:
        data: dict[str, Any] = json.load(f)
    return data


@pytest.fixture
def vectors() -> Any:
    return load_vectors
