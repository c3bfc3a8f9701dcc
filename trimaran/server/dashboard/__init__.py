"""A read-only web dashboard over the control plane's store: every kind's objects and status, an
Experiment's trials and curves, jobs, InferenceServices and pods with their logs.

Pages are HTML rendered on the server with inline SVG charts: no script, no stylesheet or font
from elsewhere, so it works on a machine without internet access.
"""

from trimaran.server.dashboard.routes import dashboard_router

__all__ = ["dashboard_router"]
