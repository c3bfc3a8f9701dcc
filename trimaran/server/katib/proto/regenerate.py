"""Regenerate ``dbmanager_pb2.py`` and ``dbmanager_pb2_grpc.py`` from ``dbmanager.proto``.

Run ``python -m trimaran.server.katib.proto.regenerate`` after editing the proto (needs grpcio-tools); commit the
result. ``tests/server/test_katib_dbmanager.py`` fails while the committed modules are stale.
"""

from __future__ import annotations

from pathlib import Path

from trimaran import _protogen

HERE = Path(__file__).resolve().parent
PROTO = "dbmanager.proto"
GENERATED = ("dbmanager_pb2.py", "dbmanager_pb2_grpc.py")


def generate(out_dir: Path) -> dict[str, str]:
    """Compile the proto into ``out_dir``; return the generated modules' text by file name."""
    return _protogen.generate(HERE, PROTO, __package__, out_dir)


if __name__ == "__main__":
    _protogen.write(HERE, PROTO, __package__)
