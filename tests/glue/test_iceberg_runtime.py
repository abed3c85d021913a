"""The local Spark 3.5 + Iceberg runtime: the repaired jars, the session factory, and one catalog shared with pyiceberg.

Focus: Spark SQL (CREATE / INSERT / MERGE INTO / VERSION AS OF) works on the real Iceberg runtime; a table written
by one engine is read by the other through the same sqlite catalog; the jar cache is built once, atomically, and
reused; set-up problems and bad arguments fail with actionable errors.
"""

from __future__ import annotations

import logging
import shutil
import sqlite3
import subprocess
import threading
import uuid
import zipfile
from contextlib import closing
from dataclasses import dataclass
from datetime import UTC, datetime
from pathlib import Path
from typing import TYPE_CHECKING, Any
from urllib.parse import urlparse

import pyarrow as pa
import pyarrow.parquet as pq
import pytest

from lakesync.lake.catalog import create_catalog_tables, local_catalog, sqlite_file, warehouse_uri
from lakesync.spark import runtime
from lakesync.spark.runtime import SparkSetupError, iceberg_jars
from lakesync.spark.session import build_session, session_conf

if TYPE_CHECKING:
    from pyiceberg.catalog.sql import SqlCatalog
    from pyspark.sql import SparkSession

    from tests.glue.conftest import LakePaths

pytestmark = pytest.mark.spark

SHADED_PREFIX = "org/apache/iceberg/shaded/com/fasterxml/jackson/"


def _ts(day: int) -> datetime:
    return datetime(2024, 1, day, 12, 30, tzinfo=UTC)


def _micros(day: int) -> int:
    """Epoch microseconds of ``_ts(day)``; Spark reports instants as ``unix_micros`` to stay clear of local time."""
    return int(_ts(day).timestamp()) * 1_000_000


def _local(uri: str) -> Path:
    """The filesystem path of a ``file:/abs`` (Java) or ``file:///abs`` (pyiceberg) location."""
    return Path(urlparse(uri).path)


def _rows(spark: SparkSession, query: str) -> list[tuple[Any, ...]]:
    return sorted(tuple(r) for r in spark.sql(query).collect())


def _create_users(spark: SparkSession, table: str) -> None:
    spark.sql(f"CREATE TABLE lake.{table} (id BIGINT, name STRING, updated_at TIMESTAMP) USING iceberg")


# --- Spark SQL on the Iceberg runtime -------------------------------------------------------------------------------


def test_spark_sql_insert_then_merge_into_upserts_rows(spark: SparkSession, lake_namespace: str) -> None:
    # Given a table with two rows
    table = f"{lake_namespace}.users"
    _create_users(spark, table)
    spark.sql(f"INSERT INTO lake.{table} VALUES (1, 'ada', TIMESTAMP'2024-01-01 12:30:00'), (2, 'bob', NULL)")

    # When a MERGE updates row 2 and inserts row 3
    spark.sql(
        f"""
        MERGE INTO lake.{table} t
        USING (SELECT 2L AS id, 'bobby' AS name, TIMESTAMP'2024-01-02 12:30:00' AS updated_at
               UNION ALL SELECT 3L, 'cy', TIMESTAMP'2024-01-03 12:30:00') s
        ON t.id = s.id
        WHEN MATCHED THEN UPDATE SET *
        WHEN NOT MATCHED THEN INSERT *
        """
    )

    # Then the table holds the upserted rows (literals are read in the session time zone, UTC)
    assert _rows(spark, f"SELECT id, name, unix_micros(updated_at) FROM lake.{table}") == [
        (1, "ada", _micros(1)),
        (2, "bobby", _micros(2)),
        (3, "cy", _micros(3)),
    ]
    operations = [r.operation for r in spark.sql(f"SELECT operation FROM lake.{table}.snapshots").collect()]
    assert operations == ["append", "overwrite"]


def test_spark_version_as_of_reads_the_earlier_snapshot(spark: SparkSession, lake_namespace: str) -> None:
    # Given a table with a first snapshot, then a MERGE that rewrites it
    table = f"{lake_namespace}.users"
    _create_users(spark, table)
    spark.sql(f"INSERT INTO lake.{table} VALUES (1, 'ada', NULL)")
    first = spark.sql(f"SELECT snapshot_id FROM lake.{table}.snapshots").collect()[0].snapshot_id
    spark.sql(
        f"MERGE INTO lake.{table} t USING (SELECT 1L AS id, 'ADA' AS name) s ON t.id = s.id "
        "WHEN MATCHED THEN UPDATE SET t.name = s.name"
    )

    # When reading as of the first snapshot, Then the old value is back; the current read sees the new one
    assert _rows(spark, f"SELECT id, name FROM lake.{table} VERSION AS OF {first}") == [(1, "ada")]
    assert _rows(spark, f"SELECT id, name FROM lake.{table}") == [(1, "ADA")]


def test_spark_new_tables_are_format_v2_in_the_lake_catalog(
    spark: SparkSession, lake_catalog: SqlCatalog, lake_namespace: str
) -> None:
    # Given an unqualified table name (the Iceberg catalog is the default catalog)
    spark.sql(f"CREATE TABLE {lake_namespace}.plain (id BIGINT) USING iceberg")

    # Then pyiceberg finds it in the lake catalog, as format v2
    table = lake_catalog.load_table(f"{lake_namespace}.plain")
    assert table.format_version == 2
    assert spark.conf.get("spark.sql.defaultCatalog") == "lake"


# --- one catalog, two engines ---------------------------------------------------------------------------------------


def test_pyiceberg_reads_the_rows_spark_wrote(
    spark: SparkSession, lake_catalog: SqlCatalog, lake_namespace: str
) -> None:
    # Given rows written and merged by Spark
    table = f"{lake_namespace}.users"
    _create_users(spark, table)
    spark.sql(f"INSERT INTO lake.{table} VALUES (1, 'ada', TIMESTAMP'2024-01-01 12:30:00'), (2, 'bob', NULL)")
    spark.sql(f"MERGE INTO lake.{table} t USING (SELECT 2L AS id) s ON t.id = s.id WHEN MATCHED THEN DELETE")

    # When pyiceberg scans the same table through its own catalog object
    arrow = lake_catalog.load_table(table).scan().to_arrow()

    # Then it sees Spark's current snapshot, with Spark's TIMESTAMP as an Iceberg timestamptz
    assert sorted(arrow.to_pylist(), key=lambda r: r["id"]) == [{"id": 1, "name": "ada", "updated_at": _ts(1)}]
    assert arrow.schema.field("updated_at").type == pa.timestamp("us", tz="UTC")


def test_spark_reads_rows_pyiceberg_appended(
    spark: SparkSession, lake_catalog: SqlCatalog, lake_namespace: str
) -> None:
    # Given a Spark table with one row
    table = f"{lake_namespace}.users"
    _create_users(spark, table)
    spark.sql(f"INSERT INTO lake.{table} VALUES (1, 'ada', NULL)")

    # When pyiceberg appends a row through the shared catalog
    iceberg_table = lake_catalog.load_table(table)
    batch = pa.table(
        {"id": [2], "name": ["bob"], "updated_at": [_ts(2)]},
        schema=iceberg_table.schema().as_arrow(),
    )
    iceberg_table.append(batch)

    # Then Spark sees both rows, and the append as a new snapshot
    rows = _rows(spark, f"SELECT id, name, unix_micros(updated_at) FROM lake.{table}")
    assert rows == [(1, "ada", None), (2, "bob", _micros(2))]
    assert spark.sql(f"SELECT * FROM lake.{table}.snapshots").count() == 2


def test_spark_sees_a_table_pyiceberg_created(spark: SparkSession, lake_catalog: SqlCatalog) -> None:
    # Given a namespace and table created only through pyiceberg
    namespace = f"py_{uuid.uuid4().hex[:12]}"
    lake_catalog.create_namespace(namespace)
    created = lake_catalog.create_table(
        f"{namespace}.things", schema=pa.schema([pa.field("id", pa.int64()), pa.field("label", pa.string())])
    )
    created.append(pa.table({"id": [7], "label": ["seven"]}, schema=created.schema().as_arrow()))

    # Then Spark lists and reads it
    tables = [r.tableName for r in spark.sql(f"SHOW TABLES IN lake.{namespace}").collect()]
    assert tables == ["things"]
    assert _rows(spark, f"SELECT id, label FROM lake.{namespace}.things") == [(7, "seven")]


def test_catalog_rows_are_keyed_by_the_shared_catalog_name(
    spark: SparkSession, lake_catalog: SqlCatalog, lake_paths: LakePaths, lake_namespace: str
) -> None:
    # Given a table Spark created
    spark.sql(f"CREATE TABLE lake.{lake_namespace}.keyed (id BIGINT) USING iceberg")

    # When reading the sqlite catalog directly
    with closing(sqlite3.connect(lake_paths.catalog_db)) as db:
        rows = db.execute(
            "SELECT catalog_name, table_name, metadata_location, iceberg_type FROM iceberg_tables "
            "WHERE table_namespace = ?",
            (lake_namespace,),
        ).fetchall()

    # Then the row carries the catalog name both engines use and points into the shared warehouse
    assert len(rows) == 1
    catalog_name, table_name, metadata_location, iceberg_type = rows[0]
    assert (catalog_name, table_name, iceberg_type) == ("lake", "keyed", "TABLE")
    assert metadata_location == lake_catalog.load_table(f"{lake_namespace}.keyed").metadata_location
    assert (lake_namespace,) in lake_catalog.list_namespaces()

    # And a table pyiceberg creates next to it gets the same default layout: <warehouse>/<namespace>/<table>
    py_table = lake_catalog.create_table(f"{lake_namespace}.py_keyed", schema=pa.schema([pa.field("id", pa.int64())]))
    spark_table = lake_catalog.load_table(f"{lake_namespace}.keyed")
    assert _local(spark_table.location()) == lake_paths.warehouse / lake_namespace / "keyed"
    assert _local(py_table.location()) == lake_paths.warehouse / lake_namespace / "py_keyed"


def test_spark_leaves_the_catalog_file_writable_by_other_processes(
    spark: SparkSession, lake_paths: LakePaths, lake_namespace: str
) -> None:
    # Given Spark has run catalog reads and commits on a catalog file that existed before it started
    table = f"{lake_namespace}.busy"
    spark.sql(f"CREATE TABLE lake.{table} (id BIGINT) USING iceberg")
    spark.sql(f"INSERT INTO lake.{table} VALUES (1)")
    spark.sql(f"SHOW TABLES IN lake.{lake_namespace}").collect()

    # When another connection writes to the catalog, without waiting long for a lock
    with closing(sqlite3.connect(lake_paths.catalog_db, timeout=2)) as db:
        db.execute(
            "INSERT INTO iceberg_namespace_properties VALUES ('lake', ?, 'probe', 'yes')",
            (lake_namespace,),
        )
        db.commit()

    # Then the write committed, and Spark sees it
    info = {
        r.info_name: r.info_value for r in spark.sql(f"DESCRIBE NAMESPACE EXTENDED lake.{lake_namespace}").collect()
    }
    assert "(probe,yes)" in info["Properties"]


def test_spark_parquet_timestamps_are_micros_so_pyiceberg_can_add_them(
    spark: SparkSession, lake_catalog: SqlCatalog, lake_namespace: str, tmp_path: Path
) -> None:
    # Given plain Parquet written by Spark (not through Iceberg)
    out = tmp_path / "plain"
    spark.sql("SELECT 5L AS id, TIMESTAMP'2024-01-05 12:30:00' AS updated_at").coalesce(1).write.parquet(str(out))
    (data_file,) = out.glob("*.parquet")
    assert pq.read_schema(data_file).field("updated_at").type == pa.timestamp("us", tz="UTC")

    # When pyiceberg registers the file in a timestamptz table
    table = lake_catalog.create_table(
        f"{lake_namespace}.imported",
        schema=pa.schema([pa.field("id", pa.int64()), pa.field("updated_at", pa.timestamp("us", tz="UTC"))]),
    )
    table.add_files([str(data_file)])

    # Then Spark reads it back through Iceberg
    rows = _rows(spark, f"SELECT id, unix_micros(updated_at) FROM lake.{lake_namespace}.imported")
    assert rows == [(5, _micros(5))]


# --- the session factory --------------------------------------------------------------------------------------------


def test_build_session_with_the_same_settings_returns_the_running_session(
    spark: SparkSession, lake_paths: LakePaths
) -> None:
    # When the factory is asked again for the same catalog
    again = build_session(
        app_name="another-name",
        catalog="local",
        warehouse=str(lake_paths.warehouse),
        catalog_uri=str(lake_paths.catalog_db),
        log_level="ERROR",
    )

    # Then it is the same session
    assert again.sparkContext is spark.sparkContext


def test_build_session_refuses_a_running_session_on_another_catalog(
    spark: SparkSession, lake_paths: LakePaths, tmp_path: Path
) -> None:
    # When a local session on a different sqlite file is requested while the fixture's session runs
    with pytest.raises(SparkSetupError, match=r"spark\.sql\.catalog\.lake\.uri"):
        build_session(
            app_name="x", catalog="local", warehouse=str(lake_paths.warehouse), catalog_uri=str(tmp_path / "other.db")
        )

    # Then the running session still points at the original catalog
    assert spark.conf.get("spark.sql.catalog.lake.uri") == f"jdbc:sqlite:{lake_paths.catalog_db}"


def test_session_conf_local_sets_runtime_catalog_and_quiet_defaults(tmp_path: Path) -> None:
    conf = session_conf(
        app_name="job", catalog="local", warehouse=str(tmp_path / "wh"), catalog_uri=str(tmp_path / "c.db")
    )

    assert conf["spark.master"] == "local[2]"
    assert conf["spark.sql.catalog.lake"] == "org.apache.iceberg.spark.SparkCatalog"
    assert conf["spark.sql.catalog.lake.type"] == "jdbc"
    assert conf["spark.sql.catalog.lake.uri"] == f"jdbc:sqlite:{tmp_path / 'c.db'}"
    assert conf["spark.sql.catalog.lake.warehouse"] == f"file://{tmp_path / 'wh'}"
    assert conf["spark.sql.catalog.lake.jdbc.schema-version"] == "V1"
    assert conf["spark.sql.catalog.lake.jdbc.init-catalog-tables"] == "false"
    assert conf["spark.jars"].split(",") == [str(p) for p in iceberg_jars()]
    assert (conf["spark.ui.enabled"], conf["spark.sql.shuffle.partitions"]) == ("false", "2")
    assert conf["spark.sql.parquet.outputTimestampType"] == "TIMESTAMP_MICROS"
    assert conf["spark.sql.session.timeZone"] == "UTC"
    assert conf["spark.sql.catalog.lake.cache-enabled"] == "false"


def test_session_conf_glue_uses_glue_catalog_and_s3_without_local_jars() -> None:
    conf = session_conf(app_name="job", warehouse="s3://lake-bucket/warehouse/", catalog="glue", catalog_name="lk")

    assert conf["spark.sql.catalog.lk"] == "org.apache.iceberg.spark.SparkCatalog"
    assert conf["spark.sql.catalog.lk.catalog-impl"] == "org.apache.iceberg.aws.glue.GlueCatalog"
    assert conf["spark.sql.catalog.lk.io-impl"] == "org.apache.iceberg.aws.s3.S3FileIO"
    assert conf["spark.sql.catalog.lk.warehouse"] == "s3://lake-bucket/warehouse"
    assert conf["spark.sql.defaultCatalog"] == "lk"
    assert conf["spark.sql.extensions"] == "org.apache.iceberg.spark.extensions.IcebergSparkSessionExtensions"
    assert conf["spark.sql.catalog.lk.table-default.format-version"] == "2"
    # Glue supplies the master and the Iceberg jars itself
    assert not {"spark.master", "spark.jars", "spark.sql.catalog.lk.uri"} & conf.keys()


def test_session_conf_extra_conf_wins(tmp_path: Path) -> None:
    conf = session_conf(
        app_name="job",
        warehouse="s3://b/w",
        catalog="glue",
        extra_conf={"spark.sql.shuffle.partitions": "64", "spark.sql.session.timeZone": "UTC"},
    )
    assert conf["spark.sql.shuffle.partitions"] == "64"


@pytest.mark.parametrize(
    ("kwargs", "message"),
    [
        pytest.param({"catalog": "local", "warehouse": "/tmp/wh"}, "catalog_uri", id="local-without-uri"),
        pytest.param({"catalog": "glue", "warehouse": "/tmp/wh"}, "s3://", id="glue-local-warehouse"),
        pytest.param(
            {"catalog": "glue", "warehouse": "s3://b/w", "catalog_uri": "x.db"}, "no catalog_uri", id="glue-with-uri"
        ),
        pytest.param({"catalog": "hive", "warehouse": "/tmp/wh"}, "'local' or 'glue'", id="unknown-catalog"),
        pytest.param(
            {"catalog": "local", "warehouse": "s3://b/w", "catalog_uri": "c.db"}, "file://", id="local-s3-warehouse"
        ),
        pytest.param(
            {"catalog": "glue", "warehouse": "s3://b/w", "catalog_name": "a.b"}, "identifier", id="dotted-name"
        ),
    ],
)
def test_session_conf_rejects_inconsistent_arguments(kwargs: dict[str, Any], message: str, tmp_path: Path) -> None:
    if "catalog_uri" in kwargs and kwargs["catalog"] == "local":
        kwargs = {**kwargs, "catalog_uri": str(tmp_path / kwargs["catalog_uri"])}
    with pytest.raises(ValueError, match=message):
        session_conf(app_name="job", **kwargs)


# --- path helpers shared by both engines ----------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("location", "expected"),
    [
        pytest.param("/data/cat.db", "/data/cat.db", id="path"),
        pytest.param("jdbc:sqlite:/data/cat.db", "/data/cat.db", id="jdbc"),
        pytest.param("jdbc:sqlite:file:/data/cat.db", "/data/cat.db", id="jdbc-file"),
        pytest.param("sqlite:////data/cat.db", "/data/cat.db", id="sqlalchemy-absolute"),
    ],
)
def test_sqlite_file_accepts_every_spelling_of_one_file(location: str, expected: str) -> None:
    assert sqlite_file(location) == Path(expected)


def test_sqlite_file_resolves_relative_paths_against_the_cwd(monkeypatch: pytest.MonkeyPatch, tmp_path: Path) -> None:
    monkeypatch.chdir(tmp_path)
    assert sqlite_file("sqlite:///rel/cat.db") == tmp_path / "rel" / "cat.db"
    assert sqlite_file("rel/cat.db") == tmp_path / "rel" / "cat.db"


@pytest.mark.parametrize("location", ["sqlite:///:memory:", "jdbc:sqlite::memory:", ":memory:", ""])
def test_sqlite_file_rejects_in_memory_databases(location: str) -> None:
    with pytest.raises(ValueError, match="not a sqlite file"):
        sqlite_file(location)


def test_create_catalog_tables_is_idempotent_and_gives_pyiceberg_a_v1_catalog(
    tmp_path: Path, caplog: pytest.LogCaptureFixture
) -> None:
    # Given a catalog file created twice (a second process starting on an existing catalog)
    db = create_catalog_tables(f"jdbc:sqlite:{tmp_path / 'nested' / 'catalog.db'}")
    assert create_catalog_tables(db) == db == tmp_path / "nested" / "catalog.db"

    # When pyiceberg opens it and writes through it
    with caplog.at_level(logging.WARNING, logger="pyiceberg"):
        catalog = local_catalog(db, tmp_path / "wh")
    catalog.create_namespace("ns")
    catalog.create_table("ns.t", schema=pa.schema([pa.field("id", pa.int64())]))

    # Then it found the V1 schema (no downgrade warning) and tagged its row as a table, like Iceberg's JDBC catalog
    assert not [r for r in caplog.records if "v0" in r.getMessage()]
    with closing(sqlite3.connect(db)) as conn:
        assert conn.execute("SELECT catalog_name, iceberg_type FROM iceberg_tables").fetchall() == [("lake", "TABLE")]


def test_warehouse_uri_normalises_paths_and_file_uris(tmp_path: Path) -> None:
    expected = f"file://{tmp_path}/wh"
    assert warehouse_uri(tmp_path / "wh") == expected
    assert warehouse_uri(f"file://{tmp_path}/wh/") == expected
    assert warehouse_uri(f"file:{tmp_path}/wh") == expected
    with pytest.raises(ValueError, match="file://"):
        warehouse_uri("s3://bucket/wh")


# --- the jar cache --------------------------------------------------------------------------------------------------


@dataclass(frozen=True, slots=True)
class RacedCache:
    """A jar cache two threads built at once from cold: its root, each thread's result, the jarjar runs it took."""

    root: Path
    results: tuple[list[Path], list[Path]]
    jarjar_runs: int


@pytest.fixture(scope="module")
def raced_cache(tmp_path_factory: pytest.TempPathFactory) -> RacedCache:
    root = tmp_path_factory.mktemp("jar-cache")
    results: list[list[Path]] = [[], []]
    errors: list[BaseException] = []
    runs: list[object] = []
    start = threading.Barrier(2)
    real_run = subprocess.run

    def counting_run(*args: Any, **kwargs: Any) -> Any:
        runs.append(args)  # list.append is atomic under the GIL
        return real_run(*args, **kwargs)

    def build(slot: int) -> None:
        try:
            start.wait()
            results[slot] = iceberg_jars(root)
        except BaseException as e:  # re-raised in the test thread below
            errors.append(e)

    with pytest.MonkeyPatch.context() as mp:
        mp.setattr("lakesync.spark.runtime.subprocess.run", counting_run)
        threads = [threading.Thread(target=build, args=(slot,)) for slot in (0, 1)]
        for t in threads:
            t.start()
        for t in threads:
            t.join()
    if errors:
        raise errors[0]
    return RacedCache(root=root, results=(results[0], results[1]), jarjar_runs=len(runs))


def _visible(directory: Path) -> list[str]:
    return sorted(p.name for p in directory.iterdir() if not p.name.startswith("."))


def _leftovers(directory: Path) -> list[str]:
    """Hidden entries other than the builders' lock files: temporary or discarded build directories."""
    return sorted(p.name for p in directory.iterdir() if p.name.startswith(".") and not p.name.endswith(".lock"))


def test_iceberg_jars_racing_threads_build_the_cache_once(raced_cache: RacedCache) -> None:
    first, second = raced_cache.results

    # Then both threads got the same existing jars, from one keyed directory built by one set of jarjar runs
    assert first == second
    assert all(p.is_file() for p in first)
    assert raced_cache.jarjar_runs == 3
    assert _visible(raced_cache.root) == [first[1].parent.name]
    assert _leftovers(raced_cache.root) == []
    assert first[0] == runtime.iceberg_runtime_jar()
    assert first[-1] == runtime.SQLITE_JDBC_JAR
    assert [p.parent for p in first[1:4]] == [raced_cache.root / first[1].parent.name] * 3


def test_iceberg_jars_reuses_the_cache_without_running_jarjar(
    raced_cache: RacedCache, monkeypatch: pytest.MonkeyPatch
) -> None:
    # Given a built cache and its files' mtimes
    root, built = raced_cache.root, raced_cache.results[0]
    before = {p: p.stat().st_mtime_ns for p in built[1:4]}

    def no_jarjar(*args: object, **kwargs: object) -> subprocess.CompletedProcess[str]:
        raise AssertionError("jarjar ran although the cache was complete")

    monkeypatch.setattr("lakesync.spark.runtime.subprocess.run", no_jarjar)

    # When asking again
    again = iceberg_jars(root)

    # Then the same files come back, untouched
    assert again == built
    assert {p: p.stat().st_mtime_ns for p in again[1:4]} == before


def test_iceberg_jars_rebuilds_an_incomplete_cache(raced_cache: RacedCache, tmp_path: Path) -> None:
    # Given a copy of the cache with one relocated jar deleted
    root, built = raced_cache.root, raced_cache.results[0]
    copy = tmp_path / "cache"
    shutil.copytree(root, copy)
    key_dir = copy / built[1].parent.name
    (key_dir / built[2].name).unlink()

    # When asking for the jars
    jars = iceberg_jars(copy)

    # Then the directory is complete again and nothing else is left behind
    assert jars == [*built[:1], *(key_dir / p.name for p in built[1:4]), built[4]]
    assert all(p.is_file() for p in jars)
    assert _visible(copy) == [key_dir.name]
    assert _leftovers(copy) == []


def test_relocated_jackson_sits_under_iceberg_shaded_package(raced_cache: RacedCache) -> None:
    core, databind, annotations = raced_cache.results[0][1:4]

    for jar, artifact in ((core, "core"), (databind, "databind"), (annotations, "annotation")):
        with zipfile.ZipFile(jar) as z:
            classes = [n for n in z.namelist() if n.endswith(".class")]
        # Every class moved under Iceberg's shaded prefix; no multi-release or module leftovers
        assert classes
        assert all(n.startswith(SHADED_PREFIX + artifact + "/") for n in classes), jar.name
        assert not [n for n in z.namelist() if n.startswith(("META-INF/versions/", "META-INF/services/"))]
    with zipfile.ZipFile(core) as z:
        assert SHADED_PREFIX + "core/JsonFactoryBuilder.class" in z.namelist()


@pytest.mark.parametrize("missing", ["java", "jarjar", "sqlite-jdbc"])
def test_iceberg_jars_missing_tool_says_run_make_setup(
    missing: str, monkeypatch: pytest.MonkeyPatch, tmp_path: Path
) -> None:
    # Given one piece of the runtime missing and an empty cache
    if missing == "java":
        monkeypatch.setattr("lakesync.spark.runtime.shutil.which", lambda name: None)
    elif missing == "jarjar":
        monkeypatch.setattr(runtime, "JARJAR_JAR", tmp_path / "no-jarjar.jar")
    else:
        monkeypatch.setattr(runtime, "SQLITE_JDBC_JAR", tmp_path / "no-sqlite-jdbc.jar")

    # Then the error names the fix
    with pytest.raises(SparkSetupError, match="make setup"):
        iceberg_jars(tmp_path / "cache")
    assert not (tmp_path / "cache").exists() or not any((tmp_path / "cache").iterdir())
