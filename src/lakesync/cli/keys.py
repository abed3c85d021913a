"""``lakesync token`` (dev tokens) and ``lakesync rotate-key`` (the signing key, local or deployed)."""

from __future__ import annotations

import argparse
import os
import sys
from pathlib import Path
from typing import Any

from lakesync.cli.common import DEFAULT_DATA_DIR


def _cmd_token(args: argparse.Namespace) -> int:
    from lakesync.auth import check_signing_key, mint_token
    from lakesync.local.runner import SECRET_FILE, load_or_create_secret

    max_lifetime = _max_token_lifetime()
    if max_lifetime is None:
        return 2
    if args.ttl <= 0 or args.ttl > max_lifetime:
        print(
            f"--ttl {args.ttl} is outside 1..{max_lifetime} s: the gateway refuses tokens that live longer than"
            f" {max_lifetime} s ({MAX_TOKEN_LIFETIME_VAR}; default 86400, at most 2592000)",
            file=sys.stderr,
        )
        return 2
    secret = os.environ.get("LAKESYNC_JWT_SECRET")
    try:
        if secret:
            check_signing_key(secret, "LAKESYNC_JWT_SECRET")
        else:
            data_dir = Path(args.data_dir)
            if not (data_dir / SECRET_FILE).exists():
                print(
                    f"no JWT secret: set LAKESYNC_JWT_SECRET or run `lakesync local` once in {data_dir}",
                    file=sys.stderr,
                )
                return 2
            secret = load_or_create_secret(data_dir)
    except ValueError as exc:
        print(f"cannot mint: {exc}", file=sys.stderr)
        return 2
    claims = dict(pair.split("=", 1) for pair in args.claim)
    print(mint_token(args.sub, args.gw, secret, role=args.role, ttl_s=args.ttl, claims=claims))
    return 0


MAX_TOKEN_LIFETIME_VAR = "LAKESYNC_MAX_TOKEN_LIFETIME_S"


def _max_token_lifetime() -> int | None:
    """The gateway's maximum token lifetime as the functions read it (``None``, with a message, when invalid)."""
    from lakesync.auth import DEFAULT_MAX_LIFETIME_S
    from lakesync.aws.settings.variables import MAX_TOKEN_LIFETIME_LIMIT_S, MIN_TOKEN_LIFETIME_LIMIT_S

    raw = os.environ.get(MAX_TOKEN_LIFETIME_VAR, "").strip()
    if not raw:
        return DEFAULT_MAX_LIFETIME_S
    if raw.isascii() and raw.isdigit() and MIN_TOKEN_LIFETIME_LIMIT_S <= int(raw) <= MAX_TOKEN_LIFETIME_LIMIT_S:
        return int(raw)
    print(
        f"{MAX_TOKEN_LIFETIME_VAR} must be an integer from {MIN_TOKEN_LIFETIME_LIMIT_S} to"
        f" {MAX_TOKEN_LIFETIME_LIMIT_S}, got {raw!r}",
        file=sys.stderr,
    )
    return None


def _cmd_rotate_key(args: argparse.Namespace) -> int:
    if args.secret_id:
        return _rotate_aws_key(args.secret_id, emergency=args.emergency)
    from lakesync.local.runner import rotate_local_key

    data_dir = Path(args.data_dir)
    if rotate_local_key(data_dir, emergency=args.emergency):
        kept = "the previous key still verifies until the next rotation (--emergency drops it)"
    else:
        kept = "no previous key is kept: every token signed before now is refused"
    print(f"rotated the JWT key in {data_dir.resolve()}; {kept}.")
    print("restart `lakesync local` to apply it, then mint new tokens with `lakesync token`.")
    return 0


def _rotate_aws_key(secret_id: str, *, emergency: bool) -> int:
    from lakesync.aws.rotation import emergency_rotate, start_rotation
    from lakesync.aws.secrets import secretsmanager_client
    from lakesync.core.errors import LakeSyncError

    client = secretsmanager_client()
    try:
        if not emergency:
            start_rotation(client, secret_id)
            print(
                f"rotation of {secret_id} started (its rotation function runs the four steps); tokens signed with"
                " the replaced key stay valid until the next rotation"
            )
            return 0
        done = emergency_rotate(client, secret_id)
    except LakeSyncError as exc:
        print(f"rotate-key failed: {exc.message}", file=sys.stderr)
        return 1
    dropped = ", ".join(done.dropped_versions) or "none"
    print(
        f"new AWSCURRENT version {done.current_version} of {secret_id}; versions taken out of verification: {dropped}"
    )
    print(
        "warm functions refuse tokens signed with the old keys within 60 s, new ones at once;"
        " mint new tokens with the new key"
    )
    return 0


def add_parsers(sub: Any) -> None:
    """``lakesync token`` and ``lakesync rotate-key``."""
    token = sub.add_parser("token", help="mint a JWT for the local gateway")
    token.add_argument("--sub", required=True, help="client id")
    token.add_argument("--gw", default="default", help="gateway id")
    token.add_argument("--role", default="client", choices=["client", "admin"])
    token.add_argument(
        "--ttl",
        type=int,
        default=3600,
        help="seconds until expiry (at most LAKESYNC_MAX_TOKEN_LIFETIME_S, default 86400; longer is refused)",
    )
    token.add_argument("--claim", action="append", default=[], metavar="KEY=VALUE", help="custom claim (repeatable)")
    token.add_argument("--data-dir", default=str(DEFAULT_DATA_DIR))
    token.set_defaults(func=_cmd_token)

    rotate = sub.add_parser(
        "rotate-key",
        help="replace the JWT signing key: the local data directory's, or a deployed stack's (--secret-id)",
    )
    rotate.add_argument(
        "--emergency",
        action="store_true",
        help="drop the previous key at once (a leaked key): every token signed before now is refused",
    )
    rotate.add_argument("--data-dir", default=str(DEFAULT_DATA_DIR))
    rotate.add_argument(
        "--secret-id",
        metavar="ARN",
        help="the stack's JWT secret in Secrets Manager (output JwtSecretArn); AWS credentials from the environment",
    )
    rotate.set_defaults(func=_cmd_rotate_key)
