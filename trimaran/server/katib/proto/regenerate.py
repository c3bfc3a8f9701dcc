"""Regenerate ``dbmanager_pb2.py`` and ``dbmanager_pb2_grpc.py`` from ``dbmanager.proto``.

Run ``python -m trimaran.server.katib.proto.regenerate`` after editing the proto (needs grpcio-tools);
commit the result. ``tests/server/test_katib_dbmanager.py`` fails while the committed modules are stale.
"""

from __future__ import annotations

import sys
import tempfile
from pathlib import Path

HERE = Path(__file__).resolve().parent
PROTO = "dbmanager.proto"
GENERATED = ("dbmanager_pb2.py", "dbmanager_pb2_grpc.py")


def generate(out_dir: Path) -> dict[str, str]:
    """Compile the proto into ``out_dir``; return the generated modules' text by file name.

    Two rewrites of protoc's output: the ``_pb2_grpc`` module imports its ``_pb2`` sibling as a top-level
    module, which would not resolve inside this package; and the messages go into a private descriptor
    pool, because Katib's SDK registers the same ``api.v1.beta1.*`` names in the default pool and one
    process (a test, a notebook) may import both.
    """
    from grpc_tools import protoc

    code = protoc.main(["grpc_tools.protoc", f"-I{HERE}", f"--python_out={out_dir}", f"--grpc_python_out={out_dir}",
                        str(HERE / PROTO)])
    if code != 0:
        raise RuntimeError(f"protoc failed with exit status {code}")
    texts = {name: (out_dir / name).read_text() for name in GENERATED}
    texts[GENERATED[1]] = texts[GENERATED[1]].replace(
        "import dbmanager_pb2 as dbmanager__pb2",
        "from trimaran.server.katib.proto import dbmanager_pb2 as dbmanager__pb2")
    texts = {name: "# ruff: noqa\n" + text for name, text in texts.items()}  # generated: not ours to lint
    texts[GENERATED[0]] = texts[GENERATED[0]].replace(
        "_descriptor_pool.Default().AddSerializedFile",
        "_descriptor_pool.DescriptorPool().AddSerializedFile")
    return texts


def main() -> None:
    with tempfile.TemporaryDirectory() as tmp:
        for name, text in generate(Path(tmp)).items():
            (HERE / name).write_text(text)
            print(f"wrote {HERE / name}", file=sys.stderr)


if __name__ == "__main__":
    main()
