"""What a Service's hop costs: HTTP GET latency straight to a server and through the Service
proxy (`controllers/workloads/proxy.py`) to the same server, keep-alive and one connection per
request. Prints p50 and p99 of each."""

from __future__ import annotations

import argparse
import http.client
import socket
import subprocess
import sys
import time

from trimaran.controllers.workloads.proxy import ServiceProxy

SERVER = """
import http.server, sys
class H(http.server.BaseHTTPRequestHandler):
    protocol_version = "HTTP/1.1"
    wbufsize = 65536  # headers and body in one write, so Nagle's delay measures nothing
    def do_GET(self):
        self.send_response(200); self.send_header("Content-Length", "2"); self.end_headers(); self.wfile.write(b"ok")
    def log_message(self, *args):
        pass
http.server.ThreadingHTTPServer(("127.0.0.1", int(sys.argv[1])), H).serve_forever()
"""


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def latencies(host: str, port: int, requests: int, fresh: bool) -> tuple[float, float]:
    """p50 and p99 in milliseconds."""
    samples = []
    conn = http.client.HTTPConnection(host, port)
    for _ in range(requests):
        if fresh:
            conn = http.client.HTTPConnection(host, port)
        start = time.perf_counter()
        conn.request("GET", "/")
        conn.getresponse().read()
        samples.append(time.perf_counter() - start)
        if fresh:
            conn.close()
    samples.sort()
    return samples[len(samples) // 2] * 1e3, samples[int(len(samples) * 0.99)] * 1e3


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--requests", type=int, default=2000)
    args = parser.parse_args()
    port, service_port = free_port(), free_port()
    server = subprocess.Popen([sys.executable, "-c", SERVER, str(port)])
    proxy = ServiceProxy()
    try:
        deadline = time.monotonic() + 10
        while True:
            try:
                socket.create_connection(("127.0.0.1", port), timeout=1).close()
                break
            except OSError:
                if time.monotonic() > deadline:
                    raise
                time.sleep(0.05)
        proxy.set(("127.88.0.9", service_port), [("127.0.0.1", port)])
        for fresh in (False, True):
            direct = latencies("127.0.0.1", port, args.requests, fresh)
            via = latencies("127.88.0.9", service_port, args.requests, fresh)
            print(f"{'one connection per request' if fresh else 'keep-alive'}: direct p50 {direct[0]:.3f} ms "
                  f"p99 {direct[1]:.3f} ms; through the Service p50 {via[0]:.3f} ms p99 {via[1]:.3f} ms")
    finally:
        server.kill()
        proxy.close()


if __name__ == "__main__":
    main()
