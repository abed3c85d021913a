"""Generated protobuf code: committed files equal a fresh regeneration (proto and code cannot drift), the schema is
reference §11.1's table, and nothing outside lakesync.wire imports the generated classes."""

from __future__ import annotations

import re
import subprocess
import sys
from pathlib import Path

import pytest

from lakesync.wire import _pb
from lakesync.wire._pb import lakesync_pb2

ROOT = Path(__file__).resolve().parent.parent.parent
COMMITTED = ROOT / "src" / "lakesync" / "wire" / "_pb"

# Reference §11.1, transcribed: message -> [(number, name, type, repeated)]. This is the wire contract.
SCHEMA = {
    "ColumnDelta": [(1, "column", "string", False), (2, "value", "bytes", False)],
    "RowDelta": [
        (1, "op", "enum", False),
        (2, "table", "string", False),
        (3, "row_id", "string", False),
        (4, "columns", "message", True),
        (5, "hlc", "fixed64", False),
        (6, "client_id", "string", False),
        (7, "delta_id", "string", False),
    ],
    "SyncPush": [
        (1, "client_id", "string", False),
        (2, "deltas", "message", True),
        (3, "last_seen_hlc", "fixed64", False),
    ],
    "SyncPull": [
        (1, "client_id", "string", False),
        (2, "since_hlc", "fixed64", False),
        (3, "max_deltas", "uint32", False),
    ],
    "SyncResponse": [
        (1, "deltas", "message", True),
        (2, "server_hlc", "fixed64", False),
        (3, "has_more", "bool", False),
    ],
    "Action": [
        (1, "action_id", "string", False),
        (2, "client_id", "string", False),
        (3, "hlc", "fixed64", False),
        (4, "connector", "string", False),
        (5, "action_type", "string", False),
        (6, "params", "bytes", False),
        (7, "idempotency_key", "string", False),
    ],
    "ActionPush": [(1, "client_id", "string", False), (2, "actions", "message", True)],
    "ActionResultMsg": [
        (1, "action_id", "string", False),
        (2, "data", "bytes", False),
        (3, "server_hlc", "fixed64", False),
    ],
    "ActionErrorMsg": [
        (1, "action_id", "string", False),
        (2, "code", "string", False),
        (3, "message", "string", False),
        (4, "retryable", "bool", False),
    ],
    "ActionResponseEntry": [(1, "success", "message", False), (2, "error", "message", False)],
    "ActionResponse": [(1, "results", "message", True), (2, "server_hlc", "fixed64", False)],
}
TYPE_NAMES = {9: "string", 12: "bytes", 6: "fixed64", 13: "uint32", 8: "bool", 14: "enum", 11: "message"}


def test_regenerating_the_proto_reproduces_the_committed_files(tmp_path):
    pytest.importorskip("grpc_tools", reason="grpcio-tools (dev group) is needed to regenerate")
    result = subprocess.run(
        [sys.executable, str(ROOT / "scripts" / "gen_proto.py"), "--out", str(tmp_path)],
        capture_output=True,
        text=True,
        check=False,
    )
    assert result.returncode == 0, result.stderr
    fresh = {p.name: p.read_bytes() for p in tmp_path.iterdir()}
    committed = {p.name: p.read_bytes() for p in COMMITTED.iterdir() if p.is_file()}
    assert sorted(fresh) == sorted(committed) == ["__init__.py", "lakesync_pb2.py", "lakesync_pb2.pyi"]
    for name, data in fresh.items():
        assert committed[name] == data, f"{name} is stale: run `make proto`"


def test_schema_is_the_reference_table():
    file = lakesync_pb2.DESCRIPTOR
    assert file.package == "lakesync.v1"
    assert list(file.message_types_by_name) == list(SCHEMA)
    for message, fields in SCHEMA.items():
        actual = [
            (f.number, f.name, TYPE_NAMES[f.type], f.is_repeated) for f in file.message_types_by_name[message].fields
        ]
        assert actual == fields, message
    entry = file.message_types_by_name["ActionResponseEntry"]
    assert [f.name for f in entry.oneofs_by_name["result"].fields] == ["success", "error"]


def test_delta_op_enum_numbers():
    op = lakesync_pb2.DESCRIPTOR.enum_types_by_name["DeltaOp"]
    assert {v.name: v.number for v in op.values} == {
        "DELTA_OP_UNSPECIFIED": 0,
        "DELTA_OP_INSERT": 1,
        "DELTA_OP_UPDATE": 2,
        "DELTA_OP_DELETE": 3,
    }


def test_generated_package_is_importable_from_the_installed_layout():
    assert Path(_pb.__file__).parent == Path(lakesync_pb2.__file__).parent
    assert lakesync_pb2.__name__ == "lakesync.wire._pb.lakesync_pb2"


def test_nothing_outside_lakesync_wire_imports_the_generated_code():
    pattern = re.compile(
        r"^\s*(from|import)\s+lakesync\.wire\._pb|^\s*from\s+lakesync\.wire\s+import\s+.*\b_pb\b", re.M
    )
    offenders = [
        str(path.relative_to(ROOT))
        for path in (ROOT / "src" / "lakesync").rglob("*.py")
        if "wire" not in path.relative_to(ROOT / "src" / "lakesync").parts[:1] and pattern.search(path.read_text())
    ]
    assert offenders == []
