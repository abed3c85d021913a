"""Local Spark fixtures: one session-scoped SparkSession with the real Iceberg runtime, and pyiceberg on its catalog.

The session and the pyiceberg catalog share one sqlite catalog file and one ``file://`` warehouse under
``tmp_path_factory``. The repaired Iceberg jars come from the default jar cache (``~/.cache/lakesync/jars``), built on
first use. Tests get their own namespace through ``lake_namespace`` so they never see each other's tables.
"""

from __future__ import annotations

import os
import uuid
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING

import pytest

from lakesync.lake.catalog import local_catalog
from lakesync.spark.session import build_session

if TYPE_CHECKING:
    from pyiceberg.catalog.sql import SqlCatalog
    from pyspark.sql import SparkSession

CATALOG_NAME = "lake"

# PySpark reads query results (collect, toPandas, ...) over a local socket it never closes; the warning fires in the
# test that collected, when CPython frees the socket. Only that py4j/pyspark loopback socket is ignored, only here.
PYSPARK_SOCKET_FILTER = r"ignore:unclosed <socket\.socket .*raddr=\('127\.0\.0\.1', \d+\)>:ResourceWarning"
_GLUE_TESTS = Path(__file__).parent


def pytest_collection_modifyitems(items: list[pytest.Item]) -> None:
    """Give every test under tests/glue the PySpark socket filter (items from elsewhere are left alone)."""
    for item in items:
        if item.path.is_relative_to(_GLUE_TESTS):
            item.add_marker(pytest.mark.filterwarnings(PYSPARK_SOCKET_FILTER))


@dataclass(frozen=True, slots=True)
class LakePaths:
    """Where the test lake lives."""

    warehouse: Path
    catalog_db: Path


@pytest.fixture(scope="session")
def lake_paths(tmp_path_factory: pytest.TempPathFactory) -> LakePaths:
    root = tmp_path_factory.mktemp("lake")
    return LakePaths(warehouse=root / "warehouse", catalog_db=root / "catalog.db")


@pytest.fixture(scope="session")
def spark(lake_paths: LakePaths) -> Iterator[SparkSession]:
    with pytest.MonkeyPatch.context() as mp:
        # Without it Spark warns that the hostname resolves to loopback and binds to another interface.
        mp.setenv("SPARK_LOCAL_IP", "127.0.0.1")
        # The JVM, and the Python workers it starts, keep the environment it is launched with: fake credentials, as
        # a Glue job's role gives its executors, so job code that builds its own boto3 clients on the executors (the
        # flush job's reads of the buffer) reaches the moto server when a test runs an entry script's main().
        for key, value in {"AWS_ACCESS_KEY_ID": "testing", "AWS_SECRET_ACCESS_KEY": "testing"}.items():
            mp.setenv(key, os.environ.get(key, value))
        session = build_session(
            app_name="lakesync-tests",
            warehouse=str(lake_paths.warehouse),
            catalog_name=CATALOG_NAME,
            catalog="local",
            catalog_uri=str(lake_paths.catalog_db),
            master="local[2]",
            log_level="ERROR",
        )
    yield session
    session.stop()


@pytest.fixture(scope="session")
def lake_catalog(lake_paths: LakePaths) -> SqlCatalog:
    return local_catalog(lake_paths.catalog_db, lake_paths.warehouse, name=CATALOG_NAME)


@pytest.fixture
def lake_namespace(spark: SparkSession) -> str:
    """A fresh namespace created through Spark; tables go in it as ``f"{lake_namespace}.name"``."""
    namespace = f"t_{uuid.uuid4().hex[:12]}"
    spark.sql(f"CREATE NAMESPACE {CATALOG_NAME}.{namespace}")
    return namespace
