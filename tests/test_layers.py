"""The tree's layers: lower packages never import upper ones, and the control plane reaches the node
only through its interface (``runtime/nodeapi.py``).

Read from the source, not run: every module of ``trimaran/controllers`` and ``trimaran/server`` but
the node's own imports no runtime internals, calls nothing on a runtime that ``NodeAPI`` does not
list, and builds no path into the runtime's home (``pods/UID/runs``, ``logs``, ``volumes``).
"""

from __future__ import annotations

import ast
import inspect
from pathlib import Path

import pytest

from trimaran.runtime import LocalRuntime, NodeAPI

ROOT = Path(__file__).resolve().parent.parent / "trimaran"

# The node itself, which holds the runtime whole: our kubelet (pods' lifecycle, its prober, the Node
# object), kube-proxy, CoreDNS and the NetworkPolicy agent, and the wiring that builds the node.
NODE_SIDE = {
    "controllers/kubelet.py", "controllers/probes.py", "controllers/node.py", "controllers/workloads/network.py",
    "server/controlplane.py", "server/daemon.py",
}
# Runtime modules the control plane may import: the interface, and pure code with no node state
# (resource arithmetic, GPU names, env expansion, the cgroup counters' types, the pods' exec
# protocol that MPI launchers speak to their workers, the pod network's public names).
ALLOWED_MODULES = {
    "trimaran.runtime", "trimaran.runtime.nodeapi", "trimaran.runtime.gpus", "trimaran.runtime.node",
    "trimaran.runtime.env", "trimaran.runtime.qos", "trimaran.runtime.stats", "trimaran.runtime.podexec",
    "trimaran.runtime.network",
}
# Directories of the runtime's home (``home / "pods"``) a path must not be built into.
HOME_DIRS = {"pods", "runs", "logs", "volumes", "crun", "cgroups"}
INTERFACE = {name for name in dir(NodeAPI) if not name.startswith("_")}


def _control_plane_modules() -> list[Path]:
    modules = [p for layer in ("controllers", "server") for p in sorted((ROOT / layer).rglob("*.py"))]
    return [p for p in modules if str(p.relative_to(ROOT)) not in NODE_SIDE]


def _runtime_holder(node: ast.expr) -> bool:
    """``runtime``, ``self.runtime``, ``plane.kubelet.runtime``: what holds the node."""
    return (isinstance(node, ast.Name) and node.id == "runtime") or \
        (isinstance(node, ast.Attribute) and node.attr == "runtime")


def _reaches(source: str, where: str) -> tuple[list[str], int]:
    """What a module reaches past the interface (one line each), and how many uses of a runtime
    it makes (so the scan is seen to look at something)."""
    tree = ast.parse(source, where)
    found, calls = [], 0
    for node in ast.walk(tree):
        if isinstance(node, ast.ImportFrom) and node.module and node.module.startswith("trimaran.runtime"):
            names = [a.name for a in node.names]
            if node.module not in ALLOWED_MODULES:
                found.append(f"{where}:{node.lineno} imports {node.module}")
            private = [n for n in names if n.startswith("_") or n == "LocalRuntime"
                       or (node.module == "trimaran.runtime" and n not in _PACKAGE_NAMES)]
            if private:
                found.append(f"{where}:{node.lineno} imports {', '.join(private)} from {node.module}")
        elif isinstance(node, ast.Import):
            found += [f"{where}:{node.lineno} imports {a.name}" for a in node.names
                      if a.name.startswith("trimaran.runtime") and a.name not in ALLOWED_MODULES]
        elif isinstance(node, ast.Attribute) and _runtime_holder(node.value):
            calls += 1
            if node.attr not in INTERFACE:
                found.append(f"{where}:{node.lineno} uses runtime.{node.attr}, which NodeAPI does not offer")
        elif isinstance(node, ast.BinOp) and isinstance(node.op, ast.Div) and isinstance(node.right, ast.Constant) \
                and node.right.value in HOME_DIRS and not isinstance(node.left, ast.BinOp):
            # A home's own directory (``home / "pods"``); ``home / "pipelines" / "runs"`` is not the runtime's.
            found.append(f"{where}:{node.lineno} builds a path into {node.right.value!r}")
    return found, calls


# What the control plane may take from the runtime package itself: the interface and pure helpers.
_PACKAGE_NAMES = {"NodeAPI", "PodNotFound", "PodProcessStatus", "ContainerStatus", "ConfigError", "Node", "Resources",
                  "pod_requests", "container_requests", "is_gpu_resource", "GPU_RESOURCE", "MIG_RESOURCE_PREFIX",
                  "ServiceAccountAccess", "podexec", "expand", "expand_command", "resolve_env", "Lookup"}


def test_the_control_plane_reaches_the_node_only_through_its_interface() -> None:
    found, calls = [], 0
    for path in _control_plane_modules():
        reached, made = _reaches(path.read_text(), str(path.relative_to(ROOT)))
        found += reached
        calls += made
    assert not found, "\n".join(found)
    assert calls >= 20  # the scan saw the controllers' and the API's calls on the node


def test_the_scan_sees_a_reach_past_the_interface() -> None:
    source = ("from trimaran.runtime.shim import read_json\n"
              "from trimaran.runtime import LocalRuntime, NodeAPI\n"
              "from trimaran.runtime.network._proxy import sctp_sockets\n"
              "def hosts(runtime: NodeAPI, uid: str):\n"
              "    runtime.update_service_hosts(uid, {})\n"
              "    return runtime.home / 'pods' / uid / 'runs'\n")
    reached, uses = _reaches(source, "probe.py")
    assert sorted(r.split(" ", 1)[1] for r in reached) == [
        "builds a path into 'pods'", "imports LocalRuntime from trimaran.runtime",
        "imports trimaran.runtime.network._proxy", "imports trimaran.runtime.shim",
        "uses runtime.home, which NodeAPI does not offer"]
    assert uses == 2


@pytest.mark.parametrize("name", sorted(INTERFACE))
def test_the_local_runtime_implements_every_method_of_the_interface(name: str) -> None:
    wanted = inspect.signature(getattr(NodeAPI, name))
    got = inspect.signature(getattr(LocalRuntime, name))
    assert list(got.parameters) == list(wanted.parameters), name
    assert [p.kind for p in got.parameters.values()] == [p.kind for p in wanted.parameters.values()], name
    assert [p.default for p in got.parameters.values()] == [p.default for p in wanted.parameters.values()], name


# -- the tree's layers ----------------------------------------------------------------------------

# What each package may import of the others (docs/architecture.md, "The tree"). The bottom is
# ``api``; ``tuning`` and ``pipelines`` are pure (no store, no processes); ``serving`` runs in pods,
# so it reaches no store, node or controller; only the server wires controllers; the clients sit on
# top. Top-level helper modules (``trimaran._aio``, ``trimaran.jsonbody``, ...) are everyone's.
MAY_IMPORT = {
    "api": {"tuning", "pipelines", "serving"},  # validation asks the pure parts (see API_REACHES)
    "store": {"api"},
    "runtime": {"api", "store"},
    "tuning": {"api"},
    "pipelines": {"api"},
    "serving": {"api"},
    "controllers": {"api", "store", "runtime", "tuning", "pipelines", "serving"},
    "server": {"api", "store", "runtime", "tuning", "pipelines", "serving", "controllers"},
    "cli": {"api", "tuning", "serving", "server"},  # it starts the control plane and `trimaran serve`
    "sdk": {"api", "tuning", "cli"},
}
# The modules of upper packages that a kind's validation may ask: an algorithm's or early stopper's
# name, a pipeline's IR, schedule and roots, a storage URI's scheme, a runtime's name, a graph's
# JSON path. Each imports nothing from the store, the node or the controllers.
API_REACHES = {
    "trimaran.tuning", "trimaran.tuning.early_stopping", "trimaran.tuning.errors",
    "trimaran.pipelines", "trimaran.pipelines.ir", "trimaran.pipelines.schedule", "trimaran.pipelines.roots",
    "trimaran.serving.storage", "trimaran.serving.runtimes", "trimaran.serving.graph.gjson",
}


def _trimaran_imports(path: Path) -> list[tuple[int, str]]:
    """Every ``trimaran.*`` module a file imports, at its top or inside a function."""
    found = []
    for node in ast.walk(ast.parse(path.read_text(), str(path))):
        if isinstance(node, ast.ImportFrom) and node.level == 0 and node.module:
            modules = [node.module]
            if node.module == "trimaran":
                modules = [f"trimaran.{a.name}" for a in node.names]
        elif isinstance(node, ast.Import):
            modules = [a.name for a in node.names]
        else:
            continue
        found += [(node.lineno, m) for m in modules if m.startswith("trimaran.")]
    return found


def _upward(path: Path, root: Path = ROOT) -> list[str]:
    package = path.relative_to(root).parts[0]
    wrong = []
    for line, module in _trimaran_imports(path):
        other = module.split(".")[1]
        if other == package or other not in MAY_IMPORT:
            continue  # its own package, or a top-level helper module
        if other not in MAY_IMPORT[package]:
            wrong.append(f"{path.relative_to(root)}:{line} ({package}) imports {module}")
        elif package == "api" and module not in API_REACHES:
            wrong.append(f"{path.relative_to(root)}:{line} (api) imports {module}, not a pure part")
    return wrong


def test_lower_layers_never_import_upper_ones() -> None:
    files = [p for p in sorted(ROOT.rglob("*.py")) if len(p.relative_to(ROOT).parts) > 1]
    assert {p.relative_to(ROOT).parts[0] for p in files} == set(MAY_IMPORT)  # every package has its rule
    wrong = [line for path in files for line in _upward(path)]
    assert wrong == [], "\n".join(wrong)


def test_the_pure_parts_the_api_asks_import_nothing_of_the_state() -> None:
    for module in sorted(API_REACHES):
        relative = Path(*module.split(".")[1:])
        path = ROOT / relative / "__init__.py" if (ROOT / relative).is_dir() else ROOT / relative.with_suffix(".py")
        state = [m for _, m in _trimaran_imports(path) if m.split(".")[1] in {"store", "runtime", "controllers",
                                                                            "server", "cli", "sdk"}]
        assert state == [], f"{module} imports {state}"


def test_the_layer_scan_sees_an_upward_import(tmp_path: Path) -> None:
    api = tmp_path / "trimaran" / "api"
    api.mkdir(parents=True)
    (api / "x.py").write_text("import trimaran.serving.server\n\n"
                              "def f():\n    from trimaran.server.daemon import home_dir\n")
    assert _upward(api / "x.py", tmp_path / "trimaran") == [
        "api/x.py:1 (api) imports trimaran.serving.server, not a pure part",
        "api/x.py:4 (api) imports trimaran.server.daemon"]
