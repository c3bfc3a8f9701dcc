"""The graph executor (Seldon's service orchestrator) run in-process: a hop between units is a
function call, not a request.

For each unit, as Seldon's engine does: a TRANSFORMER's ``transform_input`` or a MODEL's
``predict`` first; then its children: a ROUTER's ``route`` picks one (its index recorded in
``meta.routing``), a COMBINER ``aggregate``s all of theirs, any other unit passes its output to its
only child; an OUTPUT_TRANSFORMER's ``transform_output`` last. ``meta.requestPath`` names every
unit the request went through, ``meta.tags`` and ``meta.metrics`` gather theirs. A unit with a ``logger``
has the message it receives and the one it answers sent to its sink (`trimaran.serving.logger`), with the
request's ``puid`` as the event id.
"""

from __future__ import annotations

from typing import Any

import orjson

from trimaran.serving.logger import PayloadLogger
from trimaran.serving.seldon.protocol import Message, SeldonError, decode, encode, new_meta
from trimaran.serving.seldon.units import Unit

__all__ = ["Graph", "walk_config"]


class Graph:
    """One predictor's graph, rooted at ``root``."""

    def __init__(self, name: str, root: Unit, loggers: dict[str, PayloadLogger] | None = None) -> None:
        self.name = name
        self.root = root
        self.loggers = loggers or {}

    def predict(self, body: Any) -> dict[str, Any]:
        """A predictions request body → the response body; raises SeldonError."""
        request = decode(body)
        meta = new_meta(request.meta)
        request.meta = meta
        out = self._run(self.root, request, meta)
        out.meta = meta
        return encode(out)

    def _run(self, unit: Unit, msg: Message, meta: dict[str, Any]) -> Message:
        logger = self.loggers.get(unit.name)
        if logger is None:
            return self._run_unit(unit, msg, meta)
        puid = meta["puid"]
        extensions = ((b"ce-requestid", puid.encode()),)
        logger.request(puid, _message_bytes(msg, meta), extensions=extensions)
        out = self._run_unit(unit, msg, meta)
        logger.response(puid, _message_bytes(out, meta), extensions=extensions)
        return out

    def _run_unit(self, unit: Unit, msg: Message, meta: dict[str, Any]) -> Message:
        meta["requestPath"][unit.name] = unit.implementation or "python"
        if unit.type == "MODEL":
            msg = unit.predict(msg)
        elif unit.type == "TRANSFORMER":
            msg = unit.transform_input(msg)
        if unit.children:
            if unit.type == "ROUTER":
                index = unit.route(msg)
                if not 0 <= index < len(unit.children):
                    raise unit.error(f"route chose child {index}, but the unit has {len(unit.children)} "
                                     f"(0..{len(unit.children) - 1})")
                meta["routing"][unit.name] = index
                msg = self._run(unit.children[index], msg, meta)
            elif unit.type == "COMBINER":
                msg = unit.aggregate([self._run(child, msg, meta) for child in unit.children])
            else:
                msg = self._run(unit.children[0], msg, meta)
        if unit.type == "OUTPUT_TRANSFORMER":
            msg = unit.transform_output(msg)
        tags = unit.tags()
        if tags:
            meta["tags"].update(tags)
        metrics = unit.metrics()
        if metrics:
            meta["metrics"].extend(metrics)
        return msg

    def feedback(self, body: Any) -> dict[str, Any]:
        """``{request, response, reward, truth}``: every unit on the response's route gets ``send_feedback``
        (a router with the child it chose, from ``response.meta.routing``; a combiner's children all)."""
        if not isinstance(body, dict) or "request" not in body:
            raise SeldonError("feedback needs request (the SeldonMessage predicted on), response, reward and truth")
        request = decode(body["request"])
        response = decode(body["response"]) if isinstance(body.get("response"), dict) else Message("jsonData", None)
        routing = (response.meta or {}).get("routing") or {}
        reward = body.get("reward")
        if reward is not None and not isinstance(reward, (int, float)):
            raise SeldonError("reward must be a number")
        truth = decode(body["truth"]).payload if isinstance(body.get("truth"), dict) else None
        meta = new_meta(request.meta)
        self._feedback(self.root, request, response, float(reward or 0.0), truth, routing, meta)
        return {"meta": meta}

    def _feedback(self, unit: Unit, request: Message, response: Message, reward: float, truth: Any,
                  routing: dict[str, Any], meta: dict[str, Any]) -> None:
        """As Seldon's engine: a router passes feedback to the child it chose, a combiner to all of them."""
        chosen = routing.get(unit.name)
        meta["requestPath"][unit.name] = unit.implementation or "python"
        unit.send_feedback(request, response, reward, truth, chosen)
        if unit.type == "ROUTER":
            children = [unit.children[int(chosen)]] if isinstance(chosen, int) and 0 <= chosen < len(unit.children) \
                else []
        else:
            children = unit.children
        for child in children:
            self._feedback(child, request, response, reward, truth, routing, meta)

    def metadata(self, unit_name: str | None = None) -> dict[str, Any]:
        """The graph's metadata (every unit's), or one unit's."""
        units = {u.name: u for u in _walk(self.root)}
        if unit_name is not None:
            if unit_name not in units:
                raise SeldonError(f"no unit {unit_name!r} in the graph ({', '.join(units)})", 404)
            return units[unit_name].metadata()
        models = {name: u.metadata() for name, u in units.items()}
        return {"name": self.name, "models": models,
                "graphinputs": models[self.root.name].get("inputs", []),
                "graphoutputs": models[_last(self.root).name].get("outputs", [])}


def _message_bytes(msg: Message, meta: dict[str, Any]) -> bytes:
    return orjson.dumps(encode(Message(msg.form, msg.payload, msg.names, {"puid": meta["puid"]})),
                        option=orjson.OPT_SERIALIZE_NUMPY)


def walk_config(unit: dict[str, Any]) -> list[dict[str, Any]]:
    """Every unit of a graph as the configuration spells it, depth first."""
    units = [unit]
    for child in unit.get("children") or []:
        units += walk_config(child)
    return units


def _walk(unit: Unit) -> list[Unit]:
    units = [unit]
    for child in unit.children:
        units += _walk(child)
    return units


def _last(unit: Unit) -> Unit:
    """The unit whose output is the graph's (when the path does not depend on routing)."""
    while len(unit.children) == 1 and unit.type not in ("OUTPUT_TRANSFORMER", "COMBINER"):
        unit = unit.children[0]
    return unit
