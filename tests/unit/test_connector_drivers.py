"""A SQL connector opened where its driver is not installed (the API functions' small asset on AWS) answers with a
clear 502 naming the connector and the missing driver, never an ImportError (a 500)."""

from __future__ import annotations

import sys

import pytest

from lakesync.connectors.sql.mysql import MySQLRunner
from lakesync.connectors.sql.postgres import PostgresRunner
from lakesync.core.errors import AdapterError


@pytest.mark.parametrize(
    ("runner", "module"),
    [
        (lambda: PostgresRunner("postgresql://u:secret-pw@db.example.com:1/db", name="crm"), "psycopg"),
        (lambda: MySQLRunner("mysql://u:secret-pw@db.example.com:1/db", name="crm"), "pymysql"),
    ],
)
def test_a_missing_driver_is_a_clear_502(monkeypatch: pytest.MonkeyPatch, runner, module: str) -> None:
    monkeypatch.setitem(sys.modules, module, None)  # import now raises ImportError, as without the package
    with pytest.raises(AdapterError) as failed:
        runner().query("SELECT 1")
    assert failed.value.status == 502
    message = str(failed.value)
    assert 'Connector "crm"' in message and module in message and "secret-pw" not in message
