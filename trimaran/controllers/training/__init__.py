"""Kubeflow training job kinds: the shared controller and one env contract per framework."""

from trimaran.controllers.training import jax, mpi, paddle, pytorch, tensorflow, xgboost  # noqa: F401  (registers)
from trimaran.controllers.training.framework import Framework, framework_for, frameworks
from trimaran.controllers.training.job import TrainingJobReconciler

__all__ = ["Framework", "TrainingJobReconciler", "framework_for", "frameworks"]
