"""Image references read as Docker reads them, and pull credentials from Secrets."""

from __future__ import annotations

import base64
import json

import pytest

from tests.imagekit import docker_config_secret
from trimaran.runtime.images import InvalidImageName, credentials_from_secrets, parse_reference

DIGEST = "sha256:" + "0123456789abcdef" * 4


@pytest.mark.parametrize(("image", "normalised"), [
    ("busybox", "docker.io/library/busybox:latest"),
    ("busybox:1.36", "docker.io/library/busybox:1.36"),
    ("kubeflow/training-operator", "docker.io/kubeflow/training-operator:latest"),
    ("index.docker.io/pytorch/pytorch:2.1", "docker.io/pytorch/pytorch:2.1"),
    ("ghcr.io/kubeflow/katib/mnist:v1", "ghcr.io/kubeflow/katib/mnist:v1"),
    ("localhost/app", "localhost/app:latest"),
    ("127.0.0.1:5000/team/app:v2", "127.0.0.1:5000/team/app:v2"),
    (f"127.0.0.1:5000/app@{DIGEST}", f"127.0.0.1:5000/app@{DIGEST}"),
    (f"app:v1@{DIGEST}", f"docker.io/library/app:v1@{DIGEST}"),
    ("[::1]:5000/app", "[::1]:5000/app:latest"),
])
def test_references_normalise_as_docker_does(image: str, normalised: str) -> None:
    assert str(parse_reference(image)) == normalised


def test_a_digest_reference_has_no_default_tag_and_loopback_registries_are_known() -> None:
    ref = parse_reference(f"127.0.0.1:5000/app@{DIGEST}")
    assert (ref.registry, ref.repository, ref.tag, ref.digest) == ("127.0.0.1:5000", "app", None, DIGEST)
    assert ref.is_loopback and parse_reference("localhost:5000/a").is_loopback
    assert not parse_reference("ghcr.io/a/b").is_loopback


@pytest.mark.parametrize(("image", "reason"), [
    ("", "empty"),
    ("Busybox", "must be lowercase"),
    ("team/App:v1", "must be lowercase"),
    ("app:.hidden", "tag '.hidden'"),
    ("app@sha256:abc", "digest"),
    ("app@sha256:" + "A" * 64, "64 lowercase hex"),
    ("a//b", "component ''"),
    (" busybox", "whitespace"),
    ("reg.io/" + "a" * 260, "longer than 255"),
])
def test_invalid_names_are_refused_with_the_reason(image: str, reason: str) -> None:
    with pytest.raises(InvalidImageName, match="invalid reference format") as caught:
        parse_reference(image)
    assert reason in str(caught.value)


def test_credentials_come_from_dockerconfigjson_and_dockercfg_secrets_and_match_by_registry() -> None:
    legacy = {"type": "kubernetes.io/dockercfg", "data": {".dockercfg": base64.b64encode(json.dumps(
        {"https://index.docker.io/v1/": {"auth": base64.b64encode(b"hubuser:hubpass").decode()}}).encode()).decode()}}
    opaque = {"type": "Opaque", "data": {".dockerconfigjson": "e30="}}
    broken = {"type": "kubernetes.io/dockerconfigjson", "data": {".dockerconfigjson": "not base64 json"}}
    secrets = [docker_config_secret("127.0.0.1:5000", "alice", "s3cret"), legacy, opaque, broken]
    credentials = credentials_from_secrets(secrets)
    assert [(c.registry, c.username, c.password) for c in credentials] == [
        ("127.0.0.1:5000", "alice", "s3cret"), ("docker.io", "hubuser", "hubpass")]
    local, hub = credentials
    assert local.matches(parse_reference("127.0.0.1:5000/team/app"))
    assert not local.matches(parse_reference("127.0.0.1:5001/team/app"))
    assert hub.matches(parse_reference("busybox")) and not hub.matches(parse_reference("ghcr.io/a/b"))
