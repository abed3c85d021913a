"""The cloud runs what the tests run: every deployed function's Python is the interpreter running this suite (which
runs the handlers), and the Glue jobs' version runs the Spark, Python, Iceberg line and Java that the local Spark
tests use (pinned pyspark, the Iceberg runtime jar from PyPI)."""

from __future__ import annotations

import re
import shutil
import subprocess
import sys
import tomllib
from pathlib import Path

import pytest
from lakesync_infra.common import LAMBDA_RUNTIME
from lakesync_infra.config import ALL_FUNCTIONS
from lakesync_infra.jobs import GLUE_RUNTIMES, GLUE_VERSION, JOB_KINDS
from lakesync_infra.packaging import LAMBDA_PYTHON

ROOT = Path(__file__).resolve().parents[2]
RUNNING_PYTHON = f"{sys.version_info.major}.{sys.version_info.minor}"


def _minor_line(version: str) -> str:
    """``1.10.2`` -> ``1.10``."""
    return ".".join(version.split(".")[:2])


@pytest.mark.parametrize("name", ALL_FUNCTIONS)
def test_deployed_function_runtime_is_the_python_running_the_tests(cfn, name):
    # Given a synthesized function
    fn = cfn.functions()[name]
    # Then its runtime is the interpreter this suite runs the handlers on
    assert fn["Runtime"] == f"python{RUNNING_PYTHON}"


def test_lambda_runtime_and_asset_target_are_the_running_python():
    # Given the runtime the functions deploy and the Python their assets' wheels are chosen for
    # Then both are the running interpreter's major.minor
    assert LAMBDA_RUNTIME.name == f"python{RUNNING_PYTHON}"
    assert LAMBDA_PYTHON == RUNNING_PYTHON


@pytest.mark.parametrize("kind", JOB_KINDS)
def test_glue_jobs_run_the_pinned_glue_version(synth, glue_synth, kind):
    # Given a synthesized Glue job (the flush job: with flushEngine glue)
    deploying = glue_synth if kind == "flush" else synth
    job = deploying.cfn.resources[deploying.ids[f"job:{kind}"]]["Properties"]
    # Then it runs the Glue version whose runtime the local tests match
    assert job["GlueVersion"] == GLUE_VERSION
    assert GLUE_VERSION in GLUE_RUNTIMES


def test_glue_spark_is_the_local_pyspark_and_its_pin():
    import pyspark

    # Given Glue's Spark and the spark extra's pin
    glue = GLUE_RUNTIMES[GLUE_VERSION]
    extra = tomllib.loads((ROOT / "pyproject.toml").read_text(encoding="utf-8"))["project"]["optional-dependencies"]
    pins = [req for req in extra["spark"] if re.match(r"pyspark\b", req)]
    # Then the installed pyspark is exactly Glue's Spark, and so is the pin
    assert pyspark.__version__ == glue.spark
    assert pins == [f"pyspark=={glue.spark}"]


def test_glue_python_is_the_running_python():
    # Given Glue's Python
    # Then the local Spark tests (and the Lambda handlers) run on the same major.minor
    assert GLUE_RUNTIMES[GLUE_VERSION].python == RUNNING_PYTHON


def test_glue_iceberg_line_is_the_local_runtime_jars():
    from lakesync.spark.runtime import iceberg_runtime_version

    # Given Glue's Iceberg (1.10.0) and the local runtime jar's (PyPI ships 1.10.2, no 1.10.0)
    glue, local = GLUE_RUNTIMES[GLUE_VERSION].iceberg, iceberg_runtime_version()
    # Then both are on the same minor line, the local one at the same patch release or a later one
    assert _minor_line(local) == _minor_line(glue)
    assert tuple(map(int, local.split("."))) >= tuple(map(int, glue.split(".")))


def test_glue_java_is_the_local_java():
    # Given the Java the local Spark runs on
    java = shutil.which("java")
    assert java is not None, "local Spark needs Java (make setup installs it)"
    banner = subprocess.run([java, "-version"], capture_output=True, text=True, check=True).stderr
    match = re.search(r'version "(\d+)', banner)
    assert match is not None, banner
    # Then it is Glue's major version
    assert match[1] == GLUE_RUNTIMES[GLUE_VERSION].java
