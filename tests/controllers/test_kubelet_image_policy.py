"""Which path a container takes and the API server's default pull policy (pure functions; the
pulls themselves are tested through a control plane in tests/e2e/test_image_pods.py)."""

from __future__ import annotations

import pytest

from trimaran.controllers.kubelet import default_pull_policy, runs_image
from trimaran.runtime.env import ConfigError


@pytest.mark.parametrize(("image", "policy"), [
    ("busybox", "Always"),
    ("busybox:latest", "Always"),
    ("localhost:5000/busybox", "Always"),
    ("localhost:5000/busybox:1.36", "IfNotPresent"),
    ("busybox@sha256:" + "a" * 64, "IfNotPresent"),
    ("busybox:latest@sha256:" + "a" * 64, "IfNotPresent"),
])
def test_default_pull_policy(image: str, policy: str) -> None:
    assert default_pull_policy(image) == policy


def pod(annotation: str | None = None) -> dict:
    return {"metadata": {"annotations": {"trimaran.io/image-policy": annotation} if annotation else {}}}


@pytest.mark.parametrize(("container", "annotation", "node", "expected"), [
    ({"image": "busybox"}, None, "host", True),                       # no command: always the image
    ({"image": "busybox", "command": ["sh"]}, None, "host", False),
    ({"image": "busybox", "command": ["sh"]}, None, "image", True),
    ({"image": "busybox", "command": ["sh"]}, "image", "host", True),
    ({"image": "busybox", "command": ["sh"]}, "host", "image", False),
    ({"command": ["sh"]}, "image", "image", False),                   # nothing to run
])
def test_which_path_a_container_takes(container: dict, annotation: str | None, node: str, expected: bool) -> None:
    assert runs_image(pod(annotation), container, node) is expected


def test_an_unknown_policy_annotation_names_the_field() -> None:
    with pytest.raises(ConfigError, match=r"metadata\.annotations\[trimaran\.io/image-policy\]: must be one of"):
        runs_image(pod("vm"), {"image": "busybox", "command": ["sh"]}, "host")
