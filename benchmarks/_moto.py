"""moto in server mode, in its own process, for the benchmarks.

Why a separate process (and not :class:`lakesync.local.moto.MotoServer`, which runs in a thread): a Lambda and
DynamoDB do not share an interpreter. In one process, moto's request handling and the code under test would take
turns on one GIL, and a client-side profile would mix the two. Here the client's profile shows moto as time spent
waiting on a socket, and moto can be profiled on its own (``--profile``).

Both sides of every comparison run on the same server, with the same flags.

``--fast-transactions``: :func:`lakesync.local.moto_fast.install_fast_transactions`, the patches the embedded
default's moto server runs: a table's stream keeps its last records instead of every one ever written (the log table
has a stream: every log write adds a record), consumed shard iterators are forgotten, and a ``TransactWriteItems``
backs each touched table up once per transaction instead of once per item. The gateway sends no transaction (a push
commits by one conditional ``PutItem`` of its chunk's log item, issue 42), so that last patch is idle here.

``--fast-json``: moto 5.x writes every response through a generic, botocore-model-driven serializer that costs
about a millisecond per item returned (seconds for a 1,000-item ``Query`` page; DynamoDB answers in milliseconds).
With the flag, the ``Items`` of ``Query`` and ``Scan`` responses whose attribute values are all of the JSON-native
types (S, N, BOOL, NULL, and L/M of them) are written with :func:`json.dumps`; the rest of the response, and every
other response, goes through the stock serializer. The first responses are serialized both ways and compared
(:data:`VERIFY_FIRST`); any difference turns the fast path off for the life of the process and is reported.

Every other request runs stock moto code.

Run as ``python -m benchmarks._moto --port 0 [--fast-transactions] [--profile FILE]``; the process prints
``READY <port>`` on stdout when it accepts connections and stops on SIGTERM (writing the profile, if asked).
With ``--profile`` the server handles one request at a time (a profiler sees one thread).
"""

from __future__ import annotations

import argparse
import json
import os
import signal
import subprocess
import sys
import urllib.request
from pathlib import Path
from types import FrameType
from typing import IO, Any

from lakesync.local.moto_fast import install_fast_transactions

VERIFY_FIRST = 3
"""How many fast-path responses are also serialized the stock way and compared."""
_JSON_TYPES = frozenset({"S", "N", "BOOL", "NULL"})


class _FastJsonState:
    """What the fast JSON path did, reported on stdout at shutdown."""

    used = 0
    verified = 0
    disabled_reason: str | None = None


def _json_native(value: Any) -> bool:
    if not isinstance(value, dict) or len(value) != 1:
        return False
    ((kind, inner),) = value.items()
    if kind in _JSON_TYPES:
        return True
    if kind == "L":
        return isinstance(inner, list) and all(_json_native(v) for v in inner)
    if kind == "M":
        return isinstance(inner, dict) and all(_json_native(v) for v in inner.values())
    return False


def _install_fast_json() -> None:
    """Patch moto's DynamoDB results: plain-JSON ``Items`` skip the model-driven serializer (module docstring)."""
    from moto.dynamodb.responses import DynamoResult

    stock_execute = DynamoResult.execute_result

    def execute_result(self: Any, context: Any) -> Any:
        result = self.result
        items = result.get("Items") if isinstance(result, dict) else None
        if (
            _FastJsonState.disabled_reason is not None
            or context.operation_model.name not in ("Query", "Scan")
            or not isinstance(items, list)
            or not all(isinstance(i, dict) and all(_json_native(v) for v in i.values()) for i in items)
        ):
            return stock_execute(self, context)
        rest = DynamoResult.__new__(DynamoResult)
        rest._result = {**result, "Items": []}
        status, headers, body = stock_execute(rest, context)
        document = json.loads(body)
        document["Items"] = items
        fast_body = json.dumps(document)
        _FastJsonState.used += 1
        if _FastJsonState.verified < VERIFY_FIRST:
            _FastJsonState.verified += 1
            stock_status, stock_headers, stock_body = stock_execute(self, context)
            if (stock_status, stock_headers, json.loads(stock_body)) != (status, headers, document):
                _FastJsonState.disabled_reason = f"{context.operation_model.name} response differed from moto's"
                print(f"fast-json disabled: {_FastJsonState.disabled_reason}", file=sys.stderr, flush=True)
                return stock_status, stock_headers, stock_body
        return status, headers, fast_body

    DynamoResult.execute_result = execute_result  # type: ignore[method-assign]


def main(argv: list[str] | None = None) -> None:
    """Serve moto until SIGTERM (see the module docstring)."""
    parser = argparse.ArgumentParser(prog="python -m benchmarks._moto")
    parser.add_argument("--host", default="127.0.0.1")
    parser.add_argument("--port", type=int, default=0)
    parser.add_argument("--fast-transactions", action="store_true")
    parser.add_argument("--fast-json", action="store_true")
    parser.add_argument("--profile", type=Path)
    args = parser.parse_args(argv)

    import logging

    from moto.moto_server.werkzeug_app import DomainDispatcherApplication, MotoRequestHandler, create_backend_app
    from werkzeug.serving import make_server

    logging.getLogger("werkzeug").setLevel(logging.WARNING)
    if args.fast_transactions:
        install_fast_transactions()
    if args.fast_json:
        _install_fast_json()
    app = DomainDispatcherApplication(create_backend_app)
    server = make_server(args.host, args.port, app, threaded=args.profile is None, request_handler=MotoRequestHandler)

    def stop(_signum: int, _frame: FrameType | None) -> None:
        raise SystemExit(0)

    signal.signal(signal.SIGTERM, stop)
    profiler = None
    if args.profile is not None:
        import cProfile

        profiler = cProfile.Profile()
    print(f"READY {server.server_address[1]}", flush=True)
    try:
        if profiler is not None:
            profiler.enable()
        server.serve_forever()
    except (SystemExit, KeyboardInterrupt):
        pass
    finally:
        if profiler is not None:
            profiler.disable()
            profiler.dump_stats(str(args.profile))
        server.server_close()
        if args.fast_json:
            report = {
                "used": _FastJsonState.used,
                "verified": _FastJsonState.verified,
                "disabled_reason": _FastJsonState.disabled_reason,
            }
            print(f"FAST-JSON {json.dumps(report)}", flush=True)


class MotoProcess:
    """A moto server subprocess (``python -m benchmarks._moto``); use as a context manager."""

    def __init__(self, *, fast_transactions: bool, fast_json: bool = False, profile: Path | None = None) -> None:
        """Configure; :meth:`start` launches it."""
        self.fast_transactions = fast_transactions
        self.fast_json = fast_json
        self.profile = profile
        self.fast_json_report: dict[str, Any] | None = None
        self._proc: subprocess.Popen[str] | None = None
        self.endpoint_url = ""

    def start(self) -> MotoProcess:
        """Launch the server and wait until it accepts connections."""
        command = [sys.executable, "-m", "benchmarks._moto", "--port", "0"]
        if self.fast_transactions:
            command.append("--fast-transactions")
        if self.fast_json:
            command.append("--fast-json")
        if self.profile is not None:
            command += ["--profile", str(self.profile)]
        root = Path(__file__).resolve().parent.parent
        env = {**os.environ, "PYTHONPATH": os.pathsep.join(filter(None, [str(root), os.environ.get("PYTHONPATH")]))}
        self._proc = subprocess.Popen(command, stdout=subprocess.PIPE, text=True, cwd=root, env=env)
        assert self._proc.stdout is not None
        line = _read_line(self._proc.stdout)
        if not line.startswith("READY "):
            self.stop()
            raise RuntimeError(f"moto server did not start: {line!r}")
        self.endpoint_url = f"http://127.0.0.1:{int(line.split()[1])}"
        return self

    def reset(self) -> None:
        """Drop all of moto's state (``POST /moto-api/reset``)."""
        request = urllib.request.Request(f"{self.endpoint_url}/moto-api/reset", data=b"", method="POST")
        with urllib.request.urlopen(request, timeout=60) as response:
            response.read()

    def stop(self) -> None:
        """SIGTERM the server and wait for it (and its profile) to finish."""
        proc, self._proc = self._proc, None
        if proc is None:
            return
        proc.terminate()
        try:
            proc.wait(timeout=60)
        except subprocess.TimeoutExpired:
            proc.kill()
            proc.wait()
        if proc.stdout is not None:
            for line in proc.stdout.read().splitlines():
                if line.startswith("FAST-JSON "):
                    self.fast_json_report = json.loads(line.removeprefix("FAST-JSON "))
            proc.stdout.close()

    def __enter__(self) -> MotoProcess:
        return self.start()

    def __exit__(self, *exc: object) -> None:
        self.stop()


def _read_line(stream: IO[str]) -> str:
    return stream.readline().strip()


if __name__ == "__main__":
    main()
