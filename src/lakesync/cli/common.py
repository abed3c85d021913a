"""What the ``lakesync`` subcommands share."""

from __future__ import annotations

from pathlib import Path

DEFAULT_DATA_DIR = Path(".lakesync")
"""Where ``lakesync local`` keeps its state, and where the other commands look for it."""
