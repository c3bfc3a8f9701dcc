"""The init container that downloads a pod's storage inside the pod: KServe's ``storage-initializer``.

The InferenceService controller gives each model replica one (the model lands in the emptyDir
``kserve-provision-location`` at ``/mnt/models``, as KServe lays it out), and the kubelet gives one
to a pod with object-storage CSI volumes. It runs :mod:`trimaran.serving.storage.initializer` in
the pod's sandbox as the pod's user, so the control plane never downloads or unpacks user data.
"""

from __future__ import annotations

import os
import sys
from collections.abc import Sequence
from pathlib import Path
from typing import Any

from trimaran.serving.storage._archive import MAX_BYTES_VARIABLE, MAX_MEMBERS_VARIABLE, MAX_RATIO_VARIABLE

__all__ = ["INITIALIZER_NAME", "ORIGIN_VARIABLE", "initializer_container"]

#: The init container's name, as KServe's webhook names it.
INITIALIZER_NAME = "storage-initializer"
#: Where the initializer's credentials came from, said in its messages ("Secret ns/name", ...).
ORIGIN_VARIABLE = "TRIMARAN_CREDENTIALS_ORIGIN"
# The control plane's caps travel to every initializer: they are the node's, not the user's.
_NODE_VARIABLES = (MAX_BYTES_VARIABLE, MAX_MEMBERS_VARIABLE, MAX_RATIO_VARIABLE, "TRIMARAN_STORAGE_MAX_BYTES")


def initializer_container(sources: Sequence[tuple[str, str, str]], env: Sequence[dict[str, Any]],
                          origin: str) -> dict[str, Any]:
    """The init container downloading each ``(uri, volume, mount path)`` of ``sources`` into its
    volume, mounted writable at that path (the pod's other containers mount it read-only), with
    ``env`` (credentials, see `credential_env`) and ``origin`` (where they came from).

    As KServe's: its arguments are ``SRC DEST`` pairs and its termination message policy is
    ``FallbackToLogsOnError`` (the initializer also writes its one-line failure to the termination
    log), so its status on the pod says why it failed."""
    node_env = [{"name": name, "value": os.environ[name]} for name in _NODE_VARIABLES if os.environ.get(name)]
    # The initializer is this control plane's code, from the checkout the sandbox shows every pod
    # (the interpreter's own editable install may name another one, which pods do not see).
    node_env.append({"name": "PYTHONPATH", "value": str(Path(__file__).resolve().parents[3])})
    return {
        "name": INITIALIZER_NAME, "image": "trimaran/storage-initializer",
        "command": [sys.executable, "-m", "trimaran.serving.storage.initializer"],
        "args": [word for uri, _, path in sources for word in (uri, path)],
        "env": [*env, {"name": ORIGIN_VARIABLE, "value": origin}, *node_env],
        "volumeMounts": [{"name": volume, "mountPath": path} for _, volume, path in sources],
        "terminationMessagePolicy": "FallbackToLogsOnError",
        "securityContext": {"allowPrivilegeEscalation": False, "capabilities": {"drop": ["ALL"]}},
    }
