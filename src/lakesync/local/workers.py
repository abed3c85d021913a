"""Concurrent invocations for the embedded default, the way Lambda runs them: one execution environment each.

Lambda never runs two invocations at once in one process, and the handlers rely on it: Powertools keeps the
Logger's appended keys (``inject_lambda_context(clear_state=True)`` clears them for everyone), the metric set
(shared by every ``Metrics`` instance) and our router's current event in process-wide state, so two invocations on
threads of one process would mix their logs, flush each other's metrics or, with the router, answer with the other
request's parameters. :class:`WorkerPool` therefore runs handlers in ``size`` worker processes, each serving one
invocation at a time, as concurrent Lambda execution environments do. Workers are fresh interpreters (``python -m
lakesync.local.workers``): not forked, as the parent runs threads, and not ``multiprocessing``'s spawn, which would
re-run the parent's main script (a user's script, or pytest). ``functions._runtime.one_at_a_time`` stays as it is.
The parent keeps the HTTP front (one thread per connection) and moto.

Invariants:

* A request waits for a free worker; requests beyond ``size`` queue, they are never refused.
* A worker that dies mid-invocation (killed, out of memory) fails that invocation only (the front answers 500, as
  API Gateway does for a crashed Lambda) and is replaced.
* Workers ignore SIGINT (a terminal's Ctrl-C goes to the whole process group; the parent decides) and exit when the
  parent goes away, even ``kill -9``'d: their end of the pipe reads EOF, and a watchdog notices a new parent pid.
"""

from __future__ import annotations

import logging
import os
import queue
import signal
import socket
import subprocess
import sys
import threading
import time
from dataclasses import dataclass, field
from multiprocessing.connection import Connection
from typing import Any

__all__ = ["WorkerCrashed", "WorkerPool"]

logger = logging.getLogger(__name__)


class WorkerCrashed(RuntimeError):
    """The worker serving an invocation died before answering."""


@dataclass
class _Worker:
    process: subprocess.Popen[bytes]
    conn: Connection


@dataclass
class WorkerPool:
    """``size`` processes running :func:`lakesync.local.dispatch.route_request` (see the module docstring)."""

    size: int
    env: dict[str, str]
    _idle: queue.Queue[_Worker] = field(default_factory=queue.Queue)
    _all: list[_Worker] = field(default_factory=list)
    _lock: threading.Lock = field(default_factory=threading.Lock)
    _closed: bool = False

    def start(self) -> WorkerPool:
        """Spawn the workers and wait until each has imported the handlers."""
        workers = [self._spawn() for _ in range(self.size)]
        for worker in workers:
            if not worker.conn.poll(120) or worker.conn.recv() != "ready":
                raise RuntimeError("a handler worker did not start")
            self._idle.put(worker)
        return self

    def _spawn(self) -> _Worker:
        parent, child = socket.socketpair()
        with child:
            process = subprocess.Popen(
                [sys.executable, "-m", "lakesync.local.workers", str(child.fileno()), str(os.getpid())],
                env={**os.environ, **self.env},
                pass_fds=(child.fileno(),),
                stdin=subprocess.DEVNULL,
            )
        worker = _Worker(process, Connection(parent.detach()))
        with self._lock:
            self._all.append(worker)
        return worker

    def invoke(self, event: dict[str, Any], context: Any) -> dict[str, Any]:
        """Run one invocation on a free worker (waiting for one if all are busy).

        Raises:
            WorkerCrashed: The worker died before answering.
            RuntimeError: The handler raised (its traceback is logged by the worker).
        """
        worker = self._idle.get()
        try:
            worker.conn.send((event, context))
            kind, value = worker.conn.recv()
        except (EOFError, OSError) as e:
            self._replace(worker)
            raise WorkerCrashed("the handler process died") from e
        self._idle.put(worker)
        if kind == "error":
            raise RuntimeError(value)
        result: dict[str, Any] = value
        return result

    def _replace(self, worker: _Worker) -> None:
        worker.conn.close()
        try:
            worker.process.wait(5)
        except subprocess.TimeoutExpired:
            worker.process.kill()
            worker.process.wait(5)
        with self._lock:
            self._all.remove(worker)
            if self._closed:
                return
        fresh = self._spawn()
        if fresh.conn.poll(120) and fresh.conn.recv() == "ready":
            self._idle.put(fresh)

    def stop(self) -> None:
        """Let invocations in progress finish, then end every worker."""
        with self._lock:
            self._closed = True
            workers = list(self._all)
        for worker in workers:
            try:
                worker.conn.send(None)
            except OSError:
                pass
        deadline = time.monotonic() + 30
        for worker in workers:
            try:
                worker.process.wait(max(0.1, deadline - time.monotonic()))
            except subprocess.TimeoutExpired:
                worker.process.kill()
                worker.process.wait(5)
            worker.conn.close()


def _worker_main(conn: Connection, parent_pid: int) -> None:
    signal.signal(signal.SIGINT, signal.SIG_IGN)
    threading.Thread(target=_watch_parent, args=(parent_pid,), daemon=True, name="parent-watchdog").start()
    import importlib

    from lakesync.api_routes import ROUTES
    from lakesync.local.dispatch import route_request
    from lakesync.local.terminal import readable_function_logs

    for module in {route.module for route in ROUTES}:  # the cold start happens here, not on the first request
        importlib.import_module(module)
    readable_function_logs()  # a terminal's lines, as in the runner's process
    conn.send("ready")
    while True:
        try:
            message = conn.recv()
        except (EOFError, OSError):
            return
        if message is None:
            return
        event, context = message
        try:
            reply: tuple[str, Any] = ("ok", route_request(event, context))
        except Exception as e:  # the front answers 500, as API Gateway does for a failed invocation
            logging.getLogger(__name__).exception("handler failed")
            reply = ("error", f"{type(e).__name__}: {e}")
        conn.send(reply)


def _watch_parent(parent_pid: int) -> None:
    while True:
        time.sleep(1.0)
        if os.getppid() != parent_pid:
            os._exit(0)


if __name__ == "__main__":
    _worker_main(Connection(int(sys.argv[1])), int(sys.argv[2]))
