"""The committed etcd gRPC modules are exactly what scripts/gen-etcd-proto produces,
and they carry upstream etcd's names and field numbers."""

from __future__ import annotations

import importlib.util
import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]
PROTO_DIR = Path("semaphore_recipes/etcd/_proto")
GENERATED = ("etcd_api_pb2.py", "etcd_api_pb2.pyi", "etcd_api_pb2_grpc.py", "__init__.py")


def test_regeneration_is_byte_identical(tmp_path: Path) -> None:
    if importlib.util.find_spec("grpc_tools") is None:
        pytest.fail("grpcio-tools is needed to check the generated code: pip install grpcio-tools")
    subprocess.run(
        [sys.executable, str(ROOT / "scripts" / "gen-etcd-proto"), "--out", str(tmp_path)],
        check=True,
        capture_output=True,
        cwd=ROOT,
    )
    for name in GENERATED:
        committed = (ROOT / PROTO_DIR / name).read_bytes()
        fresh = (tmp_path / PROTO_DIR / name).read_bytes()
        assert fresh == committed, (
            f"{PROTO_DIR / name} differs from what scripts/gen-etcd-proto generates now: "
            "run scripts/gen-etcd-proto and commit the result"
        )


def test_no_version_checks_and_private_pool() -> None:
    pb2 = (ROOT / PROTO_DIR / "etcd_api_pb2.py").read_text()
    grpc_mod = (ROOT / PROTO_DIR / "etcd_api_pb2_grpc.py").read_text()
    assert "runtime_version" not in pb2
    assert "_descriptor_pool.DescriptorPool().AddSerializedFile" in pb2
    assert "GRPC_GENERATED_VERSION" not in grpc_mod
    assert "from semaphore_recipes.etcd._proto import etcd_api_pb2" in grpc_mod


# (message, field) -> number, from etcd's api/etcdserverpb/rpc.proto and api/mvccpb/kv.proto
UPSTREAM_FIELDS = {
    ("ResponseHeader", "cluster_id"): 1,
    ("ResponseHeader", "member_id"): 2,
    ("ResponseHeader", "revision"): 3,
    ("ResponseHeader", "raft_term"): 4,
    ("KeyValue", "key"): 1,
    ("KeyValue", "create_revision"): 2,
    ("KeyValue", "mod_revision"): 3,
    ("KeyValue", "version"): 4,
    ("KeyValue", "value"): 5,
    ("KeyValue", "lease"): 6,
    ("Event", "type"): 1,
    ("Event", "kv"): 2,
    ("Event", "prev_kv"): 3,
    ("RangeRequest", "key"): 1,
    ("RangeRequest", "range_end"): 2,
    ("RangeRequest", "limit"): 3,
    ("RangeRequest", "revision"): 4,
    ("RangeRequest", "sort_order"): 5,
    ("RangeRequest", "sort_target"): 6,
    ("RangeRequest", "serializable"): 7,
    ("RangeRequest", "keys_only"): 8,
    ("RangeRequest", "count_only"): 9,
    ("RangeRequest", "min_mod_revision"): 10,
    ("RangeRequest", "max_mod_revision"): 11,
    ("RangeRequest", "min_create_revision"): 12,
    ("RangeRequest", "max_create_revision"): 13,
    ("RangeResponse", "header"): 1,
    ("RangeResponse", "kvs"): 2,
    ("RangeResponse", "more"): 3,
    ("RangeResponse", "count"): 4,
    ("PutRequest", "key"): 1,
    ("PutRequest", "value"): 2,
    ("PutRequest", "lease"): 3,
    ("PutRequest", "prev_kv"): 4,
    ("PutRequest", "ignore_value"): 5,
    ("PutRequest", "ignore_lease"): 6,
    ("PutResponse", "prev_kv"): 2,
    ("DeleteRangeRequest", "prev_kv"): 3,
    ("DeleteRangeResponse", "deleted"): 2,
    ("DeleteRangeResponse", "prev_kvs"): 3,
    ("RequestOp", "request_range"): 1,
    ("RequestOp", "request_put"): 2,
    ("RequestOp", "request_delete_range"): 3,
    ("RequestOp", "request_txn"): 4,
    ("ResponseOp", "response_txn"): 4,
    ("Compare", "result"): 1,
    ("Compare", "target"): 2,
    ("Compare", "key"): 3,
    ("Compare", "version"): 4,
    ("Compare", "create_revision"): 5,
    ("Compare", "mod_revision"): 6,
    ("Compare", "value"): 7,
    ("Compare", "lease"): 8,
    ("Compare", "range_end"): 64,
    ("TxnRequest", "compare"): 1,
    ("TxnRequest", "success"): 2,
    ("TxnRequest", "failure"): 3,
    ("TxnResponse", "succeeded"): 2,
    ("TxnResponse", "responses"): 3,
    ("CompactionRequest", "revision"): 1,
    ("CompactionRequest", "physical"): 2,
    ("WatchRequest", "create_request"): 1,
    ("WatchRequest", "cancel_request"): 2,
    ("WatchRequest", "progress_request"): 3,
    ("WatchCreateRequest", "key"): 1,
    ("WatchCreateRequest", "range_end"): 2,
    ("WatchCreateRequest", "start_revision"): 3,
    ("WatchCreateRequest", "progress_notify"): 4,
    ("WatchCreateRequest", "filters"): 5,
    ("WatchCreateRequest", "prev_kv"): 6,
    ("WatchCreateRequest", "watch_id"): 7,
    ("WatchCreateRequest", "fragment"): 8,
    ("WatchCancelRequest", "watch_id"): 1,
    ("WatchResponse", "header"): 1,
    ("WatchResponse", "watch_id"): 2,
    ("WatchResponse", "created"): 3,
    ("WatchResponse", "canceled"): 4,
    ("WatchResponse", "compact_revision"): 5,
    ("WatchResponse", "cancel_reason"): 6,
    ("WatchResponse", "fragment"): 7,
    ("WatchResponse", "events"): 11,
    ("LeaseGrantRequest", "TTL"): 1,
    ("LeaseGrantRequest", "ID"): 2,
    ("LeaseGrantResponse", "ID"): 2,
    ("LeaseGrantResponse", "TTL"): 3,
    ("LeaseGrantResponse", "error"): 4,
    ("LeaseRevokeRequest", "ID"): 1,
    ("LeaseKeepAliveRequest", "ID"): 1,
    ("LeaseKeepAliveResponse", "ID"): 2,
    ("LeaseKeepAliveResponse", "TTL"): 3,
    ("LeaseTimeToLiveRequest", "ID"): 1,
    ("LeaseTimeToLiveRequest", "keys"): 2,
    ("LeaseTimeToLiveResponse", "TTL"): 3,
    ("LeaseTimeToLiveResponse", "grantedTTL"): 4,
    ("LeaseTimeToLiveResponse", "keys"): 5,
    ("StatusResponse", "version"): 2,
    ("StatusResponse", "leader"): 4,
    ("StatusResponse", "raftTerm"): 6,
    ("StatusResponse", "isLearner"): 10,
    ("AuthenticateRequest", "name"): 1,
    ("AuthenticateRequest", "password"): 2,
    ("AuthenticateResponse", "token"): 2,
    ("AuthUserAddRequest", "name"): 1,
    ("AuthUserAddRequest", "password"): 2,
    ("AuthUserAddRequest", "options"): 3,
    ("UserAddOptions", "no_password"): 1,
    ("AuthUserGrantRoleRequest", "user"): 1,
    ("AuthUserGrantRoleRequest", "role"): 2,
    ("AuthRoleAddRequest", "name"): 1,
    ("AuthRoleGrantPermissionRequest", "name"): 1,
    ("AuthRoleGrantPermissionRequest", "perm"): 2,
    ("Permission", "permType"): 1,
    ("Permission", "key"): 2,
    ("Permission", "range_end"): 3,
}

UPSTREAM_ENUMS = {
    "RangeRequest.SortOrder": {"NONE": 0, "ASCEND": 1, "DESCEND": 2},
    "RangeRequest.SortTarget": {"KEY": 0, "VERSION": 1, "CREATE": 2, "MOD": 3, "VALUE": 4},
    "Compare.CompareResult": {"EQUAL": 0, "GREATER": 1, "LESS": 2, "NOT_EQUAL": 3},
    "Compare.CompareTarget": {"VERSION": 0, "CREATE": 1, "MOD": 2, "VALUE": 3, "LEASE": 4},
    "WatchCreateRequest.FilterType": {"NOPUT": 0, "NODELETE": 1},
    "Event.EventType": {"PUT": 0, "DELETE": 1},
    "Permission.Type": {"READ": 0, "WRITE": 1, "READWRITE": 2},
}


def test_field_numbers_and_names_match_upstream() -> None:
    from semaphore_recipes.etcd._proto import etcd_api_pb2 as pb

    fd = pb.DESCRIPTOR
    assert fd.package == "etcdserverpb"
    for (message, field), number in UPSTREAM_FIELDS.items():
        assert fd.message_types_by_name[message].fields_by_name[field].number == number
    for dotted, values in UPSTREAM_ENUMS.items():
        message, enum = dotted.split(".")
        enum_desc = fd.message_types_by_name[message].enum_types_by_name[enum]
        assert {v.name: v.number for v in enum_desc.values} == values
    services = {s.full_name: [m.name for m in s.methods] for s in fd.services_by_name.values()}
    assert services == {
        "etcdserverpb.KV": ["Range", "Put", "DeleteRange", "Txn", "Compact"],
        "etcdserverpb.Watch": ["Watch"],
        "etcdserverpb.Lease": ["LeaseGrant", "LeaseRevoke", "LeaseKeepAlive", "LeaseTimeToLive"],
        "etcdserverpb.Maintenance": ["Status"],
        "etcdserverpb.Auth": [
            "Authenticate",
            "AuthEnable",
            "AuthDisable",
            "UserAdd",
            "UserGrantRole",
            "RoleAdd",
            "RoleGrantPermission",
        ],
    }


@pytest.mark.parametrize("implementation", ["upb", "python"])
def test_imports_with_each_protobuf_implementation(implementation: str) -> None:
    code = (
        "from semaphore_recipes.etcd._proto import etcd_api_pb2 as pb, etcd_api_pb2_grpc\n"
        "from google.protobuf.internal import api_implementation\n"
        f"assert api_implementation.Type() == {implementation!r}, api_implementation.Type()\n"
        "r = pb.TxnRequest(compare=[pb.Compare(key=b'k', create_revision=0)])\n"
        "assert pb.TxnRequest.FromString(r.SerializeToString()) == r\n"
    )
    env = {"PROTOCOL_BUFFERS_PYTHON_IMPLEMENTATION": implementation, "PYTHONPATH": str(ROOT)}
    result = subprocess.run(
        [sys.executable, "-W", "error", "-c", code], capture_output=True, text=True, env=env
    )
    assert result.returncode == 0, result.stderr
