"""Package names loaded on first use (PEP 562): importing a package loads only what its caller
touches (the pod shim no more of the runtime, a CLI command no pydantic models, a tuning client
no Optuna)."""

from __future__ import annotations

import importlib
from collections.abc import Callable, Mapping
from typing import Any


def lazy_getattr(package: str, module_of: Mapping[str, str]) -> Callable[[str], Any]:
    """A module ``__getattr__`` for ``package`` that imports ``package.<module_of[name]>`` when
    ``name`` is first asked for."""

    def __getattr__(name: str) -> Any:
        module = module_of.get(name)
        if module is None:
            raise AttributeError(f"module {package!r} has no attribute {name!r}")
        return getattr(importlib.import_module(f"{package}.{module}"), name)

    return __getattr__
