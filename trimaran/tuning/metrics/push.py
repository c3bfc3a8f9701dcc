"""Report metrics from inside a trial to the control plane (Katib's Push collector,
``kubeflow.katib.report_metrics``; katib.md §1.4).

Standard library only: training scripts import this, and it must not slow their start or need
the control plane's dependencies.

The trial controller puts into the primary container's environment:

* ``TRIMARAN_TRIAL`` = ``<namespace>/<trial name>`` (Katib's ``KATIB_TRIAL_NAME`` is accepted
  instead, with the namespace from ``TRIMARAN_NAMESPACE`` or ``default``);
* ``TRIMARAN_API`` = the control plane's base URL; ``TRIMARAN_TOKEN``, when set, is sent as a
  bearer token.
"""

from __future__ import annotations

import json
import math
import os
import ssl
import time
import urllib.error
import urllib.parse
import urllib.request
from collections.abc import Mapping
from pathlib import Path

TIMEOUT_SECONDS = 10.0
# Where the kubelet mounts a pod's service-account token (trimaran.runtime.serviceaccount).
SERVICE_ACCOUNT_TOKEN = "/var/run/secrets/kubernetes.io/serviceaccount/token"


class NotInTrialError(RuntimeError):
    """report_metrics was called outside a trial (its environment variables are missing)."""


class ReportError(RuntimeError):
    """The control plane did not accept the observations."""


def _opener(base: str) -> urllib.request.OpenerDirector:
    """urllib's opener, without proxies for a control plane on this machine: a training
    environment's HTTP(S)_PROXY (set for downloading data sets) would otherwise route
    127.0.0.1 through the proxy, which cannot reach it."""
    host = (urllib.parse.urlsplit(base).hostname or "").lower()
    handlers: list[urllib.request.BaseHandler] = []
    if host == "localhost" or host == "::1" or host.startswith("127."):
        handlers.append(urllib.request.ProxyHandler({}))
    # The API's certificate is signed by the control plane's own CA, which every pod is given.
    ca = Path(SERVICE_ACCOUNT_TOKEN).with_name("ca.crt")
    if ca.exists():
        handlers.append(urllib.request.HTTPSHandler(context=ssl.create_default_context(cafile=str(ca))))
    return urllib.request.build_opener(*handlers)


def trial_identity(environ: Mapping[str, str] | None = None) -> tuple[str, str]:
    """(namespace, trial name) of the trial this process runs in; NotInTrialError outside one."""
    env = os.environ if environ is None else environ
    full = env.get("TRIMARAN_TRIAL", "").strip()
    if full:
        namespace, sep, name = full.partition("/")
        if not sep or not namespace or not name:
            raise NotInTrialError(f"TRIMARAN_TRIAL must be <namespace>/<trial name>, not {full!r}")
        return namespace, name
    name = env.get("KATIB_TRIAL_NAME", "").strip()
    if name:
        return env.get("TRIMARAN_NAMESPACE", "").strip() or "default", name
    raise NotInTrialError("report_metrics works only inside a trial: neither TRIMARAN_TRIAL nor "
                          "KATIB_TRIAL_NAME is set (the trial controller sets them in the primary container)")


def _service_account_token() -> str:
    """The pod's own token, which every pod of the trial's namespace is given (in-cluster config)."""
    try:
        return Path(SERVICE_ACCOUNT_TOKEN).read_text().strip()
    except OSError:
        return ""


def report_metrics(metrics: Mapping[str, float], step: int | None = None, *,
                   environ: Mapping[str, str] | None = None, timeout: float = TIMEOUT_SECONDS) -> None:
    """Send one observation per metric, all at ``step`` and the current time.

    With ``step=None`` the step is left to the control plane, which numbers each metric's
    observations 0, 1, 2, ... as the TEXT collector does. Values must be numbers (numeric
    strings, which Katib's SDK accepts, are converted). Raises NotInTrialError outside a trial,
    ValueError for a value that is not a number, ReportError when the control plane refuses.
    """
    env = os.environ if environ is None else environ
    namespace, name = trial_identity(env)
    base = env.get("TRIMARAN_API", "").strip().rstrip("/")
    if not base:
        raise NotInTrialError("TRIMARAN_API is not set: the trial does not know where the control plane is")
    if step is not None and (isinstance(step, bool) or not isinstance(step, int) or step < 0):
        raise ValueError(f"step must be a non-negative integer, not {step!r}")
    now = time.time()
    observations = []
    for metric, raw in metrics.items():
        if isinstance(raw, bool):
            raise ValueError(f"metric {metric!r}: {raw!r} is not a number")
        try:
            value = float(raw)
        except (TypeError, ValueError):
            raise ValueError(f"metric {metric!r}: {raw!r} is not a number") from None
        # JSON has no NaN/Infinity; a diverged loss is reported as a string the server can read.
        observations.append({"metric": str(metric), "value": value if math.isfinite(value) else repr(value),
                             "step": step, "timestamp": now})
    if not observations:
        return
    url = (f"{base}/trimaran/v1/namespaces/{urllib.parse.quote(namespace, safe='')}"
           f"/trials/{urllib.parse.quote(name, safe='')}/observations")
    headers = {"Content-Type": "application/json"}
    token = env.get("TRIMARAN_TOKEN", "").strip() or _service_account_token()
    if token:
        headers["Authorization"] = f"Bearer {token}"
    body = json.dumps({"observations": observations}).encode()
    request = urllib.request.Request(url, data=body, headers=headers, method="POST")
    try:
        with _opener(base).open(request, timeout=timeout) as response:
            response.read()
    except urllib.error.HTTPError as exc:
        detail = exc.read().decode("utf-8", errors="replace")[:500]
        raise ReportError(f"{url} answered {exc.code}: {detail or exc.reason}") from None
    except urllib.error.URLError as exc:
        raise ReportError(f"cannot reach the control plane at {base}: {exc.reason}") from None
