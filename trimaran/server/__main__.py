import argparse

from trimaran.server.controlplane import serve

parser = argparse.ArgumentParser(prog="python -m trimaran.server", description="Run the Trimaran control plane.")
parser.add_argument("--host", default="127.0.0.1")
parser.add_argument("--port", type=int, default=0)
args = parser.parse_args()
serve(host=args.host, port=args.port)
