"""The pod network of a home and what runs over it.

:class:`PodNetwork` (``from_env``: None where pods keep the host's network) sets up and tears
down pods' networks, a network namespace and an IP per pod on the home's bridge, by CNI plugins;
:class:`NetworkPlan` is the home's bridge and ranges, reserved machine-wide. Over it: Services'
forwarding as kube-proxy's nftables mode (``proxy_rules``), NetworkPolicy (``policy_rules``), both
in one nftables table per home (``apply_table``), and cluster DNS by dnsmasq (``ClusterDns``).
"""

from trimaran.runtime.network._cni import CniError
from trimaran.runtime.network._dns import DOMAIN as CLUSTER_DOMAIN
from trimaran.runtime.network._dns import ClusterDns, DnsService, hosts_text, resolv_conf
from trimaran.runtime.network._nft import apply_table, delete_table, stale_tables, table_name
from trimaran.runtime.network._plan import NetworkPlan, PlanError, home_digest
from trimaran.runtime.network._pods import (
    NETNS_DIR,
    POOL_PREFIX,
    NetworkError,
    PodAddress,
    PodNetwork,
    pool_size_from_env,
)
from trimaran.runtime.network._policy import policy_rules
from trimaran.runtime.network._proxy import (
    ProxiedService,
    ServicePort,
    delete_flows,
    ensure_bridge_netfilter,
    proxy_rules,
    sctp_sockets,
    stale_udp_flows,
)

__all__ = [
    "CLUSTER_DOMAIN", "CniError", "ClusterDns", "DnsService", "NETNS_DIR", "NetworkError", "NetworkPlan", "PlanError",
    "POOL_PREFIX", "PodAddress", "PodNetwork", "ProxiedService", "ServicePort", "apply_table", "delete_flows",
    "delete_table", "ensure_bridge_netfilter", "home_digest", "hosts_text", "policy_rules", "pool_size_from_env",
    "proxy_rules", "resolv_conf", "sctp_sockets", "stale_tables", "stale_udp_flows", "table_name",
]
