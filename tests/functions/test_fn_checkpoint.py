"""GET /v1/sync/{gw}/checkpoint through functions.checkpoint.lambda_handler on the moto server's S3 (checkpoints
written by the job's writer): 404 without a checkpoint or bucket, the framed stream and its headers, sync-rule
filtering by the token's claims, one chunk pinned to a checkpoint, bad chunk/checkpoint parameters, 413 for a whole
checkpoint over the cap, auth errors, storage faults as 500; plus the S3 ObjectStore adapter and a light cold import.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
import uuid
from typing import Any

import pytest

import functions.admin as admin_fn
import functions.checkpoint as checkpoint_fn
from lakesync.aws.objects import S3ObjectStore, create_bucket
from lakesync.aws.settings.api import Settings
from lakesync.aws.settings.env import SettingsError
from lakesync.aws.settings.variables import CHECKPOINT_BUCKET
from lakesync.core.checkpoint import Manifest, checkpoint_id, manifest_key, row_deltas
from lakesync.core.delta import RowDelta, make_delta
from lakesync.core.errors import StorageError
from lakesync.core.hlc import encode
from lakesync.core.merge import RowState, fold
from lakesync.gateway.checkpoint import CONTENT_TYPE, MAX_SERVE_BYTES, encode_row, write_checkpoint
from lakesync.gateway.cursor import decode_cursor
from lakesync.wire.checkpoint_columns import MEDIA_TYPE, decode_columns
from lakesync.wire.fast_checkpoint import to_row_delta
from lakesync.wire.framing import iter_checkpoint_responses

GW = "default"
T0 = 1_763_000_000_000
PINNED = checkpoint_id(T0, "0a1b2c3d")  # the id in events/checkpoint_chunk.json


@pytest.fixture
def s3(moto_endpoint: str) -> Any:
    import boto3

    return boto3.client(
        "s3", endpoint_url=moto_endpoint, region_name="us-east-1", aws_access_key_id="testing",
        aws_secret_access_key="testing",
    )  # fmt: skip


@pytest.fixture
def store(s3: Any) -> S3ObjectStore:
    bucket = f"ckpt-{uuid.uuid4().hex[:12]}"
    create_bucket(s3, bucket)
    return S3ObjectStore(bucket, s3)


@pytest.fixture
def ckpt(api: Any, store: S3ObjectStore, monkeypatch: pytest.MonkeyPatch) -> Any:
    """The functions with a checkpoint bucket configured (cold runtime)."""
    from functions._runtime import reset_runtime

    monkeypatch.setenv(CHECKPOINT_BUCKET, store.bucket)
    reset_runtime()
    return api


def _row(row: str, user: str, ms: int, **cols: Any) -> RowState:
    delta = make_delta(
        "INSERT", table="todos", row_id=row, client_id="c1", hlc=encode(T0 + ms, 0), columns={"user_id": user, **cols}
    )
    state = fold([delta])
    assert state is not None
    return state


def _write(store: S3ObjectStore, states: list[RowState], *, cid: str = PINNED, chunk_bytes: int = 1 << 20) -> Manifest:
    return write_checkpoint(
        store,
        gateway=GW,
        checkpoint_id=cid,
        created_at_ms=T0,
        positions={f"{GW}#todos#0": len(states)},
        server_hlc=encode(T0, 0),
        tables=["todos"],
        rows=(encode_row(s) for s in states),
        chunk_bytes=chunk_bytes,
    )


def _deltas(body: bytes) -> list[RowDelta]:
    return [d for response in iter_checkpoint_responses(body) for d in response.deltas]


# -- 200 ----------------------------------------------------------------------------------------------------------


def test_checkpoint_serves_the_framed_stream_with_its_headers(ckpt: Any, store: S3ObjectStore) -> None:
    # Given a checkpoint of three rows
    states = [_row(f"r{i}", "client-a", i, title=f"t{i}") for i in range(3)]
    manifest = _write(store, states)

    # When a client fetches it
    reply = ckpt.call(checkpoint_fn, ckpt.event("checkpoint"))

    # Then it gets the stream, whose deltas rebuild the rows, and where to continue from
    assert reply.status == 200
    assert reply.headers["Content-Type"] == CONTENT_TYPE
    assert reply.headers["Cache-Control"] == "no-store"
    assert _deltas(reply.body) == [d for s in states for d in row_deltas(s)]
    assert reply.headers["X-Checkpoint-Id"] == PINNED
    assert reply.headers["X-Checkpoint-Hlc"] == str(manifest.server_hlc)
    assert reply.headers["X-Checkpoint-Chunks"] == "1"
    assert decode_cursor(reply.headers["X-Checkpoint-Cursor"], GW) == {f"{GW}#todos#0": 3}


def test_checkpoint_filters_rows_by_the_token_claims(ckpt: Any, store: S3ObjectStore) -> None:
    # Given rules scoping todos to their owner (sub), and rows of two owners
    assert ckpt.call(admin_fn, ckpt.event("admin_sync_rules_post", token=ckpt.admin_token())).status == 200
    _write(store, [_row("mine", "client-a", 1), _row("theirs", "client-b", 2), _row("mine2", "client-a", 3)])

    # When each owner fetches the checkpoint
    rows = {
        sub: [d.row_id for d in _deltas(ckpt.call(checkpoint_fn, ckpt.event("checkpoint", token=ckpt.token(sub))).body)]
        for sub in ("client-a", "client-b", "client-c")
    }

    # Then each gets only their rows
    assert rows == {"client-a": ["mine", "mine2"], "client-b": ["theirs"], "client-c": []}


def test_checkpoint_chunk_pinned_to_a_checkpoint(ckpt: Any, store: S3ObjectStore) -> None:
    # Given a checkpoint of several chunks, then a newer one published
    first = _write(store, [_row(f"r{i}", "client-a", i, title="x" * 100) for i in range(10)], chunk_bytes=600)
    assert len(first.chunks) > 2
    _write(store, [_row("new", "client-a", 50)], cid=checkpoint_id(T0 + 1, "0a1b2c3d"))

    # When a client fetches chunk 0 of the first checkpoint, pinned as in the sample event, and chunk 2
    chunk0 = ckpt.call(checkpoint_fn, ckpt.event("checkpoint_chunk"))
    chunk2 = ckpt.call(checkpoint_fn, ckpt.event("checkpoint_chunk", query={"chunk": "2", "checkpoint": PINNED}))

    # Then each is that chunk of the first checkpoint
    assert (chunk0.status, chunk2.status) == (200, 200)
    assert chunk0.headers["X-Checkpoint-Id"] == PINNED
    assert chunk0.headers["X-Checkpoint-Chunks"] == str(len(first.chunks))
    assert chunk0.body == store.get(first.chunks[0].key)
    assert chunk2.body == store.get(first.chunks[2].key)


def test_checkpoint_as_columns_carries_the_streams_rows_for_each_caller(ckpt: Any, store: S3ObjectStore) -> None:
    # Given rules scoping todos to their owner, and rows of two owners in several chunks
    assert ckpt.call(admin_fn, ckpt.event("admin_sync_rules_post", token=ckpt.admin_token())).status == 200
    states = [_row(f"r{i}", f"client-{'ab'[i % 2]}", i, title=f"t{i}", n=i) for i in range(12)]
    manifest = _write(store, states, chunk_bytes=400)
    assert len(manifest.chunks) > 2

    for sub in ("client-a", "client-b", "client-c"):
        # When each owner fetches the checkpoint as columns, whole and by chunk, accepting gzip as the SDK does
        token = ckpt.token(sub)
        stream = ckpt.call(checkpoint_fn, ckpt.event("checkpoint", token=token))
        whole = ckpt.call(
            checkpoint_fn,
            ckpt.event("checkpoint", token=token, query={"format": "columns"}, headers={"accept-encoding": "gzip"}),
        )
        chunk1 = ckpt.call(
            checkpoint_fn, ckpt.event("checkpoint", token=token, query={"format": "columns", "chunk": "1"})
        )

        # Then it gets JSON with the same rows as the stream, in order, and the same headers
        assert (whole.status, whole.headers["Content-Type"]) == (200, MEDIA_TYPE)
        assert not whole.raw["isBase64Encoded"] or whole.headers.get("Content-Encoding") == "gzip"
        assert _column_deltas(whole.body) == _deltas(stream.body)
        assert {k: v for k, v in whole.headers.items() if k.startswith("X-Checkpoint")} == {
            k: v for k, v in stream.headers.items() if k.startswith("X-Checkpoint")
        }
        stream1 = ckpt.call(checkpoint_fn, ckpt.event("checkpoint", token=token, query={"chunk": "1"}))
        assert _column_deltas(chunk1.body) == _deltas(stream1.body)
    assert [d.row_id for d in _deltas(stream.body)] == []  # client-c owns nothing


@pytest.mark.parametrize("fmt", ["json", "COLUMNS", "", "columns "])
def test_checkpoint_unknown_format_is_400(ckpt: Any, store: S3ObjectStore, fmt: str) -> None:
    _write(store, [_row("a", "client-a", 1)])
    reply = ckpt.call(checkpoint_fn, ckpt.event("checkpoint", query={"format": fmt}))
    assert (reply.status, reply.json()["code"]) == (400, "VALIDATION_ERROR")
    assert "'format'" in reply.json()["error"]


def _column_deltas(body: bytes) -> list[RowDelta]:
    return [to_row_delta(d) for row in decode_columns(body).rows() for d in row]


# -- 4xx / 5xx ----------------------------------------------------------------------------------------------------


def test_checkpoint_without_a_checkpoint_is_404(ckpt: Any) -> None:
    reply = ckpt.call(checkpoint_fn, ckpt.event("checkpoint"))
    assert (reply.status, reply.json()) == (404, {"error": "No checkpoint available", "code": "NOT_FOUND"})


def test_checkpoint_without_a_bucket_configured_is_404(api: Any) -> None:
    reply = api.call(checkpoint_fn, api.event("checkpoint"))
    assert (reply.status, reply.json()["code"]) == (404, "NOT_FOUND")


def test_checkpoint_unknown_pinned_checkpoint_is_404(ckpt: Any, store: S3ObjectStore) -> None:
    _write(store, [_row("a", "client-a", 1)], cid=checkpoint_id(T0 + 5, "ffffffff"))
    reply = ckpt.call(checkpoint_fn, ckpt.event("checkpoint_chunk"))
    assert (reply.status, reply.json()["code"]) == (404, "NOT_FOUND")


@pytest.mark.parametrize("chunk", ["1", "abc", "-1", "+0", " 0", "1e0", "0x0", "", "1234567890"])
def test_checkpoint_bad_chunk_index_is_400(ckpt: Any, store: S3ObjectStore, chunk: str) -> None:
    _write(store, [_row("a", "client-a", 1)])
    reply = ckpt.call(checkpoint_fn, ckpt.event("checkpoint_chunk", query={"chunk": chunk}))
    assert (reply.status, reply.json()["code"]) == (400, "VALIDATION_ERROR")
    assert "'chunk'" in reply.json()["error"]


@pytest.mark.parametrize("pin", ["latest", "../1763000000000-0a1b2c3d", "1763000000000-0A1B2C3D"])
def test_checkpoint_malformed_pinned_checkpoint_is_400(ckpt: Any, store: S3ObjectStore, pin: str) -> None:
    _write(store, [_row("a", "client-a", 1)])
    reply = ckpt.call(checkpoint_fn, ckpt.event("checkpoint_chunk", query={"chunk": "0", "checkpoint": pin}))
    assert (reply.status, reply.json()) == (
        400,
        {"error": "Invalid 'checkpoint' parameter", "code": "VALIDATION_ERROR"},
    )


def test_checkpoint_too_large_whole_is_413_and_served_by_chunk(ckpt: Any, store: S3ObjectStore) -> None:
    # Given a checkpoint whose chunks total more than the cap (rows of ~0.9 MB, one per chunk)
    manifest = _write(store, [_row(f"big{i}", "client-a", i, blob="x" * 900_000) for i in range(5)])
    assert manifest.bytes > MAX_SERVE_BYTES

    # When fetched whole, then by chunk
    whole = ckpt.call(checkpoint_fn, ckpt.event("checkpoint"))
    last = ckpt.call(checkpoint_fn, ckpt.event("checkpoint_chunk", query={"chunk": str(len(manifest.chunks) - 1)}))

    # Then whole is refused with a hint, and chunks are served
    assert (whole.status, whole.json()["code"]) == (413, "VALIDATION_ERROR")
    assert f"?chunk=0..{len(manifest.chunks) - 1}&checkpoint={PINNED}" in whole.json()["error"]
    assert last.status == 200
    assert [d.row_id for d in _deltas(last.body)] == ["big4"]


def test_checkpoint_without_token_is_401(ckpt: Any, store: S3ObjectStore) -> None:
    _write(store, [_row("a", "client-a", 1)])
    reply = ckpt.call(checkpoint_fn, ckpt.event("checkpoint", token=None))
    assert (reply.status, reply.json()["code"]) == (401, "AUTH_ERROR")


def test_checkpoint_of_another_gateway_is_403_and_an_unserved_one_404(ckpt: Any) -> None:
    mismatch = ckpt.call(checkpoint_fn, ckpt.event("checkpoint", token=ckpt.token(gw="other")))
    unserved = ckpt.call(checkpoint_fn, ckpt.event("checkpoint", token=ckpt.token(gw="nope"), gateway="nope"))
    assert (mismatch.status, mismatch.json()["code"]) == (403, "FORBIDDEN")
    assert (unserved.status, unserved.json()["error"]) == (404, "Gateway not found")


def test_checkpoint_corrupt_manifest_is_500_without_details(ckpt: Any, store: S3ObjectStore) -> None:
    _write(store, [_row("a", "client-a", 1)])
    store.put(manifest_key(GW, PINNED), b'{"version": 1}')

    reply = ckpt.call(checkpoint_fn, ckpt.event("checkpoint"))

    assert (reply.status, reply.json()["error"], reply.json()["code"]) == (500, "Internal error", "INTERNAL_ERROR")


# -- the S3 adapter -------------------------------------------------------------------------------------------------


def test_s3_object_store_put_get_list(store: S3ObjectStore) -> None:
    store.put("a/2", b"two")
    store.put("a/1", b"\x00\xff")
    store.put("b/1", b"{}", "application/json")

    assert (store.get("a/1"), store.get("a/2"), store.get("a/missing")) == (b"\x00\xff", b"two", None)
    assert store.list_keys("a/") == ["a/1", "a/2"]
    assert store.list_keys("c/") == []
    assert json.loads(store.get("b/1") or b"null") == {}


def test_s3_object_store_missing_bucket_is_a_storage_error(s3: Any) -> None:
    missing = S3ObjectStore(f"nope-{uuid.uuid4().hex[:12]}", s3)
    for call in (lambda: missing.get("k"), lambda: missing.put("k", b""), lambda: missing.list_keys("")):
        with pytest.raises(StorageError, match="NoSuchBucket"):
            call()


def test_create_bucket_is_idempotent(s3: Any) -> None:
    bucket = f"ckpt-{uuid.uuid4().hex[:12]}"
    create_bucket(s3, bucket)
    create_bucket(s3, bucket)
    assert bucket in {b["Name"] for b in s3.list_buckets()["Buckets"]}


def test_checkpoint_handler_cold_import_is_light() -> None:
    # Given a clean environment, When functions.checkpoint is imported cold
    env = {k: v for k, v in os.environ.items() if not k.startswith(("LAKESYNC_", "AWS_"))}
    code = (
        "import sys, functions.checkpoint as m; assert callable(m.lambda_handler); "
        "print(','.join(n for n in ('boto3', 'pyspark', 'pyiceberg', 'pyarrow', 'moto') if n in sys.modules))"
    )
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, env=env, check=True)
    # Then neither boto3 nor the Spark/Iceberg stack was imported
    assert out.stdout.strip() == ""


@pytest.mark.parametrize("bucket", ["UPPER", "a", "under_score", "dots..dots", "-dash", "x" * 64])
def test_settings_reject_an_invalid_checkpoint_bucket(bucket: str) -> None:
    env = {"LAKESYNC_TABLE_PREFIX": "t", "LAKESYNC_JWT_SECRET": "s" * 32, CHECKPOINT_BUCKET: bucket}
    with pytest.raises(SettingsError, match=CHECKPOINT_BUCKET):
        Settings.from_env(env)


def test_settings_checkpoint_bucket_is_optional() -> None:
    env = {"LAKESYNC_TABLE_PREFIX": "t", "LAKESYNC_JWT_SECRET": "s" * 32}
    assert Settings.from_env(env).checkpoint_bucket is None
    assert Settings.from_env({**env, CHECKPOINT_BUCKET: " my.bucket-1 "}).checkpoint_bucket == "my.bucket-1"
