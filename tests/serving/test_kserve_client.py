"""KServe's own Python clients (InferenceRESTClient V1 and V2, InferenceGRPCClient) against our server.

kserve pins protobuf 6 and brings FastAPI, pandas and the Kubernetes client, so it is not in the project's
environment: the client runs in a separate virtualenv, found at ``$TRIMARAN_KSERVE_PYTHON``,
``/tmp/kserve-venv`` or ``bench/.peers/kserve`` (the benchmark's peer environment). ``scripts/test.sh`` (CI)
builds ``.venv-kserve`` and sets ``TRIMARAN_KSERVE_PYTHON``, and then the test must run; a bare ``pytest``
without any such environment skips it.
"""

from __future__ import annotations

import os
import subprocess
from pathlib import Path

import pytest

from tests.helpers import REPO
from tests.serving.conftest import ModelServer

SCRIPT = '''
import asyncio, sys
import numpy as np
from kserve import InferenceGRPCClient, InferenceRESTClient, InferInput, InferRequest, RESTConfig

http_url, grpc_url = sys.argv[1], sys.argv[2]
rows = np.array([[0.0] * 64, [0.5] * 64], dtype=np.float32)


def request(binary):
    tensor = InferInput("input-0", list(rows.shape), "FP32")
    tensor.set_data_from_numpy(rows, binary_data=binary)
    return InferRequest(model_name="digits", infer_inputs=[tensor], request_id="k1")


async def main():
    v1 = InferenceRESTClient(RESTConfig(protocol="v1"))
    assert await v1.is_server_live(http_url)
    assert await v1.is_model_ready(http_url, "digits")
    v1_answer = (await v1.infer(http_url, {"instances": rows.tolist()}, model_name="digits"))["predictions"]
    v2 = InferenceRESTClient(RESTConfig(protocol="v2"))
    assert await v2.is_server_ready(http_url) and await v2.is_model_ready(http_url, "digits")
    for binary in (False, True):
        response = await v2.infer(http_url, request(binary), model_name="digits")
        assert response.id == "k1", response.id
        assert response.outputs[0].as_numpy().tolist() == v1_answer
    grpc = InferenceGRPCClient(grpc_url)
    assert await grpc.is_server_ready()
    response = await grpc.infer(request(False))
    assert response.outputs[0].as_numpy().tolist() == v1_answer
    await v1.close(); await v2.close(); await grpc.close()
    print("kserve clients ok")


asyncio.run(main())
'''


def kserve_python() -> str | None:
    required = os.environ.get("TRIMARAN_KSERVE_PYTHON")
    if required:
        # Named explicitly (CI): a broken environment is a failure, not a reason to skip.
        subprocess.run([required, "-c", "import kserve"], check=True, capture_output=True)
        return required
    candidates = ["/tmp/kserve-venv/bin/python",
                  str(REPO / "bench" / ".peers" / "kserve" / "bin" / "python")]
    for candidate in candidates:
        if candidate and Path(candidate).exists() and subprocess.run(
                [candidate, "-c", "import kserve"], capture_output=True).returncode == 0:
            return candidate
    return None


def test_kserve_clients(digits_dir: Path, tmp_path: Path) -> None:
    python = kserve_python()
    if python is None:
        pytest.skip("no virtualenv with kserve (set TRIMARAN_KSERVE_PYTHON or create /tmp/kserve-venv)")
    server = ModelServer(digits_dir, tmp_path).wait_ready()
    try:
        done = subprocess.run([python, "-c", SCRIPT, server.url, server.grpc_url], capture_output=True, text=True,
                              timeout=120)
    finally:
        server.stop()
    assert done.returncode == 0, done.stdout + done.stderr
    assert "kserve clients ok" in done.stdout
