"""Compiling our .proto files into the modules we commit (each proto package's ``regenerate.py``).

Two rewrites of protoc's output: the ``_pb2_grpc`` module imports its ``_pb2`` sibling as a
top-level module, which would not resolve inside our package; and the messages are registered in a
private descriptor pool, because the projects whose protocols we speak (tritonclient and kserve,
Katib's SDK) register the same names in the default pool, and one process (a test, a notebook, a
custom model calling a predictor) may import both.
"""

from __future__ import annotations

import sys
import tempfile
from pathlib import Path


def generate(proto_dir: Path, proto: str, package: str, out_dir: Path) -> dict[str, str]:
    """Compile ``proto_dir/proto`` into ``out_dir``; return the generated modules' text by file name."""
    from grpc_tools import protoc

    stem = proto.removesuffix(".proto")
    code = protoc.main(["grpc_tools.protoc", f"-I{proto_dir}", f"--python_out={out_dir}",
                        f"--grpc_python_out={out_dir}", str(proto_dir / proto)])
    if code != 0:
        raise RuntimeError(f"protoc failed with exit status {code}")
    messages, services = f"{stem}_pb2.py", f"{stem}_pb2_grpc.py"
    texts = {name: (out_dir / name).read_text() for name in (messages, services)}
    alias = stem.replace("_", "__") + "__pb2"
    texts[services] = texts[services].replace(f"import {stem}_pb2 as {alias}",
                                              f"from {package} import {stem}_pb2 as {alias}")
    texts = {name: "# ruff: noqa\n" + text for name, text in texts.items()}  # generated: not ours to lint
    texts[messages] = texts[messages].replace("_descriptor_pool.Default().AddSerializedFile",
                                              "_descriptor_pool.DescriptorPool().AddSerializedFile")
    return texts


def write(proto_dir: Path, proto: str, package: str) -> None:
    """Regenerate the committed modules beside the proto."""
    with tempfile.TemporaryDirectory() as tmp:
        for name, text in generate(proto_dir, proto, package, Path(tmp)).items():
            (proto_dir / name).write_text(text)
            print(f"wrote {proto_dir / name}", file=sys.stderr)
