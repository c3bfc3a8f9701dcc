"""The objective as a trial process receives it: a pickled payload in a ConfigMap.

The payload is a dict: the objective (or its ``module:qualname``), the objective metric's name,
each parameter's type (and a categorical's Python values), and the fixed parameters. It is
pickled with cloudpickle when that is installed, else with the standard pickle, which stores a
function as a reference to ``module:qualname`` (so the trial must be able to import it).
"""

from __future__ import annotations

import importlib
import os
import pickle
import sys
import sysconfig
import types
from collections.abc import Callable, Mapping
from pathlib import Path
from typing import Any

__all__ = ["FORMAT", "dump_payload", "import_reference", "load_payload", "module_root"]

FORMAT = 1


def _cloudpickle() -> Any | None:
    try:
        import cloudpickle
    except ImportError:
        return None
    return cloudpickle


def _installed(path: str) -> bool:
    """Whether ``path`` lies in the standard library or site-packages (importable anywhere)."""
    real = os.path.realpath(path)
    paths = sysconfig.get_paths()
    roots = {paths.get(k) for k in ("stdlib", "platstdlib", "purelib", "platlib")}
    return any(r and (real == os.path.realpath(r) or real.startswith(os.path.realpath(r) + os.sep)) for r in roots)


def user_module(func: Callable[..., Any]) -> types.ModuleType | None:
    """The module that defines ``func`` when it is the user's own code (not installed, not
    ``__main__``, which cloudpickle ships by value anyway)."""
    name = getattr(func, "__module__", None)
    module = sys.modules.get(name or "")
    if module is None or name == "__main__":
        return None
    file = getattr(module, "__file__", None)
    if not file or _installed(file):
        return None
    return module


def module_root(module_name: str) -> str | None:
    """The sys.path entry that makes ``module_name`` importable, when it is not installed code."""
    module = sys.modules.get(module_name)
    file = getattr(module, "__file__", None)
    if not file or _installed(file):
        return None
    path = Path(file).resolve().parent
    depth = module_name.count(".")
    if Path(file).name == "__init__.py":
        depth += 1
    for _ in range(depth):
        path = path.parent
    return str(path)


def dump_payload(payload: Mapping[str, Any], by_value: types.ModuleType | None = None) -> bytes:
    """Pickle ``payload``; with cloudpickle, ``by_value``'s functions are shipped as code."""
    cp = _cloudpickle()
    if cp is None:
        return pickle.dumps(dict(payload), protocol=pickle.HIGHEST_PROTOCOL)
    registered = False
    if by_value is not None:
        try:
            cp.register_pickle_by_value(by_value)
            registered = True
        except ValueError:
            pass  # already registered by the user, or not a module cloudpickle can ship
    try:
        return cp.dumps(dict(payload))
    finally:
        if registered:
            cp.unregister_pickle_by_value(by_value)


def load_payload(path: str | os.PathLike[str]) -> dict[str, Any]:
    with open(path, "rb") as f:
        payload = pickle.load(f)  # noqa: S301 (our own ConfigMap, written by TuningClient.tune)
    if not isinstance(payload, dict) or payload.get("format") != FORMAT:
        raise ValueError(f"{path}: not a Trimaran SDK objective (format {FORMAT})")
    return payload


def import_reference(reference: str) -> Callable[..., Any]:
    """The function ``module:qualname`` (or ``module.qualname``) names."""
    module_name, sep, qualname = reference.partition(":")
    if not sep:
        module_name, _, qualname = reference.rpartition(".")
    if not module_name or not qualname:
        raise ValueError(f"objective reference {reference!r}: expected 'module:function'")
    obj: Any = importlib.import_module(module_name)
    for part in qualname.split("."):
        obj = getattr(obj, part)
    if not callable(obj):
        raise TypeError(f"objective reference {reference!r} is not callable")
    return obj
