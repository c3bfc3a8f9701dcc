"""Runtimes by KServe modelFormat name; detection of a model directory's format."""

from __future__ import annotations

from abc import ABC, abstractmethod
from pathlib import Path
from typing import Any, TypeVar

from trimaran.serving.runtimes._base import Model, ModelLoadError

_RUNTIMES: dict[str, Runtime] = {}


class Runtime(ABC):
    """Turns one model format's files into a :class:`Model`.

    Subclasses set ``format`` (the KServe ``modelFormat.name``) and ``looks_for`` (the files it
    recognises, in words, for error messages) and are added with :func:`register_runtime`. They import
    their framework inside :meth:`load`, so that importing the runtimes costs nothing.
    """

    format: str
    looks_for: str
    #: Its file describes the whole directory (``model.py``, ``MLmodel``): detection picks this runtime even
    #: when files of other formats lie beside it (the model it describes may load them itself).
    claims_directory: bool = False

    @abstractmethod
    def find(self, path: Path) -> Path | None:
        """This format's artifact in ``path`` (a version directory or a single file), or None."""

    @abstractmethod
    def load(self, artifact: Path, *, name: str, version: str, **options: Any) -> Model:
        """Load the artifact :meth:`find` returned; raise ModelLoadError naming it on failure."""


R = TypeVar("R", bound=type[Runtime])


def register_runtime(cls: R) -> R:
    """Class decorator: serve ``cls.format`` with this runtime. Detection tries runtimes in registration order."""
    _RUNTIMES[cls.format] = cls()
    return cls


def runtime_names() -> list[str]:
    """The modelFormat names there is a runtime for."""
    return list(_RUNTIMES)


def _get(model_format: str) -> Runtime:
    try:
        return _RUNTIMES[model_format.lower()]
    except KeyError:
        raise ModelLoadError(f"no runtime for modelFormat {model_format!r}; "
                             f"supported: {', '.join(_RUNTIMES)}") from None


def _check_exists(path: Path) -> None:
    if not path.exists():
        raise ModelLoadError(f"model path {path} does not exist")


def _describe(path: Path) -> str:
    if not path.is_dir():
        return str(path)
    names = sorted(p.name for p in path.iterdir())
    listed = ", ".join(names[:10]) + (f" and {len(names) - 10} more" if len(names) > 10 else "")
    return f"{path} (contents: {listed or 'empty'})"


def detect_format(path: Path) -> str:
    """The modelFormat name of the model at ``path`` (a version directory or one model file).

    A ``model.py`` (a custom model) or an ``MLmodel`` wins over the files it may load itself; otherwise exactly
    one format must be present. Raises ModelLoadError when none is (listing what was looked for) or several are.
    """
    path = Path(path)
    _check_exists(path)
    found: list[tuple[str, Path]] = []
    for runtime in _RUNTIMES.values():
        artifact = runtime.find(path)
        if artifact is not None:
            if runtime.claims_directory:
                return runtime.format
            found.append((runtime.format, artifact))
    if len(found) == 1:
        return found[0][0]
    if found:
        listed = ", ".join(f"{artifact.name} ({fmt})" for fmt, artifact in found)
        raise ModelLoadError(f"{path} holds models of several formats: {listed}; set the modelFormat to choose")
    looked_for = "; ".join(f"{r.format}: {r.looks_for}" for r in _RUNTIMES.values())
    hint = ""
    if path.is_dir() and any(p.is_dir() and p.name.isdigit() for p in path.iterdir()):
        hint = " This looks like a base path (integer version directories): load one version directory."
    raise ModelLoadError(f"no model recognised in {_describe(path)}.{hint} Looked for {looked_for}")


def load_model(path: Path, *, name: str, version: str = "1", model_format: str | None = None,
               **options: Any) -> Model:
    """Load the model at ``path`` (a version directory or one model file) with the runtime of its format.

    Args:
        path: the version directory (``<base>/<version>/``) or a model file.
        name: the model's name, as clients address it.
        version: the version's name.
        model_format: a KServe modelFormat name (sklearn, xgboost, lightgbm, onnx, pytorch, tensorflow,
            keras, mlflow, custom). None detects it (:func:`detect_format`); given, that runtime's files must be
            present.
        options: runtime-specific settings. The custom runtime takes ``predictor_host`` and
            ``predictor_protocol`` (``v1``/``v2``) for transformers; other runtimes ignore them.

    Example::

        model = load_model(Path("models/iris/1"), name="iris")
        model.predict({"input-0": np.array([[5.1, 3.5, 1.4, 0.2]], dtype=np.float32)})["output-0"]
    """
    path = Path(path)
    _check_exists(path)
    runtime = _get(model_format or detect_format(path))
    artifact = runtime.find(path)
    if artifact is None:
        raise ModelLoadError(f"modelFormat {runtime.format!r} needs {runtime.looks_for}; none in {_describe(path)}")
    return runtime.load(artifact, name=name, version=version, **options)
