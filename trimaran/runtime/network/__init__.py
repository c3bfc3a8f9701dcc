"""The pod network of a home (podnet) and what runs over it: Services, cluster DNS, NetworkPolicy."""

# Services, cluster DNS and NetworkPolicy (the "services" part of issue 24).
from trimaran.runtime.network._dns import ClusterDns, DnsService, hosts_text, resolv_conf
from trimaran.runtime.network._nft import apply_table, delete_table, table_name
from trimaran.runtime.network._policy import policy_rules
from trimaran.runtime.network._proxy import ProxiedService, ServicePort, ensure_bridge_netfilter, proxy_rules

__all__ = [
    "ClusterDns", "DnsService", "ProxiedService", "ServicePort", "apply_table", "delete_table",
    "ensure_bridge_netfilter", "hosts_text", "policy_rules", "proxy_rules", "resolv_conf", "table_name",
]
