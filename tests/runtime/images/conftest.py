"""Fixtures of the image tests: the shared test images and loopback registries (tests/imagekit.py)."""

from __future__ import annotations

from tests.imagekit import auth_registry, registry, test_images  # noqa: F401 -- fixtures
