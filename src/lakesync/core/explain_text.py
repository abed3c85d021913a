"""An :class:`~lakesync.core.explanation.Explanation` in plain text, for a person on call."""

from __future__ import annotations

import json

from lakesync.core.canonical import JsonValue
from lakesync.core.explanation import Explanation, GrantCheck, ScopeVerdict, Storage, Write, iso_ms

__all__ = ["render"]


def _value(value: JsonValue) -> str:
    return json.dumps(value, ensure_ascii=False)


def _write(w: Write) -> str:
    flushed = f"flushed {iso_ms(w.flushed_ms)}" if w.flushed_ms is not None else "not flushed"
    return (
        f"{w.op} by {w.client_id} at HLC {w.hlc} (delta {w.delta_id[:12]}, {w.shard}#{w.seq}, "
        f"committed {iso_ms(w.committed_ms)}, {flushed})"
    )


def _grant(g: GrantCheck) -> list[str]:
    if not g.covers_table:
        return [f"    {g.origin}: does not cover the table"]
    lines = [f"    {g.origin}: {'matches' if g.matches else 'does not match'}"]
    for c in g.clauses:
        row = _value(c.row_value) if c.row_has_column else "(no such column)"
        verdict = "holds" if c.holds else "fails"
        lines.append(f"      {c.column} {c.op} {c.source} -> {list(c.values)}; row has {row}: {verdict}")
    return lines


def _scope(s: ScopeVerdict) -> list[str]:
    version = f"rules v{s.rules_version}" if s.rules_version is not None else "no rules version"
    head = "COVERED" if s.covered else "NOT COVERED"
    lines = [f"  [{s.label}] {head} ({version}, scope {s.fingerprint[:12]}, judged on {s.judged_on}): {s.reason}"]
    for g in s.grants:
        lines.extend(_grant(g))
    lines.extend(f"    refused: {r}" for r in s.refused)
    return lines


def _known(flag: bool | None, yes: str, no: str, unknown: str) -> str:
    return unknown if flag is None else yes if flag else no


def _storage(s: Storage) -> list[str]:
    unflushed = (
        f"{s.unflushed} delta(s) not yet flushed to the lake (oldest committed {iso_ms(s.unflushed_since_ms)})"
        if s.unflushed
        else "every delta is in the lake"
    )
    return [
        f"  {unflushed}",
        "  row index: " + _known(s.index_agrees, "agrees with the fold", "DIFFERS from the fold", "not checked"),
        "  lake state table: "
        + _known(s.lake_state_agrees, "agrees with the fold", "differs from the fold", "not read")
        + _known(s.lake_state_current_to_flush, " (current to the flushed deltas)", " (compaction behind)", ""),
        "  materialisation: "
        + _known(s.published, "last change published", "last change not published yet", "nothing to publish"),
    ]


def render(e: Explanation) -> str:
    """The explanation as lines of text."""
    state = "exists" if e.exists else "does not exist (deleted)" if e.tombstone else "does not exist"
    lines = [f"{e.table}:{e.row_id} on gateway {e.gateway}, for client {e.client_id}: the row {state}"]
    if e.values is not None:
        lines.append(f"  values: {_value(e.values)}")
    if e.at_ms is not None:
        lines.append(f"  values at {iso_ms(e.at_ms)}: {_value(e.values_at)}")
    lines.append("Scope:")
    for s in e.scopes:
        lines.extend(_scope(s))
    lines.append("Columns:")
    for c in e.columns:
        holder = _write(c.winner) if c.winner is not None else "no live value"
        lines.append(f"  {c.column} = {_value(c.value)}: {holder}")
        for lost in c.lost:
            to = "a delete" if lost.by_delete else "the write"
            lines.append(
                f"    lost: {_value(lost.value)} by {lost.write.client_id} at HLC {lost.write.hlc}"
                f" -> {to} of {lost.to_client_id} at HLC {lost.to_hlc}"
            )
    if e.deletes:
        lines.append("Deletes:")
        lines.extend(f"  {_write(d)}{' (the tombstone)' if d == e.tombstone else ''}" for d in e.deletes)
    lines.append(f"History ({len(e.history)} committed deltas{'' if e.history_complete else ', incomplete'}):")
    lines.extend(f"  {_write(w)}" for w in e.history)
    d = e.delivery
    lines.append(f"Delivery: {d.reason}")
    if d.last_visible is not None:
        lines.append(f"  latest change in its scope: {_write(d.last_visible)} ({d.visible_changes} in all)")
    lines.append("Storage:")
    lines.extend(_storage(e.storage))
    lines.extend(f"Note: {n}" for n in e.notes)
    return "\n".join(lines)
