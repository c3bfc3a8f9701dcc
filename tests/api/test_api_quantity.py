"""Kubernetes quantity parsing."""

from __future__ import annotations

import pytest

from trimaran.api.quantity import (
    QuantityError,
    format_cpu,
    format_memory,
    parse_cpu,
    parse_memory,
)


@pytest.mark.parametrize(
    ("text", "cores"),
    [("500m", 0.5), ("2", 2.0), ("0.5", 0.5), (2, 2.0), (0.25, 0.25), ("1500m", 1.5),
     ("1u", 0.001), ("100n", 0.001), ("1k", 1000.0), ("2e0", 2.0)],
)
def test_cpu(text: object, cores: float) -> None:
    assert parse_cpu(text) == cores  # type: ignore[arg-type]


@pytest.mark.parametrize(
    ("text", "num_bytes"),
    [("4Gi", 4 * 2**30), ("512Mi", 512 * 2**20), ("1G", 10**9), ("1e9", 10**9), ("100", 100),
     ("1.5Gi", 3 * 2**29), ("128974848", 128974848), ("129M", 129 * 10**6), ("123Mi", 123 * 2**20),
     ("1Ki", 1024), ("1E", 10**18), ("1E3", 1000), ("0.5", 1), (1024, 1024)],
)
def test_memory(text: object, num_bytes: int) -> None:
    assert parse_memory(text) == num_bytes  # type: ignore[arg-type]


@pytest.mark.parametrize("bad", ["", "abc", "1Gb", "1.2.3", "Gi", "--1", "1 Gi", True, None])
def test_rejects_malformed(bad: object) -> None:
    with pytest.raises(QuantityError):
        parse_memory(bad)  # type: ignore[arg-type]


def test_rejects_negative() -> None:
    with pytest.raises(QuantityError):
        parse_cpu("-1")


def test_formatting() -> None:
    assert format_cpu(8) == "8"
    assert format_cpu(0.5) == "500m"
    assert format_cpu(0.1 + 0.2) == "300m"
    assert format_memory(64 * 2**30) == "64Gi"
    assert format_memory(1536 * 2**20) == "1536Mi"
    assert format_memory(100) == "100"
