"""The units of a graph: Seldon's built-ins, the prepackaged servers over our model runtimes, and
user classes in Seldon's Python wrapper shape.

Every unit answers the same five calls (`Unit`): ``predict`` (MODEL), ``transform_input``
(TRANSFORMER), ``transform_output`` (OUTPUT_TRANSFORMER), ``route`` (ROUTER: a child's index) and
``aggregate`` (COMBINER: one message from the children's), plus ``send_feedback``. A user class
implements what its type needs, as with ``seldon-core-microservice``: ``predict(X, feature_names)``
(``meta=`` too when its signature takes it), ``transform_input``, ``transform_output``, ``route``,
``aggregate(Xs, features_names)``, ``send_feedback(features, feature_names, reward, truth, routing=)``,
``tags()``, ``metrics()``, ``init_metadata()``, ``load()``, and ``class_names`` for its output's names;
``predict_raw``, ``transform_input_raw`` and ``transform_output_raw`` take and return whole messages.
A unit at ``endpoint.service_host`` is a Seldon microservice called over HTTP (`RemoteUnit`).
"""

from __future__ import annotations

import http.client
import importlib.util
import inspect
import random
import sys
import urllib.parse
from pathlib import Path
from typing import Any

import numpy as np
import orjson

from trimaran.api.seldon import PREPACKAGED_SERVERS, parameter_value
from trimaran.serving.seldon.protocol import Message, SeldonError, decode, encode, reply

__all__ = ["Unit", "load_user_class", "make_unit"]


class Unit:
    """A node of the graph; the defaults pass messages through unchanged."""

    def __init__(self, name: str, unit_type: str, implementation: str, children: list[Unit]) -> None:
        self.name = name
        self.type = unit_type
        self.implementation = implementation
        self.children = children

    def predict(self, msg: Message) -> Message:
        return msg

    def transform_input(self, msg: Message) -> Message:
        return msg

    def transform_output(self, msg: Message) -> Message:
        return msg

    def route(self, msg: Message) -> int:
        return 0

    def aggregate(self, msgs: list[Message]) -> Message:
        return msgs[0]

    def send_feedback(self, request: Message, response: Message, reward: float, truth: Any,
                      routing: int | None) -> None:
        """Nothing to learn by default."""

    def tags(self) -> dict[str, Any]:
        return {}

    def metrics(self) -> list[dict[str, Any]]:
        return []

    def metadata(self) -> dict[str, Any]:
        return {"name": self.name, "platform": self.implementation, "versions": [], "inputs": [], "outputs": []}

    def error(self, what: str, http_status: int = 400, reason: str = "MICROSERVICE_BAD_DATA") -> SeldonError:
        """An error that names this unit, which is what a caller of a graph needs to know first."""
        return SeldonError(f"unit {self.name!r} ({self.type}): {what}", http_status, reason)


def _array(unit: Unit, msg: Message) -> np.ndarray:
    if not isinstance(msg.payload, np.ndarray):
        raise unit.error(f"takes data.ndarray or data.tensor, not {msg.form}")
    return msg.payload


class SimpleModel(Unit):
    """Seldon's SIMPLE_MODEL: three fixed class probabilities per row, for wiring graphs up."""

    VALUES = (0.1, 0.9, 0.5)

    def predict(self, msg: Message) -> Message:
        rows = len(msg.payload) if isinstance(msg.payload, np.ndarray) and msg.payload.ndim else 1
        return reply(msg, np.tile(np.asarray(self.VALUES), (rows, 1)), ["class0", "class1", "class2"])


class SimpleRouter(Unit):
    """Seldon's SIMPLE_ROUTER: always the first child."""


class RandomABTest(Unit):
    """Seldon's RANDOM_ABTEST: child 0 with probability ``ratioA`` (default 0.5), else child 1."""

    def __init__(self, *args: Any, ratio_a: float = 0.5) -> None:
        super().__init__(*args)
        self.ratio_a = ratio_a

    def route(self, msg: Message) -> int:
        return 0 if random.random() < self.ratio_a else 1


class AverageCombiner(Unit):
    """Seldon's AVERAGE_COMBINER: the element-wise mean of the children's arrays, which must agree in shape."""

    def aggregate(self, msgs: list[Message]) -> Message:
        arrays = [_array(self, m) for m in msgs]
        shapes = {a.shape for a in arrays}
        if len(shapes) != 1:
            detail = ", ".join(f"{c.name}: {list(a.shape)}" for c, a in zip(self.children, arrays, strict=False))
            raise self.error(f"the children's outputs differ in shape ({detail}); averaging needs one shape")
        try:
            mean = np.mean(np.stack([a.astype(np.float64) for a in arrays]), axis=0)
        except (TypeError, ValueError) as exc:
            raise self.error(f"cannot average the children's outputs: {exc}") from None
        return reply(msgs[0], mean, msgs[0].names)


class PrepackagedModel(Unit):
    """A prepackaged server (SKLEARN_SERVER, ...) over the local model runtime of its format.

    SKLEARN_SERVER answers ``predict_proba`` unless the ``method`` parameter says ``predict``, as
    Seldon's server does; TENSORFLOW_SERVER calls ``signature_name`` when given."""

    def __init__(self, *args: Any, model_dir: Path, parameters: dict[str, Any]) -> None:
        super().__init__(*args)
        from trimaran.serving.runtimes import ModelLoadError, load_model

        runtime = PREPACKAGED_SERVERS[self.implementation]
        try:
            self.model = load_model(_version_dir(model_dir), name=self.name, model_format=runtime)
        except (ModelLoadError, OSError) as exc:
            raise RuntimeError(f"unit {self.name!r}: {self.implementation} cannot load {model_dir}: {exc}") from exc
        self.method = str(parameters.get("method") or ("predict_proba" if runtime == "sklearn" else "predict"))
        self.signature = parameters.get("signature_name")
        self.model_name = str(parameters.get("model_name") or self.name)
        if self.signature:
            from trimaran.serving.runtimes import InferenceInputError

            try:
                self.model.signature_specs(self.signature)
            except InferenceInputError as exc:
                raise RuntimeError(f"unit {self.name!r}: parameter signature_name: {exc}") from exc

    def predict(self, msg: Message) -> Message:
        from trimaran.serving.runtimes import InferenceInputError

        x = _array(self, msg)
        inputs = self.model.signature_specs(self.signature)[0] if self.signature else self.model.inputs
        name = inputs[0].name if len(inputs) == 1 else "input-0"
        if inputs and inputs[0].datatype.startswith("FP") and x.dtype.kind in "iuf":
            x = x.astype(np.float32)
        try:
            if self.method == "predict_proba":
                out = self.model.predict({name: x}, outputs=["probabilities"])
                result = out.get("probabilities")
                if result is None:
                    raise self.error("the model has no predict_proba; set the parameter method=predict")
            else:
                out = self.model.predict({name: x}, signature_name=self.signature)
                result = out[sorted(out)[0]] if len(out) > 1 else next(iter(out.values()))
        except InferenceInputError as exc:
            raise self.error(str(exc)) from None
        except SeldonError:
            raise
        except Exception as exc:  # the framework refused the input (a wrong width, text for numbers, ...)
            raise self.error(f"{self.implementation} failed: {type(exc).__name__}: {exc}", 500,
                             "MICROSERVICE_INTERNAL_ERROR") from exc
        result = np.asarray(result)
        names = [f"t:{i}" for i in range(result.shape[1])] if result.ndim == 2 else []
        return reply(msg, result, names)

    def metadata(self) -> dict[str, Any]:
        return {**self.model.metadata(), "name": self.model_name, "versions": [self.model.version]}


def _version_dir(model_dir: Path) -> Path:
    """A TF Serving layout (numbered version directories) serves its newest version, as TF Serving does."""
    versions = [p for p in model_dir.iterdir() if p.is_dir() and p.name.isdigit()] if model_dir.is_dir() else []
    return max(versions, key=lambda p: int(p.name)) if versions else model_dir


class UserUnit(Unit):
    """A user's class in Seldon's wrapper shape."""

    def __init__(self, *args: Any, instance: Any) -> None:
        super().__init__(*args)
        self.instance = instance
        self._takes_meta = {m: _takes_meta(getattr(instance, m, None))
                            for m in ("predict", "transform_input", "transform_output", "route", "aggregate")}

    def _call(self, method: str, msg: Message) -> Any:
        fn = getattr(self.instance, method, None)
        if fn is None:
            return None
        kwargs = {"meta": msg.meta} if self._takes_meta[method] else {}
        try:
            return fn(msg.payload, msg.names, **kwargs)
        except SeldonError:
            raise
        except Exception as exc:  # the user's code: its failure is the answer, with the unit named
            raise self.error(f"{method} raised {type(exc).__name__}: {exc}", 500,
                             "MICROSERVICE_INTERNAL_ERROR") from exc

    def _names(self, msg: Message, result: Any) -> list[str]:
        names = getattr(self.instance, "class_names", None) or getattr(self.instance, "feature_names", None)
        if names:
            return [str(n) for n in names]
        array = np.asarray(result) if not isinstance(result, (str, bytes, dict)) else None
        if array is not None and array.ndim == 2 and len(msg.names) == array.shape[1]:
            return msg.names
        return [f"t:{i}" for i in range(array.shape[1])] if array is not None and array.ndim == 2 else []

    def _answer(self, method: str, msg: Message) -> Message:
        raw = getattr(self.instance, method + "_raw", None)
        if raw is not None:  # Seldon's low-level form: the whole message in, a whole message out
            try:
                answer = raw(encode(msg))
            except Exception as exc:  # the user's code, as in _call
                raise self.error(f"{method}_raw raised {type(exc).__name__}: {exc}", 500,
                                 "MICROSERVICE_INTERNAL_ERROR") from exc
            out = decode(answer)
            out.meta = msg.meta
            return out
        if not hasattr(self.instance, method):
            return msg
        result = self._call(method, msg)
        return reply(msg, result, self._names(msg, result))

    def predict(self, msg: Message) -> Message:
        return self._answer("predict", msg)

    def transform_input(self, msg: Message) -> Message:
        return self._answer("transform_input", msg)

    def transform_output(self, msg: Message) -> Message:
        return self._answer("transform_output", msg)

    def route(self, msg: Message) -> int:
        result = self._call("route", msg)
        if result is None:
            return 0
        try:
            return int(np.asarray(result).ravel()[0])
        except (TypeError, ValueError, IndexError):
            raise self.error(f"route returned {result!r}, not a child's index") from None

    def aggregate(self, msgs: list[Message]) -> Message:
        fn = getattr(self.instance, "aggregate", None)
        if fn is None:
            return msgs[0]
        try:
            result = fn([m.payload for m in msgs], [m.names for m in msgs])
        except Exception as exc:  # the user's code, as in _call
            raise self.error(f"aggregate raised {type(exc).__name__}: {exc}", 500,
                             "MICROSERVICE_INTERNAL_ERROR") from exc
        return reply(msgs[0], result, self._names(msgs[0], result))

    def send_feedback(self, request: Message, response: Message, reward: float, truth: Any,
                      routing: int | None) -> None:
        fn = getattr(self.instance, "send_feedback", None)
        if fn is None:
            return
        kwargs = {"routing": routing} if "routing" in _parameters(fn) else {}
        try:
            fn(request.payload, request.names, reward, truth, **kwargs)
        except Exception as exc:  # the user's code, as in _call
            raise self.error(f"send_feedback raised {type(exc).__name__}: {exc}", 500,
                             "MICROSERVICE_INTERNAL_ERROR") from exc

    def tags(self) -> dict[str, Any]:
        fn = getattr(self.instance, "tags", None)
        return dict(fn() or {}) if fn else {}

    def metrics(self) -> list[dict[str, Any]]:
        fn = getattr(self.instance, "metrics", None)
        return list(fn() or []) if fn else []

    def metadata(self) -> dict[str, Any]:
        fn = getattr(self.instance, "init_metadata", None)
        base = super().metadata()
        base["platform"] = "seldon"
        return {**base, **(fn() or {})} if fn else base


class RemoteUnit(Unit):
    """A Seldon microservice at ``urls`` (e.g. ``seldon-core-microservice`` behind a Service, or an image
    unit's pods, in turn), called over
    Seldon's internal REST API: ``/predict``, ``/transform-input``, ``/transform-output``, ``/route``,
    ``/aggregate`` and ``/send-feedback``, each a SeldonMessage (list) as JSON."""

    TIMEOUT_SECONDS = 60.0

    def __init__(self, *args: Any, urls: list[str]) -> None:
        super().__init__(*args)
        # Several: the ready pods of an image unit, called in turn (one kept-alive connection each).
        self._targets = [(p.hostname or "127.0.0.1", p.port or 80) for p in map(urllib.parse.urlsplit, urls)]
        self._conns: list[http.client.HTTPConnection | None] = [None] * len(self._targets)
        self._turn = 0

    def _post(self, path: str, body: dict[str, Any]) -> Any:
        data = orjson.dumps(body, option=orjson.OPT_SERIALIZE_NUMPY)
        index = self._turn % len(self._targets)
        self._turn += 1
        host, port = self._targets[index]
        for attempt in (1, 2):  # a kept-alive connection the service closed is opened again once
            conn = self._conns[index]
            if conn is None:
                conn = self._conns[index] = http.client.HTTPConnection(host, port, timeout=self.TIMEOUT_SECONDS)
            try:
                conn.request("POST", path, data, {"content-type": "application/json"})
                response = conn.getresponse()
                payload = response.read()
                break
            except (OSError, http.client.HTTPException) as exc:
                conn.close()
                self._conns[index] = None
                if attempt == 2:
                    raise self.error(f"cannot reach http://{host}:{port}{path}: {exc}", 502,
                                     "MICROSERVICE_UNREACHABLE") from None
        try:
            answer = orjson.loads(payload)
        except orjson.JSONDecodeError:
            answer = None
        if response.status != 200:
            info = ((answer or {}).get("status") or {}).get("info") if isinstance(answer, dict) else None
            raise self.error(f"{path} answered {response.status}: {info or payload[:200]!r}", response.status,
                             "MICROSERVICE_ERROR")
        if not isinstance(answer, dict):
            raise self.error(f"{path} answered something that is not a SeldonMessage", 502, "MICROSERVICE_BAD_DATA")
        return answer

    def _message(self, path: str, msg: Message) -> Message:
        out = decode(self._post(path, encode(msg)))
        out.meta = msg.meta
        return out

    def predict(self, msg: Message) -> Message:
        return self._message("/predict", msg)

    def transform_input(self, msg: Message) -> Message:
        return self._message("/transform-input", msg)

    def transform_output(self, msg: Message) -> Message:
        return self._message("/transform-output", msg)

    def route(self, msg: Message) -> int:
        answer = decode(self._post("/route", encode(msg)))
        try:
            return int(np.asarray(answer.payload).ravel()[0])
        except (TypeError, ValueError, IndexError):
            raise self.error(f"/route answered {answer.payload!r}, not a child's index") from None

    def aggregate(self, msgs: list[Message]) -> Message:
        out = decode(self._post("/aggregate", {"seldonMessages": [encode(m) for m in msgs]}))
        out.meta = msgs[0].meta
        return out

    def send_feedback(self, request: Message, response: Message, reward: float, truth: Any,
                      routing: int | None) -> None:
        body: dict[str, Any] = {"request": encode(request), "reward": reward}
        if response.payload is not None:
            body["response"] = encode(response)
        self._post("/send-feedback", body)


def _parameters(fn: Any) -> set[str]:
    try:
        return set(inspect.signature(fn).parameters)
    except (TypeError, ValueError):
        return set()


def _takes_meta(fn: Any) -> bool:
    if fn is None:
        return False
    params = inspect.signature(fn).parameters
    return "meta" in params or any(p.kind is inspect.Parameter.VAR_KEYWORD for p in params.values())


def load_user_class(class_name: str, paths: list[str]) -> type:
    """``Module`` (a class of that name in ``Module.py``) or ``module.Class``, found under ``paths``
    (the container's workingDir and volume mounts), as ``seldon-core-microservice MODEL_NAME`` finds it."""
    module_name, _, attr = class_name.rpartition(".")
    if not module_name:
        module_name = attr
    for base in paths:
        candidate = Path(base) / (module_name.replace(".", "/") + ".py")
        if candidate.is_file():
            if base not in sys.path:
                sys.path.insert(0, base)  # the class may import its neighbours, as in Seldon's image
            spec = importlib.util.spec_from_file_location(module_name, candidate)
            assert spec is not None and spec.loader is not None
            module = importlib.util.module_from_spec(spec)
            sys.modules[module_name] = module
            spec.loader.exec_module(module)
            cls = getattr(module, attr, None)
            if cls is None:
                raise RuntimeError(f"{candidate} defines no {attr!r}")
            return cls
    raise RuntimeError(f"no {module_name}.py for class {class_name!r} in {', '.join(paths) or 'no directory'}")


def make_unit(graph: dict[str, Any], sources: dict[str, dict[str, Any]]) -> Unit:
    """The unit tree of a predictor's ``graph``; ``sources`` says per unit name where its model
    (``modelDir``) or its class (``class``, ``paths``) is."""
    children = [make_unit(c, sources) for c in graph.get("children") or []]
    name = graph["name"]
    impl = graph.get("implementation") or ""
    unit_type = graph.get("type") or "MODEL"
    params = {p["name"]: parameter_value(p.get("type", "STRING"), p["value"]) for p in graph.get("parameters") or []}
    args = (name, unit_type, impl, children)
    source = sources.get(name) or {}
    if impl == "SIMPLE_MODEL":
        return SimpleModel(*args)
    if impl == "SIMPLE_ROUTER":
        return SimpleRouter(*args)
    if impl == "RANDOM_ABTEST":
        return RandomABTest(*args, ratio_a=float(params.get("ratioA", 0.5)))
    if impl == "AVERAGE_COMBINER":
        return AverageCombiner(*args)
    if impl in PREPACKAGED_SERVERS:
        return PrepackagedModel(*args, model_dir=Path(source["modelDir"]), parameters=params)
    if source.get("url") or source.get("urls"):
        return RemoteUnit(*args, urls=source.get("urls") or [source["url"]])
    cls = load_user_class(source["class"], list(source.get("paths") or []))
    instance = cls(**params)
    if hasattr(instance, "load"):
        instance.load()
    return UserUnit(*args, instance=instance)
