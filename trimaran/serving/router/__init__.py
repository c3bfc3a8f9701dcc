"""The InferenceService router (ingress, activator, queue-proxy in one process); see `_router`.

Run as ``python -m trimaran.serving.router --routes ROUTES.json``; the serving controller runs it as
a pod and writes the routes file.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from trimaran.serving.router._router import Router

__all__ = ["Router"]


def __getattr__(name: str) -> Any:
    # `Router` on first use: the Ingress controller imports `_http` only, without gRPC and the graph.
    if name == "Router":
        from trimaran.serving.router._router import Router

        return Router
    raise AttributeError(f"module {__name__!r} has no attribute {name!r}")
