import argparse

from trimaran.api.podsecurity import LEVELS
from trimaran.server.controlplane import serve

parser = argparse.ArgumentParser(prog="python -m trimaran.server", description="Run the Trimaran control plane.")
parser.add_argument("--host", default="127.0.0.1")
parser.add_argument("--port", type=int, default=0)
parser.add_argument("--pod-security", choices=LEVELS, default="baseline",
                    help="the Pod Security level enforced in namespaces that set none")
args = parser.parse_args()
serve(host=args.host, port=args.port, pod_security=args.pod_security)
