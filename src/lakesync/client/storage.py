"""The parts of the store's file that the sync steps and the local writes share."""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass

from lakesync.client.base import BaseRecords
from lakesync.client.database import Database
from lakesync.client.outbox import Outbox
from lakesync.client.states import RowStates
from lakesync.client.tables import LocalTable
from lakesync.core.hlc import HLC


@dataclass(frozen=True, slots=True)
class Storage:
    """One store's file: the database, the row states and base records in it, the outbox, the persisted clock, and
    the user tables by name."""

    db: Database
    states: RowStates
    base: BaseRecords
    outbox: Outbox
    clock: HLC
    tables: Mapping[str, LocalTable]
