"""The SDK's docstring examples run as written."""

from __future__ import annotations

import doctest
import importlib

import pytest

MODULES = ["trimaran.sdk", "trimaran.sdk.search", "trimaran.sdk.client", "trimaran.sdk._metrics",
           "trimaran.sdk._experiment", "trimaran.sdk._trial_runner"]


@pytest.mark.parametrize("name", MODULES)
def test_docstring_examples(name):
    result = doctest.testmod(importlib.import_module(name), optionflags=doctest.ELLIPSIS)
    assert result.failed == 0
