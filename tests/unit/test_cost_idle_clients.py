"""The cost of connected idle clients (issue 43, item 6): the connection-minute floor, a handover a minute before
API Gateway's two hours with its functions and writes and no pull unless a gap is assumed, and the total the lines
add up to."""

from __future__ import annotations

import pytest

from benchmarks.cost.idle_clients import IdleClients, disconnect_route, idle_month, markdown, per_change


def test_a_thousand_idle_clients_pay_the_connection_minute_floor_and_their_reconnects() -> None:
    result = idle_month()
    lines = {e["item"]: e for e in result["lines"]}
    assert lines["API Gateway connection minutes"]["usd"] == pytest.approx(10.80)
    assert result["floor_per_1000_usd"] == pytest.approx(10.80)
    handovers = 1000 * 30 * 86400 / (2 * 3600 - 60)  # every 1 h 59 min, all month
    assert lines["$connect requests"]["quantity"] == pytest.approx(handovers)
    assert lines["$connect function"]["quantity"] == pytest.approx(handovers)
    assert lines["sessions table writes"]["quantity"] == pytest.approx(handovers)  # the put; TTL deletes are free
    assert lines["handover overlap"]["quantity"] == pytest.approx(handovers * 10 / 60)
    assert lines["pulls after a gap"]["quantity"] == 0.0 and lines["pulls after a gap"]["usd"] == 0.0
    assert lines["pings (control frames)"]["usd"] == 0.0
    assert result["pings_if_metered_usd"] == pytest.approx(43.20)
    assert result["total_usd"] == pytest.approx(sum(e["usd"] for e in result["lines"]))
    assert 10.80 < result["total_usd"] < 20.0
    assert result["goal_met"] == (result["per_1000_usd"] <= 12.0)


def test_a_handover_that_found_a_gap_pays_its_pull() -> None:
    every = idle_month(IdleClients(gap_ratio=1.0))
    lines = {e["item"]: e for e in every["lines"]}
    assert lines["pulls after a gap"]["quantity"] == pytest.approx(lines["$connect requests"]["quantity"])
    assert every["total_usd"] - idle_month()["total_usd"] > 0.5  # what a pull on every reconnect used to cost


def test_a_disconnect_route_would_cost_its_function_log_and_delete_per_handover() -> None:
    handovers = 1000 * 30 * 86400 / (2 * 3600 - 60)
    per_handover = 0.2e-6 + 0.028 * 1.0 * 0.0000133334 + 700e-9 * 0.50 + 0.625e-6
    assert disconnect_route() == pytest.approx(handovers * per_handover, rel=0.01)
    # it is what keeps the month under the goal: with it, the month would miss
    assert idle_month()["per_1000_usd"] + disconnect_route() > 12.0


def test_the_cost_scales_with_the_clients() -> None:
    assert idle_month(IdleClients(clients=2000))["total_usd"] == pytest.approx(2 * idle_month()["total_usd"])
    assert idle_month(IdleClients(clients=2000))["per_1000_usd"] == pytest.approx(idle_month()["per_1000_usd"])


def test_a_broadcast_change_costs_the_sessions_query_and_a_message_per_recipient() -> None:
    assert per_change(1000, 0) == pytest.approx(37 * 0.125 / 1e6)  # 300 KB: 74 read units, halved
    assert per_change(1000, 10) - per_change(1000, 0) == pytest.approx(10 / 1e6)
    assert "connected idle clients" in "\n".join(markdown(idle_month()))
