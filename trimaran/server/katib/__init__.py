"""Katib's own services that its SDK reaches off the Kubernetes API: the DBManager (push metrics)."""

from trimaran.server.katib.dbmanager import DBManager, start_dbmanager, start_dbmanager_for_home

__all__ = ["DBManager", "start_dbmanager", "start_dbmanager_for_home"]
