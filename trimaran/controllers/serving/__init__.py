"""KServe InferenceServices on this machine: revisions, replicas, traffic, autoscaling, the router; and
Seldon's SeldonDeployments, each predictor an InferenceService running its graph."""

from trimaran.controllers.serving.reconciler import InferenceServiceReconciler
from trimaran.controllers.serving.seldon import SeldonDeploymentReconciler

__all__ = ["InferenceServiceReconciler", "SeldonDeploymentReconciler"]
