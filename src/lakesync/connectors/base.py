"""The ports of a connector: what an external system offers LakeSync, whatever it is (a database, Jira, Salesforce).

A connector type (``postgres``, ``mysql``, ``jira``, ...) turns a validated config
(:class:`lakesync.core.connectors.ConnectorConfig`, secrets already resolved) into a :class:`Connector`: some of an
:class:`IngestSource` (polled on a schedule), a :class:`~lakesync.ports.SourceAdapter` (``?source=`` pulls) and an
:class:`~lakesync.core.actions.ActionHandler` (actions).

**Polling is exactly-once by construction.** A poll reads the changes after a stored :class:`Position` and returns
them with the position after them. The poller turns each :class:`ChangedRow` into a delta whose deltaId is derived
from the connector, the row and its ``version`` (never from the wall clock), pushes them through the push service
under the connector's identity, and only then stores the new position with a condition on the old one. A crash
between the push and the store polls the same rows again: the same deltaIds, which the gateway's dedup answers as
duplicates. Two pollers racing on one connector: the loser's position write fails its condition and it stops.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from typing import Protocol

from lakesync.core.actions import ActionHandler
from lakesync.core.canonical import JsonValue
from lakesync.ports import SourceAdapter

__all__ = ["ChangedRow", "Connector", "ConnectorTypeDescriptor", "IngestSource", "PollBatch", "Position"]

Position = Mapping[str, JsonValue]
"""Where a poll resumes: an opaque JSON object the source defines (a cursor value per table, a page token, the
hashes of a diff). ``{}`` is the beginning."""


@dataclass(frozen=True, slots=True)
class ChangedRow:
    """One row as the source has it now.

    Attributes:
        table: The LakeSync table the row syncs to.
        row_id: The row's id in that table.
        values: The row's columns (JSON values), or ``None`` when the row was deleted at the source.
        version: What identifies this state of the row at the source (an ``updated`` timestamp, a row version, a
            content hash): the same row in the same state always has the same version, so a re-poll re-sends the
            same delta.
        origin: Provenance kept with the change (e.g. the source's cursor value, the issue key, the record URL).
    """

    table: str
    row_id: str
    values: Mapping[str, JsonValue] | None
    version: str
    origin: Mapping[str, JsonValue] = field(default_factory=dict)


@dataclass(frozen=True, slots=True)
class PollBatch:
    """What one poll found: the changed rows, in the order to apply them, and the position after them.

    ``more`` says the source has more right away (the poller polls again before it sleeps).
    """

    rows: Sequence[ChangedRow]
    position: Position
    more: bool = False


class IngestSource(Protocol):
    """An external system the poller reads changes from."""

    @property
    def name(self) -> str:
        """The connector's name."""
        ...

    def poll(self, position: Position, limit: int) -> PollBatch:
        """The changes after ``position``, at most about ``limit`` rows.

        Raises:
            AdapterError: the source is unreachable or refused (the poll is retried later; nothing is stored).
        """
        ...

    def close(self) -> None:
        """Release connections."""
        ...


@dataclass(frozen=True, slots=True)
class ConnectorTypeDescriptor:
    """A connector type as ``GET /v1/connectors/types`` lists it (reference §12.2)."""

    type: str
    display_name: str
    description: str
    category: str
    config_schema: Mapping[str, JsonValue]
    ingest_schema: Mapping[str, JsonValue]
    output_tables: Sequence[Mapping[str, JsonValue]] = ()
    secret_fields: Sequence[str] = ()
    """The fields of the type's settings object (``config[type]``) that hold credentials: registration stores them in
    the secret store and keeps only a ``secret://`` reference (:mod:`lakesync.connectors.secrets`)."""

    def to_json(self) -> dict[str, JsonValue]:
        """The wire JSON shape."""
        return {
            "type": self.type,
            "displayName": self.display_name,
            "description": self.description,
            "category": self.category,
            "configSchema": dict(self.config_schema),
            "ingestSchema": dict(self.ingest_schema),
            "outputTables": [dict(t) for t in self.output_tables],
            "secretFields": list(self.secret_fields),
        }


@dataclass(slots=True)
class Connector:
    """What one configured connector offers; any part may be absent."""

    name: str
    ingest: IngestSource | None = None
    source: SourceAdapter | None = None
    actions: ActionHandler | None = None

    def close(self) -> None:
        """Release the parts' connections."""
        if self.ingest is not None:
            self.ingest.close()
        close = getattr(self.source, "close", None)
        if close is not None and close is not getattr(self.ingest, "close", None):
            close()
