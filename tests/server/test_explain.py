"""``kubectl explain`` (the real one, which reads ``/openapi/v3``) for every resource the control plane
serves, as ``kubectl api-resources`` lists them, and for each one's ``.spec`` where it has one."""

from __future__ import annotations

import pytest

from tests.conftest import shared_plane
from tests.server.test_kubectl import KUBECTL, kubectl  # noqa: F401 -- the kubectl fixture

pytestmark = pytest.mark.skipif(KUBECTL is None, reason="kubectl is installed by .ci/run (Debian's kubernetes-client)")

plane = shared_plane("explain")


def test_explain_every_served_resource_and_its_spec(kubectl) -> None:  # noqa: ANN001, F811
    rows = [line.split() for line in kubectl("api-resources", "--no-headers").stdout.splitlines()]
    # NAME [SHORTNAMES] APIVERSION NAMESPACED KIND: the version is named, as "nodes.metrics.k8s.io" would
    # be read as the core nodes' field "metrics" (kubectl splits at the first dot it can resolve).
    listed = [(row[0], row[-3]) for row in rows]
    assert ("pods", "v1") in listed and ("deployments", "apps/v1") in listed
    assert ("pytorchjobs", "kubeflow.org/v1") in listed and ("nodes", "metrics.k8s.io/v1beta1") in listed
    failures = []
    for resource, api_version in listed:
        proc = kubectl("explain", resource, f"--api-version={api_version}", check=False)
        if proc.returncode != 0:
            failures.append(f"{resource} ({api_version}): {proc.stderr.strip()}")
            continue
        assert proc.stdout.startswith(("KIND:", "GROUP:")), proc.stdout[:200]
        assert f"VERSION:    {api_version.rpartition('/')[2]}" in proc.stdout, proc.stdout[:200]
        if "\n  spec\t" in proc.stdout:
            spec = kubectl("explain", f"{resource}.spec", f"--api-version={api_version}", check=False)
            if spec.returncode != 0 or "FIELD:" not in spec.stdout:
                failures.append(f"{resource}.spec ({api_version}): {spec.stderr.strip()}")
    assert not failures, "\n".join(failures)


def test_explain_reaches_nested_fields_of_the_built_in_kinds(kubectl) -> None:  # noqa: ANN001, F811
    containers = kubectl("explain", "pods.spec.containers").stdout
    assert "FIELD: containers <[]Container>" in containers or "containers\t<[]Object>" in containers, containers[:400]
    assert "image\t" in containers and "env\t" in containers
    strategy = kubectl("explain", "deployments.spec.strategy").stdout
    assert "rollingUpdate" in strategy and "type" in strategy
    recursive = kubectl("explain", "deployments", "--recursive").stdout
    assert "template" in recursive and "containers" in recursive
