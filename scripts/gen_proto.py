"""Regenerate the committed protobuf code from ``proto/`` (``make proto``).

Runs the protoc bundled with ``grpcio-tools`` over every ``.proto`` under ``proto/`` and writes the generated
``*_pb2.py`` / ``*_pb2.pyi`` files flat into ``src/lakesync/wire/_pb/`` (``lakesync/v1/lakesync.proto`` becomes
``_pb/lakesync_pb2.py``), so the installed package imports them as ``lakesync.wire._pb.lakesync_pb2`` and the Lambda
install needs no grpcio-tools. The generated code is committed; ``tests/unit/test_wire_generated.py`` regenerates it
into a temporary directory and fails if the committed files differ.

Usage: ``python scripts/gen_proto.py [--out DIR]``.
"""

from __future__ import annotations

import argparse
import shutil
import subprocess
import sys
import tempfile
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
PROTO_ROOT = ROOT / "proto"
DEFAULT_OUT = ROOT / "src" / "lakesync" / "wire" / "_pb"

INIT_TEXT = '"""Generated protobuf code (``make proto``); do not edit. Private to :mod:`lakesync.wire`."""\n'


def proto_files(proto_root: Path = PROTO_ROOT) -> list[str]:
    """The ``.proto`` files under ``proto_root``, as paths relative to it, sorted."""
    return sorted(p.relative_to(proto_root).as_posix() for p in proto_root.rglob("*.proto"))


def generate(out_dir: Path, proto_root: Path = PROTO_ROOT) -> list[Path]:
    """Generate the Python code for every proto file into ``out_dir`` (created if needed).

    Returns:
        The files written, ``__init__.py`` included.

    Raises:
        RuntimeError: if protoc fails or two proto files would generate the same module name.
    """
    files = proto_files(proto_root)
    if not files:
        raise RuntimeError(f"no .proto files under {proto_root}")
    out_dir.mkdir(parents=True, exist_ok=True)
    written: list[Path] = []
    with tempfile.TemporaryDirectory() as tmp:
        cmd = [
            sys.executable,
            "-m",
            "grpc_tools.protoc",
            f"-I{proto_root}",
            f"--python_out={tmp}",
            f"--pyi_out={tmp}",
            *files,
        ]
        result = subprocess.run(cmd, cwd=proto_root, capture_output=True, text=True, check=False)
        if result.returncode != 0:
            raise RuntimeError(f"protoc failed ({result.returncode}):\n{result.stderr}")
        # The proto files import nothing but themselves, so flattening the package path needs no import fix-ups;
        # a clash of two flattened names would, so refuse it.
        seen: dict[str, Path] = {}
        for generated in sorted(Path(tmp).rglob("*_pb2.py*")):
            if generated.name in seen:
                raise RuntimeError(f"{generated.name} generated twice ({seen[generated.name]} and {generated})")
            seen[generated.name] = generated
            target = out_dir / generated.name
            shutil.copyfile(generated, target)
            written.append(target)
    init = out_dir / "__init__.py"
    init.write_text(INIT_TEXT, encoding="utf-8")
    written.append(init)
    return written


def main(argv: list[str] | None = None) -> int:
    """Command-line entry point."""
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--out", type=Path, default=DEFAULT_OUT, help=f"output directory (default {DEFAULT_OUT})")
    args = parser.parse_args(argv)
    for path in generate(args.out):
        print(f"wrote {path}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
