"""The push: the outbox sent in batches, each delta taken out once the gateway answered it.

A refused batch (400, 413, 422) is sent again one delta at a time, so that only the refused ones are moved to
``_lakesync_rejected``. A delta the gateway's write rules rejected (a receipt with ``"rejected": true``) is recorded
and its row rolled back to the gateway's state (:mod:`lakesync.client.rejections`) in the same transaction that takes
it out of the outbox, so an interruption never leaves a rejected write in place, records it twice, or sends it again.
Column writes that lost are reported as :class:`~lakesync.client.model.Conflict`.
"""

from __future__ import annotations

import json
import logging
import time
from collections.abc import Mapping, Sequence
from typing import Any

from lakesync.client.answers import push_answer, receive_hlc, unreadable_answer
from lakesync.client.http import ApiError, SyncClient
from lakesync.client.model import Conflict, Rejected, SyncReport
from lakesync.client.outbox import Ack, PushPlan, plan_push
from lakesync.client.rejections import REJECTED_STATUS, accepted_after, last_by_row, rejections, rolled_back
from lakesync.client.storage import Storage

logger = logging.getLogger(__name__)

REJECT_STATUS = frozenset({400, 413, 422})
"""Answers that refuse a push for good (validation, size, schema)."""


class Pusher:
    """Sends the outbox and settles the answers (see the module docstring)."""

    def __init__(self, storage: Storage, http: SyncClient) -> None:
        self._db, self._states, self._outbox, self._clock = storage.db, storage.states, storage.outbox, storage.clock
        self._http = http

    def push(self, report: SyncReport, *, batch: int) -> None:
        """Push the whole outbox, at most ``batch`` deltas a request."""
        try:
            self._push_all(report, batch)
        finally:
            with self._db.lock:
                self._outbox.forget_wires()

    def _push_all(self, report: SyncReport, batch: int) -> None:
        while True:
            with self._db.lock:
                self._db.check_open()
                plan = plan_push(self._outbox.entries(batch), limit=batch)
            if not plan.deltas:
                return
            try:
                with unreadable_answer("push"):
                    answer = self._http.push_wire(plan.deltas, self._clock.now())
            except ApiError as exc:
                if exc.status not in REJECT_STATUS:
                    raise
                self._push_singly(plan, report)
                continue
            accepted, receipts = push_answer(answer, plan.deltas)
            receive_hlc(self._clock, answer.get("serverHlc"))
            collect_conflicts(plan.deltas, receipts, report)
            report.pushed += accepted
            self._settle(plan.acks, plan.deltas, receipts, report)

    def ack(self, acks: Sequence[Ack]) -> None:
        """Drop acknowledged deltas from the outbox (only after the gateway's answer; a crash before this re-sends
        them, harmlessly)."""
        with self._db.tx():
            self._advance(acks)

    def _advance(self, acks: Sequence[Ack]) -> None:
        """:meth:`ack`'s writes, inside a transaction."""
        self._outbox.take_out(acks)
        self._db.save_clock(self._clock)

    def _push_singly(self, plan: PushPlan, report: SyncReport) -> None:
        """A push was refused for good: send its deltas one by one; each is taken out of the outbox once answered, a
        refused one moved to ``_lakesync_rejected`` in the same transaction (so an interruption never records it
        twice, nor sends it again)."""
        for index, wire in enumerate(plan.deltas):
            try:
                with unreadable_answer("push"):
                    answer = self._http.push_wire([wire], self._clock.now())
            except ApiError as exc:
                if exc.status not in REJECT_STATUS:
                    raise
                doc = json.loads(wire)
                report.rejected.append(Rejected(doc["deltaId"], doc["table"], doc["rowId"], exc.status, str(exc)))
                with self._db.tx():
                    self._outbox.reject([(doc["deltaId"], wire, exc.status, str(exc), int(time.time() * 1000))])
                    self._advance(plan.acks_of_first(index + 1))
                logger.warning("the gateway refused local delta %s: %s", doc["deltaId"], exc)
                continue
            accepted, receipts = push_answer(answer, [wire])
            collect_conflicts([wire], receipts, report)
            report.pushed += accepted
            self._settle(plan.acks_of_first(index + 1), [wire], receipts, report)

    def _settle(
        self,
        acks: Sequence[Ack],
        wires: Sequence[str],
        receipts: Sequence[Mapping[str, Any]],
        report: SyncReport,
    ) -> None:
        """Drop the answered deltas from the outbox; in the same transaction, record the ones the write rules
        rejected in ``_lakesync_rejected`` and roll their rows back to the gateway's state
        (:mod:`lakesync.client.rejections`), so an interruption never leaves a rejected write in place."""
        found = rejections(wires, receipts)
        if not found:
            self.ack(acks)
            return
        last = last_by_row(found)
        later = accepted_after(last, wires, receipts)
        at_ms = int(time.time() * 1000)
        with self._db.tx():
            self._advance(acks)
            self._outbox.reject([(r.delta_id, r.wire, REJECTED_STATUS, r.error, at_ms) for r in found])
            pending = self._outbox.pending_deltas(set(last))
            for key, rejection in last.items():
                self._states.put(rolled_back(key[0], key[1], rejection.row, [*later[key], *pending.get(key, ())]))
                report.changed.setdefault(key[0], set()).add(key[1])
        for r in found:
            report.rejected.append(Rejected(r.delta_id, r.table, r.row_id, REJECTED_STATUS, r.error, r.code))
            logger.warning("the gateway's write rules rejected local delta %s: %s", r.delta_id, r.error)

    def resolve_conflicts(self, report: SyncReport) -> None:
        """Fill in each conflict's winning value from the state (the pull after the push delivered it)."""
        if not report.conflicts:
            return
        resolved = []
        with self._db.lock:
            for conflict in report.conflicts:
                state = self._states.get(conflict.table, conflict.row_id)
                column = None if state is None else state.columns.get(conflict.column)
                won = column is not None and (column.hlc, column.client_id) == (
                    conflict.winner_hlc,
                    conflict.winner_client_id,
                )
                deleted = conflict.deleted or (state is not None and not state.exists)
                resolved.append(
                    Conflict(
                        **{
                            **{f: getattr(conflict, f) for f in conflict.__dataclass_fields__},
                            "winner_value": column.value if won and column is not None else None,
                            "deleted": deleted,
                        }
                    )
                )
        report.conflicts[:] = resolved


def collect_conflicts(wires: Sequence[str], receipts: Sequence[Mapping[str, Any]], report: SyncReport) -> None:
    """Count the duplicates among ``receipts`` and report each local column write that lost (its winning value is
    filled in after the pull, :meth:`Pusher.resolve_conflicts`)."""
    lost = [r for r in receipts if not r.get("duplicate") and any(not c.get("applied") for c in r.get("columns", ()))]
    report.duplicates += sum(1 for r in receipts if r.get("duplicate"))
    if not lost:
        return
    by_id = {}
    for wire in wires:
        doc = json.loads(wire)
        by_id[doc["deltaId"]] = doc
    for receipt in lost:
        doc = by_id.get(receipt.get("deltaId", ""))
        if doc is None:
            continue
        values = {c["column"]: c["value"] for c in doc["columns"]}
        for col in receipt["columns"]:
            if col.get("applied"):
                continue
            report.conflicts.append(
                Conflict(
                    table=doc["table"],
                    row_id=doc["rowId"],
                    column=col["column"],
                    local_value=values.get(col["column"]),
                    local_hlc=int(doc["hlc"]),
                    winner_hlc=int(col["winnerHlc"]),
                    winner_client_id=str(col["winnerClientId"]),
                    deleted=bool(receipt.get("deleted")),
                )
            )
