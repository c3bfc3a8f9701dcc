"""Package names loaded on first use (PEP 562): importing a package loads only what its caller
touches (the pod shim no more of the runtime, a CLI command no pydantic models, a tuning client
no Optuna)."""

from __future__ import annotations

import importlib
from collections.abc import Callable, Mapping, Sequence
from typing import Any


def lazy_exports(package: str, exports: Mapping[str, Sequence[str]]) -> tuple[Callable[[str], Any], list[str]]:
    """A module ``__getattr__`` for ``package`` and the sorted names it serves: ``exports`` maps
    each submodule to its names, imported from ``package.<submodule>`` when first asked for."""
    module_of = {name: module for module, names in exports.items() for name in names}

    def __getattr__(name: str) -> Any:
        module = module_of.get(name)
        if module is None:
            raise AttributeError(f"module {package!r} has no attribute {name!r}")
        return getattr(importlib.import_module(f"{package}.{module}"), name)

    return __getattr__, sorted(module_of)
