"""Build the deployable artifacts locally (no Docker): the Lambda code directory and the Glue job bundle.

**Lambda asset** (one directory for every function; the handler string picks the module):

* ``lakesync`` without the parts the Lambda path never imports (:data:`LAMBDA_EXCLUDED` -- Spark jobs, the lake's
  pyiceberg helpers, the local runner, the Python client and CLI), plus ``functions/``;
* the runtime dependencies of the ``aws`` extra, pinned by ``uv.lock`` and installed as binary wheels for
  :data:`LAMBDA_PLATFORM` / :data:`LAMBDA_PYTHON` (``uv pip install --target``);
* **without the AWS SDK** (:data:`RUNTIME_PROVIDED`): every Lambda Python runtime ships boto3/botocore, LakeSync
  only calls long-standing APIs (DynamoDB, S3, Secrets Manager, Glue StartJobRun), and bundling botocore would
  triple the asset (~25 MB) and the cold start's unzip for nothing.

**Materialise asset**: the same, plus the ``sql`` extra (the destinations' drivers: ``psycopg[binary]``, PyMySQL,
``google-cloud-bigquery``), for the ``materialise`` function alone -- the API functions keep today's small asset
and cold start. BigQuery's client and its gRPC/cryptography dependencies make most of the asset (~60 MB unzipped,
~20 MB zipped, far below Lambda's 250 MB). It is built for x86_64 (:data:`MATERIALISE_PLATFORM`): psycopg-binary 3.3
publishes ARM64 wheels only for glibc >= 2.27 (``manylinux_2_27_aarch64``), which the ``python3.11`` runtime's
Amazon Linux 2 (glibc 2.26) does not have, while its ``manylinux2014_x86_64`` wheels run there.

**Target.** The runtime is ``python3.11`` (:data:`LAMBDA_PYTHON`): the Python the test suite runs the handlers on
(and Glue 5.1's). Lambda runs it on Amazon Linux 2, glibc 2.26, so wheels are chosen for ``manylinux2014``
(glibc 2.17) -- the newest manylinux tag uv targets that AL2 satisfies; a ``manylinux_2_28`` wheel would install here
and fail to load there.

**Glue bundle**: the three ``glue_jobs/*.py`` scripts and the ``lakesync`` wheel (``uv build --wheel``), deployed
together under a content-addressed prefix so ``--additional-python-modules`` names a real wheel file name.

Both are cached under ``build/`` by a hash of everything they are made of (``uv.lock``, ``pyproject.toml``, the
sources, the target platform); a repeated synth reuses them. A directory is published by an atomic rename, so a
crashed build never leaves a half-made artifact behind.
"""

from __future__ import annotations

import hashlib
import os
import shutil
import subprocess
import sys
import tempfile
from collections.abc import Iterable
from dataclasses import dataclass
from pathlib import Path
from typing import Final

ROOT: Final = Path(__file__).resolve().parents[2]
"""The repository root (``infra/lakesync_infra/packaging.py`` -> ``.``)."""

LAMBDA_PYTHON: Final = "3.11"
"""The Lambda runtime's Python (``python3.11``): the interpreter the test suite runs the handlers on (a test asserts
it equals ``sys.version_info``), and Glue 5.1's. Lambda deprecates ``python3.11`` on 2027-06-30 (projected)."""
LAMBDA_GLIBC: Final = (2, 26)
"""glibc of the ``python3.11`` runtime's Amazon Linux 2: no wheel in an asset may need more."""
LAMBDA_PLATFORM: Final = "aarch64-manylinux2014"
"""Wheels for Graviton (ARM64) functions on Amazon Linux 2: ``manylinux2014`` (glibc 2.17) <= :data:`LAMBDA_GLIBC`."""
MATERIALISE_PLATFORM: Final = "x86_64-manylinux2014"
"""The ``materialise`` asset's target: x86_64, because psycopg-binary 3.3 has no ARM64 wheel for glibc 2.26."""
RUNTIME_PROVIDED: Final = frozenset({"boto3", "botocore", "s3transfer", "urllib3", "python-dateutil", "six"})
"""Distributions the Lambda runtime provides (the AWS SDK and what only it depends on)."""
LAMBDA_EXCLUDED: Final = ("spark", "lake", "local", "client", "cli.py")
"""Parts of ``src/lakesync`` left out of the Lambda asset (a test proves the handlers never import them)."""
GLUE_SCRIPTS: Final = ("flush.py", "compact.py", "checkpoint.py")
LAMBDA_EXTRAS: Final = ("aws",)
MATERIALISE_EXTRAS: Final = ("aws", "sql")

_SKIP_NAMES: Final = frozenset({"__pycache__", ".mypy_cache", ".pytest_cache", ".ruff_cache"})
_COMPLETE: Final = ".complete"


class PackagingError(RuntimeError):
    """An artifact could not be built."""


@dataclass(frozen=True, slots=True)
class GlueBundle:
    """The Glue job files, ready to deploy.

    Attributes:
        directory: Holds the scripts and the wheel.
        digest: Content hash (the S3 prefix the bundle is deployed under).
        wheel_name: The wheel's file name (``lakesync-<version>-py3-none-any.whl``).
    """

    directory: Path
    digest: str
    wheel_name: str


def lambda_requirements(root: Path = ROOT, extras: tuple[str, ...] = LAMBDA_EXTRAS) -> list[str]:
    """The pinned runtime requirements of a Lambda asset (``name==version``), from ``uv.lock``.

    Args:
        root: The repository root.
        extras: The project's extras the asset installs.
    """
    extra_args = [arg for extra in extras for arg in ("--extra", extra)]
    out = _run([str(uv(root)), "export", "--frozen", *extra_args, "--no-dev", "--no-hashes", "--no-emit-project",
                "--no-header", "--no-annotate"], cwd=root)  # fmt: skip
    reqs = []
    for line in out.splitlines():
        line = line.strip()
        if not line or line.startswith(("#", "-")):
            continue
        name = line.split("==")[0].split(";")[0].strip().lower().replace("_", "-")
        if name not in RUNTIME_PROVIDED:
            reqs.append(line)
    return reqs


def build_lambda_asset(
    root: Path = ROOT,
    build_dir: Path | None = None,
    *,
    extras: tuple[str, ...] = LAMBDA_EXTRAS,
    name: str = "lambda",
    platform: str = LAMBDA_PLATFORM,
) -> Path:
    """A Lambda code directory (built once per content hash under ``build/``).

    Args:
        root: The repository root.
        build_dir: Where artifacts are cached (default ``build/``).
        extras: The project's extras installed beside the code.
        name: The directory's name prefix.
        platform: uv's ``--python-platform`` the wheels are chosen for.

    Raises:
        PackagingError: uv is missing or an install failed.
    """
    build_dir = build_dir or root / "build"
    requirements = lambda_requirements(root, extras)
    digest = _digest(
        [*_lambda_sources(root), root / "uv.lock", root / "pyproject.toml"],
        root,
        extra=[platform, LAMBDA_PYTHON, *extras, *requirements],
    )
    target = build_dir / f"{name}-{digest}"
    if (target / _COMPLETE).exists():
        return target
    with _Staging(build_dir, target) as stage:
        req_file = stage.parent / f"{stage.name}.requirements.txt"
        req_file.write_text("\n".join(requirements) + "\n", encoding="utf-8")
        try:
            _run([str(uv(root)), "pip", "install", "--quiet", "--no-deps", "--target", str(stage),
                  "--python-platform", platform, "--python-version", LAMBDA_PYTHON, "--only-binary", ":all:",
                  "--no-compile", "-r", str(req_file)], cwd=root)  # fmt: skip
        finally:
            req_file.unlink(missing_ok=True)
        shutil.rmtree(stage / "bin", ignore_errors=True)  # console scripts (jp.py): nothing runs them on Lambda
        for source in _lambda_sources(root):
            dest = stage / source.relative_to(root / "src" if source.is_relative_to(root / "src") else root)
            dest.parent.mkdir(parents=True, exist_ok=True)
            shutil.copy2(source, dest)
    return target


def build_materialise_asset(root: Path = ROOT, build_dir: Path | None = None) -> Path:
    """The ``materialise`` function's code directory: the Lambda asset plus the ``sql`` extra, for x86_64.

    Raises:
        PackagingError: uv is missing or an install failed.
    """
    return build_lambda_asset(
        root, build_dir, extras=MATERIALISE_EXTRAS, name="materialise", platform=MATERIALISE_PLATFORM
    )


def build_glue_bundle(root: Path = ROOT, build_dir: Path | None = None) -> GlueBundle:
    """The Glue scripts and the ``lakesync`` wheel (built once per content hash under ``build/``).

    Raises:
        PackagingError: uv is missing or the wheel build failed.
    """
    build_dir = build_dir or root / "build"
    scripts = [root / "glue_jobs" / name for name in GLUE_SCRIPTS]
    wheel_sources = [*_tree(root / "src" / "lakesync"), *_tree(root / "functions"), root / "pyproject.toml"]
    digest = _digest([*scripts, *wheel_sources, root / "README.md"], root)
    target = build_dir / f"glue-{digest}"
    if not (target / _COMPLETE).exists():
        with _Staging(build_dir, target) as stage:
            _run([str(uv(root)), "build", "--wheel", "--quiet", "--out-dir", str(stage), "--python", sys.executable],
                 cwd=root)  # fmt: skip
            for script in scripts:
                shutil.copy2(script, stage / script.name)
    wheels = sorted(target.glob("lakesync-*-py3-none-any.whl"))
    if len(wheels) != 1:
        raise PackagingError(f"expected one lakesync wheel in {target}, found {[w.name for w in wheels]}")
    return GlueBundle(target, digest, wheels[0].name)


def directory_size(path: Path) -> int:
    """Total bytes of the files under ``path`` (the unzipped size of an asset)."""
    return sum(p.stat().st_size for p in path.rglob("*") if p.is_file())


def uv(root: Path = ROOT) -> Path:
    """The uv binary: ``$UV``, the repository's ``.tools/bin/uv`` (``make setup``), or ``uv`` on ``PATH``.

    Raises:
        PackagingError: none is found.
    """
    candidates = [os.environ.get("UV"), str(root / ".tools" / "bin" / "uv"), shutil.which("uv")]
    for candidate in candidates:
        if candidate and Path(candidate).is_file() and os.access(candidate, os.X_OK):
            return Path(candidate)
    raise PackagingError("uv not found: run `make setup` (it installs .tools/bin/uv) or set $UV")


def _lambda_sources(root: Path) -> list[Path]:
    package = root / "src" / "lakesync"
    excluded = {package / name for name in LAMBDA_EXCLUDED}
    files = [p for p in _tree(package) if not any(p == e or p.is_relative_to(e) for e in excluded)]
    return files + _tree(root / "functions")


def _tree(directory: Path) -> list[Path]:
    """Source files under ``directory`` (no caches, no compiled files), sorted."""
    return sorted(
        p
        for p in directory.rglob("*")
        if p.is_file() and not _SKIP_NAMES.intersection(p.relative_to(directory).parts) and p.suffix != ".pyc"
    )


def _digest(files: Iterable[Path], root: Path, extra: Iterable[str] = ()) -> str:
    h = hashlib.sha256()
    for path in sorted(files):
        h.update(path.relative_to(root).as_posix().encode() + b"\0")
        h.update(hashlib.sha256(path.read_bytes()).digest())
    for item in extra:
        h.update(item.encode() + b"\0")
    return h.hexdigest()[:16]


class _Staging:
    """A temporary directory beside ``target``, renamed to it on success and removed on failure."""

    def __init__(self, build_dir: Path, target: Path) -> None:
        self._build_dir = build_dir
        self._target = target
        self._stage: Path | None = None

    def __enter__(self) -> Path:
        self._build_dir.mkdir(parents=True, exist_ok=True)
        self._stage = Path(tempfile.mkdtemp(prefix=f".{self._target.name}-", dir=self._build_dir))
        return self._stage

    def __exit__(self, exc_type: object, exc: object, tb: object) -> None:
        assert self._stage is not None
        if exc_type is not None:
            shutil.rmtree(self._stage, ignore_errors=True)
            return
        (self._stage / _COMPLETE).write_text("", encoding="utf-8")
        try:
            self._stage.rename(self._target)
        except OSError:  # another process published the same content first
            shutil.rmtree(self._stage, ignore_errors=True)
            if not (self._target / _COMPLETE).exists():
                raise


def _run(cmd: list[str], cwd: Path) -> str:
    env = {**os.environ, "UV_PYTHON_DOWNLOADS": "never"}
    try:
        done = subprocess.run(cmd, cwd=cwd, env=env, capture_output=True, text=True, check=False)
    except OSError as exc:
        raise PackagingError(f"cannot run {cmd[0]}: {exc}") from exc
    if done.returncode != 0:
        raise PackagingError(f"{' '.join(cmd[:3])} failed ({done.returncode}):\n{done.stderr.strip()}")
    return done.stdout
