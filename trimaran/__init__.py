"""Trimaran: Kubeflow training, tuning and serving manifests on one machine, and on a cluster."""

__version__ = "0.1.0"
