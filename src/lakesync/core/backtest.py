"""A rules backtest: what a candidate rules version would change for each client, judged on the current rows
(docs/streams.md, "Backtest a rules change").

For each :class:`ClaimSet` (a client's claims and subscriptions), the caller resolves its scope under the rules in
force and under the candidate with the one evaluation (:func:`lakesync.core.scope.resolve_scope`), then shows every
live row to a :class:`Backtest`. A row *enters* when the candidate's scope covers it and the current one does not,
and *leaves* in the opposite case: exactly what the pull serves a caught-up client as the difference of its scope
once the candidate is saved (:class:`lakesync.gateway.scope_change.ScopeView`). The report counts both by table,
keeps a few sample rows of each, adds up the bytes the client would be sent, and names the candidate's filters that
hold for no row, or for every row, of their tables under every claim set.
"""

from __future__ import annotations

import hashlib
import json
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any, Final

from lakesync.core.claims import ClaimValue
from lakesync.core.errors import ValidationError
from lakesync.core.filters import Condition, Filter, Row
from lakesync.core.rules import SyncRules
from lakesync.core.scope import Scope
from lakesync.core.streams import Subscription

__all__ = [
    "DEFAULT_SAMPLE",
    "MAX_CLAIM_SETS",
    "MAX_SAMPLE",
    "Backtest",
    "BacktestInputError",
    "ClaimSet",
    "ClaimSetResult",
    "Comparison",
    "FilterResult",
    "parse_claim_sets",
    "render_text",
    "rules_digest",
]

DEFAULT_SAMPLE: Final = 5
"""Sample rows kept per claim set, table and direction unless asked otherwise."""
MAX_SAMPLE: Final = 100
"""Most sample rows one may ask for."""
MAX_CLAIM_SETS: Final = 1_000
"""Most claim sets one backtest judges (each row is judged once per claim set)."""


class BacktestInputError(ValidationError):
    """400: the claim sets or the options of a backtest are malformed."""

    code = "INVALID_BACKTEST"


@dataclass(frozen=True, slots=True)
class ClaimSet:
    """Whom to judge the change for: a client's ``claims``, its id (the drops it would be sent carry it) and its
    ``subscriptions`` (``None``: those the gateway keeps for it); ``origin`` says where the claims came from."""

    client: str
    claims: Mapping[str, ClaimValue] = field(hash=False)
    subscriptions: tuple[Subscription, ...] | None = None
    origin: str = "given"

    def to_json(self) -> dict[str, Any]:
        """``{"client", "claims", "origin"}``."""
        claims = {k: v if isinstance(v, str) else list(v) for k, v in sorted(self.claims.items())}
        return {"client": self.client, "claims": claims, "origin": self.origin}


def _claim_value(value: object, where: str) -> ClaimValue:
    if isinstance(value, str):
        return value
    if isinstance(value, list) and all(isinstance(v, str) for v in value):
        return tuple(value)
    raise BacktestInputError(f"{where} must be a string or an array of strings")


def _subscriptions(raw: object, where: str) -> tuple[Subscription, ...]:
    if not isinstance(raw, list):
        raise BacktestInputError(f"{where} subscriptions must be an array")
    out: list[Subscription] = []
    for k, doc in enumerate(raw):
        at = f"{where} subscription at index {k}"
        if not isinstance(doc, dict) or not isinstance(doc.get("stream"), str) or not doc["stream"]:
            raise BacktestInputError(f"{at} must be an object with a stream")
        params = doc.get("params", {})
        if not isinstance(params, dict) or not all(isinstance(v, str) for v in params.values()):
            raise BacktestInputError(f"{at} params must map names to strings")
        out.append(Subscription(doc["stream"], tuple(sorted(params.items()))))
    return tuple(out)


def parse_claim_sets(doc: object) -> list[ClaimSet]:
    """Claim sets given as ``[{"claims": {...}, "client"?, "subscriptions"?: [{"stream", "params"}]}]``; the client
    defaults to the ``sub`` claim, the subscriptions to those the gateway keeps for the client.

    Raises:
        BacktestInputError: not such a list, or more than :data:`MAX_CLAIM_SETS` entries.
    """
    if not isinstance(doc, list):
        raise BacktestInputError("claimSets must be an array")
    if len(doc) > MAX_CLAIM_SETS:
        raise BacktestInputError(f"At most {MAX_CLAIM_SETS} claim sets can be judged at once")
    out: list[ClaimSet] = []
    for i, raw in enumerate(doc):
        where = f"Claim set at index {i}"
        if not isinstance(raw, dict) or not isinstance(raw.get("claims"), dict):
            raise BacktestInputError(f"{where} must be an object with claims")
        claims = {str(k): _claim_value(v, f"{where} claim {k!r}") for k, v in raw["claims"].items()}
        client = raw.get("client", claims.get("sub"))
        if not isinstance(client, str) or not client:
            raise BacktestInputError(f"{where} must name its client (client, or a sub claim)")
        claims.setdefault("sub", client)
        held = _subscriptions(raw["subscriptions"], where) if "subscriptions" in raw else None  # null is refused
        out.append(ClaimSet(client, claims, held))
    return out


def rules_digest(rules: SyncRules | None) -> str:
    """A short digest of a rules document's canonical JSON (``""``: no rules), naming a version exactly."""
    if rules is None:
        return ""
    text = json.dumps(rules.to_json(), sort_keys=True, separators=(",", ":"), ensure_ascii=True)
    return hashlib.sha256(text.encode("ascii")).hexdigest()[:16]


@dataclass(frozen=True, slots=True)
class Comparison:
    """One claim set's scope under the rules in force (``old``) and under the candidate (``new``)."""

    claim_set: ClaimSet
    old: Scope
    new: Scope

    def judge(self, table: str, values: Row | None) -> str | None:
        """``"enter"``, ``"leave"`` or ``None`` (unchanged) for a row of ``table`` (``values`` ``None``: deleted)."""
        if values is None:
            return None
        before, after = self.old.covers(table, values), self.new.covers(table, values)
        if after == before:
            return None
        return "enter" if after else "leave"


@dataclass
class _Moves:
    """Rows entering or leaving one claim set's scope in one table."""

    rows: int = 0
    bytes: int = 0
    sample: list[dict[str, Any]] = field(default_factory=list)


@dataclass
class ClaimSetResult:
    """What the change does to one claim set: rows and bytes entering and leaving, by table."""

    comparison: Comparison
    entering: dict[str, _Moves] = field(default_factory=dict)
    leaving: dict[str, _Moves] = field(default_factory=dict)

    def add(self, verdict: str, table: str, row_id: str, values: Row, size: int, sample: int) -> None:
        """Count a row that enters (``verdict`` ``"enter"``) or leaves, of ``size`` bytes as sent."""
        moves = (self.entering if verdict == "enter" else self.leaving).setdefault(table, _Moves())
        moves.rows += 1
        moves.bytes += size
        if len(moves.sample) < sample:
            moves.sample.append({"rowId": row_id, "values": dict(values)})

    @property
    def bytes(self) -> int:
        """The bytes of the difference the client would be sent: entering rows' deltas and leaving rows' drops."""
        return sum(m.bytes for m in (*self.entering.values(), *self.leaving.values()))

    def to_json(self) -> dict[str, Any]:
        """The claim set's part of the report."""
        new = self.comparison.new
        return {
            **self.comparison.claim_set.to_json(),
            "subscriptions": [s.to_json() for s in new.subscriptions],
            "refusedSubscriptions": [{**s.to_json(), "code": r.code, "reason": r.reason} for s, r in new.refused],
            "scopeChanged": self.comparison.old.fingerprint != new.fingerprint,
            "entering": _moves_json(self.entering),
            "leaving": _moves_json(self.leaving),
            "bytes": self.bytes,
        }


def _moves_json(moves: Mapping[str, _Moves]) -> dict[str, Any]:
    return {t: {"rows": m.rows, "bytes": m.bytes, "sample": m.sample} for t, m in sorted(moves.items())}


@dataclass
class FilterResult:
    """How often one filter of the candidate held: over every (claim set, row of its tables) it was judged on."""

    origin: str
    index: int
    filter: Filter
    judged: int = 0
    held: int = 0

    @property
    def verdict(self) -> str | None:
        """``"nothing"`` (held for no row), ``"everything"`` (for every row) or ``None``."""
        if not self.judged:
            return None
        if not self.held:
            return "nothing"
        return "everything" if self.held == self.judged else None

    def to_json(self) -> dict[str, Any]:
        """``{"origin", "index", "filter", "judged", "held", "matches"}``."""
        return {
            "origin": self.origin,
            "index": self.index,
            "filter": self.filter.to_json(),
            "judged": self.judged,
            "held": self.held,
            "matches": self.verdict,
        }


def _filter_conditions(rules: SyncRules, scope: Scope) -> list[tuple[str, tuple[Filter, ...], Condition]]:
    """Each bucket and subscription of ``scope`` as (origin, its filters, its resolved condition): the scope's grants
    are its buckets in order, then its accepted subscriptions in order."""
    out: list[tuple[str, tuple[Filter, ...], Condition]] = []
    for bucket, grant in zip(rules.buckets, scope.grants, strict=False):
        out.append((f'Bucket "{bucket.name}"', bucket.filters, grant.condition))
    for sub, grant in zip(scope.subscriptions, scope.grants[len(rules.buckets) :], strict=False):
        stream = rules.stream(sub.stream)
        if stream is not None:
            out.append((f'Stream "{stream.name}"', stream.filters, grant.condition))
    return out


class Backtest:
    """The report being built: shown every live row once (:meth:`observe`), it judges it for every claim set.

    Args:
        current: The rules in force (``None``: none stored).
        candidate: The candidate rules.
        comparisons: Each claim set's two scopes.
        drop_bytes: The bytes of the drop a client is sent for a row leaving its scope (table, row id, client id).
        sample: Sample rows kept per claim set, table and direction.
    """

    def __init__(
        self,
        current: SyncRules | None,
        candidate: SyncRules,
        comparisons: Sequence[Comparison],
        drop_bytes: Callable[[str, str, str], int],
        sample: int = DEFAULT_SAMPLE,
    ) -> None:
        self._current = current
        self._candidate = candidate
        self._results = [ClaimSetResult(c) for c in comparisons]
        self._drop_bytes = drop_bytes
        self._sample = sample
        self._filters: dict[tuple[str, int], FilterResult] = {}
        self._conditions = [_filter_conditions(candidate, c.new) for c in comparisons]
        self.rows_read: dict[str, int] = {}

    @property
    def results(self) -> list[ClaimSetResult]:
        """Each claim set's result, in the order given."""
        return self._results

    def observe(self, table: str, row_id: str, values: Row | None, size: int) -> None:
        """Judge one row of the current state (``values`` ``None``: deleted) whose state is ``size`` bytes as a
        difference sends it."""
        if values is None:
            return
        self.rows_read[table] = self.rows_read.get(table, 0) + 1
        for result, conditions in zip(self._results, self._conditions, strict=True):
            verdict = result.comparison.judge(table, values)
            if verdict == "enter":
                result.add(verdict, table, row_id, values, size, self._sample)
            elif verdict == "leave":
                client = result.comparison.claim_set.client
                result.add(verdict, table, row_id, values, self._drop_bytes(table, row_id, client), self._sample)
            for origin, filters, condition in conditions:
                if condition.covers_table(table):
                    self._tally(origin, filters, condition, values)

    def _tally(self, origin: str, filters: tuple[Filter, ...], condition: Condition, values: Row) -> None:
        for index, (flt, clause) in enumerate(zip(filters, condition.clauses, strict=False)):
            tally = self._filters.get((origin, index))
            if tally is None:
                tally = self._filters[(origin, index)] = FilterResult(origin, index, flt)
            tally.judged += 1
            tally.held += clause.holds(values)

    def to_json(self, against: Mapping[str, Any]) -> dict[str, Any]:
        """The report: ``against`` (the rules version compared with and where the rows were read), the candidate's
        version, each claim set's result, the totals by table and the filters that match nothing or everything."""
        totals: dict[str, dict[str, int]] = {}
        for result in self._results:
            for key, moves in (("entering", result.entering), ("leaving", result.leaving)):
                for table, m in moves.items():
                    entry = totals.setdefault(table, {"entering": 0, "leaving": 0, "bytes": 0})
                    entry[key] += m.rows
                    entry["bytes"] += m.bytes
        filters = sorted(self._filters.values(), key=lambda f: (f.origin, f.index))
        return {
            "against": {"version": _version(self._current), "digest": rules_digest(self._current), **against},
            "candidate": {"version": self._candidate.version, "digest": rules_digest(self._candidate)},
            "rowsRead": dict(sorted(self.rows_read.items())),
            "claimSets": [r.to_json() for r in self._results],
            "tables": dict(sorted(totals.items())),
            "filters": [f.to_json() for f in filters if f.verdict is not None],
            "readOnly": True,
        }


def _version(rules: SyncRules | None) -> int | None:
    return rules.version if rules is not None else None


def _moves_text(label: str, moves: Mapping[str, Any]) -> list[str]:
    lines = []
    for table, m in moves.items():
        lines.append(f"    {label} {table}: {m['rows']} rows, {m['bytes']} bytes")
        lines.extend(f"      {s['rowId']}: {json.dumps(s['values'], sort_keys=True)}" for s in m["sample"])
    return lines


def render_text(report: Mapping[str, Any]) -> str:
    """A report of :meth:`Backtest.to_json` for people."""
    against, candidate = report["against"], report["candidate"]
    lines = [
        f"compared against rules version {against['version']} ({against['digest'] or 'none stored'}); "
        f"candidate version {candidate['version']} ({candidate['digest']})",
        f"rows read from {against['source']}: "
        + (", ".join(f"{t} {n}" for t, n in report["rowsRead"].items()) or "none"),
    ]
    for cs in report["claimSets"]:
        head = f"  {cs['client']} ({cs['origin']}) {json.dumps(cs['claims'], sort_keys=True)}"
        if not cs["scopeChanged"]:
            lines.append(f"{head}: scope unchanged")
            continue
        lines.append(f"{head}: {cs['bytes']} bytes to send")
        lines.extend(_moves_text("enter", cs["entering"]))
        lines.extend(_moves_text("leave", cs["leaving"]))
        refused = cs["refusedSubscriptions"]
        lines.extend(f"    subscription refused: {r['stream']} {r['code']}: {r['reason']}" for r in refused)
    for f in report["filters"]:
        lines.append(
            f"  filter {f['index']} of {f['origin']} {json.dumps(f['filter'], sort_keys=True)} matches {f['matches']}"
            f" ({f['held']} of {f['judged']} judged rows)"
        )
    return "\n".join(lines)
