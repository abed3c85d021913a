"""The one SparkSession factory of LakeSync: same job code, local or on AWS Glue, by arguments only.

``catalog="local"``
    Spark's Iceberg ``JdbcCatalog`` on a sqlite file plus a ``file://`` warehouse, with the Iceberg runtime jars
    from :func:`lakesync.spark.runtime.iceberg_jars`. pyiceberg opens the same store with
    :func:`lakesync.lake.catalog.local_catalog`. The catalog tables are created (by pyiceberg) before Spark starts,
    never by Iceberg's ``JdbcCatalog``, which would otherwise lock a pre-existing sqlite catalog against other
    writers (see :func:`lakesync.lake.catalog.create_catalog_tables`).
``catalog="glue"``
    The Glue Data Catalog (``org.apache.iceberg.aws.glue.GlueCatalog``) with ``S3FileIO`` and an ``s3://``
    warehouse. Glue provides the Iceberg jars (``--datalake-formats iceberg``); the job must also pass
    ``--conf spark.sql.extensions=org.apache.iceberg.spark.extensions.IcebergSparkSessionExtensions``, because Glue
    starts the SparkContext before job code runs and the extensions are a static setting.

Invariants, both modes: the Iceberg catalog is the default catalog (``db.table`` resolves to it); table caching is
off, so every query sees the latest commit, whoever made it; the session time zone is UTC; plain Parquet timestamps
are written as ``TIMESTAMP_MICROS`` (so pyiceberg can ``add_files`` them); new tables default to Iceberg format v2.
A process has one SparkContext: asking for a local session while one with a different catalog or without the
Iceberg runtime is running raises instead of silently reusing it.
"""

from __future__ import annotations

import os
import sys
from collections.abc import Mapping
from pathlib import Path
from typing import Literal

from pyspark.sql import SparkSession

from lakesync.lake.catalog import CATALOG_SCHEMA_VERSION, create_catalog_tables, sqlite_file, warehouse_uri
from lakesync.spark.runtime import SparkSetupError, iceberg_jars

__all__ = ["CatalogKind", "build_session", "session_conf"]

CatalogKind = Literal["local", "glue"]

_EXTENSIONS = "org.apache.iceberg.spark.extensions.IcebergSparkSessionExtensions"
_LOCAL_MASTER = "local[2]"
_COMMON_CONF = {
    "spark.sql.extensions": _EXTENSIONS,
    "spark.sql.session.timeZone": "UTC",
    "spark.sql.parquet.outputTimestampType": "TIMESTAMP_MICROS",
}
_LOG4J2_LOCAL = Path(__file__).with_name("log4j2-local.properties")
# The JVM's options: UTC, and the log4j2 configuration of local sessions (errors only from the start; no banner).
_LOCAL_JAVA_OPTIONS = f"-Duser.timezone=UTC -Dlog4j2.configurationFile={_LOG4J2_LOCAL.as_uri()}"
_LOCAL_CONF = {
    "spark.ui.enabled": "false",
    "spark.ui.showConsoleProgress": "false",
    "spark.sql.shuffle.partitions": "2",
    "spark.default.parallelism": "2",
    "spark.driver.host": "127.0.0.1",
    "spark.driver.bindAddress": "127.0.0.1",
    "spark.driver.extraJavaOptions": _LOCAL_JAVA_OPTIONS,
    "spark.executor.extraJavaOptions": _LOCAL_JAVA_OPTIONS,
}
# Settings a running SparkContext cannot change; a mismatch means the caller would get the wrong session.
_PINNED_KEYS = ("spark.jars", "spark.sql.extensions")


def session_conf(
    *,
    app_name: str,
    warehouse: str,
    catalog_name: str = "lake",
    catalog: CatalogKind = "local",
    catalog_uri: str | None = None,
    master: str | None = None,
    extra_conf: Mapping[str, str] | None = None,
    jar_cache_dir: Path | None = None,
) -> dict[str, str]:
    """The Spark configuration :func:`build_session` applies, without starting anything.

    Args and Raises: as :func:`build_session`.
    """
    if not catalog_name.isidentifier():
        raise ValueError(f"catalog_name must be a plain identifier, got {catalog_name!r}")
    prefix = f"spark.sql.catalog.{catalog_name}"
    conf: dict[str, str] = {"spark.app.name": app_name, **_COMMON_CONF}
    conf[prefix] = "org.apache.iceberg.spark.SparkCatalog"
    conf["spark.sql.defaultCatalog"] = catalog_name
    conf[f"{prefix}.table-default.format-version"] = "2"
    # Iceberg's SparkCatalog caches loaded tables (30 s by default), so a read could miss a commit made by another
    # writer (pyiceberg, another job). Every query re-reads the current metadata instead.
    conf[f"{prefix}.cache-enabled"] = "false"
    if catalog == "local":
        if catalog_uri is None:
            raise ValueError("a local catalog needs catalog_uri: the sqlite file shared with pyiceberg")
        db = sqlite_file(catalog_uri)
        conf.update(_LOCAL_CONF)
        conf["spark.master"] = master or _LOCAL_MASTER
        conf["spark.jars"] = ",".join(str(p) for p in iceberg_jars(jar_cache_dir))
        conf[f"{prefix}.type"] = "jdbc"
        conf[f"{prefix}.uri"] = f"jdbc:sqlite:{db}"
        conf[f"{prefix}.jdbc.schema-version"] = CATALOG_SCHEMA_VERSION.upper()
        # build_session creates the tables first; see create_catalog_tables for why Iceberg must not.
        conf[f"{prefix}.jdbc.init-catalog-tables"] = "false"
        conf[f"{prefix}.warehouse"] = warehouse_uri(warehouse)
        # Spark's built-in catalog is unused, but Spark creates its directory at start-up: keep it out of the cwd.
        conf["spark.sql.warehouse.dir"] = (db.parent / "spark-warehouse").as_uri()
    elif catalog == "glue":
        if catalog_uri is not None:
            raise ValueError("the Glue catalog takes no catalog_uri (the account's Data Catalog is used)")
        if not warehouse.startswith("s3://"):
            raise ValueError(f"a Glue catalog warehouse must be an s3:// URI, got {warehouse!r}")
        if master is not None:
            conf["spark.master"] = master
        conf[f"{prefix}.catalog-impl"] = "org.apache.iceberg.aws.glue.GlueCatalog"
        conf[f"{prefix}.io-impl"] = "org.apache.iceberg.aws.s3.S3FileIO"
        conf[f"{prefix}.warehouse"] = warehouse.rstrip("/")
    else:
        raise ValueError(f"catalog must be 'local' or 'glue', got {catalog!r}")
    conf.update(extra_conf or {})
    return conf


def build_session(
    *,
    app_name: str,
    warehouse: str,
    catalog_name: str = "lake",
    catalog: CatalogKind = "local",
    catalog_uri: str | None = None,
    master: str | None = None,
    extra_conf: Mapping[str, str] | None = None,
    jar_cache_dir: Path | None = None,
    log_level: str = "WARN",
) -> SparkSession:
    """Start (or join) the SparkSession with an Iceberg catalog named ``catalog_name``.

    Args:
        app_name: Spark application name.
        warehouse: ``local``: a directory or ``file://`` URI; ``glue``: an ``s3://`` URI.
        catalog_name: The Spark catalog name, also the default catalog; pyiceberg must use the same name.
        catalog: ``"local"`` (sqlite JDBC catalog) or ``"glue"`` (Glue Data Catalog + S3).
        catalog_uri: ``local`` only: the sqlite file (path or ``jdbc:sqlite:`` URI) shared with pyiceberg.
        master: Spark master; ``None`` means ``local[2]`` for ``local`` and the cluster's own for ``glue``.
        extra_conf: More Spark settings, applied last (they win).
        jar_cache_dir: ``local`` only: where the repaired Iceberg jars are cached (see ``iceberg_jars``).
        log_level: Spark's log level once the context is up.

    Returns:
        The SparkSession.

    Raises:
        ValueError: inconsistent arguments (e.g. a local catalog without ``catalog_uri``).
        SparkSetupError: the local runtime is missing a piece, or a different session already runs here.
    """
    conf = session_conf(
        app_name=app_name,
        warehouse=warehouse,
        catalog_name=catalog_name,
        catalog=catalog,
        catalog_uri=catalog_uri,
        master=master,
        extra_conf=extra_conf,
        jar_cache_dir=jar_cache_dir,
    )
    if catalog == "local":
        _refuse_foreign_session(conf, catalog_name)
        create_catalog_tables(conf[f"spark.sql.catalog.{catalog_name}.uri"])
    builder = SparkSession.builder
    for key, value in conf.items():
        builder = builder.config(key, value)
    spark = builder.getOrCreate()
    if catalog == "local":
        # PySpark starts local Python workers with $PYSPARK_PYTHON or else `python3` from PATH; use this interpreter
        # (where lakesync is installed) instead.
        spark.sparkContext.pythonExec = os.environ.get("PYSPARK_PYTHON", sys.executable)
    spark.sparkContext.setLogLevel(log_level)
    return spark


def _refuse_foreign_session(conf: Mapping[str, str], catalog_name: str) -> None:
    active = SparkSession.getActiveSession()
    if active is None:
        return
    running = dict(active.sparkContext.getConf().getAll())
    prefix = f"spark.sql.catalog.{catalog_name}"
    keys = [*_PINNED_KEYS, *(k for k in conf if k.startswith(prefix))]
    differing = sorted(k for k in keys if _running_value(active, running, k) != conf.get(k))
    if differing:
        raise SparkSetupError(
            f"a SparkSession with different settings ({', '.join(differing)}) already runs in this process; "
            "stop it first (spark.stop()) — one process has one SparkContext"
        )


def _running_value(active: SparkSession, context_conf: Mapping[str, str], key: str) -> str | None:
    if key in context_conf:
        return context_conf[key]
    value = active.conf.get(key, None)
    return None if value is None else str(value)
