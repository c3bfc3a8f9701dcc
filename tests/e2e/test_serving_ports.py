"""An ingress port another process holds shows on the InferenceService, which is still served at its own URL."""

from __future__ import annotations

import socket

from tests.e2e.test_serving import Predictor, apply, condition, constant_model, isvc, isvc_manifest
from tests.helpers import poll


def test_a_taken_ingress_port_is_shown_on_the_service(plane_with, tmp_path):
    squatter = socket.socket()
    squatter.bind(("127.0.0.1", 0))
    squatter.listen()
    port = squatter.getsockname()[1]
    try:
        plane = plane_with(TRIMARAN_INGRESS_PORT=str(port))
        apply(plane, tmp_path, isvc_manifest("taken", str(constant_model(tmp_path / "models/one", 1))))
        obj = poll(lambda: (lambda o: o if condition(o, "PredictorReady").get("status") == "True"
                            and condition(o, "IngressReady").get("reason") == "PortInUse" else None)(
            isvc(plane, "taken")), timeout=90, interval=0.2, what="a ready predictor and IngressReady PortInUse")
        ingress = condition(obj, "IngressReady")
        assert ingress["status"] == "False" and str(port) in ingress["message"]
        assert "TRIMARAN_INGRESS_PORT" in ingress["message"], "the port was chosen by the user: it says so"
        ready = condition(obj, "Ready")
        assert ready["status"] == "False" and ready["reason"] == "PortInUse"
        described = plane.cli("describe", "isvc", "taken").stdout
        assert "Warning" in described and "PortInUse" in described
        assert Predictor(obj["status"]["url"], "taken").v1() == 1  # its own port is served meanwhile
    finally:
        squatter.close()
