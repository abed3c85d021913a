"""Database connectors (``postgres``, ``mysql``; ``bigquery`` generates SQL only): ingest pollers and ``source=`` pulls.

Config (reference §14.2; validated by :func:`lakesync.core.connectors.validate_connector_config`)::

    {"name": "crm", "type": "postgres",
     "postgres": {"connectionString": "secret://arn:aws:secretsmanager:...:secret:crm-db-AbCdEf"},
     "ingest": {"intervalMs": 60000,
                "tables": [{"table": "customers", "query": "SELECT id, name, updated_at FROM customers",
                            "rowIdColumn": "id", "strategy": {"type": "cursor", "cursorColumn": "updated_at",
                                                               "lookbackMs": 5000}},
                           {"table": "plans", "query": "SELECT * FROM plans", "strategy": {"type": "diff"}}]}}

Every query runs as **one statement in a read-only transaction** (``BEGIN READ ONLY`` over PostgreSQL's extended
protocol / ``START TRANSACTION READ ONLY`` without MySQL multi-statements; the sessions default to read-only too): a
connector never writes to its source, whatever its configured query says, and ``...; COMMIT; DROP ...`` is refused
by the server (and by registration, which refuses a query with a ``;`` outside quotes and comments). The connection
string may carry only its location and options that do not redirect it (:mod:`lakesync.sql.targets`), and its host
is resolved and checked against the deployment's network policy at every connect (:mod:`lakesync.egress`).

**Cursor strategy** (incremental; cannot see deletes), as the original's: the first poll reads
``SELECT * FROM ({query}) AS _src ORDER BY {c} ASC``, later ones ``... WHERE {c} > %s`` with the stored cursor minus
``lookbackMs`` (numbers: ``n - lookbackMs``; datetimes and ISO strings: the instant minus the look-back). Unlike the
original, a poll reads at most ``limit`` rows (the position then says ``paging`` and the next poll continues exactly
after the last cursor value, without look-back; rows sharing the page's last cursor value all land on one page), and
rows the look-back window re-delivers unchanged are skipped (the position remembers the content hash of the rows
inside the window), so they are not written again.

**Diff strategy** (full scan; sees deletes): each poll reads the whole query and compares every row's content hash
with the snapshot in the position (``{rowId: hash}``): new and changed rows are emitted, rows gone from the result
are emitted as deletions. Unlike the original, the snapshot is part of the stored position, so a restart does not
re-insert everything.

A change's ``version`` is the row's content hash (with its cursor value in cursor mode); the poller derives the
deltaId from it and the position's generation (:mod:`lakesync.gateway.poller`).

**Source pulls** (``GET /pull?source={name}``, reference §5.3): the ingest tables' rows served live as INSERT deltas.
A cursor table's rows carry ``HLC(cursor as epoch ms, 0)`` (datetime cursors; numeric cursors as they are) and
``since`` becomes ``WHERE {c} > since``; a diff table has no notion of change time: its rows are served with HLC 1,
so only a pull from ``since=0`` sees them.

The package, one module a part: :mod:`~lakesync.connectors.sql.runner` (what a database offers a connector: read-only
queries), one runner per database (:mod:`~lakesync.connectors.sql.postgres`, :mod:`~lakesync.connectors.sql.mysql`),
:mod:`~lakesync.connectors.sql.query` (the ingest tables and the statements over them),
:mod:`~lakesync.connectors.sql.values` (database values as JSON, cursors), the polling
(:mod:`~lakesync.connectors.sql.ingest`) and the source pulls (:mod:`~lakesync.connectors.sql.source`), and
:mod:`~lakesync.connectors.sql.registration` (the connector types and their factories).
"""
