"""Name and label rules, worded as Kubernetes words them."""

from __future__ import annotations

import pytest

from trimaran.api import (
    is_dns1035_label,
    is_dns1123_label,
    is_dns1123_subdomain,
    is_qualified_name,
    is_valid_label_value,
)


@pytest.mark.parametrize("name", ["a", "mnist", "resnet-distributed", "a100-training", "x" * 63])
def test_dns1035_valid(name: str) -> None:
    assert is_dns1035_label(name) == []


@pytest.mark.parametrize("name", ["", "1job", "a.b", "Job", "job-", "-job", "a_b", "x" * 64])
def test_dns1035_invalid(name: str) -> None:
    assert is_dns1035_label(name)


def test_dns1035_messages() -> None:
    [msg] = is_dns1035_label("1job")
    assert msg.startswith(
        "a DNS-1035 label must consist of lower case alphanumeric characters or '-', start with an alphabetic character"
    )
    assert msg.endswith("regex used for validation is '[a-z]([-a-z0-9]*[a-z0-9])?')")
    assert is_dns1035_label("a" * 64) == ["must be no more than 63 characters"]


@pytest.mark.parametrize("name", ["a", "1abc", "my-pod", "a.b.c", "x" * 253, "mnist-worker-0"])
def test_dns1123_subdomain_valid(name: str) -> None:
    assert is_dns1123_subdomain(name) == []


@pytest.mark.parametrize("name", ["", "A", "a..b", ".a", "a.", "a_b", "x" * 254])
def test_dns1123_subdomain_invalid(name: str) -> None:
    assert is_dns1123_subdomain(name)


def test_dns1123_label() -> None:
    assert is_dns1123_label("1abc") == []
    assert is_dns1123_label("a.b")
    assert is_dns1123_label("a" * 64) == ["must be no more than 63 characters"]


@pytest.mark.parametrize(
    "key", ["app", "nvidia.com/gpu", "nvidia.com/mig-3g.20gb", "training.kubeflow.org/job-name", "My.Key_1", "a/b"]
)
def test_qualified_names_valid(key: str) -> None:
    assert is_qualified_name(key) == []


@pytest.mark.parametrize(
    ("key", "fragment"),
    [
        ("", "name part must be non-empty"),
        ("/a", "prefix part must be non-empty"),
        ("a/", "name part must be non-empty"),
        ("Bad_Prefix/a", "prefix part a lowercase RFC 1123 subdomain"),
        ("a/b/c", "a qualified name must consist of"),
        ("-a", "name part must consist of alphanumeric characters"),
        ("x" * 64, "name part must be no more than 63 characters"),
    ],
)
def test_qualified_names_invalid(key: str, fragment: str) -> None:
    assert any(fragment in m for m in is_qualified_name(key))


def test_label_values() -> None:
    assert is_valid_label_value("") == []
    assert is_valid_label_value("v1.2_3-x") == []
    assert is_valid_label_value("x" * 64) == ["must be no more than 63 characters"]
    [msg] = is_valid_label_value("has space")
    assert msg.startswith("a valid label must be an empty string or consist of alphanumeric characters")
