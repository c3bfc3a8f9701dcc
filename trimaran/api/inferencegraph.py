"""KServe ``serving.kserve.io/v1alpha1`` InferenceGraph, checked at apply as KServe's webhook would refuse it,
and more: a graph here must be runnable, so cycles and dangling ``nodeName``s are refused too.

A graph is a map of named nodes (the entry is ``root``); each node is a router (``Sequence``, ``Switch``,
``Ensemble``, ``Splitter``) over steps, and each step calls an InferenceService (``serviceName``), a URL
(``serviceUrl``) or another node (``nodeName``).
"""

# Annotations are evaluated eagerly, as in the other API modules (pydantic compiles them at build).

from typing import Any

from pydantic import Field

from trimaran.api.errors import FieldError, join_path
from trimaran.api.meta import ApiModel, NonNegInt32, Resource

__all__ = ["API_VERSION", "ROUTER_TYPES", "InferenceGraph", "InferenceRouter", "InferenceStep"]

API_VERSION = "serving.kserve.io/v1alpha1"
ROUTER_TYPES = ("Sequence", "Switch", "Ensemble", "Splitter")
DATA_SOURCES = ("$request", "$response")
DEPENDENCIES = ("Soft", "Hard")
ROOT = "root"


class InferenceStep(ApiModel):
    """One step of a node: what it calls, with what data, under which condition and how its failure counts."""

    name: str | None = None
    node_name: str | None = None
    service_name: str | None = None
    service_url: str | None = None
    data: str | None = None
    map_predictions_to_instances: bool | None = None
    weight: NonNegInt32 | None = None
    condition: str | None = None
    dependency: str | None = None


class InferenceRouter(ApiModel):
    """A node: its router type and its steps."""

    router_type: str
    steps: list[InferenceStep] | None = None


class InferenceGraphSpec(ApiModel):
    """``spec``: the nodes, and fields about the router's pod (kept; the graph runs in one process here)."""

    nodes: dict[str, InferenceRouter]
    timeout: NonNegInt32 | None = None
    router_timeouts: dict[str, Any] | None = None
    min_replicas: NonNegInt32 | None = None
    max_replicas: NonNegInt32 | None = None
    scale_target: NonNegInt32 | None = None
    scale_metric: str | None = None
    resources: dict[str, Any] | None = None
    affinity: dict[str, Any] | None = None
    tolerations: list[dict[str, Any]] | None = None
    node_selector: dict[str, str] | None = None
    node_name: str | None = None
    service_account_name: str | None = None


class InferenceGraph(Resource):
    """serving.kserve.io InferenceGraph: models composed behind one URL (``status.url``).

    ``status`` is the controller's (``url``, ``conditions`` with Ready, ``deploymentMode``).
    """

    spec: InferenceGraphSpec
    status: dict[str, Any] | None = Field(default=None)

    def check(self) -> list[FieldError]:
        errs = super().check()
        nodes = self.spec.nodes
        if ROOT not in nodes:
            errs.append(FieldError.required("spec.nodes.root", "the graph's entry node must be named root"))
        for name, node in nodes.items():
            errs.extend(_check_node(join_path("spec.nodes", name), node, nodes))
        if not errs:
            errs.extend(_cycles(nodes))
        return errs


def _check_node(path: str, node: InferenceRouter, nodes: dict[str, InferenceRouter]) -> list[FieldError]:
    errs: list[FieldError] = []
    if node.router_type not in ROUTER_TYPES:
        errs.append(FieldError.not_supported(join_path(path, "routerType"), node.router_type, ROUTER_TYPES))
    steps = node.steps or []
    if not steps:
        errs.append(FieldError.required(join_path(path, "steps"), "a node needs at least one step"))
    names: set[str] = set()
    for i, step in enumerate(steps):
        where = join_path(path, "steps", i)
        targets = [t for t in (step.node_name, step.service_name, step.service_url) if t]
        if not targets:
            errs.append(FieldError.required(where, "a step calls one of nodeName, serviceName or serviceUrl"))
        elif len(targets) > 1:
            errs.append(FieldError.invalid(where, ", ".join(targets),
                                           "a step calls exactly one of nodeName, serviceName or serviceUrl"))
        if step.node_name and step.node_name not in nodes:
            errs.append(FieldError.invalid(join_path(where, "nodeName"), step.node_name,
                                           f"no such node; nodes: {', '.join(sorted(nodes))}"))
        if step.service_url and not step.service_url.startswith(("http://", "https://")):
            errs.append(FieldError.invalid(join_path(where, "serviceUrl"), step.service_url, "must be an http(s) URL"))
        if step.data is not None and step.data not in DATA_SOURCES:
            errs.append(FieldError.not_supported(join_path(where, "data"), step.data, DATA_SOURCES))
        if step.dependency is not None and step.dependency not in DEPENDENCIES:
            errs.append(FieldError.not_supported(join_path(where, "dependency"), step.dependency, DEPENDENCIES))
        if step.name:
            if step.name in names:
                errs.append(FieldError.duplicate(join_path(where, "name"), step.name))
            names.add(step.name)
        if step.condition is not None:
            from trimaran.serving.graph.gjson import PathError, parse

            try:
                parse(step.condition)
            except PathError as exc:
                errs.append(FieldError.invalid(join_path(where, "condition"), step.condition, str(exc)))
        if node.router_type == "Splitter" and step.weight is None:
            errs.append(FieldError.required(join_path(where, "weight"), "a Splitter's steps each carry a weight"))
    if node.router_type == "Splitter" and steps and all(s.weight is not None for s in steps):
        total = sum(s.weight or 0 for s in steps)
        if total != 100:
            errs.append(FieldError.invalid(join_path(path, "steps"), total, "a Splitter's weights must sum to 100"))
    if node.router_type == "Switch":
        for i, step in enumerate(steps[:-1]):
            if not step.condition:
                errs.append(FieldError.required(join_path(path, "steps", i, "condition"),
                                                "a Switch step before the last needs a condition"))
    return errs


def _cycles(nodes: dict[str, InferenceRouter]) -> list[FieldError]:
    """A node reached again while it is still being entered: the graph would call itself forever."""
    state: dict[str, str] = {}

    def visit(name: str, trail: list[str]) -> FieldError | None:
        state[name] = "entering"
        for i, step in enumerate(nodes[name].steps or []):
            target = step.node_name
            if not target:
                continue
            if state.get(target) == "entering":
                loop = " -> ".join([*trail[trail.index(target):], target])
                return FieldError.invalid(join_path("spec.nodes", name, "steps", i, "nodeName"), target,
                                          f"makes a cycle: {loop}")
            if target not in state:
                found = visit(target, [*trail, target])
                if found:
                    return found
        state[name] = "done"
        return None

    for name in nodes:
        if name not in state:
            found = visit(name, [name])
            if found:
                return [found]
    return []
