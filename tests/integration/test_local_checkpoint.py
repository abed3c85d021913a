"""The checkpoint route over real HTTP against the embedded default: the local stack creates the checkpoint bucket
and configures it, answers 404 until a checkpoint exists, then serves the binary stream byte for byte."""

from __future__ import annotations

import urllib.error
import urllib.request
from pathlib import Path
from typing import Any

import pytest

from lakesync.auth import mint_token
from lakesync.aws.objects import S3ObjectStore, s3_client
from lakesync.core.checkpoint import checkpoint_id, row_deltas
from lakesync.core.delta import make_delta
from lakesync.core.hlc import encode
from lakesync.core.merge import fold
from lakesync.gateway.checkpoint import CONTENT_TYPE, encode_row, write_checkpoint
from lakesync.local.runner import CHECKPOINT_BUCKET, LocalStack
from lakesync.wire.framing import iter_checkpoint_responses

pytestmark = pytest.mark.integration

T0 = 1_700_000_000_000


@pytest.fixture(scope="module")
def stack(tmp_path_factory: pytest.TempPathFactory) -> Any:
    with LocalStack(Path(tmp_path_factory.mktemp("local")), port=0, persist=False) as running:
        yield running


def _get(stack: LocalStack, path: str) -> tuple[int, dict[str, str], bytes]:
    token = mint_token("client-a", "default", stack.secret)
    req = urllib.request.Request(stack.url + path, headers={"Authorization": f"Bearer {token}"})
    try:
        with urllib.request.urlopen(req, timeout=30) as resp:
            return resp.status, dict(resp.headers), resp.read()
    except urllib.error.HTTPError as exc:
        return exc.code, dict(exc.headers), exc.read()


def test_local_checkpoint_404_until_written_then_the_stream(stack: LocalStack) -> None:
    # Given no checkpoint yet
    status, _, body = _get(stack, "/v1/sync/default/checkpoint")
    assert (status, body) == (404, b'{"error":"No checkpoint available","code":"NOT_FOUND"}')

    # When the checkpoint job's writer publishes one into the local bucket (values with every byte class)
    state = fold(
        [make_delta("INSERT", table="todos", row_id="r1", client_id="c", hlc=encode(T0, 0), columns={"v": "\x00é😀"})]
    )
    assert state is not None
    store = S3ObjectStore(CHECKPOINT_BUCKET, s3_client())  # the stack points the environment at its moto server
    manifest = write_checkpoint(
        store,
        gateway="default",
        checkpoint_id=checkpoint_id(T0, "00000001"),
        created_at_ms=T0,
        positions={"default#todos#0": 1},
        server_hlc=encode(T0, 0),
        tables=["todos"],
        rows=[encode_row(state)],
    )

    # Then the route serves it, byte for byte, with its headers
    status, headers, body = _get(stack, "/v1/sync/default/checkpoint")
    assert status == 200
    assert headers["Content-Type"] == CONTENT_TYPE
    assert headers["X-Checkpoint-Id"] == manifest.checkpoint_id
    assert body == store.get(manifest.chunks[0].key)
    assert [d for r in iter_checkpoint_responses(body) for d in r.deltas] == row_deltas(state)
