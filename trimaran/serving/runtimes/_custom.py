"""Custom Python models: a ``model.py`` defining a class in KServe's custom-model shape.

The class is ``MODEL_CLASS`` if ``model.py`` sets it, else the one class defined in ``model.py`` with a
``predict`` method. It is built as ``cls(name)`` (plus ``predictor_host`` and ``predictor_protocol``, or
KServe's ``protocol``, where ``__init__`` takes them), then ``load()`` is called if it has one and ``ready`` is
not already True. Requests go
through ``preprocess(payload, headers)``, ``predict(payload, headers)`` and ``postprocess(result, headers)``;
preprocess and postprocess are optional, any of them may be ``async``, and methods that take only the payload
are called without headers.
"""

from __future__ import annotations

import asyncio
import concurrent.futures
import contextlib
import hashlib
import importlib.util
import inspect
import sys
import threading
import traceback
from collections.abc import Collection, Coroutine
from pathlib import Path
from typing import Any

import numpy as np

from trimaran.serving.runtimes._base import Model, ModelLoadError
from trimaran.serving.runtimes._registry import Runtime, register_runtime

STEPS = ("preprocess", "predict", "postprocess")


def _run_to_completion(coroutine: Coroutine) -> Any:
    """Run an ``async load()`` from synchronous code, also when this thread already runs an event loop."""
    try:
        asyncio.get_running_loop()
    except RuntimeError:
        return asyncio.run(coroutine)
    with concurrent.futures.ThreadPoolExecutor(1) as pool:
        return pool.submit(asyncio.run, coroutine).result()


def _takes_headers(method: Any) -> bool:
    """Whether ``method(payload, headers)`` is a valid call (KServe's shape) rather than ``method(payload)``."""
    try:
        parameters = list(inspect.signature(method).parameters.values())
    except (TypeError, ValueError):
        return True
    positional = [p for p in parameters if p.kind in (p.POSITIONAL_ONLY, p.POSITIONAL_OR_KEYWORD)]
    return len(positional) >= 2 or any(p.kind is p.VAR_POSITIONAL for p in parameters)


class CustomModel(Model):
    """A user's object in KServe's custom-model shape, served at payload level (:meth:`infer_payload`).

    Synchronous methods run in a worker thread, one request at a time (the user's code need not be
    thread-safe, and the server's event loop is not blocked); ``async`` methods run on the caller's loop,
    concurrently. Payloads are opaque to the server, so the model is not batchable.
    """

    platform = "custom"
    batchable = False
    payload_level = True

    def __init__(self, obj: Any, *, name: str, version: str) -> None:
        super().__init__(name, version)
        self.obj = obj
        self._steps = [(getattr(obj, step), _takes_headers(getattr(obj, step)))
                       for step in STEPS if callable(getattr(obj, step, None))]
        # A thread lock, not an asyncio one: the server may call from more than one event loop (HTTP, gRPC).
        self._sync_lock = threading.Lock()

    async def infer_payload(self, payload: Any, headers: dict[str, str]) -> Any:
        value = payload
        for method, takes_headers in self._steps:
            args = (value, headers) if takes_headers else (value,)
            if inspect.iscoroutinefunction(method):
                value = await method(*args)
            else:
                value = await asyncio.to_thread(self._one_at_a_time, method, args)
                if inspect.isawaitable(value):
                    value = await value
        return value

    def _one_at_a_time(self, method: Any, args: tuple) -> Any:
        with self._sync_lock:
            return method(*args)

    def predict(self, inputs: dict[str, np.ndarray], *, signature_name: str | None = None,
                outputs: Collection[str] | None = None) -> dict[str, np.ndarray]:
        raise NotImplementedError(f"model {self.name!r} is a custom model served at payload level: "
                                  "use infer_payload()")

    def close(self) -> None:
        stop = getattr(self.obj, "stop", None)
        if callable(stop):
            result = stop()
            if inspect.isawaitable(result):
                _run_to_completion(result)


def _import(file: Path) -> Any:
    # A module name per file: two versions of one model (two directories) load side by side during a swap.
    digest = hashlib.sha1(str(file.resolve()).encode()).hexdigest()[:12]
    module_name = f"trimaran_custom_model_{digest}"
    spec = importlib.util.spec_from_file_location(module_name, file)
    if spec is None or spec.loader is None:
        raise ModelLoadError(f"cannot import {file}")
    module = importlib.util.module_from_spec(spec)
    # model.py may import modules beside it, also later, at request time. (Two versions' sibling modules of
    # the same name share sys.modules: the first imported wins.)
    if str(file.parent) not in sys.path:
        sys.path.insert(0, str(file.parent))
    sys.modules[module_name] = module
    try:
        spec.loader.exec_module(module)
    except (Exception, SystemExit) as e:
        sys.modules.pop(module_name, None)
        raise ModelLoadError(f"importing {file} failed:\n{_user_traceback(e)}") from e
    return module


def _user_traceback(error: BaseException) -> str:
    """The last frames of the user's code (not the runtime's or importlib's) and the exception."""
    ours = str(Path(__file__).parent)
    frames = [f for f in traceback.extract_tb(error.__traceback__)
              if not f.filename.startswith(ours) and not f.filename.startswith("<frozen")]
    return ("".join(traceback.format_list(frames[-4:])) + "".join(traceback.format_exception_only(error))).rstrip()


def _model_class(module: Any, file: Path) -> type:
    chosen = getattr(module, "MODEL_CLASS", None)
    if chosen is not None:
        if not inspect.isclass(chosen):
            raise ModelLoadError(f"{file}: MODEL_CLASS must be a class, not {type(chosen).__name__}")
        return chosen
    # Classes model.py only imports (a base class, helpers) are not candidates.
    candidates = [obj for obj in vars(module).values() if inspect.isclass(obj) and obj.__module__ == module.__name__
                  and callable(getattr(obj, "predict", None))]
    if len(candidates) == 1:
        return candidates[0]
    if not candidates:
        raise ModelLoadError(f"{file} defines no class with a predict() method; define one (KServe's custom model "
                             "shape: __init__(name), load(), predict(payload, headers)) or set MODEL_CLASS")
    names = ", ".join(c.__name__ for c in candidates)
    raise ModelLoadError(f"{file} defines several classes with predict() ({names}); set MODEL_CLASS = <the one>")


def _construct(cls: type, name: str, file: Path, options: dict[str, Any]) -> Any:
    parameters = inspect.signature(cls).parameters
    kwargs = {}
    if options.get("predictor_host") is not None and "predictor_host" in parameters:
        kwargs["predictor_host"] = options["predictor_host"]
    if options.get("predictor_protocol") is not None:
        for key in ("predictor_protocol", "protocol"):
            if key in parameters:
                kwargs[key] = options["predictor_protocol"]
                break
    try:
        obj = cls(name, **kwargs)
    except Exception as e:
        raise ModelLoadError(f"{file}: {cls.__name__}({name!r}) failed:\n{_user_traceback(e)}") from e
    # kserve.Model subclasses built as cls(name) read this attribute when forwarding.
    if options.get("predictor_host") is not None and getattr(obj, "predictor_host", None) is None:
        with contextlib.suppress(AttributeError):  # a read-only property in some kserve versions
            obj.predictor_host = options["predictor_host"]
    return obj


@register_runtime
class CustomRuntime(Runtime):
    format = "custom"
    looks_for = "model.py (a class in KServe's custom-model shape)"
    claims_directory = True

    def find(self, path: Path) -> Path | None:
        if path.is_file():
            return path if path.suffix == ".py" else None
        return path / "model.py" if (path / "model.py").is_file() else None

    def load(self, artifact: Path, *, name: str, version: str, **options: Any) -> Model:
        cls = _model_class(_import(artifact), artifact)
        obj = _construct(cls, name, artifact, options)
        load = getattr(obj, "load", None)
        # KServe models often load in __init__ and set ready: loading again would only cost time.
        if callable(load) and getattr(obj, "ready", False) is not True:
            try:
                result = load()
                if inspect.isawaitable(result):
                    result = _run_to_completion(result)
            except Exception as e:
                raise ModelLoadError(f"{artifact}: {cls.__name__}.load() failed:\n{_user_traceback(e)}") from e
            if result is False:
                raise ModelLoadError(f"{artifact}: {cls.__name__}.load() returned False")
        return CustomModel(obj, name=name, version=version)
