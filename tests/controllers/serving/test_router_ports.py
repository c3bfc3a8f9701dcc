"""The router and ports another process holds: it keeps serving what it can, reports what it cannot
listen on, and takes a port as soon as it is free again, without waiting for a new routes file."""

from __future__ import annotations

import socket
from collections.abc import Iterator
from pathlib import Path

import pytest

from tests.controllers.serving.test_router import Client, Replica, RouterHarness
from tests.helpers import poll


@pytest.fixture
def harness(tmp_path: Path) -> Iterator[RouterHarness]:
    h = RouterHarness(tmp_path)
    yield h
    h.close()


def _squat(port: int) -> socket.socket:
    squatter = socket.socket()
    squatter.bind(("127.0.0.1", port))
    squatter.listen()
    return squatter


def test_a_taken_ingress_port_is_reported_the_service_is_served_and_the_port_taken_once_free(
        harness: RouterHarness) -> None:
    squatter = _squat(harness.ingress)
    try:
        replica = Replica("r")
        harness.configure([("rev-1", 100)], {"rev-1": [replica.address]})
        errors = poll(lambda: harness.stats().get("listenErrors"), what="the ingress error")
        assert list(errors) == ["ingress"] and errors["ingress"]["port"] == harness.ingress
        poll(lambda: harness.ready_endpoints("rev-1"), what="replica ready")
        assert Client(harness.port).predict() == (200, "r")  # the service's own port is served meanwhile
    finally:
        squatter.close()
    poll(lambda: harness.stats().get("listenErrors") == {}, what="the ingress port taken once free")
    assert Client(harness.ingress, "iris.default.example.com").predict() == (200, "r")


def test_a_service_port_freed_later_is_taken_without_a_new_routes_file(harness: RouterHarness) -> None:
    squatter = _squat(harness.port)
    try:
        replica = Replica("r")
        harness.configure([("rev-1", 100)], {"rev-1": [replica.address]})
        poll(lambda: harness.stats().get("bindErrors"), what="the bind error")
    finally:
        squatter.close()
    poll(lambda: harness.stats().get("bindErrors") == {}, what="the service port taken once free")
    poll(lambda: harness.ready_endpoints("rev-1"), what="replica ready")
    assert Client(harness.port).predict() == (200, "r")
