"""The Glue jobs' zip of wheels installs into a clean Python 3.11 without the network (issue 12.6).

The bundle is the one the stack deploys (``lakesync_infra.packaging.build_glue_bundle``; built once per content hash
under ``build/``, the pinned wheels downloaded once from the URLs uv.lock records). Glue runs pip on it with
``--python-modules-installer-option --no-index``; here pip runs the same way in a fresh venv, with every proxy
pointing at a closed port, so any attempt to reach an index fails the install.
"""

from __future__ import annotations

import os
import subprocess
import sys
import tomllib
import venv
import zipfile
from pathlib import Path

import pytest
from lakesync_infra.packaging import GLUE_WHEEL_TAGS, GlueBundle, build_glue_bundle, glue_requirements

ROOT = Path(__file__).resolve().parents[2]
_NO_NETWORK = {
    **dict.fromkeys(("http_proxy", "https_proxy", "HTTP_PROXY", "HTTPS_PROXY", "ALL_PROXY"), "http://127.0.0.1:9"),
    "PIP_NO_INDEX": "1",
    "PIP_CONFIG_FILE": os.devnull,
    "PIP_DISABLE_PIP_VERSION_CHECK": "1",
    "PIP_NO_CACHE_DIR": "1",
}
_PROBE = """
import json, sys
from importlib import metadata
import jwt
import lakesync
from google.protobuf.internal import api_implementation
from lakesync.auth import mint_token, verify_token
from lakesync.wire import codec
print(json.dumps({
    "python": list(sys.version_info[:2]),
    "dists": sorted(f"{d.metadata['Name'].lower()}=={d.version}" for d in metadata.distributions()
                    if d.metadata['Name'].lower() not in ("pip", "setuptools")),
    "protobuf": api_implementation.Type(),
}))
"""


@pytest.fixture(scope="module")
def bundle() -> GlueBundle:
    return build_glue_bundle()


def _unpack(bundle: GlueBundle, into: Path) -> Path:
    with zipfile.ZipFile(bundle.directory / bundle.modules_name) as archive:
        archive.extractall(into)
    return into / "wheels"


def _clean_venv(path: Path) -> Path:
    # A venv of the base interpreter (3.11), with pip from ensurepip (bundled: no download), nothing else.
    venv.EnvBuilder(with_pip=True, clear=True).create(path)
    return path / "bin" / "python"


def _pip_install(python: Path, wheels: Path, *extra: str) -> subprocess.CompletedProcess[str]:
    env = {**os.environ, **_NO_NETWORK}
    env.pop("VIRTUAL_ENV", None)
    return subprocess.run(
        [str(python), "-m", "pip", "install", "--no-index", "--find-links", str(wheels),
         "-r", str(wheels / "requirements.txt"), *extra],
        capture_output=True, text=True, env=env, check=False, timeout=300,
    )  # fmt: skip


def test_zip_of_wheels_pins_the_locked_runtime_requirements(bundle: GlueBundle) -> None:
    # Given the zip the jobs install and uv.lock
    with zipfile.ZipFile(bundle.directory / bundle.modules_name) as archive:
        names = sorted(archive.namelist())
        pins = archive.read("wheels/requirements.txt").decode().split()
    lock = {p["name"]: p["version"] for p in tomllib.loads((ROOT / "uv.lock").read_text())["package"] if "version" in p}
    # Then it pins lakesync and exactly the base install's requirements, at the locked versions
    assert pins[0] == f"lakesync=={bundle.wheel_name.split('-')[1]}"
    assert pins[1:] == glue_requirements() == [f"protobuf=={lock['protobuf']}", f"pyjwt=={lock['pyjwt']}"]
    # And holds one wheel set for them, only for Glue's Python and platform (or pure Python), nothing else
    wheels = [n.removeprefix("wheels/") for n in names if n.endswith(".whl")]
    assert names == sorted(["wheels/requirements.txt", *(f"wheels/{w}" for w in wheels)])
    assert bundle.wheel_name in wheels
    for wheel in wheels:
        assert any(wheel.endswith(f"-{tag}.whl") for tag in GLUE_WHEEL_TAGS), wheel
    assert {w.split("-")[0].lower() for w in wheels} == {"lakesync", "protobuf", "pyjwt"}


def test_zip_of_wheels_installs_into_a_clean_python_without_the_network(bundle: GlueBundle, tmp_path: Path) -> None:
    # Given the unpacked zip and a fresh venv of Python 3.11 (Glue 5.1's)
    assert sys.version_info[:2] == (3, 11)
    wheels = _unpack(bundle, tmp_path / "bundle")
    python = _clean_venv(tmp_path / "venv")
    # When pip installs the requirements from the bundle alone, with no index and no way out
    done = _pip_install(python, wheels)
    # Then it succeeds
    assert done.returncode == 0, done.stdout + done.stderr
    # And the venv holds exactly the pinned set, with protobuf's compiled (upb) wheel on this x86_64 Linux
    probe = subprocess.run([str(python), "-c", _PROBE], capture_output=True, text=True, check=True, cwd=tmp_path)
    report = __import__("json").loads(probe.stdout)
    pins = (wheels / "requirements.txt").read_text().split()
    assert report["python"] == [3, 11]
    assert report["dists"] == sorted(pins)
    assert report["protobuf"] == "upb"


def test_install_fails_when_a_pinned_wheel_is_missing(bundle: GlueBundle, tmp_path: Path) -> None:
    # Given the bundle without PyJWT's wheel (what a run would meet with an incomplete bundle)
    wheels = _unpack(bundle, tmp_path / "bundle")
    for wheel in wheels.glob("pyjwt-*.whl"):
        wheel.unlink()
    python = _clean_venv(tmp_path / "venv")
    # When pip installs it offline
    done = _pip_install(python, wheels)
    # Then it fails rather than fetch the wheel from anywhere
    assert done.returncode != 0
    assert "pyjwt" in (done.stdout + done.stderr).lower()
