"""The pipeline corpus (``tests/pipelines/corpus/*.py``) compiled by the real ``kfp`` SDK, and run by
``kfp.local`` for parity.

The SDK lives in its own virtualenv (``$TRIMARAN_KFP_PYTHON``, built by ``scripts/test.sh``); a test
without it is skipped, as the other SDK tests are. Compiling costs seconds (importing kfp), so
compiled YAML is kept under ``.cache/kfp-corpus/``, named by a hash of the corpus file and the
interpreter: a changed pipeline compiles again, an unchanged one never does, across sessions and
pytest-xdist workers. Use::

    from tests.pipelines.kfp_corpus import compiled, run_local

    pipeline = compiled("loops")          # .path (YAML), .pipeline_spec, .platform_spec, .arguments
    outputs = run_local("loops", tmp_path, {"numbers": [5, 6]})   # kfp.local's SubprocessRunner
"""

from __future__ import annotations

import functools
import hashlib
import json
import os
import subprocess
import tempfile
import textwrap
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import yaml

from tests.server.sdk import venv_python

CORPUS = Path(__file__).parent / "corpus"
_CACHE = Path(__file__).resolve().parents[2] / ".cache" / "kfp-corpus"

__all__ = ["CORPUS", "CompiledPipeline", "compiled", "corpus_names", "kfp_python", "run_local", "run_outputs"]


@dataclass(frozen=True)
class CompiledPipeline:
    """One corpus pipeline as the compiler wrote it."""

    name: str
    path: Path  # the YAML file: the PipelineSpec, then the platforms document when kfp-kubernetes is used
    pipeline_spec: dict[str, Any]
    platform_spec: dict[str, Any] | None  # the second document, {platforms: {kubernetes: ...}}: a run's platformSpec
    arguments: dict[str, Any]  # the module's ARGUMENTS: the parameters the tests run it with
    local: bool  # kfp.local's SubprocessRunner can run it


def corpus_names() -> list[str]:
    """Every pipeline in the corpus, by module name."""
    return sorted(p.stem for p in CORPUS.glob("*.py"))


@functools.cache
def kfp_python() -> str:
    """The interpreter with kfp and kfp-kubernetes; skips the calling test when it is unset."""
    return venv_python("TRIMARAN_KFP_PYTHON", "kfp.kubernetes", ".venv-kfp")


def _cache_path(name: str, python: str) -> Path:
    digest = hashlib.sha256((CORPUS / f"{name}.py").read_bytes() + python.encode()).hexdigest()[:16]
    return _CACHE / f"{name}-{digest}.yaml"


# Compiles each (name, source, target) triple of its arguments into target.
_COMPILE = textwrap.dedent("""
    import os, runpy, sys
    from kfp import compiler
    for name, source, target in zip(*[iter(sys.argv[1:])] * 3):
        module = runpy.run_path(source)
        tmp = f"{target}.{os.getpid()}.tmp.yaml"
        compiler.Compiler().compile(module["pipeline"], tmp)
        os.replace(tmp, target)  # whole or absent: another worker may read it at once
""")


def _compile(names: list[str], python: str) -> None:
    _CACHE.mkdir(parents=True, exist_ok=True)
    argv: list[str] = []
    for name in names:
        argv += [name, str(CORPUS / f"{name}.py"), str(_cache_path(name, python))]
    done = subprocess.run([python, "-W", "ignore::FutureWarning", "-c", _COMPILE, *argv],
                          capture_output=True, text=True, timeout=300)
    assert done.returncode == 0, f"compiling {names} failed:\n{done.stderr}"
    current = {_cache_path(name, python) for name in corpus_names()}
    for stale in {p for p in _CACHE.glob("*.yaml") if ".tmp" not in p.name} - current:
        stale.unlink(missing_ok=True)  # an edited pipeline's earlier YAML (not another worker's temporary)


def _module_constants(name: str) -> tuple[dict[str, Any], bool]:
    """ARGUMENTS and LOCAL, read from the module's source without importing kfp here."""
    import ast

    values: dict[str, Any] = {"ARGUMENTS": {}, "LOCAL": False}
    for node in ast.parse((CORPUS / f"{name}.py").read_text()).body:
        target = node.targets[0] if isinstance(node, ast.Assign) else getattr(node, "target", None)
        if isinstance(target, ast.Name) and target.id in values and node.value is not None:
            values[target.id] = ast.literal_eval(node.value)
    return values["ARGUMENTS"], values["LOCAL"]


@functools.cache
def compiled(name: str) -> CompiledPipeline:
    """Corpus pipeline `name` compiled (once; cached on disk while its source is unchanged)."""
    python = kfp_python()
    path = _cache_path(name, python)
    if not path.exists():
        # One interpreter for every stale module: importing kfp is most of the cost.
        _compile([n for n in corpus_names() if not _cache_path(n, python).exists()], python)
    documents = list(yaml.load_all(path.read_text(), Loader=getattr(yaml, "CSafeLoader", yaml.SafeLoader)))
    platform = documents[1] if len(documents) > 1 and documents[1] else None
    arguments, local = _module_constants(name)
    return CompiledPipeline(name, path, documents[0], platform, arguments, local)


# Runs one corpus pipeline under kfp.local's SubprocessRunner in the current interpreter (no venv: a
# component's `pip install kfp` preamble finds it installed, offline) and prints its outputs as JSON:
# parameters as values, artifacts as {type, uri, metadata}, or the error kfp.local raised when a task
# failed.
_RUN_LOCAL = textwrap.dedent("""
    import json, re, runpy, sys
    from kfp import dsl, local

    source, root, arguments = sys.argv[1], sys.argv[2], json.loads(sys.argv[3])
    local.init(runner=local.SubprocessRunner(use_venv=False), pipeline_root=root)
    module = runpy.run_path(source)

    def plain(value):
        if isinstance(value, dsl.Artifact):
            return {"type": value.schema_title, "uri": value.uri, "metadata": value.metadata}
        if isinstance(value, list):
            return [plain(v) for v in value]
        return value

    try:
        task = module["pipeline"](**arguments)
    except RuntimeError as failed:  # a task failed: kfp.local says which
        print(json.dumps({"outputs": {}, "error": re.sub(r"\\x1b\\[[0-9;]*m", "", str(failed))}))
    else:
        outputs = {key: plain(value) for key, value in (task.outputs or {}).items()} if task else {}
        print(json.dumps({"outputs": outputs, "error": None}))
""")


def run_local(name: str, pipeline_root: Path, arguments: dict[str, Any] | None = None,
              timeout: float = 300) -> dict[str, Any]:
    """Corpus pipeline `name` run by ``kfp.local`` (SubprocessRunner, this venv's interpreter):
    ``{"outputs": {output name: value}, "error": None}``, or ``{"outputs": {}, "error": why}`` when a
    task failed (kfp.local's words).

    One difference is kfp.local's own: numbers inside LIST and STRUCT values and in artifact metadata
    reach its components as doubles (``[1.0]``, ``rows=5.0``; Python's protobuf JSON), where a cluster
    and Trimaran hand on ``[1]`` and ``rows=5``; compare outputs that do not print such values."""
    if not _module_constants(name)[1]:
        raise ValueError(f"{name}: kfp.local's SubprocessRunner cannot run it (LOCAL is not True)")
    python = kfp_python()
    merged = {**_module_constants(name)[0], **(arguments or {})}
    env = {k: v for k, v in os.environ.items() if not k.startswith(("TRIMARAN_", "PYTHON", "VIRTUAL_ENV"))}
    with tempfile.TemporaryDirectory() as cwd:
        done = subprocess.run([python, "-W", "ignore::FutureWarning", "-c", _RUN_LOCAL,
                               str(CORPUS / f"{name}.py"), str(pipeline_root), json.dumps(merged)],
                              capture_output=True, text=True, timeout=timeout, cwd=cwd, env=env)
    assert done.returncode == 0, f"kfp.local failed on {name}:\n{done.stdout}\n{done.stderr}"
    return json.loads(done.stdout.strip().splitlines()[-1])


def run_outputs(pipeline_spec: dict[str, Any], run: dict[str, Any]) -> dict[str, Any]:
    """A finished Trimaran Run's pipeline outputs, shaped as :func:`run_local`'s: each of the root
    DAG's declared output parameters from the task that produced it (the first branch of a OneOf
    that did)."""
    tasks = {t["id"]: t for t in (run.get("status") or {}).get("tasks") or []}

    def produced(selector: dict[str, Any]) -> Any:
        task = tasks.get(selector.get("producerSubtask", "")) or {}
        return ((task.get("outputs") or {}).get("parameters") or {}).get(selector.get("outputParameterKey"))

    outputs: dict[str, Any] = {}
    for name, spec in ((pipeline_spec["root"].get("dag") or {}).get("outputs") or {}).get("parameters", {}).items():
        selectors = ([spec["valueFromParameter"]] if "valueFromParameter" in spec
                     else (spec.get("valueFromOneof") or {}).get("parameterSelectors") or [])
        outputs[name] = next((v for v in map(produced, selectors) if v is not None), None)
    return outputs
