"""The committed gRPC modules are what grpcio-tools generates from the committed proto."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

from trimaran.serving.proto import regenerate

# In its own interpreter: protoc's extension crashes a process that has already loaded torch,
# tensorflow and several protobuf users (as the test session has by now).
_GENERATE = """
import json, sys
from pathlib import Path
from trimaran.serving.proto import regenerate
print(json.dumps(regenerate.generate(Path(sys.argv[1]))))
"""


def test_generated_modules_are_current(tmp_path: Path) -> None:
    out = subprocess.run([sys.executable, "-c", _GENERATE, str(tmp_path)], capture_output=True, text=True,
                         check=True, cwd=Path(__file__).resolve().parents[2])
    generated = json.loads(out.stdout)
    assert set(generated) == set(regenerate.GENERATED)
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
