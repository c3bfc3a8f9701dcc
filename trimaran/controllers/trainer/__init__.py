"""Kubeflow Trainer v2: TrainJobs run as JobSets (`trainjob`), the built-in runtimes (`runtimes`),
the MPI plugin (`mpi`) and the initializers' program (`initializer`)."""

from trimaran.controllers.trainer.runtimes import install_builtin_runtimes
from trimaran.controllers.trainer.trainjob import TrainJobReconciler

__all__ = ["TrainJobReconciler", "install_builtin_runtimes"]
