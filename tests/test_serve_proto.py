"""The committed KEDA stubs are exactly what grpcio-tools makes from the committed proto (no drift)."""

from __future__ import annotations

import shutil
from pathlib import Path

import pytest

PROTO_DIR = Path(__file__).resolve().parents[1] / "recommender" / "serve" / "proto"
GENERATED = ("externalscaler_pb2.py", "externalscaler_pb2.pyi", "externalscaler_pb2_grpc.py")


def test_stubs_match_a_fresh_generation(tmp_path: Path) -> None:
    protoc = pytest.importorskip("grpc_tools.protoc")
    rel = Path("recommender/serve/proto/externalscaler.proto")
    (tmp_path / rel.parent).mkdir(parents=True)
    shutil.copy(PROTO_DIR / rel.name, tmp_path / rel)
    args = ["protoc", "-I", str(tmp_path), f"--python_out={tmp_path}", f"--pyi_out={tmp_path}",
            f"--grpc_python_out={tmp_path}", str(tmp_path / rel)]
    assert protoc.main(args) == 0
    for name in GENERATED:
        fresh = (tmp_path / rel.parent / name).read_text()
        assert (PROTO_DIR / name).read_text() == fresh, f"{name} drifted: regenerate it (see proto/__init__.py)"


def test_the_service_is_kedas() -> None:
    from recommender.serve.proto import externalscaler_pb2 as pb

    service = pb.DESCRIPTOR.services_by_name["ExternalScaler"]
    assert service.full_name == "externalscaler.ExternalScaler"  # the name KEDA dials
    assert {m.name for m in service.methods} == {"IsActive", "StreamIsActive", "GetMetricSpec", "GetMetrics",
                                                 "StreamMetricSpec"}
