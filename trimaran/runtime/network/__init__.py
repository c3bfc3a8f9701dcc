"""The pod network: a network namespace and an IP per pod on the home's bridge, by CNI plugins.

:class:`PodNetwork` (``from_env``: None where pods keep the host's network) sets up and tears
down pods' networks; :class:`NetworkPlan` is the home's bridge and ranges, reserved machine-wide.
"""

from trimaran.runtime.network._cni import CniError
from trimaran.runtime.network._plan import NetworkPlan, PlanError, home_digest
from trimaran.runtime.network._pods import NETNS_DIR, NetworkError, PodAddress, PodNetwork

__all__ = ["CniError", "NETNS_DIR", "NetworkError", "NetworkPlan", "PlanError", "PodAddress", "PodNetwork",
           "home_digest"]
