"""A pipeline run's graph as inline SVG: steps as boxes coloured by state, loops, iterations,
conditions and exit handlers as boxes around their steps, and edges from each task's dependencies
and the outputs it reads.

The run's tasks (``status.tasks``, each with its enclosing task as ``parent``) give the nesting and
the states; the compiled IR gives the edges (a DAG's ``dependentTasks`` and the ``producerTask`` of
its inputs) and the tasks the controller has not reached yet. Each DAG is laid out in layers, a
task one layer below the lowest task it needs, as a Sugiyama-style layout does, with each layer
ordered by where its predecessors sit (the barycentre rule) so that fewer edges cross.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

from trimaran.server.dashboard.html import esc

GROUP_TYPES = ("dag", "loop", "iteration", "condition", "exit-handler")
FILL = {"SUCCEEDED": "#bbf7d0", "CACHED": "#a5f3fc", "RUNNING": "#bfdbfe", "FAILED": "#fecaca",
        "SKIPPED": "#e5e7eb", "CANCELED": "#fed7aa", "CANCELING": "#fed7aa", "PENDING": "#f9fafb"}
STROKE = {"SUCCEEDED": "#047857", "CACHED": "#0e7490", "RUNNING": "#1d4ed8", "FAILED": "#b91c1c",
          "SKIPPED": "#9ca3af", "CANCELED": "#c2410c", "CANCELING": "#c2410c", "PENDING": "#9ca3af"}
_BOX_W, _BOX_H = 168, 34
_PAD, _HEADER, _ROW_GAP, _COL_GAP = 10, 20, 30, 14
_NAME_CHARS = 22
_LOOP_ROW = 4  # iterations side by side in a loop's box


@dataclass
class Node:
    id: str
    name: str
    type: str
    state: str
    label: str = ""
    children: list[Node] = field(default_factory=list)
    needs: list[str] = field(default_factory=list)  # ids of the siblings it waits for
    x: float = 0.0
    y: float = 0.0
    w: float = _BOX_W
    h: float = _BOX_H


def _dag_tasks(spec: dict, component: str | None) -> dict[str, Any]:
    holder = spec.get("root") if component is None else (spec.get("components") or {}).get(component)
    return ((holder or {}).get("dag") or {}).get("tasks") or {}


def _needs(task_spec: dict) -> set[str]:
    """The sibling tasks a task of a DAG waits for: those it names and those whose outputs it reads."""
    found = set(task_spec.get("dependentTasks") or [])
    inputs = task_spec.get("inputs") or {}
    for source in (inputs.get("parameters") or {}).values():
        producer = (source.get("taskOutputParameter") or {}).get("producerTask")
        if producer:
            found.add(producer)
    for source in (inputs.get("artifacts") or {}).values():
        producer = (source.get("taskOutputArtifact") or {}).get("producerTask")
        if producer:
            found.add(producer)
    return found


def _component_type(spec: dict, task_key: str, task_spec: dict) -> str:
    component = (spec.get("components") or {}).get((task_spec.get("componentRef") or {}).get("name"), {})
    if "dag" not in component:
        return "importer" if task_spec.get("importer") else "container"
    if task_spec.get("parameterIterator") or task_spec.get("artifactIterator"):
        return "loop"
    if task_key.startswith("condition-"):
        return "condition"
    if task_key.startswith("exit-handler-"):
        return "exit-handler"
    return "dag"


def build(spec: dict, tasks: list[dict]) -> Node:
    """The run's tree of tasks: ``tasks`` as the controller reports them, completed from the IR."""
    by_parent: dict[str | None, list[dict]] = {}
    by_id = {t["id"]: t for t in tasks}
    for t in tasks:
        parent = t.get("parent") if t.get("parent") in by_id else None
        by_parent.setdefault(parent, []).append(t)
    root = Node("", "", "dag", "", label="")
    _fill(root, spec, None, by_parent, None)
    return root


def _fill(group: Node, spec: dict, component: str | None, by_parent: dict[str | None, list[dict]],
          group_id: str | None) -> None:
    dag = _dag_tasks(spec, component)
    key_of_name = {(s.get("taskInfo") or {}).get("name", k): k for k, s in dag.items()}
    placed: dict[str, Node] = {}  # IR task key → node
    for t in by_parent.get(group_id, []):
        node = Node(t["id"], t.get("name") or t["id"], t.get("type") or "container", t.get("state") or "PENDING")
        group.children.append(node)
        key = t.get("name") if t.get("name") in dag else key_of_name.get(t.get("name") or "")
        if key and node.type != "iteration":
            placed[key] = node
        if node.type in GROUP_TYPES:
            # An iteration runs its loop's DAG; other groups run their own component's.
            inner = t.get("component") or (component if node.type == "iteration" else None)
            node.label = _label(node, t, dag.get(key or "") or {}, len(by_parent.get(t["id"], [])))
            _fill(node, spec, inner, by_parent, t["id"])
    if group.type != "loop":
        # Tasks the controller has not reached: shown waiting, or as their group ended.
        inherited = group.state if group.state in ("SKIPPED", "CANCELED", "FAILED") else "PENDING"
        inherited = "SKIPPED" if inherited == "FAILED" else inherited
        for key, task_spec in dag.items():
            if key in placed:
                continue
            node_id = f"{group_id}.{key}" if group_id else key
            node = Node(node_id, (task_spec.get("taskInfo") or {}).get("name") or key,
                        _component_type(spec, key, task_spec), inherited)
            if node.type in GROUP_TYPES:
                node.label = _label(node, {}, task_spec, 0)
                _fill(node, spec, (task_spec.get("componentRef") or {}).get("name"), by_parent, node_id)
            group.children.append(node)
            placed[key] = node
    id_of = {key: node.id for key, node in placed.items()}
    for key, node in placed.items():
        node.needs = sorted(id_of[k] for k in _needs(dag.get(key) or {}) if k in id_of and k != key)


def _label(node: Node, task: dict, task_spec: dict, children: int) -> str:
    if node.type == "loop":
        return f"loop {node.name}" + (f" ({children} iterations)" if children else "")
    if node.type == "iteration":
        return f"iteration {task.get('iteration', node.id.rpartition('-')[2])}"
    if node.type == "condition":
        condition = (task_spec.get("triggerPolicy") or {}).get("condition")
        return f"if {condition}" if condition else f"condition {node.name}"
    if node.type == "exit-handler":
        return f"exit handler {node.name}"
    return node.name


def layout(node: Node) -> None:
    """Sizes and positions (relative to the enclosing group) for ``node`` and everything in it."""
    if node.type not in GROUP_TYPES and node.id:
        node.w, node.h = _BOX_W, _BOX_H
        return
    for child in node.children:
        layout(child)
    layers = _layers(node.children)
    if node.type == "loop":
        # Iterations need nothing of each other: rows of a few, not one row as wide as the fan-out.
        layers = [node.children[i:i + _LOOP_ROW] for i in range(0, len(node.children), _LOOP_ROW)]
    top = _HEADER if node.id else 0
    if not layers:
        node.w, node.h = _BOX_W, top + _BOX_H
        return
    widths = [sum(c.w for c in row) + _COL_GAP * (len(row) - 1) for row in layers]
    inner_w = max(widths)
    y = top + _PAD
    for row, width in zip(layers, widths, strict=True):
        x = _PAD + (inner_w - width) / 2
        row_h = max(c.h for c in row)
        for c in row:
            c.x, c.y = x, y
            x += c.w + _COL_GAP
        y += row_h + _ROW_GAP
    node.w, node.h = inner_w + 2 * _PAD, y - _ROW_GAP + _PAD


def _layers(nodes: list[Node]) -> list[list[Node]]:
    by_id = {n.id: n for n in nodes}
    depth: dict[str, int] = {}

    def depth_of(n: Node, seen: frozenset[str] = frozenset()) -> int:
        if n.id not in depth:
            below = [depth_of(by_id[d], seen | {n.id}) for d in n.needs if d in by_id and d not in seen]
            depth[n.id] = 1 + max(below, default=-1)
        return depth[n.id]

    layers: list[list[Node]] = []
    for n in nodes:
        d = depth_of(n)
        while len(layers) <= d:
            layers.append([])
        layers[d].append(n)
    position = {n.id: i for i, n in enumerate(layers[0])} if layers else {}
    for row in layers[1:]:
        def centre(n: Node) -> float:
            placed = [position[d] for d in n.needs if d in position]
            return sum(placed) / len(placed) if placed else float(len(position))

        row.sort(key=centre)
        position.update({n.id: i for i, n in enumerate(row)})
    return [row for row in layers if row]


def svg(root: Node, link: Any) -> str:
    """The laid-out tree as one SVG; ``link(task_id)`` is the href of a step's box."""
    layout(root)
    parts = [f'<svg class="dag" xmlns="http://www.w3.org/2000/svg" width="{root.w:.0f}" height="{root.h:.0f}" '
             f'viewBox="0 0 {root.w:.0f} {root.h:.0f}" role="img" aria-label="the run\'s tasks">'
             '<defs><marker id="arrow" viewBox="0 0 8 8" refX="8" refY="4" markerWidth="7" markerHeight="7" '
             'orient="auto"><path d="M0,0L8,4L0,8z" fill="#6b7280"/></marker></defs>']
    _draw(root, 0.0, 0.0, parts, link)
    parts.append("</svg>")
    return "".join(parts)


def _draw(node: Node, ox: float, oy: float, parts: list[str], link: Any) -> None:
    x, y = ox + node.x, oy + node.y
    state = esc(node.state)
    title = f"<title>{esc(node.id)}: {state}</title>"
    if node.type in GROUP_TYPES or not node.id:
        if node.id:
            title = f"<title>{esc(node.id)}: {esc(node.label)} ({state})</title>"  # the label whole
            parts.append(f'<g class="group {esc(node.type)} state-{state}" data-task="{esc(node.id)}">{title}'
                         f'<rect x="{x:.1f}" y="{y:.1f}" width="{node.w:.1f}" height="{node.h:.1f}" rx="6" '
                         f'fill="none" stroke="{STROKE.get(node.state, "#9ca3af")}" stroke-dasharray="5 3"/>'
                         f'<text x="{x + 8:.1f}" y="{y + 14:.1f}" font-size="11" fill="#374151">'
                         f"{esc(_short(node.label, int(node.w / 6.5)))}</text>")
        for child in node.children:
            _draw(child, x, y, parts, link)
        by_id = {c.id: c for c in node.children}
        for child in node.children:
            for need in child.needs:
                if need in by_id:
                    parts.append(_edge(by_id[need], child, x, y))
        if node.id:
            parts.append("</g>")
        return
    parts.append(f'<a href="{esc(link(node.id))}"><g class="task state-{state}" data-task="{esc(node.id)}">{title}'
                 f'<rect x="{x:.1f}" y="{y:.1f}" width="{node.w:.1f}" height="{node.h:.1f}" rx="4" '
                 f'fill="{FILL.get(node.state, "#f9fafb")}" stroke="{STROKE.get(node.state, "#9ca3af")}"/>'
                 f'<text x="{x + node.w / 2:.1f}" y="{y + node.h / 2 + 4:.1f}" font-size="12" '
                 f'text-anchor="middle">{esc(_short(node.name, _NAME_CHARS))}</text></g></a>')


def _edge(source: Node, target: Node, ox: float, oy: float) -> str:
    x1, y1 = ox + source.x + source.w / 2, oy + source.y + source.h
    x2, y2 = ox + target.x + target.w / 2, oy + target.y
    mid = (y1 + y2) / 2
    return (f'<path class="edge" data-from="{esc(source.id)}" data-to="{esc(target.id)}" '
            f'd="M{x1:.1f},{y1:.1f}C{x1:.1f},{mid:.1f} {x2:.1f},{mid:.1f} {x2:.1f},{y2:.1f}" fill="none" '
            f'stroke="#6b7280" marker-end="url(#arrow)"/>')


def _short(text: str, limit: int) -> str:
    return text if len(text) <= limit else text[: max(1, limit - 1)] + "…"
