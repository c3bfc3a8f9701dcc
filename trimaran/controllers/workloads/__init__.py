"""Plain Kubernetes workloads: apps/v1 Deployments, v1 Services and autoscaling/v2 HorizontalPodAutoscalers."""

from trimaran.controllers.workloads.deployment import DeploymentReconciler
from trimaran.controllers.workloads.hpa import HorizontalPodAutoscalerReconciler
from trimaran.controllers.workloads.service import ServiceReconciler

__all__ = ["DeploymentReconciler", "HorizontalPodAutoscalerReconciler", "ServiceReconciler"]
