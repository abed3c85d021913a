"""Adapter composition: Composite, FanOut, Lifecycle and ``migrate`` (see docs/adapters.md).

Each composed destination is a :class:`~lakesync.ports.Destination` (usable wherever one is: the materialise
consumer, :class:`~lakesync.aws.destinations.ConfiguredDestinations`' ``extra``/``connect``), and
:class:`CompositeSource` is a :class:`~lakesync.ports.SourceAdapter`. Moving rows between destinations needs their
per-column LWW states: :mod:`lakesync.adapters.state`.
"""

from __future__ import annotations

from lakesync.adapters.composite import CompositeDestination, CompositeSource
from lakesync.adapters.fanout import FanOutDestination, SecondaryStatus
from lakesync.adapters.lifecycle import LifecycleDestination, SweepStats
from lakesync.adapters.migrate import (
    MigrateCheckpoint,
    MigrateError,
    MigrateProgress,
    MigrateResult,
    migrate,
    migrate_source,
    migrate_sql,
)
from lakesync.adapters.state import (
    SqlStateDestination,
    StatefulDestination,
    StatePage,
    StateReader,
    last_change,
    state_deltas,
)

__all__ = [
    "CompositeDestination",
    "CompositeSource",
    "FanOutDestination",
    "LifecycleDestination",
    "MigrateCheckpoint",
    "MigrateError",
    "MigrateProgress",
    "MigrateResult",
    "SecondaryStatus",
    "SqlStateDestination",
    "StatePage",
    "StateReader",
    "StatefulDestination",
    "SweepStats",
    "last_change",
    "migrate",
    "migrate_source",
    "migrate_sql",
    "state_deltas",
]
