"""KServe InferenceServices on this machine: revisions, replicas, traffic, autoscaling, the router; and
Seldon's SeldonDeployments, each predictor an InferenceService running its graph; KServe's
InferenceGraphs, each an InferenceService running the graph's router."""

from trimaran.controllers.serving.inferencegraph import InferenceGraphReconciler
from trimaran.controllers.serving.reconciler import InferenceServiceReconciler
from trimaran.controllers.serving.seldon import SeldonDeploymentReconciler

__all__ = ["InferenceGraphReconciler", "InferenceServiceReconciler", "SeldonDeploymentReconciler"]
