"""Layering: the pure core, the wire codec and auth import none of boto3, pyspark or pyiceberg.

Checked in a fresh interpreter so that other tests' imports cannot hide a leak.
"""

from __future__ import annotations

import subprocess
import sys

HEAVY = ("boto3", "botocore", "pyspark", "pyiceberg", "pyarrow", "moto", "aws_lambda_powertools")


def test_core_wire_and_auth_import_no_heavy_dependencies():
    code = (
        "import sys, importlib, pkgutil\n"
        "import lakesync.core, lakesync.wire, lakesync.auth\n"
        "for m in pkgutil.iter_modules(lakesync.core.__path__): importlib.import_module('lakesync.core.' + m.name)\n"
        f"print(','.join(sorted(m for m in {HEAVY!r} if m in sys.modules)))\n"
    )
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True)
    assert out.stdout.strip() == ""


def test_core_modules_do_no_io_imports():
    code = (
        "import sys, importlib, pkgutil\n"
        "import lakesync.core\n"
        "before = set(sys.modules)\n"
        "for m in pkgutil.iter_modules(lakesync.core.__path__): importlib.import_module('lakesync.core.' + m.name)\n"
        "bad = {'socket', 'http.client', 'urllib.request', 'sqlite3', 'subprocess'} & (set(sys.modules) - before)\n"
        "print(','.join(sorted(bad)))\n"
    )
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True)
    assert out.stdout.strip() == ""
