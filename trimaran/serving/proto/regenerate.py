"""Regenerate ``grpc_predict_v2_pb2.py`` and ``grpc_predict_v2_pb2_grpc.py`` from ``grpc_predict_v2.proto``.

Run ``python -m trimaran.serving.proto.regenerate`` after editing the proto (needs grpcio-tools); commit the
result. ``tests/serving/test_proto.py`` fails while the committed modules are stale.
"""

from __future__ import annotations

from pathlib import Path

from trimaran import _protogen

HERE = Path(__file__).resolve().parent
PROTO = "grpc_predict_v2.proto"
GENERATED = ("grpc_predict_v2_pb2.py", "grpc_predict_v2_pb2_grpc.py")


def generate(out_dir: Path) -> dict[str, str]:
    """Compile the proto into ``out_dir``; return the generated modules' text by file name."""
    return _protogen.generate(HERE, PROTO, __package__, out_dir)


if __name__ == "__main__":
    _protogen.write(HERE, PROTO, __package__)
