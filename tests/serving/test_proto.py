"""The committed gRPC modules are what grpcio-tools generates from the committed proto."""

from __future__ import annotations

from pathlib import Path

from trimaran.serving.proto import regenerate


def test_generated_modules_are_current(tmp_path: Path) -> None:
    generated = regenerate.generate(tmp_path)
    for name, text in generated.items():
        committed = (regenerate.HERE / name).read_text()
        assert committed == text, f"{name} is stale: run python -m trimaran.serving.proto.regenerate"


def test_service_matches_the_specification() -> None:
    from trimaran.serving.proto import grpc_predict_v2_pb2 as pb

    service = pb.DESCRIPTOR.services_by_name["GRPCInferenceService"]
    assert pb.DESCRIPTOR.package == "inference"
    assert {"ServerLive", "ServerReady", "ModelReady", "ServerMetadata", "ModelMetadata",
            "ModelInfer"} <= {m.name for m in service.methods}
    fields = {f.name: f.number for f in pb.ModelInferRequest.DESCRIPTOR.fields}
    assert fields == {"model_name": 1, "model_version": 2, "id": 3, "parameters": 4, "inputs": 5, "outputs": 6,
                      "raw_input_contents": 7}
