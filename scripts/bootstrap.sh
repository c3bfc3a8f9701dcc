#!/usr/bin/env bash
# Installs what Trimaran needs on a fresh Debian/Ubuntu machine: bubblewrap (the pod sandbox),
# OpenMPI, and a virtual environment at .venv with Trimaran, PyTorch (CPU), TensorFlow (CPU).
# Idempotent: a second run only checks.
set -euo pipefail
cd "$(dirname "$0")/.."

need_apt=()
command -v bwrap >/dev/null 2>&1 || need_apt+=(bubblewrap)
# newuidmap/newgidmap: an ordinary user's pods map their ids into its /etc/subuid range, as
# rootless Podman's (trimaran/runtime/idmap.py); root's pods need nothing more.
command -v newuidmap >/dev/null 2>&1 || need_apt+=(uidmap)
# crun runs a root control plane's containers from OCI bundles, behind tini-static as each
# container's init (trimaran/runtime/oci.py); without them bubblewrap does.
command -v crun >/dev/null 2>&1 || need_apt+=(crun)
command -v tini-static >/dev/null 2>&1 || need_apt+=(tini)
# Container images (trimaran/runtime/images): skopeo pulls, umoci unpacks, zstd opens zstd layers
# (umoci 0.4 cannot), fuse-overlayfs gives each container a writable root over the shared image.
for tool in skopeo umoci zstd fuse-overlayfs; do
  command -v "$tool" >/dev/null 2>&1 || need_apt+=("$tool")
done
command -v mpirun >/dev/null 2>&1 || need_apt+=(openmpi-bin libopenmpi-dev)
# etcd for elastic PyTorchJobs with rdzvBackend etcd: each such job runs its own on loopback.
command -v etcd >/dev/null 2>&1 || need_apt+=(etcd-server)
# Prometheus, to scrape what ServiceMonitors/PodMonitors select: $TRIMARAN_HOME/prometheus/prometheus.yml.
command -v prometheus >/dev/null 2>&1 || need_apt+=(prometheus)
# The pod network (trimaran/runtime/network): Debian's CNI plugins (bridge, host-local, portmap,
# firewall, tuning, loopback in /usr/lib/cni) and iptables, which the bridge plugin's ipMasq uses.
[ -x /usr/lib/cni/bridge ] || [ -x /opt/cni/bin/bridge ] || need_apt+=(containernetworking-plugins)
command -v iptables >/dev/null 2>&1 || need_apt+=(iptables)
# grep reads to the end (no -q): under pipefail, ldconfig killed by SIGPIPE after an early match would
# count as missing.
# The pod network's Services and NetworkPolicies are nftables rules; cluster DNS is a dnsmasq per home
# (trimaran/runtime/network).
command -v nft >/dev/null 2>&1 || need_apt+=(nftables)
command -v dnsmasq >/dev/null 2>&1 || need_apt+=(dnsmasq-base)
# conntrack deletes the UDP flows still DNAT'd to a removed Service endpoint (as kube-proxy does); without
# it a client that keeps its socket (a resolver) keeps reaching the old pod until the flow idles out.
command -v conntrack >/dev/null 2>&1 || need_apt+=(conntrack)
ldconfig -p 2>/dev/null | grep 'libseccomp\.so\.2 ' >/dev/null || need_apt+=(libseccomp2)
if [ ${#need_apt[@]} -gt 0 ]; then
  if [ "$(id -u)" = 0 ]; then SUDO=""; else SUDO="sudo"; fi
  echo "installing system packages: ${need_apt[*]}"
  $SUDO apt-get update -qq
  DEBIAN_FRONTEND=noninteractive $SUDO apt-get install -y -qq "${need_apt[@]}" >/dev/null
fi

PY=${PYTHON:-python3}
if [ ! -x .venv/bin/python ]; then
  "$PY" -m venv .venv
fi
stamp=.venv/.trimaran-installed
if [ ! -f "$stamp" ] || [ pyproject.toml -nt "$stamp" ]; then
  .venv/bin/python -m pip install -q --upgrade pip
  # torch is pinned to the CPU build (a bare `torch` pulls a multi-GB CUDA build).
  .venv/bin/python -m pip install -q -e '.[train,serve,test]'
  touch "$stamp"
fi
# The kfp package that lightweight pipeline components import in their pods (no network install
# while a pipeline runs; controllers/pipelines/run.py puts it on their PYTHONPATH).
kfp_runtime=.venv/share/trimaran/kfp-runtime
if [ ! -d "$kfp_runtime/kfp" ]; then
  .venv/bin/python -m pip install -q --no-deps --target "$kfp_runtime" kfp==2.17.3
fi
