"""The Lambda assets as deployed (the staged copies in the cloud assembly): the API functions' asset, the
materialise function's, which the connector poller and admin share (the same plus the SQL drivers), and the flush
function's (the same plus ``lakesync.lake``, pyiceberg, pyiceberg-core and pyarrow). Each is self-sufficient with
only the runtime's AWS SDK beside it, every lakesync/functions import inside it resolvable, built for its functions'
architecture (ARM64; x86_64 for the drivers' and the flush assets) and the runtime's Python, with no wheel needing a
newer glibc than the runtime's Amazon Linux 2; the API and drivers' assets are free of the Spark/Iceberg stack and the
flush asset carries only the lake engine (which runs from it here, on x86_64), trimmed of what the flush never loads;
each under three quarters of Lambda's unzipped limit; plus the pins they were built from, the modes they are zipped
with, and their independence of the interpreter that builds them."""

from __future__ import annotations

import ast
import csv
import hashlib
import json
import os
import platform
import re
import shutil
import subprocess
import sys
from pathlib import Path

import pytest
from lakesync_infra import packaging
from lakesync_infra.config import LakeSyncConfig
from lakesync_infra.function_access import driver_functions
from lakesync_infra.packaging import (
    FLUSH_EXTRAS,
    FLUSH_TRIMMED,
    LAMBDA_GLIBC,
    LAMBDA_PYTHON,
    MATERIALISE_EXTRAS,
    RUNTIME_PROVIDED,
    PackagingError,
    build_flush_asset,
    build_lambda_asset,
    directory_size,
    lambda_requirements,
    pinned_uv_version,
    uv,
)
from packaging.tags import Tag, compatible_tags, cpython_tags, parse_tag

from tests.infra.conftest import OPTIONS

ROOT = Path(packaging.__file__).resolve().parents[2]
HEAVY = ("pyspark", "pyiceberg", "pyarrow", "pandas", "moto", "boto3", "botocore")
# What the Lambda runtime puts on sys.path besides the function's code: the AWS SDK and its dependencies.
SDK_MODULES = ("boto3", "botocore", "s3transfer", "jmespath", "dateutil", "six.py", "urllib3")

_PROBE = """
import importlib, json, sys
loaded = {}
for handler in sys.argv[1].split(","):
    module, _, attr = handler.rpartition(".")
    assert callable(getattr(importlib.import_module(module), attr)), handler
import aws_xray_sdk.core  # the tracer's SDK, imported on Lambda where tracing runs
print(json.dumps({"modules": sorted(sys.modules), "files": sorted(
    getattr(m, "__file__", None) or "" for m in list(sys.modules.values()))}))
"""

WITH_DRIVERS = driver_functions(LakeSyncConfig.from_settings("dev", {"sqlSourcePulls": OPTIONS["sqlSourcePulls"]}))
"""The functions the test environment deploys with the SQL drivers (``sqlSourcePulls`` adds ``pull``)."""


MATERIALISE = "materialise"
"""The asset with the SQL drivers (named after its first function; :data:`WITH_DRIVERS` all use it)."""
FLUSH = "flush"
"""The flush function's asset (the lake engine)."""
ASSETS = ("api", MATERIALISE, FLUSH)
MACHINE = {"api": "aarch64", MATERIALISE: "x86_64", FLUSH: "x86_64"}
"""The CPU each asset is built for (the functions' ``Architectures``: arm64, x86_64 for materialise and flush)."""
ELF_MACHINE = {"aarch64": 183, "x86_64": 62}
"""``e_machine`` of an ELF file built for each CPU."""
EXTRAS = {"api": ("aws",), MATERIALISE: MATERIALISE_EXTRAS, FLUSH: FLUSH_EXTRAS}
SQL_DRIVERS = ("psycopg", "psycopg_binary", "pymysql", "google/cloud/bigquery")
LAKE_ENGINE = ("pyiceberg", "pyiceberg_core", "pyarrow")
LAMBDA_UNZIPPED_LIMIT = 262_144_000
"""Lambda's limit on a function's unzipped code with its layers (``CodeSizeUnzipped``, in bytes: "250 MB" on the quotas
page; https://docs.aws.amazon.com/lambda/latest/api/API_AccountLimit.html)."""
HEADROOM = 0.25
"""The share of the limit every asset leaves free, so that a dependency's next release cannot break the deploy."""


def _staged(cfn, synth, names) -> Path:
    keys = {fn["Code"]["S3Key"] for name, fn in cfn.functions().items() if name in names}
    (key,) = keys
    staged = synth.outdir / f"asset.{key.removesuffix('.zip')}"
    assert staged.is_dir()
    return staged


def _asset_of(name: str) -> str:
    return FLUSH if name == FLUSH else MATERIALISE if name in WITH_DRIVERS else "api"


@pytest.fixture(scope="module")
def assets(cfn, synth) -> dict[str, Path]:
    """The staged asset directories: ``api`` (every function but those below, one shared asset), ``materialise``
    (materialise, the connector poller and admin) and ``flush``."""
    return {asset: _staged(cfn, synth, {n for n in cfn.functions() if _asset_of(n) == asset}) for asset in ASSETS}


@pytest.fixture(scope="module", params=ASSETS)
def asset(request, assets) -> Path:
    return assets[request.param]


def _handlers(cfn, asset_name: str) -> list[str]:
    return sorted({fn["Handler"] for name, fn in cfn.functions().items() if _asset_of(name) == asset_name})


@pytest.fixture(scope="module")
def sdk_only(tmp_path_factory) -> Path:
    """A directory holding just the AWS SDK (as the Lambda runtime provides it), linked from this venv."""
    import boto3

    site = Path(boto3.__file__).resolve().parent.parent
    target = tmp_path_factory.mktemp("runtime-sdk")
    for name in SDK_MODULES:
        (target / name).symlink_to(site / name)
    return target


@pytest.mark.parametrize("asset_name", ASSETS)
def test_asset_handlers_import_with_only_the_runtime_sdk_beside_them(cfn, assets, sdk_only, tmp_path, asset_name):
    # Given a clean interpreter whose import path is the asset and the runtime's SDK, nothing else
    asset = assets[asset_name]
    handlers = _handlers(cfn, asset_name)
    code = f"import sys; sys.path[:0] = [{str(asset)!r}, {str(sdk_only)!r}]\n" + _PROBE
    # When every handler of the template is imported there
    done = subprocess.run(
        [sys.executable, "-I", "-S", "-c", code, ",".join(handlers)],
        capture_output=True,
        text=True,
        check=False,
        cwd=tmp_path,
        env={"AWS_ENDPOINT_URL": "http://127.0.0.1:9", "AWS_DEFAULT_REGION": "us-east-1"},
    )
    # Then they all import, and everything they loaded came from the asset, the SDK or the standard library
    assert done.returncode == 0, done.stderr
    report = json.loads(done.stdout)
    assert not [m for m in report["modules"] if m.split(".")[0] in HEAVY[:5]]
    allowed = [str(asset), str(sdk_only), str(Path(ast.__file__).parent), str(Path(ast.__file__).resolve().parent)]
    outside = [f for f in report["files"] if f and not any(f.startswith(prefix + "/") for prefix in allowed)]
    assert outside == []


def _module_files(asset: Path) -> set[str]:
    mods = set()
    for path in asset.rglob("*.py"):
        parts = path.relative_to(asset).with_suffix("").parts
        mods.add(".".join(parts[:-1] if parts[-1] == "__init__" else parts))
    return mods


def test_every_lakesync_import_in_the_asset_resolves_inside_it(asset):
    # Given every import statement of the asset's lakesync and functions code, lazy ones inside functions included
    available = _module_files(asset)
    wanted = {}
    for root in ("lakesync", "functions"):
        for path in (asset / root).rglob("*.py"):
            for node in ast.walk(ast.parse(path.read_text(encoding="utf-8"))):
                names = []
                if isinstance(node, ast.Import):
                    names = [alias.name for alias in node.names]
                elif isinstance(node, ast.ImportFrom) and node.module and node.level == 0:
                    names = [node.module]
                for name in names:
                    if name.split(".")[0] in ("lakesync", "functions"):
                        wanted.setdefault(name, path.relative_to(asset).as_posix())
    # Then each imported module is part of the asset (the left-out packages are never imported on this path)
    assert wanted
    assert {name: where for name, where in wanted.items() if name not in available} == {}


@pytest.mark.parametrize("asset_name", ASSETS)
def test_asset_has_no_spark_or_bundled_sdk_and_only_the_flush_has_the_lake_engine(assets, asset_name):
    # Given the asset's top-level packages
    asset = assets[asset_name]
    top = {p.name.split("-")[0].lower() for p in asset.iterdir()}
    # Then none of the heavy or runtime-provided distributions is bundled -- but the flush function's lake engine
    # (pyiceberg, its Rust core and pyarrow; no pandas) in its asset
    engine = set(LAKE_ENGINE) if asset_name == FLUSH else set()
    assert top & {*HEAVY, *LAKE_ENGINE, *(d.replace("-", "_") for d in RUNTIME_PROVIDED)} == engine
    assert not (asset / "lakesync" / "spark").exists() and not (asset / "lakesync" / "local").exists()
    assert (asset / "lakesync" / "lake").is_dir() == (asset_name == FLUSH)


@pytest.mark.parametrize("asset_name", ASSETS)
def test_asset_extensions_are_built_for_its_architecture_and_the_runtime_python(assets, asset_name):
    # Given the compiled extension modules in the asset, and every shared object (pyarrow's own libraries too)
    libraries = [p for p in assets[asset_name].rglob("*.so*") if p.is_file() and ".so" in p.suffixes]
    extensions = sorted(p.name for p in libraries if "cpython-" in p.name or ".abi3." in p.name)
    # Then each extension is for the function's CPU on Linux, and either for the runtime's CPython or the stable ABI
    tag = f"cpython-{LAMBDA_PYTHON.replace('.', '')}"
    assert extensions
    assert all(MACHINE[asset_name] in name or "abi3" in name for name in extensions), extensions
    assert all(tag in name or "abi3" in name for name in extensions), extensions
    # And every shared object is an ELF file for that CPU
    machines = {p.name: _elf_machine(p) for p in libraries}
    assert {name: m for name, m in machines.items() if m != ELF_MACHINE[MACHINE[asset_name]]} == {}


def _elf_machine(path: Path) -> int | None:
    """``e_machine`` of an ELF file (``None``: not ELF)."""
    with path.open("rb") as f:
        header = f.read(20)
    if header[:4] != b"\x7fELF":
        return None
    return int.from_bytes(header[18:20], "little" if header[5] == 1 else "big")


def _runtime_tags(machine: str) -> set[Tag]:
    """Every wheel tag the Lambda runtime accepts: its CPython, ``machine``, manylinux up to its glibc, or pure."""
    major, minor = (int(part) for part in LAMBDA_PYTHON.split("."))
    glibc_major, glibc_max = LAMBDA_GLIBC
    platforms = [f"manylinux_{glibc_major}_{m}_{machine}" for m in range(glibc_max, 4, -1)]
    platforms += [f"{legacy}_{machine}" for legacy in ("manylinux2014", "manylinux2010", "manylinux1")]  # 2.17/12/5
    return {
        *cpython_tags((major, minor), platforms=platforms),
        *compatible_tags((major, minor), f"cp{major}{minor}", platforms=platforms),
    }


@pytest.mark.parametrize("asset_name", ASSETS)
def test_every_wheel_in_the_asset_runs_on_the_runtime_os(assets, asset_name):
    # Given the tags of every wheel installed in the asset (its dist-info WHEEL file)
    accepted = _runtime_tags(MACHINE[asset_name])
    wheels = {}
    for wheel in assets[asset_name].glob("*.dist-info/WHEEL"):
        lines = wheel.read_text(encoding="utf-8").splitlines()
        tags = [line.removeprefix("Tag:").strip() for line in lines if line.startswith("Tag:")]
        wheels[wheel.parent.name] = {t for tag in tags for t in parse_tag(tag)}
    # Then each is pure Python or built for the runtime's CPython and CPU on a glibc no newer than Amazon Linux 2's
    # (a manylinux_2_28 wheel would install here and fail to import on the python3.11 runtime)
    assert wheels
    assert {name: sorted(map(str, tags)) for name, tags in wheels.items() if not tags & accepted} == {}


@pytest.mark.parametrize("asset_name", ASSETS)
def test_asset_holds_exactly_the_locked_runtime_dependencies(assets, asset_name):
    # Given the distributions installed in the asset
    stems = [p.name.removesuffix(".dist-info").rsplit("-", 1) for p in assets[asset_name].glob("*.dist-info")]
    installed = {name.lower().replace("_", "-"): version for name, version in stems}
    # Then they are the lock pins of its extras (aws; and sql for materialise, lake for flush), minus the SDK the
    # runtime provides and what the flush never loads
    extras = EXTRAS[asset_name]
    pins = dict(_pin(line) for line in lambda_requirements(extras=extras) if _on_lambda(line, MACHINE[asset_name]))
    trimmed = {g.removesuffix("-*.dist-info") for g in FLUSH_TRIMMED if g.endswith(".dist-info")}
    expected = {name.lower(): version for name, version in pins.items()}
    if asset_name == FLUSH:  # but what the flush never loads (Pygments)
        expected = {name: version for name, version in expected.items() if name not in trimmed}
    assert installed == expected


def _pin(line: str) -> tuple[str, str]:
    name, version = line.split(";")[0].strip().split("==")
    return name, version


def _on_lambda(line: str, machine: str) -> bool:
    """Whether a lock line's environment marker holds on the Lambda runtime (Linux, ``machine``, CPython)."""
    from packaging.markers import Marker

    _, _, marker = line.partition(";")
    lambda_env = {
        "sys_platform": "linux",
        "platform_system": "Linux",
        "platform_machine": machine,
        "implementation_name": "cpython",
        "platform_python_implementation": "CPython",
        "python_version": LAMBDA_PYTHON,
        "python_full_version": f"{LAMBDA_PYTHON}.0",
    }
    return not marker.strip() or Marker(marker.strip()).evaluate(lambda_env)


OURS = ("lakesync", "functions")


def _pyc_of(source: Path) -> Path:
    return source.parent / "__pycache__" / f"{source.stem}.cpython-{LAMBDA_PYTHON.replace('.', '')}.pyc"


@pytest.mark.parametrize("asset_name", ASSETS)
def test_asset_ships_unchecked_bytecode_for_the_runtime_python(assets, asset_name):
    # Given the asset's Python sources: ours, and those of its dependencies
    asset = assets[asset_name]
    sources = sorted(asset.rglob("*.py"))
    ours = [p for p in sources if p.relative_to(asset).parts[0] in OURS]
    # Then each of ours has the runtime Python's bytecode beside it, and so does every dependency's but the flush
    # asset's (whose lake engine's bytecode would not fit under Lambda's limit)
    compiled = sources if asset_name != FLUSH else ours
    assert ours and [p for p in compiled if not _pyc_of(p).is_file()] == []
    # And every file is hash-based and unchecked (PEP 552 flags 0b01): used whatever the deployed timestamps
    flags = {int.from_bytes(_pyc_of(p).read_bytes()[4:8], "little") for p in compiled}
    assert flags == {0b01}


def test_asset_handlers_import_from_bytecode_without_reading_our_sources(cfn, assets, sdk_only, tmp_path):
    # Given a copy of the API functions' asset whose every lakesync and functions source file now fails when run
    asset = tmp_path / "asset"
    shutil.copytree(assets["api"], asset, symlinks=True)
    replaced = 0
    for root in OURS:
        for source in (asset / root).rglob("*.py"):
            source.write_text("raise RuntimeError('compiled from the source, not the bytecode')\n", encoding="utf-8")
            replaced += 1
    # When every handler of that asset is imported in a clean interpreter that writes no bytecode, as on Lambda
    code = f"import sys; sys.path[:0] = [{str(asset)!r}, {str(sdk_only)!r}]\n" + _PROBE
    done = subprocess.run(
        [sys.executable, "-I", "-S", "-B", "-c", code, ",".join(_handlers(cfn, "api"))],
        capture_output=True,
        text=True,
        check=False,
        cwd=tmp_path,
        env={"AWS_ENDPOINT_URL": "http://127.0.0.1:9", "AWS_DEFAULT_REGION": "us-east-1"},
    )
    # Then they import: the runtime runs the shipped bytecode and never compiles our modules
    assert replaced > 50
    assert done.returncode == 0, done.stderr


def test_only_the_materialise_asset_carries_the_sql_drivers(assets):
    # Given the assets
    # Then the drivers of every destination type are in the materialise function's asset, and none in the others
    for driver in SQL_DRIVERS:
        assert (assets[MATERIALISE] / driver).is_dir(), driver
        assert not (assets["api"] / driver).exists(), driver
        assert not (assets[FLUSH] / driver).exists(), driver


@pytest.mark.parametrize("asset_name", ASSETS)
def test_asset_leaves_a_quarter_of_the_lambda_unzipped_limit_free(assets, asset_name):
    # Given the asset's unzipped size (what Lambda counts against CodeSizeUnzipped)
    size = directory_size(assets[asset_name])
    # Then it stays under three quarters of the limit: the flush function's too, pyarrow and pyiceberg-core included
    share = size / LAMBDA_UNZIPPED_LIMIT
    assert share < 1 - HEADROOM, f"{asset_name}: {size:,} bytes, {share:.1%} of the limit"


def test_api_and_drivers_assets_stay_small(assets):
    # Given the assets' unzipped sizes
    api, materialise = directory_size(assets["api"]), directory_size(assets[MATERIALISE])
    # Then the API functions' is a small fraction of Lambda's 250 MB limit and well under the 50 MB goal
    assert api < 25 * 1024 * 1024, api
    # And the materialise function's, drivers and BigQuery's client included, stays under half the limit
    assert materialise < 125 * 1024 * 1024, materialise


def test_deployment_guide_states_each_asset_size(assets):
    # Given the sizes the deployment guide states for the three assets (decimal MB, unzipped)
    text = " ".join((ROOT / "docs" / "deployment.md").read_text(encoding="utf-8").split())
    stated = re.search(
        r"Unzipped, at this version: API functions ([\d.]+) MB .*? drivers ([\d.]+) MB .*? flush ([\d.]+) MB", text
    )
    assert stated, "the guide no longer states the assets' sizes"
    # Then each is within 5 % of the asset as built
    sizes = {name: directory_size(assets[name]) for name in ASSETS}
    off = {name: (mb, sizes[name]) for name, mb in zip(ASSETS, stated.groups(), strict=True)
           if abs(float(mb) * 1e6 - sizes[name]) > 0.05 * sizes[name]}  # fmt: skip
    assert off == {}


_NEVER_SHIPPED = re.compile(r".*\.(pyi|pyx|pxd|pxi|h|hpp|c|cc|cpp)")


@pytest.mark.parametrize("asset_name", ASSETS)
def test_asset_ships_no_tests_stubs_sources_headers_or_library_copies(assets, asset_name):
    # Given the asset's files and directories
    asset = assets[asset_name]
    paths = [p.relative_to(asset) for p in asset.rglob("*")]
    # Then no test suite, type stub, C/C++/Cython source or header is in it, nor uv's lock on its directory
    assert [p for p in paths if p.name == "tests" or p.name.endswith("-stubs")] == []
    assert [p for p in paths if _NEVER_SHIPPED.fullmatch(p.name)] == []
    assert not (asset / ".lock").exists()
    # And no shared library is there twice under two names (pyarrow's wheel holds libX.so, .so.N and .so.N.M.K)
    digests: dict[str, list[str]] = {}
    for library in asset.rglob("lib*.so*"):
        digests.setdefault(hashlib.sha256(library.read_bytes()).hexdigest(), []).append(library.name)
    assert {d: names for d, names in digests.items() if len(names) > 1} == {}


@pytest.mark.parametrize("asset_name", ASSETS)
def test_each_record_lists_only_files_the_asset_holds(assets, asset_name):
    # Given every installed distribution's RECORD in the asset
    asset = assets[asset_name]
    records = sorted(asset.glob("*.dist-info/RECORD"))
    assert records
    # Then each names only files that are there: no console script (its hash is the builder's interpreter path) and
    # nothing the trim removed
    missing = [
        f"{record.parent.name}: {row[0]}"
        for record in records
        for row in csv.reader(record.read_text(encoding="utf-8").splitlines())
        if row and not (asset / row[0]).is_file()
    ]
    assert missing == []


def test_flush_asset_has_no_arrow_flight_substrait_or_unused_backends(assets):
    # Given the flush asset
    asset = assets[FLUSH]
    # Then Arrow Flight (libraries, extension, module), the Substrait and CUDA bindings, pyarrow's headers and C++
    # tests, zstandard's CFFI backend, pyiceberg's vendored Hive client and Pygments are gone
    gone = [
        "pyarrow/flight.py", "pyarrow/substrait.py", "pyarrow/cuda.py", "pyarrow/include", "pyarrow/src",
        "zstandard/backend_cffi.py", "hive_metastore", "fb303", "pygments",
    ]  # fmt: skip
    assert [name for name in gone if (asset / name).exists()] == []
    unused = ("_flight", "libarrow_flight", "libarrow_python_flight", "_substrait", "_pyarrow_cpp_tests", "_cffi")
    assert sorted(p.name for p in asset.rglob("*.so*") if p.name.startswith(unused)) == []
    # And what every pyarrow extension links stays (libarrow_substrait among them), each under the one name it is
    # linked by
    kept = {p.name for p in (asset / "pyarrow").glob("lib*.so*")}
    assert {"libarrow.so.2000", "libarrow_python.so.2000", "libarrow_substrait.so.2000", "libparquet.so.2000"} <= kept


@pytest.mark.parametrize("asset_name", ASSETS)
def test_asset_modes_do_not_depend_on_the_builder(assets, asset_name):
    # Given the modes of the asset's files and directories as staged for the zip
    asset = assets[asset_name]
    modes = {p.relative_to(asset).as_posix(): p.stat().st_mode & 0o7777 for p in asset.rglob("*")}
    # Then directories are 0755, files 0644 or (executables) 0755: nothing from a umask or a wheel's odd bits
    assert {n: oct(m) for n, m in modes.items() if (asset / n).is_dir() and m != 0o755} == {}
    assert {n: oct(m) for n, m in modes.items() if (asset / n).is_file() and m not in (0o644, 0o755)} == {}


def test_flush_asset_carries_pyarrow_20_and_the_lake_engine_for_x86_64(assets):
    # Given the flush asset's distributions and the engine's files
    asset = assets[FLUSH]
    installed = dict(p.name.removesuffix(".dist-info").rsplit("-", 1) for p in asset.glob("*.dist-info"))
    # Then it holds the lake package, pyiceberg with its Rust core and pyarrow 20 (the last line with manylinux2014
    # wheels), each built for x86_64 Linux
    assert (asset / "lakesync" / "lake" / "iceberg_flush.py").is_file()
    assert installed["pyarrow"].startswith("20.") and "pyiceberg" in installed and "pyiceberg_core" in installed
    for dist in ("pyarrow", "pyiceberg_core"):
        wheel = (asset / f"{dist}-{installed[dist]}.dist-info" / "WHEEL").read_text(encoding="utf-8")
        tags = [line.removeprefix("Tag:").strip() for line in wheel.splitlines() if line.startswith("Tag:")]
        assert tags and all(tag.endswith("_x86_64") for tag in tags), (dist, tags)


_ENGINE_PROBE = """
import importlib, os, sys
sys.path[:0] = sys.argv[1:3]
import functions.flush, lakesync.lake.flush, lakesync.lake.iceberg_flush
from pyiceberg.catalog.glue import GlueCatalog
from pyiceberg.schema import Schema, _check_schema_compatible
from pyiceberg.transforms import DayTransform
from pyiceberg.types import LongType, NestedField, StringType, TimestamptzType
import pyarrow as pa, pyarrow.dataset as ds, pyarrow.fs, pyarrow.parquet as pq
import pyroaring, zstandard
days = DayTransform().pyarrow_transform(TimestamptzType())(pa.array([86_400_000_000], pa.timestamp("us", "UTC")))
assert days.to_pylist() == [1], days
# every pyarrow extension the asset still ships loads (each links its libraries by their kept names)
asset = sys.argv[1]
for name in sorted(os.listdir(os.path.join(asset, "pyarrow"))):
    if name.endswith(".so") and not name.startswith("lib"):
        importlib.import_module("pyarrow." + name.split(".")[0])
# Parquet through the dataset writer (zstd), read back; zstandard's C backend and pyroaring, as pyiceberg uses them
table = pa.table({"id": pa.array([1, 2, 3], pa.int64()), "op": ["a", "b", "c"]})
ds.write_dataset(table, sys.argv[4], format="parquet", filesystem=pa.fs.LocalFileSystem(),
                 file_options=ds.ParquetFileFormat().make_write_options(compression="zstd"))
assert ds.dataset(sys.argv[4], format="parquet").to_table().sort_by("id").equals(table)
assert zstandard.backend == "cext"
assert zstandard.ZstdDecompressor().decompress(zstandard.ZstdCompressor().compress(b"x" * 64)) == b"x" * 64
assert list(pyroaring.BitMap([3, 1])) == [1, 3]
# pyiceberg's schema-mismatch error renders its rich table without Pygments
wanted = Schema(NestedField(1, "id", LongType(), required=True))
try:
    _check_schema_compatible(wanted, Schema(NestedField(1, "id", StringType(), required=True)))
except ValueError as exc:
    assert "id" in str(exc), exc
else:
    raise AssertionError("a mismatched schema passed")
assert "pygments" not in sys.modules
outside = [m.__file__ for m in list(sys.modules.values()) if getattr(m, "__file__", None)
           and not m.__file__.startswith(tuple(sys.argv[1:4]))]
assert not outside, outside[:5]
print(pa.__version__)
"""


@pytest.mark.skipif(platform.machine() != "x86_64", reason="the flush asset is built for x86_64")
def test_trimmed_flush_asset_engine_imports_and_computes_with_only_the_runtime_sdk_beside_it(
    assets, sdk_only, tmp_path
):
    # Given a clean interpreter whose import path is the trimmed flush asset and the runtime's SDK, nothing else
    stdlib = str(Path(ast.__file__).resolve().parent)
    # When the handler, the pyiceberg engine, the Glue catalog and every pyarrow extension left are imported there,
    # pyiceberg-core computes the delta log's day partition, pyarrow writes and reads zstd Parquet, and pyiceberg
    # reports a schema mismatch
    done = subprocess.run(
        [sys.executable, "-I", "-S", "-B", "-c", _ENGINE_PROBE, str(assets[FLUSH]), str(sdk_only), stdlib,
         str(tmp_path / "parquet")],
        capture_output=True,
        text=True,
        check=False,
        cwd=tmp_path,
        env={"AWS_DEFAULT_REGION": "us-east-1"},
    )  # fmt: skip
    # Then it all loads from the asset (pyarrow 20) and the SDK, and computes
    assert done.returncode == 0, done.stderr
    assert done.stdout.strip().splitlines()[-1].startswith("20.")


def _manifest(asset: Path) -> dict[str, tuple[int, str]]:
    """Each file of an asset (but the build's own marker) with its mode and SHA-256: what its zip is made of."""
    return {
        p.relative_to(asset).as_posix(): (p.stat().st_mode & 0o7777, hashlib.sha256(p.read_bytes()).hexdigest())
        for p in sorted(asset.rglob("*"))
        if p.is_file() and p.name != ".complete"
    }


def _other_interpreter() -> Path:
    """A Python other than the one running the tests to build the assets from: a newer minor version where the machine
    has one (uv's, on ``PATH`` or pyenv's), else another 3.11 executable."""
    here = Path(sys.executable).resolve()
    found = []
    for version in ("3.13", "3.12"):
        done = subprocess.run([str(uv()), "python", "find", version], capture_output=True, text=True, check=False,
                              env={**os.environ, "UV_PYTHON_DOWNLOADS": "never"}, cwd="/")  # fmt: skip
        found += [Path(done.stdout.strip())] if done.returncode == 0 else []
    pyenv = Path(os.environ.get("PYENV_ROOT", Path.home() / ".pyenv")) / "versions"
    found += sorted(pyenv.glob("3.1[2-9]*/bin/python3"), reverse=True)
    found += [Path("/usr/bin/python3.11"), Path("/usr/local/bin/python3.11")]
    others = [p for p in found if p.is_file() and p.resolve() != here]
    assert others, "no second Python on this machine to build the assets from"
    return others[0]


_BUILD = """
import importlib.util, json, sys
from pathlib import Path
spec = importlib.util.spec_from_file_location("packaging_elsewhere", sys.argv[1])
module = importlib.util.module_from_spec(spec)
sys.modules[spec.name] = module
spec.loader.exec_module(module)
root, build_dir = Path(sys.argv[2]), Path(sys.argv[3])
print(json.dumps([sys.executable, str(module.build_lambda_asset(root, build_dir)),
                  str(module.build_flush_asset(root, build_dir))]))
"""


def _snapshot(tmp_path: Path) -> Path:
    """A copy of what the assets are built from (the tree is edited while the tests run), using the repository's uv."""
    root = tmp_path / "project"
    for name in ("src", "functions"):
        shutil.copytree(ROOT / name, root / name, ignore=shutil.ignore_patterns("__pycache__"))
    for name in ("pyproject.toml", "uv.lock", "Makefile", "README.md"):
        shutil.copyfile(ROOT / name, root / name)
    return root


def test_assets_are_identical_whichever_python_builds_them(tmp_path, monkeypatch):
    # Given the project's sources, and this Python (3.11) and another one
    root = _snapshot(tmp_path)
    python = _other_interpreter()
    monkeypatch.setenv("UV", str(uv()))
    # When this Python builds the API and flush assets, and the other builds them into another build directory
    ours = {"api": build_lambda_asset(root, tmp_path / "here"), FLUSH: build_flush_asset(root, tmp_path / "here")}
    env = {k: v for k, v in os.environ.items() if k not in ("VIRTUAL_ENV", "PYTHONPATH")}
    done = subprocess.run(
        [str(python), "-I", "-c", _BUILD, packaging.__file__, str(root), str(tmp_path / "there")],
        capture_output=True, text=True, check=False, cwd=tmp_path, env=env,
    )  # fmt: skip
    assert done.returncode == 0, done.stderr[-3000:]
    executable, api, flush = json.loads(done.stdout.strip().splitlines()[-1])
    assert Path(executable).resolve() != Path(sys.executable).resolve()
    # Then each is the same asset, to the byte and the mode (so the same zip), under the same content hash; bytecode
    # for the runtime's Python included
    for name, theirs in (("api", Path(api)), (FLUSH, Path(flush))):
        mine, other = _manifest(ours[name]), _manifest(theirs)
        assert any(n.endswith(f".cpython-{LAMBDA_PYTHON.replace('.', '')}.pyc") for n in other)
        assert sorted(set(mine) ^ set(other)) == []
        assert [n for n in mine if mine[n] != other[n]] == []
        assert theirs.name == ours[name].name


def _fake_uv(tmp_path: Path, version: str) -> Path:
    fake = tmp_path / "uv"
    fake.write_text(f"#!/bin/sh\necho 'uv {version} (fake)'\n", encoding="utf-8")
    fake.chmod(0o755)
    return fake


def test_build_refuses_a_uv_other_than_the_pinned_one(tmp_path, monkeypatch):
    # Given $UV pointing at another uv version
    monkeypatch.setenv("UV", str(_fake_uv(tmp_path, "0.4.0")))
    # When the build looks for uv
    # Then it refuses, naming the version the Makefile pins
    with pytest.raises(PackagingError, match=re.escape(f"needs uv {pinned_uv_version()}")):
        uv()
    # And the repository's own uv is that version
    monkeypatch.delenv("UV")
    done = subprocess.run([str(uv()), "--version"], capture_output=True, text=True, check=True)
    assert done.stdout.split()[1] == pinned_uv_version()
    assert re.search(rf"^UV_VERSION := {re.escape(pinned_uv_version())}$", (ROOT / "Makefile").read_text(), re.M)


def test_build_refuses_a_wheel_that_does_not_match_the_lock_hashes(tmp_path, monkeypatch):
    # Given a copy of the project whose uv.lock records another hash for every file of one dependency (and the
    # repository's uv, the pinned one)
    monkeypatch.setenv("UV", str(uv()))
    root = _snapshot(tmp_path)
    lock = (root / "uv.lock").read_text(encoding="utf-8")
    start = lock.index('[[package]]\nname = "aws-xray-sdk"')
    end = lock.index("[[package]]", start + 1)
    tampered = re.sub(r"sha256:[0-9a-f]{64}", "sha256:" + "0" * 64, lock[start:end])
    (root / "uv.lock").write_text(lock[:start] + tampered + lock[end:], encoding="utf-8")
    # When the Lambda asset is built from it
    # Then the install stops on the hash mismatch, and no asset is published
    with pytest.raises(PackagingError, match=r"(?i)hash"):
        build_lambda_asset(root, tmp_path / "build")
    assert not [p for p in (tmp_path / "build").glob("lambda-*") if (p / ".complete").exists()]
