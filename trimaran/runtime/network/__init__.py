"""The pod network of a home (podnet) and what runs over it: Services, cluster DNS, NetworkPolicy."""

from trimaran.runtime.network._nft import apply_table, delete_table, table_name
from trimaran.runtime.network._proxy import ProxiedService, ServicePort, ensure_bridge_netfilter, proxy_rules

__all__ = ["ProxiedService", "ServicePort", "apply_table", "delete_table", "ensure_bridge_netfilter",
           "proxy_rules", "table_name"]
