"""SQL destinations of materialisation: PostgreSQL, MySQL/MariaDB, SQLite and BigQuery.

:func:`connect` (a URL) and :func:`connect_params` (an RDS-style secret) build a
:class:`~lakesync.sql.destination.SqlDestination`, the :class:`~lakesync.ports.Destination` whose rows always equal
the per-column LWW fold of the deltas applied (see :mod:`lakesync.sql.destination`). Drivers are imported only when
a destination of their kind is opened (``lakesync[sql]`` installs them).
"""

from __future__ import annotations

from lakesync.sql.connect import connect, connect_params, mask_url
from lakesync.sql.destination import SqlApplyStats, SqlDestination

__all__ = ["SqlApplyStats", "SqlDestination", "connect", "connect_params", "mask_url"]
