"""Trainer's built-in ClusterTrainingRuntimes (``builtin/*.yaml``, as upstream's manifests ship
them), installed when a control plane starts on a home that has never had them.

The ConfigMap ``kubeflow-system/kubeflow-trainer-public`` (which the ``kubeflow`` SDK reads for
``kubeflow_trainer_version``) marks the installation: a later start installs nothing, so a
runtime a user edited or deleted stays as they left it.
"""

from __future__ import annotations

import logging
from importlib import resources

import yaml

from trimaran.api import validate
from trimaran.store import AlreadyExists, NotFound, Store

__all__ = ["TRAINER_VERSION", "install_builtin_runtimes"]

log = logging.getLogger(__name__)

TRAINER_VERSION = "v2.3.0"
SYSTEM_NAMESPACE = "kubeflow-system"
PUBLIC_CONFIGMAP = "kubeflow-trainer-public"


def builtin_runtimes() -> list[dict]:
    """The built-in runtimes, validated and defaulted as the API stores them."""
    folder = resources.files(__package__) / "builtin"
    return [validate(yaml.safe_load(f.read_text())).object
            for f in sorted(folder.iterdir(), key=lambda f: f.name) if f.name.endswith(".yaml")]


def install_builtin_runtimes(store: Store) -> list[str]:
    """Create the built-in runtimes on a home's first start; return the names created."""
    try:
        store.get("ConfigMap", SYSTEM_NAMESPACE, PUBLIC_CONFIGMAP)
        return []
    except NotFound:
        pass
    created = []
    for runtime in builtin_runtimes():
        try:
            store.create(runtime)
            created.append(runtime["metadata"]["name"])
        except AlreadyExists:
            pass
    store.ensure_namespace(SYSTEM_NAMESPACE)
    marker = {"apiVersion": "v1", "kind": "ConfigMap",
              "metadata": {"name": PUBLIC_CONFIGMAP, "namespace": SYSTEM_NAMESPACE},
              "data": {"kubeflow_trainer_version": TRAINER_VERSION}}
    try:
        store.create(validate(marker).object)
    except AlreadyExists:
        pass
    if created:
        log.info("installed Trainer's built-in ClusterTrainingRuntimes: %s", ", ".join(created))
    return created
