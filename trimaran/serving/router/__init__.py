"""The InferenceService router (ingress, activator, queue-proxy in one process); see `_router`.

Run as ``python -m trimaran.serving.router --routes ROUTES.json``; the serving controller runs it as
a pod and writes the routes file.
"""

from trimaran.serving.router._router import Router

__all__ = ["Router"]
