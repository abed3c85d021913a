"""The cost of connected idle clients (issue 43, item 6): the connection-minute floor, a reconnect every two hours
with its functions, writes and pull, and the total the lines add up to."""

from __future__ import annotations

import pytest

from benchmarks.cost.idle_clients import IdleClients, idle_month, markdown, per_change


def test_a_thousand_idle_clients_pay_the_connection_minute_floor_and_their_reconnects() -> None:
    result = idle_month()
    lines = {e["item"]: e for e in result["lines"]}
    assert lines["API Gateway connection minutes"]["usd"] == pytest.approx(10.80)
    assert result["floor_per_1000_usd"] == pytest.approx(10.80)
    assert lines["$connect requests"]["quantity"] == pytest.approx(1000 * 30 * 12)  # every 2 h, all month
    assert lines["$connect and $disconnect functions"]["quantity"] == pytest.approx(2 * 1000 * 30 * 12)
    assert lines["pings (control frames)"]["usd"] == 0.0
    assert result["pings_if_metered_usd"] == pytest.approx(43.20)
    assert result["total_usd"] == pytest.approx(sum(e["usd"] for e in result["lines"]))
    assert 10.80 < result["total_usd"] < 20.0
    assert result["goal_met"] == (result["per_1000_usd"] <= 12.0)


def test_the_cost_scales_with_the_clients() -> None:
    assert idle_month(IdleClients(clients=2000))["total_usd"] == pytest.approx(2 * idle_month()["total_usd"])
    assert idle_month(IdleClients(clients=2000))["per_1000_usd"] == pytest.approx(idle_month()["per_1000_usd"])


def test_a_broadcast_change_costs_the_sessions_query_and_a_message_per_recipient() -> None:
    assert per_change(1000, 0) == pytest.approx(37 * 0.125 / 1e6)  # 300 KB: 74 read units, halved
    assert per_change(1000, 10) - per_change(1000, 0) == pytest.approx(10 / 1e6)
    assert "connected idle clients" in "\n".join(markdown(idle_month()))
