"""The Lambda asset as deployed (the staged copy in the cloud assembly): self-sufficient with only the runtime's AWS
SDK beside it, every lakesync/functions import inside it resolvable, built for ARM64 and the runtime's Python, small,
and free of the Spark/Iceberg stack; plus the pins it was built from."""

from __future__ import annotations

import ast
import json
import subprocess
import sys
from pathlib import Path

import pytest
from lakesync_infra.packaging import LAMBDA_PYTHON, RUNTIME_PROVIDED, directory_size, lambda_requirements

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


@pytest.fixture(scope="module")
def asset(cfn, synth) -> Path:
    """The staged asset directory every function deploys."""
    keys = {fn["Code"]["S3Key"] for fn in cfn.functions().values()}
    (key,) = keys
    staged = synth.outdir / f"asset.{key.removesuffix('.zip')}"
    assert staged.is_dir()
    return staged


@pytest.fixture(scope="module")
def sdk_only(tmp_path_factory) -> Path:
    """A directory holding just the AWS SDK (as the Lambda runtime provides it), linked from this venv."""
    import boto3

    site = Path(boto3.__file__).resolve().parent.parent
    target = tmp_path_factory.mktemp("runtime-sdk")
    for name in SDK_MODULES:
        (target / name).symlink_to(site / name)
    return target


def test_asset_handlers_import_with_only_the_runtime_sdk_beside_them(cfn, asset, sdk_only, tmp_path):
    # Given a clean interpreter whose import path is the asset and the runtime's SDK, nothing else
    handlers = sorted({fn["Handler"] for fn in cfn.functions().values()})
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


def test_asset_extensions_are_built_for_arm64_and_the_runtime_python(asset):
    # Given the compiled extension modules in the asset
    extensions = sorted(p.name for p in asset.rglob("*.so"))
    # Then each is for aarch64 Linux, and either for the runtime's CPython or the stable ABI
    tag = f"cpython-{LAMBDA_PYTHON.replace('.', '')}"
    assert extensions
    assert all("aarch64" in name or "abi3" in name for name in extensions), extensions
    assert all(tag in name or "abi3" in name for name in extensions), extensions


def test_asset_holds_exactly_the_locked_runtime_dependencies(asset):
    # Given the distributions installed in the asset
    stems = [p.name.removesuffix(".dist-info").rsplit("-", 1) for p in asset.glob("*.dist-info")]
    installed = {name.lower().replace("_", "-"): version for name, version in stems}
    # Then they are the aws extra's lock pins, minus the SDK the runtime provides
    pins = dict(line.split(";")[0].strip().split("==") for line in lambda_requirements())
    assert installed == {name.lower(): version for name, version in pins.items()}


def test_asset_is_well_under_the_lambda_limit(asset):
    # Given the asset's unzipped size
    size = directory_size(asset)
    # Then it is a small fraction of Lambda's 250 MB limit and well under the 50 MB goal
    assert size < 25 * 1024 * 1024, size
