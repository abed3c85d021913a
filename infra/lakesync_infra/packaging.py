"""Build the deployable artifacts locally (no Docker): the Lambda code directories and the Glue job bundle.

**Lambda asset** (one directory for every function; the handler string picks the module):

* ``lakesync`` without the parts the Lambda path never imports (:data:`LAMBDA_EXCLUDED` -- Spark jobs, the lake's
  pyiceberg helpers and the flush function that runs them, the local runner, the Python client and CLI), plus
  ``functions/`` (but ``flush``);
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

**Flush asset**: the Lambda asset *with* ``lakesync.lake`` and the flush function (only Spark, the local runner, the
client and the CLI left out: :data:`FLUSH_EXCLUDED`) and the ``lake`` extra (pyiceberg, Apache Iceberg's Rust core
``pyiceberg-core``, pyarrow), for the ``flush`` function alone. It is built for x86_64 (:data:`FLUSH_PLATFORM`):
pyiceberg-core publishes no ``manylinux2014`` ARM64 wheel, and pyarrow is pinned below 21, the last line with
``manylinux2014`` wheels; pyroaring, which has none, is installed from its ``manylinux_2_24`` wheel
(:data:`FLUSH_NEWER_GLIBC`).

**Trimmed.** Lambda caps a function's code and layers at 262,144,000 bytes unzipped (``CodeSizeUnzipped``,
https://docs.aws.amazon.com/lambda/latest/api/API_AccountLimit.html; the quotas page's "250 MB"). Every asset drops
what no function loads (:data:`TRIMMED`: tests, type stubs, C/C++ and Cython sources and headers), and copies of a
shared library under its other names (``libX.so`` and ``libX.so.N.M.K`` beside the ``libX.so.N`` the extensions
link); the flush asset also pyarrow's Arrow Flight, its Substrait bindings and its C++ test module, zstandard's
second (CFFI) backend, pyiceberg's vendored Hive client (whose thrift is not installed), and Pygments, which rich
needs only to highlight code (:data:`FLUSH_TRIMMED`). pyarrow's ``libarrow_substrait`` stays: every pyarrow extension
links it. The flush asset goes from 248.2 MB to about 190 MB, under three quarters of the limit (a test keeps it
there); pyarrow (about 103 MB) and pyiceberg-core (about 40 MB) make most of it.

**Bytecode.** Lambda's code directory is read-only, so Python cannot cache what it compiles: an asset without
``__pycache__`` compiles every module it imports on every cold start (about 150 ms of a push function's ~300 ms
import, measured). The assets therefore ship bytecode compiled at build time (:func:`compile_bytecode`) with
``unchecked-hash`` invalidation: the files are used as they are, whatever the deployed files' timestamps (a zip keeps
them to two seconds). The Lambda and materialise assets compile everything; the flush asset only LakeSync's own code,
since pyarrow's and pyiceberg's bytecode (~28 MB) would take it past three quarters of the limit. The bytecode is
written by a Python :data:`LAMBDA_PYTHON` that uv finds for the project (:func:`runtime_python`: the project's
``.venv`` where it is that version), whatever interpreter runs the build; with none the build stops and says what to
install. CPython's compiler output changes between patch releases (3.11.2 and 3.11.7 compile one pydantic module
differently), so the compiler's full version is part of the assets' content hash.

**Reproducible.** The wheels are installed with the SHA-256 hashes ``uv.lock`` records (``--require-hashes``: a
changed or substituted wheel stops the build), by the uv the Makefile pins (:func:`uv` refuses another version),
copied out of uv's cache rather than hard-linked to it, and every file's mode is normalised (``0644``, ``0755`` for
executables): the same inputs give the same tree, whichever interpreter or machine builds it. The CDK CLI zips that
tree with sorted entries and a fixed date, and names it by a hash of its content, so the same tree is the same zip.

**Target.** The runtime is ``python3.11`` (:data:`LAMBDA_PYTHON`): the Python the test suite runs the handlers on
(and Glue 5.1's). Lambda runs it on Amazon Linux 2, glibc 2.26, so wheels are chosen for ``manylinux2014``
(glibc 2.17) -- the newest manylinux tag uv targets that AL2 satisfies; a ``manylinux_2_28`` wheel would install here
and fail to load there.

**Glue bundle**: the three ``glue_jobs/*.py`` scripts and a *zip of wheels* (Glue 5.0+:
``lakesync-<version>.gluewheels.zip`` holding ``wheels/requirements.txt`` and the wheels), deployed together under a
content-addressed prefix. The zip holds the ``lakesync`` wheel (``uv build --wheel``) and its runtime requirements
(the base install: protobuf, PyJWT) at the versions ``uv.lock`` pins, downloaded once from the URLs the lock records
and checked against its SHA-256 hashes (cached under ``build/wheels/``). The job installs it with
``--python-modules-installer-option --no-index``, so a run reads nothing from PyPI and always gets the same bytes.
protobuf comes twice: the ``manylinux2014_x86_64`` wheel (Glue's workers; pip prefers it) and the pure-Python one (any
other platform still installs, slower). Glue's own protobuf is replaced (the generated code needs protobuf 7).

All are cached under ``build/`` by a hash of everything they are made of (``uv.lock``, ``pyproject.toml``, the
sources, the target platform, the uv version, the bytecode compiler's version and this module, whose rules decide
the rest); a repeated synth reuses them. A directory is published by an atomic rename, so a crashed build never leaves
a half-made artifact behind.
"""

from __future__ import annotations

import csv
import functools
import hashlib
import os
import re
import shutil
import subprocess
import sys
import tempfile
import tomllib
import urllib.request
import zipfile
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
FLUSH_EXCLUDED: Final = ("lakesync/spark", "lakesync/local", "lakesync/client", "lakesync/cli")
"""Paths left out of the flush asset (as laid out in it): it keeps ``lakesync.lake``, the flush's pyiceberg engine."""
LAMBDA_EXCLUDED: Final = (*FLUSH_EXCLUDED, "lakesync/lake", "lakesync/aws/flush_function.py", "functions/flush.py")
"""Paths left out of the Lambda asset (a test proves nothing in it imports them): the lake engine, and the flush
function, which alone imports it."""
FLUSH_PLATFORM: Final = "x86_64-manylinux2014"
"""The ``flush`` asset's target: x86_64, because pyiceberg-core has no ``manylinux2014`` ARM64 wheel."""
GLUE_SCRIPTS: Final = ("flush.py", "compact.py", "checkpoint.py", "restore.py")
GLUE_WHEEL_TAGS: Final = frozenset(
    {"py3-none-any", "cp310-abi3-manylinux2014_x86_64", "cp311-abi3-manylinux2014_x86_64"}
)
"""Wheels of a pinned requirement that go into the Glue zip of wheels: pure Python, or built for Glue's x86_64
workers (manylinux2014: glibc 2.17, below Glue 5.x's Amazon Linux 2023) for CPython 3.11."""
LAMBDA_EXTRAS: Final = ("aws",)
MATERIALISE_EXTRAS: Final = ("aws", "sql")
FLUSH_EXTRAS: Final = ("aws", "lake")
FLUSH_NEWER_GLIBC: Final = ("pyroaring",)
"""The flush asset's distributions without a ``manylinux2014`` wheel: pyiceberg's pyroaring 1.2 ships x86_64 wheels
tagged ``manylinux_2_24.manylinux_2_28`` only (glibc 2.24, which Amazon Linux 2's 2.26 satisfies)."""

TRIMMED: Final = (
    "**/tests", "*-stubs", "**/*.pyi", "**/*.pyx", "**/*.pxd", "**/*.pxi",
    "**/*.h", "**/*.hpp", "**/*.c", "**/*.cc", "**/*.cpp",
)  # fmt: skip
"""What no Lambda function loads, removed from every asset (globs under it): test suites, type stubs (LakeSync's
generated protobuf stub too), and C, C++ and Cython sources and headers."""
FLUSH_TRIMMED: Final = (
    "pyarrow/include", "pyarrow/includes", "pyarrow/src", "pyarrow/_pyarrow_cpp_tests.*",
    "pyarrow/flight.py", "pyarrow/_flight.*", "pyarrow/libarrow_flight.so*", "pyarrow/libarrow_python_flight.so*",
    "pyarrow/substrait.py", "pyarrow/_substrait.*", "pyarrow/cuda.py",
    "zstandard/_cffi.*", "zstandard/backend_cffi.py",
    "hive_metastore", "fb303",
    "pygments", "pygments-*.dist-info",
)  # fmt: skip
"""What the flush never loads, removed from its asset besides :data:`TRIMMED`: pyarrow's headers and C++ sources,
its C++ test module, Arrow Flight (its libraries are a tenth of the asset), the Substrait and CUDA bindings (there is
no CUDA library; ``libarrow_substrait`` stays, every pyarrow extension links it); zstandard's CFFI backend (the C
backend, its default, stays); pyiceberg's vendored Hive metastore client (its ``thrift`` is not installed, and the
flush uses the Glue catalog); and Pygments, which rich loads only to highlight code (pyiceberg uses rich's tables for
its schema-mismatch errors, which a test renders from the asset)."""

_RULES: Final = hashlib.sha256(Path(__file__).read_bytes()).hexdigest()
"""This module's hash, part of every asset's content hash: its rules (what is trimmed, how it is installed and
compiled) decide the asset as much as its inputs do."""
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
        wheel_name: The ``lakesync`` wheel's file name (``lakesync-<version>-py3-none-any.whl``), inside the zip.
        modules_name: The zip of wheels' file name (``lakesync-<version>.gluewheels.zip``), the value of
            ``--additional-python-modules``.
    """

    directory: Path
    digest: str
    wheel_name: str
    modules_name: str


def lambda_requirements(root: Path = ROOT, extras: tuple[str, ...] = LAMBDA_EXTRAS) -> list[str]:
    """The pinned runtime requirements of a Lambda asset (``name==version``, with any marker), from ``uv.lock``.

    Args:
        root: The repository root.
        extras: The project's extras the asset installs.
    """
    return [pin for pin, _ in _locked_requirements(root, extras) if _dist_name(pin) not in RUNTIME_PROVIDED]


def _locked_requirements(root: Path, extras: tuple[str, ...]) -> list[tuple[str, tuple[str, ...]]]:
    """``(pin, hashes)`` of every requirement ``uv.lock`` pins for the base install plus ``extras``: the pin as
    ``name==version`` (with any marker) and the SHA-256 hashes of its locked files (``--hash=sha256:...``)."""
    extra_args = [arg for extra in extras for arg in ("--extra", extra)]
    out = _run([str(uv(root)), "export", "--frozen", *extra_args, "--no-dev", "--no-emit-project", "--no-header",
                "--no-annotate"], cwd=root)  # fmt: skip
    entries: list[tuple[str, tuple[str, ...]]] = []
    for entry in out.replace("\\\n", " ").splitlines():
        fields = entry.split()
        if not fields or fields[0].startswith(("#", "-")):
            continue
        hashes = tuple(f for f in fields if f.startswith("--hash="))
        pin = " ".join(f for f in fields if not f.startswith("--hash="))
        if not hashes:
            raise PackagingError(f"uv.lock records no hash for {pin}")
        entries.append((pin, hashes))
    return entries


def build_lambda_asset(
    root: Path = ROOT,
    build_dir: Path | None = None,
    *,
    extras: tuple[str, ...] = LAMBDA_EXTRAS,
    name: str = "lambda",
    platform: str = LAMBDA_PLATFORM,
    excluded: tuple[str, ...] = LAMBDA_EXCLUDED,
    newer_glibc: tuple[str, ...] = (),
    compile_dependencies: bool = True,
    trimmed: tuple[str, ...] = TRIMMED,
) -> Path:
    """A Lambda code directory (built once per content hash under ``build/``), with its bytecode.

    Args:
        root: The repository root.
        build_dir: Where artifacts are cached (default ``build/``).
        extras: The project's extras installed beside the code.
        name: The directory's name prefix.
        platform: uv's ``--python-platform`` the wheels are chosen for (a ``manylinux2014`` one).
        excluded: Paths left out, as laid out in the asset (``lakesync/...``, ``functions/...``).
        newer_glibc: Distributions with no ``manylinux2014`` wheel: installed for ``manylinux_2_28`` (uv's next
            glibc target), each then required to declare a manylinux tag no newer than :data:`LAMBDA_GLIBC`.
        compile_dependencies: Whether the installed distributions get bytecode too (LakeSync's code always does).
        trimmed: Globs (under the asset) of installed files and directories no function loads, removed.

    Raises:
        PackagingError: uv is not the pinned one, no Python :data:`LAMBDA_PYTHON` is found, an install failed (a
            wheel not matching ``uv.lock``'s hashes included), or a ``newer_glibc`` wheel needs a newer glibc.
    """
    build_dir = build_dir or root / "build"
    locked = [e for e in _locked_requirements(root, extras) if _dist_name(e[0]) not in RUNTIME_PROVIDED]
    late = [e for e in locked if _dist_name(e[0]) in newer_glibc]
    if unknown := set(newer_glibc) - {_dist_name(pin) for pin, _ in late}:
        raise PackagingError(f"{sorted(unknown)} are not runtime requirements of the extras {extras}")
    python = runtime_python(root)
    sources = _lambda_sources(root, excluded)
    digest = _digest(
        [*sources, root / "uv.lock", root / "pyproject.toml"],
        root,
        extra=[platform, LAMBDA_PYTHON, *extras, *(pin for pin, _ in locked), *newer_glibc, *trimmed,
               f"uv {uv_version(uv(root))}", f"rules {_RULES}", f"python {_describe(python)}",
               f"dependencies:{compile_dependencies}"],
    )  # fmt: skip
    target = build_dir / f"{name}-{digest}"
    if (target / _COMPLETE).exists():
        return target
    with _Staging(build_dir, target) as stage:
        _install(root, stage, [e for e in locked if e not in late], platform, python)
        if late:
            _install(root, stage, late, platform.replace("manylinux2014", "manylinux_2_28"), python)
            _check_glibc(stage, newer_glibc)
        shutil.rmtree(stage / "bin", ignore_errors=True)  # console scripts (jp.py): nothing runs them on Lambda
        (stage / ".lock").unlink(missing_ok=True)  # uv's lock on the target directory
        for source in sources:
            dest = stage / _asset_path(root, source)
            dest.parent.mkdir(parents=True, exist_ok=True)
            shutil.copyfile(source, dest)
        trim(stage, trimmed)
        ours = sorted({stage / _asset_path(root, source).parts[0] for source in sources})
        compile_bytecode([stage] if compile_dependencies else ours, stage, python)
        _normalise_modes(stage)
    return target


def trim(asset: Path, globs: Iterable[str]) -> None:
    """Remove what matches ``globs`` under ``asset``, then the copies of each shared library under its other names.

    A wheel cannot hold symlinks, so pyarrow ships ``libarrow_python.so``, ``.so.2000`` and ``.so.2000.0.0`` as three
    files: only ``libX.so.N`` (the name the extensions link, their ``DT_NEEDED``) is kept when the others are
    byte-identical to it.
    """
    for pattern in globs:
        for path in sorted(asset.glob(pattern), reverse=True):
            if path.is_dir() and not path.is_symlink():
                shutil.rmtree(path)
            elif path.exists():
                path.unlink()
    libraries: dict[tuple[Path, str], list[Path]] = {}
    for path in asset.rglob("lib*.so*"):
        if match := _LIBRARY.fullmatch(path.name):
            libraries.setdefault((path.parent, match["stem"]), []).append(path)
    for paths in libraries.values():
        linked = [p for p in paths if _SONAME.fullmatch(p.name)]
        if len(paths) < 2 or len(linked) != 1:
            continue
        kept = linked[0].read_bytes()
        for path in paths:
            if path != linked[0] and path.read_bytes() == kept:
                path.unlink()
    _prune_records(asset)


def _prune_records(asset: Path) -> None:
    """Each installed distribution's ``RECORD`` lists only the files the asset holds.

    A ``RECORD`` names every file its install wrote, console scripts included, whose hashes depend on the installing
    interpreter's path (their shebang); the scripts and the trimmed files are gone, so their lines go too, and the
    asset is the same whichever Python built it.
    """
    for record in sorted(asset.glob("*.dist-info/RECORD")):
        with record.open(encoding="utf-8", newline="") as f:
            rows = [row for row in csv.reader(f) if row and (asset / row[0]).is_file()]
        with record.open("w", encoding="utf-8", newline="") as f:
            csv.writer(f, lineterminator="\n").writerows(rows)


_LIBRARY: Final = re.compile(r"(?P<stem>lib[^/]+?)\.so(\.\d+)*")
_SONAME: Final = re.compile(r"lib[^/]+?\.so\.\d+")


def _normalise_modes(asset: Path) -> None:
    """Give every directory ``0755`` and every file ``0644``, or ``0755`` if any execute bit was set: the modes go
    into the zip, so they must not depend on the builder's umask."""
    asset.chmod(0o755)
    for path in asset.rglob("*"):
        if path.is_symlink():
            continue
        executable = path.is_dir() or path.stat().st_mode & 0o111
        path.chmod(0o755 if executable else 0o644)


def compile_bytecode(directories: Iterable[Path], stage: Path, python: Path) -> None:
    """Write ``__pycache__`` bytecode for every ``.py`` under ``directories`` (inside an asset staged at ``stage``)
    with ``python`` (a Python :data:`LAMBDA_PYTHON`: :func:`runtime_python`).

    ``unchecked-hash`` pycs, with the paths recorded as ``/var/task/...`` (Lambda's code directory), so the files do
    not depend on where or when the asset was built.

    Raises:
        PackagingError: a module does not compile.
    """
    for directory in directories:
        _run([str(python), "-I", "-m", "compileall", "-q", "-j", "0", "--invalidation-mode", "unchecked-hash",
              "-s", str(stage), "-p", "/var/task", str(directory)], cwd=stage)  # fmt: skip


def runtime_python(root: Path = ROOT) -> Path:
    """A Python :data:`LAMBDA_PYTHON` to write the runtime's bytecode with, whichever Python runs the build: the one
    uv finds for the project (its ``.venv`` first), never downloaded.

    Raises:
        PackagingError: there is none.
    """
    try:
        found = Path(_run([str(uv(root)), "python", "find", LAMBDA_PYTHON], cwd=root).strip())
    except PackagingError as exc:
        raise PackagingError(
            f"building the Lambda assets needs a Python {LAMBDA_PYTHON} (the runtime's) to write their bytecode, and"
            f" uv finds none: install one (`uv python install {LAMBDA_PYTHON}`, or the system's python{LAMBDA_PYTHON})"
            f" and run `make setup`\n{exc}"
        ) from exc
    if _describe(found).split(" ")[0].rsplit(".", 1)[0] != LAMBDA_PYTHON:
        raise PackagingError(f"uv found {found} ({_describe(found)}) for Python {LAMBDA_PYTHON}")
    return found


@functools.cache
def _describe(python: Path) -> str:
    """``python``'s full version, implementation and bytecode magic number: what its compiled files depend on."""
    code = (
        "import sys, importlib.util as u; "
        "print(sys.version.split()[0], sys.implementation.cache_tag, u.MAGIC_NUMBER.hex())"
    )
    return _run([str(python), "-I", "-c", code], cwd=Path(tempfile.gettempdir())).strip()


def _install(root: Path, stage: Path, locked: list[tuple[str, tuple[str, ...]]], platform: str, python: Path) -> None:
    """``uv pip install`` the pinned requirements (binary wheels for ``platform``, each checked against the SHA-256
    hashes ``uv.lock`` records) into ``stage``."""
    req_file = stage.parent / f"{stage.name}.requirements.txt"
    req_file.write_text("".join(f"{pin} {' '.join(hashes)}\n" for pin, hashes in locked), encoding="utf-8")
    try:
        _run([str(uv(root)), "pip", "install", "--quiet", "--no-deps", "--require-hashes", "--target", str(stage),
              "--python", str(python), "--python-platform", platform, "--python-version", LAMBDA_PYTHON,
              "--only-binary", ":all:", "--no-compile", "--link-mode", "copy", "-r", str(req_file)],
             cwd=root)  # fmt: skip
    finally:
        req_file.unlink(missing_ok=True)


def _check_glibc(stage: Path, names: tuple[str, ...]) -> None:
    """Each of ``names`` installed in ``stage`` declares a tag the runtime's glibc (:data:`LAMBDA_GLIBC`) accepts."""
    for info in stage.glob("*.dist-info"):
        if _dist_name(info.name.rsplit("-", 1)[0]) not in names:
            continue
        lines = (info / "WHEEL").read_text(encoding="utf-8").splitlines()
        platforms = [line.removeprefix("Tag:").strip().split("-")[-1] for line in lines if line.startswith("Tag:")]
        if not any(_glibc_ok(p) for p in platforms):
            raise PackagingError(f"{info.name}: no wheel tag {platforms} runs on glibc {LAMBDA_GLIBC}")


def _glibc_ok(platform: str) -> bool:
    """Whether a wheel's platform tag runs on :data:`LAMBDA_GLIBC` (pure, legacy manylinux, or ``manylinux_X_Y``)."""
    if platform == "any" or platform.startswith(("manylinux1_", "manylinux2010_", "manylinux2014_")):
        return True
    parts = platform.split("_")
    if parts[0] != "manylinux" or len(parts) < 4 or not (parts[1].isdigit() and parts[2].isdigit()):
        return False
    return (int(parts[1]), int(parts[2])) <= LAMBDA_GLIBC


def _dist_name(requirement: str) -> str:
    """The normalised distribution name of a ``name==version`` line (or a dist-info name)."""
    return requirement.split("==")[0].split(";")[0].strip().lower().replace("_", "-")


def build_materialise_asset(root: Path = ROOT, build_dir: Path | None = None) -> Path:
    """The ``materialise`` function's code directory: the Lambda asset plus the ``sql`` extra, for x86_64.

    Raises:
        PackagingError: as :func:`build_lambda_asset`.
    """
    return build_lambda_asset(
        root, build_dir, extras=MATERIALISE_EXTRAS, name="materialise", platform=MATERIALISE_PLATFORM
    )


def build_flush_asset(root: Path = ROOT, build_dir: Path | None = None) -> Path:
    """The ``flush`` function's code directory: the Lambda asset plus ``lakesync.lake`` and the ``lake`` extra, for
    x86_64, trimmed of what the flush never loads (:data:`FLUSH_TRIMMED`).

    Raises:
        PackagingError: as :func:`build_lambda_asset`.
    """
    return build_lambda_asset(
        root,
        build_dir,
        extras=FLUSH_EXTRAS,
        name="flush",
        platform=FLUSH_PLATFORM,
        excluded=FLUSH_EXCLUDED,
        newer_glibc=FLUSH_NEWER_GLIBC,
        compile_dependencies=False,
        trimmed=(*TRIMMED, *FLUSH_TRIMMED),
    )


def glue_requirements(root: Path = ROOT) -> list[str]:
    """The pinned runtime requirements of the ``lakesync`` wheel on Glue (``name==version``; the base install)."""
    return [pin for pin, _ in _locked_requirements(root, ())]


def build_glue_bundle(root: Path = ROOT, build_dir: Path | None = None) -> GlueBundle:
    """The Glue scripts and the zip of wheels (built once per content hash under ``build/``).

    Raises:
        PackagingError: uv is missing, the wheel build failed, or a pinned wheel cannot be had.
    """
    build_dir = build_dir or root / "build"
    scripts = [root / "glue_jobs" / name for name in GLUE_SCRIPTS]
    wheel_sources = [*_tree(root / "src" / "lakesync"), *_tree(root / "functions"), root / "pyproject.toml"]
    requirements = glue_requirements(root)
    extra = [*requirements, *sorted(GLUE_WHEEL_TAGS), f"uv {uv_version(uv(root))}", f"rules {_RULES}"]
    digest = _digest([*scripts, *wheel_sources, root / "README.md"], root, extra=extra)
    target = build_dir / f"glue-{digest}"
    if not (target / _COMPLETE).exists():
        locked = _locked_wheels(root, requirements)
        with _Staging(build_dir, target) as stage:
            wheels = stage / "wheels"
            _run([str(uv(root)), "build", "--wheel", "--quiet", "--out-dir", str(wheels), "--python", sys.executable],
                 cwd=root)  # fmt: skip
            (project,) = wheels.glob("lakesync-*-py3-none-any.whl")
            version = project.name.split("-")[1]
            for url, sha256 in locked:
                shutil.copy2(_fetch(url, sha256, build_dir / "wheels"), wheels / url.rsplit("/", 1)[1])
            pins = [f"lakesync=={version}", *requirements]
            (wheels / "requirements.txt").write_text("\n".join(pins) + "\n", encoding="utf-8")
            with zipfile.ZipFile(stage / f"lakesync-{version}.gluewheels.zip", "w", zipfile.ZIP_DEFLATED) as archive:
                for path in sorted(wheels.iterdir()):
                    if path.name.startswith("."):  # uv build leaves a .gitignore in its output directory
                        continue
                    archive.write(path, f"wheels/{path.name}")
            shutil.rmtree(wheels)
            for script in scripts:
                shutil.copy2(script, stage / script.name)
    zips = sorted(target.glob("lakesync-*.gluewheels.zip"))
    if len(zips) != 1:
        raise PackagingError(f"expected one zip of wheels in {target}, found {[z.name for z in zips]}")
    with zipfile.ZipFile(zips[0]) as archive:
        wheel_names = [n.removeprefix("wheels/") for n in archive.namelist() if n.startswith("wheels/lakesync-")]
    if len(wheel_names) != 1:
        raise PackagingError(f"expected one lakesync wheel in {zips[0]}, found {wheel_names}")
    return GlueBundle(target, digest, wheel_names[0], zips[0].name)


def _locked_wheels(root: Path, requirements: Iterable[str]) -> list[tuple[str, str]]:
    """``(url, sha256)`` of the wheels ``uv.lock`` records for each ``name==version`` with a tag in
    :data:`GLUE_WHEEL_TAGS`."""
    lock = tomllib.loads((root / "uv.lock").read_text(encoding="utf-8"))
    packages = {(p["name"], p.get("version")): p for p in lock["package"]}
    out = []
    for requirement in requirements:
        name, _, version = requirement.split(";")[0].strip().partition("==")
        package = packages.get((name.lower().replace("_", "-"), version))
        if package is None:
            raise PackagingError(f"{requirement} is not in uv.lock")
        chosen = [
            (w["url"], w["hash"].removeprefix("sha256:"))
            for w in package.get("wheels", [])
            if any(w["url"].endswith(f"-{tag}.whl") for tag in GLUE_WHEEL_TAGS)
        ]
        if not chosen:
            raise PackagingError(f"uv.lock has no wheel of {requirement} for Glue (tags {sorted(GLUE_WHEEL_TAGS)})")
        out.extend(chosen)
    return out


def _fetch(url: str, sha256: str, cache: Path) -> Path:
    """The file at ``url``, downloaded once into ``cache/<sha256>/`` and checked against ``sha256``."""
    path = cache / sha256 / url.rsplit("/", 1)[1]
    if path.is_file() and hashlib.sha256(path.read_bytes()).hexdigest() == sha256:
        return path
    try:
        with urllib.request.urlopen(url, timeout=60) as response:  # the https URL uv.lock records
            data = response.read()
    except OSError as exc:
        raise PackagingError(f"cannot download {url}: {exc}") from exc
    if hashlib.sha256(data).hexdigest() != sha256:
        raise PackagingError(f"{url} does not match the SHA-256 uv.lock records ({sha256})")
    path.parent.mkdir(parents=True, exist_ok=True)
    partial = path.with_name(f".{path.name}.{os.getpid()}.part")
    partial.write_bytes(data)
    partial.replace(path)
    return path


def directory_size(path: Path) -> int:
    """Total bytes of the files under ``path`` (the unzipped size of an asset)."""
    return sum(p.stat().st_size for p in path.rglob("*") if p.is_file())


def uv(root: Path = ROOT) -> Path:
    """The uv binary, at the version the Makefile pins (``UV_VERSION``): ``$UV``, else the repository's
    ``.tools/bin/uv`` (``make setup`` installs it), else ``uv`` on ``PATH``.

    Raises:
        PackagingError: none is found, or the one found is another version.
    """
    pinned = pinned_uv_version(root)
    candidates = [os.environ.get("UV"), str(root / ".tools" / "bin" / "uv"), shutil.which("uv")]
    for candidate in candidates:
        if candidate and Path(candidate).is_file() and os.access(candidate, os.X_OK):
            found = uv_version(Path(candidate))
            if found != pinned:
                raise PackagingError(
                    f"{candidate} is uv {found}; the build needs uv {pinned} (the Makefile's UV_VERSION):"
                    " run `make setup` (it installs .tools/bin/uv) or point $UV at uv " + pinned
                )
            return Path(candidate)
    raise PackagingError(f"uv not found: the build needs uv {pinned}; run `make setup` (it installs .tools/bin/uv)")


def pinned_uv_version(root: Path = ROOT) -> str:
    """The uv version the Makefile pins (``UV_VERSION := x.y.z``).

    Raises:
        PackagingError: the Makefile pins none.
    """
    makefile = root / "Makefile"
    match = re.search(r"^UV_VERSION\s*:?=\s*(\S+)\s*$", makefile.read_text(encoding="utf-8"), re.MULTILINE)
    if match is None:
        raise PackagingError(f"{makefile} pins no UV_VERSION")
    return match[1]


@functools.cache
def uv_version(binary: Path) -> str:
    """The version a uv binary reports (``uv 0.13.9 (...)`` -> ``0.13.9``)."""
    return _run([str(binary), "--version"], cwd=Path(tempfile.gettempdir())).split()[1]


def _lambda_sources(root: Path, excluded: tuple[str, ...] = LAMBDA_EXCLUDED) -> list[Path]:
    """The source files of a Lambda asset: ``src/lakesync`` and ``functions``, but the ``excluded`` paths."""
    files = []
    for path in [*_tree(root / "src" / "lakesync"), *_tree(root / "functions")]:
        in_asset = _asset_path(root, path)
        if not any(in_asset == e or in_asset.is_relative_to(e) for e in map(Path, excluded)):
            files.append(path)
    return files


def _asset_path(root: Path, source: Path) -> Path:
    """Where a source file goes in a Lambda asset: ``src/`` stripped (``lakesync/...``), ``functions/...`` as is."""
    return source.relative_to(root / "src" if source.is_relative_to(root / "src") else root)


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
