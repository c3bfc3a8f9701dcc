"""Kubeflow Pipelines v2, pure: the IR read and checked, placeholders, conditions, caching keys,
schedules and the DAG's next steps. No store and no processes here: ``controllers/pipelines/``
turns those steps into pods and status."""
