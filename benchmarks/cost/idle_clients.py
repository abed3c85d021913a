"""Connected idle clients with live updates: what N clients holding the real-time socket all month cost (no I/O).

What the SDK does (``lakesync.client.realtime``), and so what is priced: an idle client holds one WebSocket on API
Gateway and sends a ping every :data:`PING_INTERVAL_S` seconds, which keeps the 10-minute idle timeout away. API
Gateway ends every connection after two hours, so a minute before that (:data:`ROTATE_AFTER_S`) the client hands its
session over: it opens a new socket and reads the old one :data:`HANDOVER_S` seconds more before closing it. Every
broadcast reaches one of the two, so a handover asks for no pull; only a gap (a socket that ended without a
successor, an old one that ended during its handover) does. With no changes nothing is broadcast. What that bills:

* **connection minutes**, every minute of the month (the floor: $10.80 for 1,000 clients), and the handovers'
  overlap (two sockets for :data:`HANDOVER_S` seconds);
* **pings**: WebSocket control frames are answered by API Gateway itself, routed to no integration, and not counted
  as messages (CloudWatch's ``MessageCount`` counts messages sent to or from the client, which pings are not); the
  scenario keeps them at zero and records what they would cost if they were metered;
* **each handover**: the ``$connect`` request (counted as one message, as ``ConnectCount`` counts it) and its
  function (token check, one PutItem into the sessions table), and the access-log lines of the connect and of the
  disconnect. The WebSocket API has no ``$disconnect`` route: the old session's item expires about 50 s after its
  socket closed (its ``exp`` is two hours after it opened) and DynamoDB's TTL deletes it without a write charge;
  were there one, its function and DeleteItem would add :func:`disconnect_route` a month;
* **pulls after a gap** (:attr:`IdleClients.gap_ratio` of the handovers; none by default: an idle client's socket
  is assumed to drop only at the limit, which the handover comes before), each an HTTP API request, the pull function
  and its reads;
* **the sessions table**: the items stored (a few hundred bytes each) with point-in-time recovery.

Per change broadcast (not in the idle month) the broadcaster reads the gateway's sessions once (one Query of every
session item, eventually consistent) and sends one message per recipient: :func:`per_change` prices it.
"""

from __future__ import annotations

import math
from dataclasses import asdict, dataclass
from typing import Any

from benchmarks.cost.model import READ_UNIT_BYTES
from benchmarks.cost.prices import price

MAX_CONNECTION_S = 2 * 3600
"""API Gateway's maximum connection duration."""
ROTATE_AFTER_S = MAX_CONNECTION_S - 60
"""Seconds between the client's handovers (``lakesync.client.realtime.ROTATE_AFTER_S``)."""
HANDOVER_S = 10
"""Seconds two sockets are open at a handover (``lakesync.client.realtime.HANDOVER_S``)."""
PING_INTERVAL_S = 60
"""The client's ping interval (``lakesync.client.realtime.PING_INTERVAL``)."""
GOAL_USD_PER_1000 = 12.0
"""Issue 43's goal for 1,000 connected idle clients a month."""


@dataclass(frozen=True, slots=True)
class IdleClients:
    """The scenario's inputs.

    Attributes:
        clients: Clients connected all month.
        days: Days in the month.
        function_ms: Billed milliseconds of one ``$connect`` or idle pull invocation (the idle
            pull measured 28 ms at 1 GB on this machine: docs/cost.md).
        function_gb: Memory of those functions.
        pull_rru: Read units of the idle cursor pull after a reconnect (the config Query, the log Query, the head).
        session_item_bytes: Bytes of one session item (id, gateway, client, claims, encoding, expiry).
        log_bytes_per_invocation: CloudWatch Logs bytes per function invocation (the platform's START/END/REPORT
            lines and the function's one JSON line).
        access_log_bytes: Bytes of one API Gateway access-log line (a connect, a disconnect).
        gap_ratio: Handovers that found a gap and were followed by a pull.
    """

    clients: int = 1000
    days: float = 30.0
    function_ms: float = 28.0
    function_gb: float = 1.0
    pull_rru: float = 3.0
    session_item_bytes: int = 300
    log_bytes_per_invocation: int = 700
    access_log_bytes: int = 350
    gap_ratio: float = 0.0


def idle_month(inputs: IdleClients = IdleClients()) -> dict[str, Any]:
    """The month of ``inputs.clients`` idle clients: ``{"inputs", "lines": [...], "total_usd", "per_1000_usd",
    "goal_usd_per_1000", "goal_met", "pings_if_metered_usd"}``; each line has ``item``, ``quantity``, ``unit``,
    ``usd`` and ``note``."""
    n = inputs.clients
    minutes = inputs.days * 24 * 60
    reconnects = n * inputs.days * 86400 / ROTATE_AFTER_S
    pulls = reconnects * inputs.gap_ratio
    invocation_usd = price("lambda.request") + inputs.function_ms / 1000 * inputs.function_gb * price(
        "lambda.gb_s.arm64"
    )
    lines: list[dict[str, Any]] = []

    def line(item: str, quantity: float, unit: str, usd: float, note: str = "") -> None:
        lines.append({"item": item, "quantity": quantity, "unit": unit, "usd": usd, "note": note})

    line(
        "API Gateway connection minutes",
        n * minutes,
        "connection-minutes",
        n * minutes * price("apigw.ws.connection_minute"),
        "every minute of the month: the floor",
    )
    overlap = reconnects * HANDOVER_S / 60
    line(
        "handover overlap",
        overlap,
        "connection-minutes",
        overlap * price("apigw.ws.connection_minute"),
        f"two sockets for {HANDOVER_S} s at each handover",
    )
    pings = n * minutes * 60 / PING_INTERVAL_S
    line("pings (control frames)", pings, "pings", 0.0, "answered by API Gateway, not metered as messages")
    line(
        "$connect requests",
        reconnects,
        "messages",
        reconnects * price("apigw.ws.message"),
        f"a handover every {ROTATE_AFTER_S / 60:g} min (before API Gateway's 2 h limit), counted as a message",
    )
    line("$connect function", reconnects, "invocations", reconnects * invocation_usd)
    write_units = math.ceil(inputs.session_item_bytes / 1024)
    line(
        "sessions table writes",
        reconnects * write_units,
        "write request units",
        reconnects * write_units * price("dynamodb.wru"),
        "a PutItem on connect; the closed session's item goes by TTL (no write charge)",
    )
    line(
        "pulls after a gap",
        pulls,
        "pulls",
        pulls * (price("apigw.http.request") + invocation_usd + inputs.pull_rru * price("dynamodb.rru")),
        "HTTP API request, pull function, its reads; a handover without a gap pulls nothing",
    )
    log_gb = (
        reconnects * (inputs.log_bytes_per_invocation + 2 * inputs.access_log_bytes)
        + pulls * inputs.log_bytes_per_invocation
    ) / 1e9
    line("CloudWatch Logs", log_gb, "GB ingested", log_gb * price("cloudwatch.logs_ingest"), "functions and access")
    stored_gb = n * inputs.session_item_bytes / 1e9
    line(
        "sessions table storage",
        stored_gb,
        "GB-month",
        stored_gb * (price("dynamodb.storage") + price("dynamodb.pitr")),
        "with point-in-time recovery",
    )
    total = sum(entry["usd"] for entry in lines)
    per_1000 = total * 1000 / n
    return {
        "inputs": asdict(inputs),
        "lines": lines,
        "total_usd": total,
        "per_1000_usd": per_1000,
        "floor_per_1000_usd": 1000 * minutes * price("apigw.ws.connection_minute"),
        "handovers_per_client": inputs.days * 86400 / ROTATE_AFTER_S,
        "goal_usd_per_1000": GOAL_USD_PER_1000,
        "goal_met": per_1000 <= GOAL_USD_PER_1000,
        "pings_if_metered_usd": pings * price("apigw.ws.message"),
    }


def disconnect_route(inputs: IdleClients = IdleClients()) -> float:
    """Dollars a month a ``$disconnect`` function deleting the session would add to ``inputs``' idle month: an
    invocation, its log lines and a DeleteItem per handover."""
    reconnects = inputs.clients * inputs.days * 86400 / ROTATE_AFTER_S
    invocation_usd = price("lambda.request") + inputs.function_ms / 1000 * inputs.function_gb * price(
        "lambda.gb_s.arm64"
    )
    log_usd = inputs.log_bytes_per_invocation / 1e9 * price("cloudwatch.logs_ingest")
    write_usd = math.ceil(inputs.session_item_bytes / 1024) * price("dynamodb.wru")
    return reconnects * (invocation_usd + log_usd + write_usd)


def per_change(sessions: int, recipients: int, session_item_bytes: int = 300) -> float:
    """Dollars of one broadcast change: the broadcaster's Query of ``sessions`` session items (eventually
    consistent; closed sessions not yet expired or found gone among them) and one message to each of
    ``recipients``."""
    read_units = max(1, math.ceil(sessions * session_item_bytes / READ_UNIT_BYTES)) / 2
    return read_units * price("dynamodb.rru") + recipients * price("apigw.ws.message")


def markdown(result: dict[str, Any]) -> list[str]:
    """The scenario's lines for a results file."""
    n = result["inputs"]["clients"]
    rows = [
        f"| {e['item']} | {e['quantity']:,.2f} {e['unit']} | ${e['usd']:.2f} | {e['note']} |" for e in result["lines"]
    ]
    verdict = "met" if result["goal_met"] else "missed"
    return [
        f"## Monthly cost of {n:,} connected idle clients with live updates",
        "",
        f"**${result['total_usd']:.2f} a month** (${result['per_1000_usd']:.2f} per 1,000 clients; goal ≤ "
        f"${result['goal_usd_per_1000']:.2f}, {verdict}; the connection-minute floor is "
        f"${result['floor_per_1000_usd']:.2f}). From `benchmarks/cost/idle_clients.py` at list prices "
        "(`benchmarks/cost/prices.py`); the inputs are in the JSON.",
        "",
        "| item | quantity | USD | note |",
        "|---|---:|---:|---|",
        *rows,
        "",
        f"Assumed, as the SDK (`lakesync.client.realtime`) does: a handover {ROTATE_AFTER_S / 60:g} minutes after "
        f"each connect, the old socket read {HANDOVER_S} s after the new one opened, and a pull only after a gap, "
        f"here {result['inputs']['gap_ratio']:.0%} of the handovers (an idle client's socket drops only at the "
        f"limit); were every handover followed by a pull, as before the handover, the month would cost "
        f"${idle_month(IdleClients(**{**result['inputs'], 'gap_ratio': 1.0}))['total_usd']:.2f}. Above the floor, "
        "what is left is the handover's server side: the $connect message, its function, the session's write, and "
        f"the logs. A $disconnect route deleting each closed session would add "
        f"${disconnect_route(IdleClients(**result['inputs'])):.2f}; there is none, and the closed session's item "
        "goes by TTL, or by the broadcast that finds it gone or expired (`docs/realtime.md`).",
        "",
        f"If API Gateway metered the pings as messages, they would add ${result['pings_if_metered_usd']:.2f} "
        f"(one a minute per client). A change broadcast to all of them costs ${per_change(n, n) * 1e6:,.0f} per "
        f"million changes (the sessions Query and {n:,} messages).",
    ]
