"""The Apache Iceberg runtime for local Spark: find the jars, repair them once, cache the result.

The Iceberg Spark runtime comes from the PyPI package ``snowpark-connect-deps-iceberg`` (1.0.3: Iceberg 1.10.2, the
nearest release on PyPI to AWS Glue 5.1's Iceberg 1.10.0; the infra tests check the two stay on one line). As shipped
it lacks the relocated Jackson that Iceberg's classes reference (``org.apache.iceberg.shaded.com.fasterxml.jackson.*``).
We rebuild that relocation from pyspark's own ``jackson-{core,databind,annotations}`` jars with Debian's jarjar, using
the rule :data:`JACKSON_RULE`.

Invariants:
    * The re-relocated jars live in ``<cache_dir>/<key>/`` where ``key`` names the source Jackson versions and the
      recipe revision. That directory is only ever created by an atomic ``rename`` of a fully built temporary
      directory, so readers (who take no lock) never see a partial cache.
    * Builders serialise on an ``flock`` of ``<cache_dir>/.<key>.lock`` and re-check under it, so processes or
      threads racing on a cold cache build it once; the others wait and reuse it.
    * A cached directory is reused as is: no rebuild, no rewrite (so its files keep their mtime).
    * Multi-release entries (``META-INF/versions/*``), ``module-info.class`` and ``META-INF/services/*`` are dropped
      before relocation: jarjar would flatten the Java 9+ variants over the Java 8 classes, and the service files
      would advertise the *unrelocated* Jackson classes a second time.

Only the local runtime needs this. On AWS Glue, Iceberg comes from ``--datalake-formats iceberg``.
"""

from __future__ import annotations

import fcntl
import os
import re
import shutil
import subprocess
import tempfile
import uuid
import zipfile
from collections.abc import Iterator, Sequence
from concurrent.futures import ThreadPoolExecutor
from contextlib import contextmanager
from pathlib import Path

from lakesync.core.errors import LakeSyncError

__all__ = [
    "JACKSON_RULE",
    "JARJAR_JAR",
    "SQLITE_JDBC_JAR",
    "SparkSetupError",
    "default_cache_dir",
    "iceberg_jars",
    "iceberg_runtime_jar",
    "iceberg_runtime_version",
]

JACKSON_RULE = "rule com.fasterxml.jackson.** org.apache.iceberg.shaded.com.fasterxml.jackson.@1"
"""The jarjar rule that moves Jackson where Iceberg's runtime expects it."""

JARJAR_JAR = Path("/usr/share/java/jarjar.jar")
"""Debian ``libjarjar-java``; run as ``java -jar jarjar.jar process <rules> <in> <out>``."""

SQLITE_JDBC_JAR = Path("/usr/share/java/sqlite-jdbc.jar")
"""Debian ``libxerial-sqlite-jdbc-java``: the JDBC driver of the local catalog (native part in the ``-jni`` package)."""

_SCALA_BINARY = "2.12"  # the Scala line pyspark 3.5 from PyPI is built with
_RUNTIME_JAR_RE = re.compile(rf"^iceberg-spark-runtime-3\.5_{re.escape(_SCALA_BINARY)}-(?P<version>[\d.]+)\.jar$")
_JACKSON_JAR_RE = re.compile(r"^jackson-(?P<artifact>core|databind|annotations)-(?P<version>2\.[\d.]+)\.jar$")
_JACKSON_ARTIFACTS = ("core", "databind", "annotations")
_PROBE_CLASS = "org/apache/iceberg/shaded/com/fasterxml/jackson/core/JsonFactoryBuilder.class"
_RECIPE = "r1"  # bump when the way the jars are built changes, so old caches are not reused
_DROPPED_PREFIXES = ("META-INF/versions/", "META-INF/services/")
_SETUP_HINT = "run `make setup` (it installs the missing packages)"


class SparkSetupError(LakeSyncError):
    """The local Spark + Iceberg runtime cannot be assembled (missing Java, jarjar, JDBC driver or jars)."""

    code = "SPARK_SETUP_ERROR"


def default_cache_dir() -> Path:
    """Where re-relocated jars are cached unless a caller says otherwise: ``~/.cache/lakesync/jars``."""
    return Path.home() / ".cache" / "lakesync" / "jars"


def iceberg_runtime_jar() -> Path:
    """The Iceberg Spark 3.5 runtime jar shipped by ``snowpark-connect-deps-iceberg``.

    Returns:
        Path of the newest ``iceberg-spark-runtime-3.5_2.12-*.jar`` in the package.

    Raises:
        SparkSetupError: the package is missing or ships no matching jar.
    """
    try:
        import snowpark_connect_deps_iceberg as deps  # type: ignore[import-untyped]  # ships no py.typed
    except ImportError as e:
        raise SparkSetupError(f"snowpark-connect-deps-iceberg is not installed; {_SETUP_HINT}") from e
    jars: list[Path] = [Path(p) for p in deps.list_jars()]
    found = [(m["version"], p) for p in jars if (m := _RUNTIME_JAR_RE.match(p.name))]
    if not found:
        raise SparkSetupError(f"no iceberg-spark-runtime-3.5_{_SCALA_BINARY} jar in {deps.get_jars_dir()}")
    return max(found, key=lambda vp: _version_tuple(vp[0]))[1]


def iceberg_runtime_version() -> str:
    """The Iceberg version of :func:`iceberg_runtime_jar` (e.g. ``"1.10.2"``).

    Raises:
        SparkSetupError: the package is missing or ships no matching jar.
    """
    m = _RUNTIME_JAR_RE.match(iceberg_runtime_jar().name)
    assert m is not None  # the jar was selected by this pattern
    return m["version"]


def iceberg_jars(cache_dir: Path | None = None) -> list[Path]:
    """Every jar local Spark needs for Iceberg on the sqlite JDBC catalog, building the Jackson fix once.

    Args:
        cache_dir: Root of the jar cache; defaults to :func:`default_cache_dir`.

    Returns:
        The Iceberg runtime jar, the re-relocated jackson core/databind/annotations jars and the sqlite JDBC jar,
        in that order, ready for ``spark.jars``.

    Raises:
        SparkSetupError: Java, jarjar, the sqlite JDBC driver or a source jar is missing, or jarjar failed.
    """
    java = _require_java()
    if not SQLITE_JDBC_JAR.is_file():
        raise SparkSetupError(f"the sqlite JDBC driver {SQLITE_JDBC_JAR} is missing; {_SETUP_HINT}")
    runtime = iceberg_runtime_jar()
    sources = _jackson_sources(_pyspark_jars_dir())
    root = cache_dir if cache_dir is not None else default_cache_dir()
    target = root / _cache_key(sources)
    names = [_relocated_name(src) for src in sources]
    if not _complete(target, names):
        _build(java, sources, names, target)
    return [runtime, *(target / name for name in names), SQLITE_JDBC_JAR]


def _require_java() -> str:
    java = shutil.which("java")
    if java is None:
        raise SparkSetupError(f"`java` is not on PATH (local Spark needs Java 17); {_SETUP_HINT}")
    return java


def _pyspark_jars_dir() -> Path:
    try:
        import pyspark
    except ImportError as e:
        raise SparkSetupError(f"pyspark is not installed; {_SETUP_HINT}") from e
    jars = Path(pyspark.__file__ or "").parent / "jars"
    if not pyspark.__file__ or not jars.is_dir():
        raise SparkSetupError(f"pyspark has no jars directory at {jars}; reinstall it with `make setup`")
    return jars


def _jackson_sources(jars_dir: Path) -> list[Path]:
    """pyspark's jackson core, databind and annotations jars, in :data:`_JACKSON_ARTIFACTS` order."""
    by_artifact: dict[str, Path] = {}
    for path in sorted(jars_dir.glob("jackson-*.jar")):
        if m := _JACKSON_JAR_RE.match(path.name):
            by_artifact[m["artifact"]] = path
    missing = [a for a in _JACKSON_ARTIFACTS if a not in by_artifact]
    if missing:
        raise SparkSetupError(f"pyspark's jars directory {jars_dir} lacks jackson-{'/'.join(missing)} 2.x")
    return [by_artifact[a] for a in _JACKSON_ARTIFACTS]


def _cache_key(sources: Sequence[Path]) -> str:
    versions = sorted({_version_of(src) for src in sources}, key=_version_tuple)
    return f"iceberg-jackson-{'-'.join(versions)}-{_RECIPE}"


def _version_of(jar: Path) -> str:
    m = _JACKSON_JAR_RE.match(jar.name)
    assert m is not None  # sources were selected by this pattern
    return m["version"]


def _relocated_name(src: Path) -> str:
    return f"iceberg-shaded-{src.name}"


def _version_tuple(version: str) -> tuple[int, ...]:
    return tuple(int(part) for part in version.split(".") if part)


def _build(java: str, sources: Sequence[Path], names: Sequence[str], target: Path) -> None:
    """Build the relocated jars in a private temporary directory, then publish it with one atomic rename."""
    if not JARJAR_JAR.is_file():
        raise SparkSetupError(f"jarjar ({JARJAR_JAR}) is missing; {_SETUP_HINT}")
    target.parent.mkdir(parents=True, exist_ok=True)
    with _exclusive(target.with_name(f".{target.name}.lock")):
        if _complete(target, names):
            return  # whoever held the lock before us built it
        work = Path(tempfile.mkdtemp(prefix=f".{target.name}.", suffix=".tmp", dir=target.parent))
        try:
            rules = work / "rules.txt"
            rules.write_text(JACKSON_RULE + "\n", encoding="utf-8")
            with ThreadPoolExecutor(max_workers=len(sources)) as pool:
                jobs = [pool.submit(_relocate, java, rules, s, work / n) for s, n in zip(sources, names, strict=True)]
                for job in jobs:
                    job.result()
            rules.unlink()
            _check_probe(work / names[0])
            work.chmod(0o755)  # mkdtemp makes it private; the published cache is readable like any other
            if target.exists():
                # Incomplete (someone deleted a file): move it aside rather than patch it under a reader's feet.
                _discard(target)
            os.rename(work, target)
        finally:
            if work.exists():
                shutil.rmtree(work, ignore_errors=True)


@contextmanager
def _exclusive(lock_file: Path) -> Iterator[None]:
    """An exclusive ``flock`` on ``lock_file``: one builder at a time, across threads and processes."""
    with lock_file.open("a") as handle:
        fcntl.flock(handle.fileno(), fcntl.LOCK_EX)
        try:
            yield
        finally:
            fcntl.flock(handle.fileno(), fcntl.LOCK_UN)


def _complete(target: Path, names: Sequence[str]) -> bool:
    return all((target / name).is_file() for name in names)


def _relocate(java: str, rules: Path, src: Path, out: Path) -> None:
    stripped = out.with_name(out.name + ".in.jar")
    _strip(src, stripped)
    proc = subprocess.run(
        [java, "-jar", str(JARJAR_JAR), "process", str(rules), str(stripped), str(out)],
        capture_output=True,
        text=True,
        check=False,
    )
    stripped.unlink()
    if proc.returncode != 0 or not out.is_file():
        detail = (proc.stderr or proc.stdout).strip()[-2000:]
        raise SparkSetupError(f"jarjar failed to relocate {src.name} (exit {proc.returncode}): {detail}")


def _strip(src: Path, dst: Path) -> None:
    with zipfile.ZipFile(src) as zin, zipfile.ZipFile(dst, "w", compression=zipfile.ZIP_DEFLATED) as zout:
        for info in zin.infolist():
            name = info.filename
            if name.startswith(_DROPPED_PREFIXES) or name.endswith("module-info.class"):
                continue
            zout.writestr(info, zin.read(info))


def _check_probe(core_jar: Path) -> None:
    with zipfile.ZipFile(core_jar) as z:
        if _PROBE_CLASS not in z.namelist():
            raise SparkSetupError(f"relocation produced no {_PROBE_CLASS} in {core_jar.name}; jarjar ignored the rule")


def _discard(path: Path) -> None:
    aside = path.with_name(f".{path.name}.stale-{uuid.uuid4().hex}")
    try:
        os.rename(path, aside)
    except FileNotFoundError:
        return
    shutil.rmtree(aside, ignore_errors=True)
