"""KServe InferenceServices on this machine: revisions, replicas, traffic, autoscaling, the router."""

from trimaran.controllers.serving.reconciler import InferenceServiceReconciler

__all__ = ["InferenceServiceReconciler"]
