"""Plain Kubernetes workloads: apps/v1 Deployments, DaemonSets and StatefulSets, v1 ReplicationControllers and Services,
and autoscaling/v2 HorizontalPodAutoscalers."""

from trimaran.controllers.workloads.daemonset import DaemonSetReconciler
from trimaran.controllers.workloads.deployment import DeploymentReconciler
from trimaran.controllers.workloads.hpa import HorizontalPodAutoscalerReconciler
from trimaran.controllers.workloads.replicationcontroller import ReplicationControllerReconciler
from trimaran.controllers.workloads.service import ServiceReconciler
from trimaran.controllers.workloads.statefulset import StatefulSetReconciler

__all__ = ["DaemonSetReconciler", "DeploymentReconciler", "HorizontalPodAutoscalerReconciler",
           "ReplicationControllerReconciler", "ServiceReconciler", "StatefulSetReconciler"]
