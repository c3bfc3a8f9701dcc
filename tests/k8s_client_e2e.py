"""Run the ``kubernetes`` Python client's own end-to-end suite (``kubernetes/e2e_test`` in
kubernetes-client/python), unchanged, against a Trimaran control plane, and report each test.

    python -m tests.k8s_client_e2e --suite PATH [--junit FILE] [-- PYTEST_ARGS...]

``PATH`` is a checkout of kubernetes-client/python (or its ``kubernetes/e2e_test`` directory),
ideally at the tag of the installed client (``git clone --depth 1 -b v37.0.1
https://github.com/kubernetes-client/python``); ``$TRIMARAN_K8S_E2E_SUITE`` may name it instead.
The suite is not on PyPI: no sdist or wheel of ``kubernetes`` (checked: 24.2.0, 29.0.0, 30.1.0,
35.0.0, 37.0.1) ships ``kubernetes/e2e_test``.

What it sets up: a fresh home whose control plane runs containers of their images
(``TRIMARAN_IMAGE_POLICY=image``), a loopback registry holding the stand-in images under the
public names the suite uses (``busybox``, ``nginx:1.15.4``, ``python``, ``k8s.gcr.io/pause:2.0``:
see tests/standins), and that home's ``certs.d`` naming it as the mirror of docker.io and
k8s.gcr.io, so nothing is pulled from the Internet. The suite finds the cluster as its ``base.py``
does: ``load_kube_config()`` reads ``$KUBECONFIG``, here the home's kubeconfig. Its modules import
``kubernetes.e2e_test``, so a conftest next to a copy of it adds the copy to the installed
``kubernetes`` package's path; the test files themselves are not touched.
"""

from __future__ import annotations

import argparse
import json
import os
import shutil
import subprocess
import sys
import tempfile
import xml.etree.ElementTree as ElementTree
from pathlib import Path

REPO = Path(__file__).resolve().parent.parent
_CONFTEST = '''"""Written by tests/k8s_client_e2e.py: the copied suite is importable as kubernetes.e2e_test."""
import pathlib

import kubernetes

kubernetes.__path__.append(str(pathlib.Path(__file__).resolve().parent / "kubernetes"))
'''


def find_suite(path: Path) -> Path:
    """The ``e2e_test`` directory in ``path`` (a checkout, its ``kubernetes/``, or the directory)."""
    for candidate in (path / "kubernetes" / "e2e_test", path / "e2e_test", path):
        if (candidate / "base.py").is_file() and candidate.name == "e2e_test":
            return candidate
    raise SystemExit(f"no kubernetes/e2e_test under {path}: pass a checkout of kubernetes-client/python")


def outcomes(junit: Path) -> list[tuple[str, str, str]]:
    """``(test id, PASS|FAIL|ERROR|SKIP, first line of the reason)`` per test in a JUnit XML report."""
    rows = []
    for case in ElementTree.parse(junit).iter("testcase"):
        test_id = f"{case.get('classname', '')}::{case.get('name', '')}"
        verdict, reason = "PASS", ""
        for tag, name in (("failure", "FAIL"), ("error", "ERROR"), ("skipped", "SKIP")):
            found = case.find(tag)
            if found is not None:
                verdict = name
                reason = (found.get("message") or found.text or "").strip().splitlines()[0:1]
                reason = reason[0][:160] if reason else ""
                break
        rows.append((test_id, verdict, reason))
    return rows


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--suite", default=os.environ.get("TRIMARAN_K8S_E2E_SUITE"),
                        help="a checkout of kubernetes-client/python")
    parser.add_argument("--junit", type=Path, help="keep pytest's JUnit report here")
    parser.add_argument("--timeout", type=float, default=1800, help="seconds for the whole suite")
    parser.add_argument("pytest_args", nargs="*", help="more pytest arguments (after --)")
    args = parser.parse_args(argv)
    if not args.suite:
        parser.error("--suite (or TRIMARAN_K8S_E2E_SUITE) is required: the suite is not on PyPI")
    suite = find_suite(Path(args.suite).resolve())

    sys.path.insert(0, str(REPO))
    from tests.imagekit import build_test_images, start_registry
    from tests.standins import build_standins, push_public, write_mirror_config
    from trimaran.server.daemon import start_server, stop_pods, stop_server

    work = Path(tempfile.mkdtemp(prefix="k8s-e2e-"))
    home = work / "home"
    registry = None
    try:
        images = build_test_images()
        build_standins(images)
        registry = start_registry(work / "registry")
        push_public(registry, images)
        write_mirror_config(home / "certs.d", registry.host)
        os.environ.update(TRIMARAN_HOME=str(home), TRIMARAN_IMAGE_POLICY="image")
        start_server(home=home)
        copy = work / "suite"
        # Its files are found at kubernetes/e2e_test/test_yaml relative to the working directory.
        shutil.copytree(suite, copy / "kubernetes" / "e2e_test")
        (copy / "conftest.py").write_text(_CONFTEST)
        junit = args.junit or work / "junit.xml"
        env = {**os.environ, "KUBECONFIG": str(home / "kubeconfig")}
        command = [sys.executable, "-m", "pytest", "-q", "-p", "no:cacheprovider", "--rootdir", str(copy),
                   f"--junitxml={junit}", "kubernetes/e2e_test", *args.pytest_args]
        try:
            subprocess.run(command, cwd=copy, env=env, timeout=args.timeout, check=False)
        except subprocess.TimeoutExpired:
            print(f"the suite ran past {args.timeout:g} s and was stopped", file=sys.stderr)
        if not junit.is_file():
            print("pytest wrote no report", file=sys.stderr)
            return 1
        rows = outcomes(junit)
        width = max((len(r[0]) for r in rows), default=0)
        for test_id, verdict, reason in rows:
            print(f"{verdict:5} {test_id:{width}}  {reason}")
        pulled = sorted(json.loads(f.read_text())["reference"] for f in (home / "images" / "refs").glob("*.json"))
        print(f"\nimages pulled (through the mirror at {registry.host}): {', '.join(pulled) or 'none'}")
        passed = sum(1 for r in rows if r[1] == "PASS")
        print(f"\n{passed} of {len(rows)} pass")
        return 0 if passed == len(rows) else 1
    finally:
        stop_server(home)
        stop_pods(home, grace_seconds=1.0)
        if registry is not None:
            registry.stop()
        shutil.rmtree(work, ignore_errors=True)


if __name__ == "__main__":
    sys.exit(main())
