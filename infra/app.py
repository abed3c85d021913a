"""Synthesize the LakeSync CloudFormation templates, offline.

Usage (from the repository root, the project venv active)::

    python infra/app.py [--outdir DIR] [-c lakesync:environments=dev,prod] [-c 'lakesync:env:dev={"gatewayIds":["a"]}']

or, with the pinned CDK CLI from ``infra/`` (``cdk synth`` / ``cdk deploy``), which runs ``python app.py`` with its
own context and output directory. Context defaults come from ``infra/cdk.json`` (see
:mod:`lakesync_infra.config`); the Lambda assets and the Glue bundle are built (or reused) under ``build/`` first.
The cloud assembly goes to ``--outdir``, else ``$CDK_OUTDIR``, else ``infra/cdk.out``. The synth fails on any
cdk-nag AwsSolutions finding that is not acknowledged.
"""

from __future__ import annotations

import argparse
import json
import os
import sys
import time
from pathlib import Path
from typing import Any

HERE = Path(__file__).resolve().parent


def _context_arg(text: str) -> tuple[str, str]:
    key, sep, value = text.partition("=")
    if not sep or not key:
        raise argparse.ArgumentTypeError(f"expected KEY=VALUE, got {text!r}")
    return key, value


def main(argv: list[str] | None = None) -> int:
    """Build the artifacts, synthesize every environment's stack, print a summary; 1 on a failed validation."""
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--outdir", help="cloud assembly directory (default: $CDK_OUTDIR or infra/cdk.out)")
    parser.add_argument("-c", "--context", action="append", type=_context_arg, default=[], metavar="KEY=VALUE")
    args = parser.parse_args(argv)
    os.environ.setdefault("JSII_SILENCE_WARNING_END_OF_LIFE_NODE_VERSION", "20")

    from lakesync_infra.packaging import (
        build_flush_asset,
        build_glue_bundle,
        build_lambda_asset,
        build_materialise_asset,
        directory_size,
    )
    from lakesync_infra.stack import Artifacts, build_app

    started = time.monotonic()
    artifacts = Artifacts(
        lambda_asset=build_lambda_asset(),
        glue=build_glue_bundle(),
        materialise_asset=build_materialise_asset(),
        flush_asset=build_flush_asset(),
    )
    built = time.monotonic()
    defaults: dict[str, Any] = json.loads((HERE / "cdk.json").read_text(encoding="utf-8")).get("context", {})
    outdir = None if "CDK_OUTDIR" in os.environ else (args.outdir or str(HERE / "cdk.out"))
    app, stacks = build_app(defaults, artifacts, outdir=outdir, post_cli_context=dict(args.context) or None)
    try:
        assembly = app.synth()
    except RuntimeError as exc:
        print(f"synth failed: {exc}", file=sys.stderr)
        return 1
    done = time.monotonic()
    for stack in stacks:
        print(f"{stack.stack_name}: {Path(assembly.directory) / stack.template_file}")
    size = directory_size(artifacts.lambda_asset)
    print(f"lambda asset: {artifacts.lambda_asset} ({size / 1e6:.1f} MB unzipped)")
    size = directory_size(artifacts.materialise_asset)
    print(f"materialise asset: {artifacts.materialise_asset} ({size / 1e6:.1f} MB unzipped)")
    size = directory_size(artifacts.flush_asset)
    print(f"flush asset: {artifacts.flush_asset} ({size / 1e6:.1f} MB unzipped)")
    print(f"glue bundle: {artifacts.glue.directory} ({artifacts.glue.wheel_name})")
    print(f"artifacts {built - started:.1f} s, synth {done - built:.1f} s")
    return 0


if __name__ == "__main__":
    sys.exit(main())
