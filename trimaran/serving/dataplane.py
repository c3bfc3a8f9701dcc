"""What the REST and gRPC front ends share: the model repository, readiness, metadata and inference."""

from __future__ import annotations

import asyncio
import gc
import logging
from typing import Any

import numpy as np

import trimaran
from trimaran._aio import within
from trimaran.serving.batching import Dispatcher
from trimaran.serving.config import ServerConfig
from trimaran.serving.errors import InvalidInput, NotFound, RequestTimeout, ServingError
from trimaran.serving.metrics import ServerMetrics
from trimaran.serving.repository import ModelRepository, ModelVersion
from trimaran.serving.runtimes import InferenceInputError, PredictorError

log = logging.getLogger("trimaran.serving")
SERVER_NAME = "trimaran"
# Triton's binary tensor extension is implemented by the REST front end (tritonclient uses it by default).
EXTENSIONS = ["binary_tensor_data"]
_GRPC_CODE_OF_STATUS = {400: "INVALID_ARGUMENT", 404: "NOT_FOUND", 502: "UNAVAILABLE", 503: "UNAVAILABLE",
                        504: "DEADLINE_EXCEEDED"}


def as_serving_error(exc: BaseException) -> ServingError:
    """Map what a model raised to the error clients get (KServe's mapping: bad input 400, else 500)."""
    if isinstance(exc, ServingError):
        return exc
    if isinstance(exc, InferenceInputError):
        return InvalidInput(str(exc))
    if isinstance(exc, PredictorError):  # a transformer's predictor said no: pass its status on
        error = ServingError(str(exc))
        error.http_status = exc.status
        error.grpc_code = _GRPC_CODE_OF_STATUS.get(exc.status, "INTERNAL")
        return error
    if isinstance(exc, asyncio.TimeoutError):
        return RequestTimeout("no answer within the request timeout")
    if isinstance(exc, RecursionError):  # code walking a request nested deeper than Python's stack (b64 values)
        return InvalidInput("the request is nested too deeply")
    return ServingError(f"{type(exc).__name__} : {exc}")


class DataPlane:
    """The models of one server (today one, ``--model-name``) and the operations on them."""

    def __init__(self, config: ServerConfig, metrics: ServerMetrics) -> None:
        self.config = config
        self.metrics = metrics
        options: dict[str, Any] = {}
        if config.predictor_host:
            options = {"predictor_host": config.predictor_host, "predictor_protocol": config.predictor_protocol}
        repo = ModelRepository(config.model_name, config.model_dir, config.policy, model_format=config.model_format,
                               load_options=options, on_loaded=self._attach)
        self.models: dict[str, ModelRepository] = {config.model_name: repo}

    def _attach(self, version: ModelVersion) -> None:
        # What loading created (the framework's modules, the model) lives as long as the version: moving it
        # out of the collector's sight keeps full collections, and the latency spikes they cause, short.
        gc.freeze()
        model = version.model
        if model.payload_level:
            return
        name = model.name
        metrics = self.metrics
        version.dispatcher = Dispatcher(
            model.predict, batchable=model.batchable, max_batch_size=self.config.max_batch_size,
            max_batch_latency=self.config.max_batch_latency_ms / 1000, max_queue=self.config.max_queue,
            timeout=self.config.request_timeout,
            on_batch=lambda seconds, n: metrics.predicted(name, seconds, n),
            on_queue=lambda delta: metrics.queue_depth(name, delta))

    async def poll(self) -> None:
        """One scan of every model's base path (the first load); a scan that fails is logged, as in ``run``."""
        results = await asyncio.gather(*(repo.poll() for repo in self.models.values()), return_exceptions=True)
        for repo, result in zip(self.models.values(), results, strict=True):
            if isinstance(result, Exception):
                log.error("model %s: scanning %s failed", repo.name, repo.base, exc_info=result)

    async def run(self) -> None:
        """Load and keep polling every model's versions (until ``stop``)."""
        await asyncio.gather(*(repo.run(self.config.poll_interval) for repo in self.models.values()))

    def stop(self) -> None:
        """Stop polling; every version closes after its last request."""
        for repo in self.models.values():
            repo.stop()

    # -- health and metadata ---------------------------------------------------------------------------------
    def repository(self, name: str) -> ModelRepository:
        repo = self.models.get(name)
        if repo is None:
            raise NotFound(f"model {name!r} not found; this server serves {', '.join(map(repr, self.models))}")
        return repo

    def ready(self) -> bool:
        return all(repo.ready for repo in self.models.values())

    def not_ready_reason(self) -> str:
        return "; ".join(f"model {name!r}: {repo.reason}" for name, repo in self.models.items() if not repo.ready)

    def model_ready(self, name: str, version: str | None) -> bool:
        """Raises NotFound for an unknown model or version."""
        repo = self.repository(name)
        if not version:
            return repo.ready
        if version in repo.loaded:
            return True
        if not (version.isdigit() and int(version) in repo.status):
            raise NotFound(f"model {name!r} has no version {version!r}")
        return False

    def server_metadata(self) -> dict[str, Any]:
        return {"name": SERVER_NAME, "version": trimaran.__version__, "extensions": EXTENSIONS}

    def model_metadata(self, name: str, version: str | None) -> dict[str, Any]:
        repo = self.repository(name)
        handle = repo.get(version)
        try:
            metadata = dict(handle.model.metadata())
        finally:
            handle.release()
        metadata["versions"] = repo.versions()
        return metadata

    # -- inference -------------------------------------------------------------------------------------------
    def predict(self, handle: ModelVersion, inputs: dict[str, np.ndarray], outputs: list[str] | None,
                signature: str | None) -> dict[str, np.ndarray] | asyncio.Future:
        """Outputs now, or a future of them (batched or threaded). Unknown requested outputs are refused."""
        model = handle.model
        if outputs is not None and model.outputs:
            known = {spec.name for spec in model.outputs}
            unknown = [o for o in outputs if o not in known]
            if unknown:
                raise InvalidInput(f"model {model.name!r} has no output {unknown[0]!r}; its outputs are "
                                   f"{', '.join(map(repr, known))}")
        try:
            result = handle.dispatcher.submit(inputs, outputs, signature)
        except Exception as exc:
            raise _refused_input(exc, model.name, inputs) from exc
        if isinstance(result, asyncio.Future):
            return _explained(result, model.name, inputs)
        return result

    async def infer_payload(self, handle: ModelVersion, payload: Any, headers: dict[str, str]) -> Any:
        """A payload-level (custom) model's answer, within the request timeout."""
        return await within(handle.model.infer_payload(payload, headers), self.config.request_timeout)


def _refused_input(exc: BaseException, model: str, inputs: dict[str, np.ndarray]) -> BaseException:
    """What the model raised, or a 400 naming the input when it holds NaN or infinity: JSON requests may
    carry them (TF Serving's literals), and a model that cannot take them must not answer 500."""
    if isinstance(exc, ServingError) or not isinstance(exc, Exception):
        return exc
    for name, array in inputs.items():
        if array.dtype.kind in "fc" and not np.isfinite(array).all():
            reason = str(exc).strip().splitlines()[0] if str(exc).strip() else type(exc).__name__
            return InvalidInput(f"input {name!r} holds NaN or infinity, which model {model!r} does not take: {reason}")
    return exc


def _explained(future: asyncio.Future, model: str, inputs: dict[str, np.ndarray]) -> asyncio.Future:
    """``future``'s outcome, its failure passed through :func:`_refused_input`; cancelling it cancels ``future``."""
    out = future.get_loop().create_future()

    def settle(done: asyncio.Future) -> None:
        if out.done():
            return
        if done.cancelled():
            out.cancel()
        elif (exc := done.exception()) is not None:
            out.set_exception(_refused_input(exc, model, inputs))
        else:
            out.set_result(done.result())

    future.add_done_callback(settle)
    out.add_done_callback(lambda o: future.cancel() if o.cancelled() else None)
    return out


def select_outputs(outputs: dict[str, np.ndarray], wanted: list[str] | None) -> dict[str, np.ndarray]:
    """The outputs a request asked for, in its order (runtimes may return more)."""
    if wanted is None:
        return outputs
    try:
        return {name: outputs[name] for name in wanted}
    except KeyError as exc:
        raise InvalidInput(f"the model returned no output {exc.args[0]!r}; it returned "
                           f"{', '.join(map(repr, outputs))}") from None
