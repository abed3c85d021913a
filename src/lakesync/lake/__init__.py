"""Iceberg lake access through pyiceberg (imported lazily): catalogs shared with the Spark jobs."""

from lakesync.lake.catalog import create_catalog_tables, local_catalog, sqlite_file, warehouse_uri

__all__ = ["create_catalog_tables", "local_catalog", "sqlite_file", "warehouse_uri"]
