"""Fixtures of the network tests."""

from __future__ import annotations

from collections.abc import Iterator

import pytest

from tests.network.netlab import Lab
from trimaran.runtime.network import delete_table, ensure_bridge_netfilter
from trimaran.runtime.network._nft import table_exists


@pytest.fixture
def lab() -> Iterator[tuple[Lab, str]]:
    """A lab of network namespaces and the name of an nft table for the test's rules; both are gone
    afterwards, and the test fails if anything of them is left."""
    made = Lab()
    table = f"trimaran-test-{made.tag}"
    ensure_bridge_netfilter()
    try:
        yield made, table
    finally:
        delete_table(table)
        made.close()
    assert not table_exists(table)
    assert made.leftovers() == []
