"""After a process's first invocation, the objects alive then (modules, SDK models, wired stores) are frozen out of
the cyclic collector's view, once: later full collections walk only what requests create."""

from __future__ import annotations

import json
import subprocess
import sys

_PROBE = """
import gc, json
from lakesync.aws.lambda_runtime import one_at_a_time

@one_at_a_time
def handler(event, context):
    if event == "fail":
        raise ValueError(event)
    return event

before = {"frozen": gc.get_freeze_count(), "walked": len(gc.get_objects())}
first_fails = len(__import__("sys").argv) > 1
try:
    handler("fail" if first_fails else "ok", None)
except ValueError:
    pass
after_first = {"frozen": gc.get_freeze_count(), "walked": len(gc.get_objects())}
kept = [[i] for i in range(1000)]
handler("ok", None)
after_second = {"frozen": gc.get_freeze_count()}
print(json.dumps({"before": before, "first": after_first, "second": after_second}))
"""


def _run(*args: str) -> dict[str, dict[str, int]]:
    out = subprocess.run([sys.executable, "-c", _PROBE, *args], capture_output=True, text=True, check=True)
    result: dict[str, dict[str, int]] = json.loads(out.stdout.strip().splitlines()[-1])
    return result


def test_the_first_invocation_freezes_what_is_alive_and_later_ones_do_not_freeze_again() -> None:
    seen = _run()
    assert seen["before"]["frozen"] == 0
    assert seen["first"]["frozen"] > 1000  # the imported modules' objects at least
    assert seen["first"]["walked"] < seen["before"]["walked"] / 2
    assert seen["second"]["frozen"] == seen["first"]["frozen"]  # the 1,000 lists made since stay collectable


def test_a_first_invocation_that_fails_still_freezes() -> None:
    seen = _run("fail")
    assert seen["first"]["frozen"] > 1000
    assert seen["second"]["frozen"] == seen["first"]["frozen"]
