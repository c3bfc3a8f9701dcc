"""Plain Kubernetes workloads: apps/v1 Deployments and v1 Services."""

from trimaran.controllers.workloads.deployment import DeploymentReconciler
from trimaran.controllers.workloads.service import ServiceReconciler

__all__ = ["DeploymentReconciler", "ServiceReconciler"]
