"""Reading cProfile output: where the time of a run went, by owner (our code, the AWS SDK, Powertools, moto, I/O).

Self time of the standard library and builtins (``json.dumps``, ``hashlib``, ``re``...) is charged to whoever called
them, walking up the call graph in proportion to each caller's share, so "our code" includes the stdlib work our
code asks for and "the SDK" includes botocore's own JSON parsing. Time blocked on a socket or in ``select``/``poll``
is its own category: on the client it is the time spent waiting for moto.
"""

from __future__ import annotations

import pstats
from collections import defaultdict
from pathlib import Path
from typing import Any

Func = tuple[str, int, str]

WAIT = "waiting on the socket (moto's time, seen from the client)"
IDLE = "idle (waiting for the next request)"
OURS = "our code (src/lakesync, functions/)"
SDK = "AWS SDK (boto3, botocore, urllib3, http.client)"
POWERTOOLS = "aws-lambda-powertools"
MOTO = "moto (DynamoDB emulation)"
SERVER = "HTTP server stack (werkzeug, flask)"
OTHER = "other"

_WAIT_NAMES = ("recv_into", "'poll' of", "'select' of", "sendall", "'connect' of", "'recv' of")
_OWNERS = (
    (("/src/lakesync/", "/functions/"), OURS),
    (("/botocore/", "/boto3/", "/urllib3/", "/http/client.py", "/jmespath/", "/dateutil/", "/s3transfer/"), SDK),
    (("/aws_lambda_powertools/",), POWERTOOLS),
    (("/moto/", "/benchmarks/_moto.py"), MOTO),
    (("/werkzeug/", "/flask/", "/flask_cors/", "/socketserver.py", "/http/server.py", "/jinja2/"), SERVER),
)


def _owner(func: Func, *, server: bool) -> str | None:
    filename, _, name = func
    if filename == "~" and any(w in name for w in _WAIT_NAMES):
        return IDLE if server else WAIT
    for markers, owner in _OWNERS:
        if any(m in filename for m in markers):
            return owner
    return None


def _label(func: Func) -> str:
    filename, line, name = func
    if filename == "~":
        return name
    path = Path(filename)
    for anchor in ("site-packages", "src", "work"):
        if anchor in path.parts:
            index = len(path.parts) - 1 - path.parts[::-1].index(anchor)
            return f"{'/'.join(path.parts[index + 1 :])}:{line}({name})"
    return f"{path.name}:{line}({name})"


def breakdown(profile: Path, *, server: bool = False, top: int = 12) -> dict[str, Any]:
    """Self time by owner, and the costliest functions, of one cProfile dump.

    Args:
        profile: A ``cProfile`` stats file.
        server: The dump is moto's (socket waits are idle time, not a cost).
        top: How many functions to list.

    Returns:
        ``{"total_s", "by_owner": {owner: seconds}, "top_functions": [...], "top_ours": [...]}``; function entries
        are ``{"function", "owner", "self_s"}`` where self time includes the stdlib work charged to them.
    """
    stats: dict[Func, Any] = pstats.Stats(str(profile)).stats  # type: ignore[attr-defined]
    shares: dict[Func, dict[Func, float]] = {}
    in_progress: set[Func] = set()

    def owners_of(func: Func) -> dict[Func, float]:
        # Which owned functions a stdlib function's time belongs to, as fractions (cycles end at the function).
        if _owner(func, server=server) is not None or func not in stats or func in in_progress:
            return {func: 1.0}
        if func in shares:
            return shares[func]
        in_progress.add(func)
        weights = {caller: edge[2] + 1e-9 for caller, edge in stats[func][4].items()}
        total = sum(weights.values())
        result: dict[Func, float] = defaultdict(float)
        for caller, weight in weights.items():
            for owner, fraction in owners_of(caller).items():
                result[owner] += fraction * weight / total
        in_progress.discard(func)
        shares[func] = dict(result) if result else {func: 1.0}
        return shares[func]

    charged: dict[Func, float] = defaultdict(float)
    for func, (_cc, _nc, self_time, _ct, _callers) in stats.items():
        if self_time > 0:
            for owner, fraction in owners_of(func).items():
                charged[owner] += self_time * fraction

    by_owner: dict[str, float] = defaultdict(float)
    for func, seconds in charged.items():
        by_owner[_owner(func, server=server) or OTHER] += seconds
    ranked = sorted(
        ((f, s) for f, s in charged.items() if _owner(f, server=server) not in (WAIT, IDLE)),
        key=lambda fs: -fs[1],
    )

    def entry(func: Func, seconds: float) -> dict[str, Any]:
        return {"function": _label(func), "owner": _owner(func, server=server) or OTHER, "self_s": round(seconds, 3)}

    return {
        "total_s": round(sum(charged.values()), 3),
        "by_owner": {k: round(v, 3) for k, v in sorted(by_owner.items(), key=lambda kv: -kv[1])},
        "top_functions": [entry(f, s) for f, s in ranked[:top]],
        "top_ours": [entry(f, s) for f, s in ranked if _owner(f, server=server) == OURS][:top],
    }


def cumulative(profile: Path, suffixes: dict[str, str]) -> dict[str, dict[str, float]]:
    """Calls and cumulative seconds of chosen functions, e.g. moto's handler of each DynamoDB operation.

    Args:
        profile: A ``cProfile`` stats file.
        suffixes: ``{label: "path/suffix.py:function"}``; a function matches when its file ends with the path and
            its name equals the function.
    """
    stats: dict[Func, Any] = pstats.Stats(str(profile)).stats  # type: ignore[attr-defined]
    found: dict[str, dict[str, float]] = {}
    for label, spec in suffixes.items():
        path, _, name = spec.partition(":")
        calls = 0
        seconds = 0.0
        for (filename, _line, func_name), (_cc, nc, _tt, ct, _callers) in stats.items():
            if filename.endswith(path) and func_name == name:
                calls += nc
                seconds += ct
        found[label] = {"calls": calls, "seconds": round(seconds, 3)}
    return found
