"""The Lambda assets as deployed (the staged copies in the cloud assembly): the API functions' asset and the
materialise function's, which the connector poller and admin share (the same plus the SQL drivers). Each is
self-sufficient with only the runtime's AWS SDK beside it, every lakesync/functions import inside it resolvable,
built for its functions' architecture (ARM64; x86_64 for the drivers' asset) and the runtime's Python, with no wheel
needing a newer glibc than the runtime's Amazon Linux 2, free of the Spark/Iceberg stack; the API asset stays small;
plus the pins they were built from."""

from __future__ import annotations

import ast
import json
import subprocess
import sys
from pathlib import Path

import pytest
from lakesync_infra.config import LakeSyncConfig
from lakesync_infra.functions import driver_functions
from lakesync_infra.packaging import (
    LAMBDA_GLIBC,
    LAMBDA_PYTHON,
    MATERIALISE_EXTRAS,
    RUNTIME_PROVIDED,
    directory_size,
    lambda_requirements,
)
from packaging.tags import Tag, compatible_tags, cpython_tags, parse_tag

from tests.infra.conftest import OPTIONS

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
ASSETS = ("api", MATERIALISE)
MACHINE = {"api": "aarch64", MATERIALISE: "x86_64"}
"""The CPU each asset is built for (the functions' ``Architectures``: arm64, x86_64 for materialise)."""
SQL_DRIVERS = ("psycopg", "psycopg_binary", "pymysql", "google/cloud/bigquery")


def _staged(cfn, synth, names) -> Path:
    keys = {fn["Code"]["S3Key"] for name, fn in cfn.functions().items() if name in names}
    (key,) = keys
    staged = synth.outdir / f"asset.{key.removesuffix('.zip')}"
    assert staged.is_dir()
    return staged


@pytest.fixture(scope="module")
def assets(cfn, synth) -> dict[str, Path]:
    """The staged asset directories: ``api`` (every function but those with the drivers, one shared asset) and
    ``materialise`` (materialise, the connector poller and admin)."""
    others = set(cfn.functions()) - set(WITH_DRIVERS)
    return {"api": _staged(cfn, synth, others), MATERIALISE: _staged(cfn, synth, set(WITH_DRIVERS))}


@pytest.fixture(scope="module", params=ASSETS)
def asset(request, assets) -> Path:
    return assets[request.param]


def _handlers(cfn, asset_name: str) -> list[str]:
    return sorted(
        {fn["Handler"] for name, fn in cfn.functions().items() if (name in WITH_DRIVERS) == (asset_name == MATERIALISE)}
    )


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


def test_asset_has_no_spark_iceberg_or_bundled_sdk(asset):
    # Given the asset's top-level packages
    top = {p.name.split("-")[0].lower() for p in asset.iterdir()}
    # Then none of the heavy or runtime-provided distributions is bundled
    assert not top & {*HEAVY, *(d.replace("-", "_") for d in RUNTIME_PROVIDED)}
    assert not (asset / "lakesync" / "spark").exists() and not (asset / "lakesync" / "local").exists()


@pytest.mark.parametrize("asset_name", ASSETS)
def test_asset_extensions_are_built_for_its_architecture_and_the_runtime_python(assets, asset_name):
    # Given the compiled extension modules in the asset
    extensions = sorted(p.name for p in assets[asset_name].rglob("*.so"))
    # Then each is for the function's CPU on Linux, and either for the runtime's CPython or the stable ABI
    tag = f"cpython-{LAMBDA_PYTHON.replace('.', '')}"
    assert extensions
    assert all(MACHINE[asset_name] in name or "abi3" in name for name in extensions), extensions
    assert all(tag in name or "abi3" in name for name in extensions), extensions


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
    # Then they are the lock pins of its extras (aws; aws and sql for materialise), minus the SDK the runtime provides
    extras = MATERIALISE_EXTRAS if asset_name == MATERIALISE else ("aws",)
    pins = dict(_pin(line) for line in lambda_requirements(extras=extras) if _on_lambda(line, MACHINE[asset_name]))
    assert installed == {name.lower(): version for name, version in pins.items()}


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


def test_only_the_materialise_asset_carries_the_sql_drivers(assets):
    # Given both assets
    # Then the drivers of every destination type are in the materialise function's asset, and none in the API's
    for driver in SQL_DRIVERS:
        assert (assets[MATERIALISE] / driver).is_dir(), driver
        assert not (assets["api"] / driver).exists(), driver


def test_assets_are_well_under_the_lambda_limit(assets):
    # Given the assets' unzipped sizes
    api, materialise = directory_size(assets["api"]), directory_size(assets[MATERIALISE])
    # Then the API functions' is a small fraction of Lambda's 250 MB limit and well under the 50 MB goal
    assert api < 25 * 1024 * 1024, api
    # And the materialise function's, drivers and BigQuery's client included, stays under half the limit
    assert materialise < 125 * 1024 * 1024, materialise
