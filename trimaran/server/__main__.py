import argparse
import os

from trimaran.api.podsecurity import LEVELS
from trimaran.server.controlplane import serve

parser = argparse.ArgumentParser(prog="python -m trimaran.server", description="Run the Trimaran control plane.")
parser.add_argument("--host", default="127.0.0.1")
parser.add_argument("--port", type=int, default=0)
parser.add_argument("--pod-security", choices=LEVELS, default="baseline",
                    help="the Pod Security level enforced in namespaces that set none")
parser.add_argument("--image-policy", choices=("host", "image"),
                    help="what a container that sets a command runs (default: $TRIMARAN_IMAGE_POLICY, else host)")
args = parser.parse_args()
if args.image_policy:
    os.environ["TRIMARAN_IMAGE_POLICY"] = args.image_policy  # read by the kubelet
serve(host=args.host, port=args.port, pod_security=args.pod_security)
