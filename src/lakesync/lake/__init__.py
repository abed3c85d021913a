"""Iceberg lake access through pyiceberg (imported lazily): catalogs shared with the Spark jobs."""

from lakesync.lake.catalog import local_catalog, sqlite_file, warehouse_uri

__all__ = ["local_catalog", "sqlite_file", "warehouse_uri"]
