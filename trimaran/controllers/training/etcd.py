"""The etcd an elastic PyTorchJob with ``rdzvBackend: etcd`` (or ``etcd-v2``) rendezvous through.

torch's etcd rendezvous speaks etcd's v2 API (the ``etcd`` Python package, python-etcd). Where none
answers at the job's endpoint and the endpoint is this machine's loopback, the job gets a pod of
its own running the distribution's ``etcd`` (Debian's etcd-server) on that port, with the v2 API on
and its data in an emptyDir under $TRIMARAN_HOME; the pod is owned by the job, so it goes when the
job is deleted, and the controller stops it once the job has finished.
"""

from __future__ import annotations

import shutil
import urllib.error
import urllib.request

from trimaran.controllers.pods import new_pod

#: Label that marks a job's etcd pod (its value: the job's name).
ETCD_LABEL = "trimaran.io/rendezvous-etcd-for"
LOOPBACK_HOSTS = ("", "localhost", "127.0.0.1")


def etcd_pod_name(job: str) -> str:
    return f"{job}-etcd"


def serves_v2(host: str, port: int, timeout: float = 0.5) -> bool | None:
    """True when an etcd at host:port serves the v2 keys API, False when something answers there
    without it (etcd 3.4 starts with v2 off), None when nothing answers."""
    try:
        with urllib.request.urlopen(f"http://{host}:{port}/v2/keys/", timeout=timeout) as answer:
            return answer.status == 200
    except urllib.error.HTTPError:
        return False
    except (OSError, ValueError):
        return None


def etcd_installed() -> bool:
    return shutil.which("etcd") is not None


def etcd_pod(job: str, namespace: str, port: int) -> dict:
    """A single-member etcd on 127.0.0.1:``port`` (its peer port chosen by the kernel, as no other
    member ever dials it), run from the host's binary whatever the node's image policy."""
    client = f"http://127.0.0.1:{port}"
    peer = "http://127.0.0.1:0"
    command = ["etcd", "--name", "rendezvous", "--data-dir", "/var/lib/etcd/data",
               "--listen-client-urls", client, "--advertise-client-urls", client,
               "--listen-peer-urls", peer, "--initial-advertise-peer-urls", peer,
               "--initial-cluster", f"rendezvous={peer}", "--enable-v2=true"]
    # On the host's loopback, where the job's workers (on the host's network too) meet it.
    spec = {"restartPolicy": "Always", "hostNetwork": True,
            "containers": [{"name": "etcd", "image": "quay.io/coreos/etcd:v3.4.23", "command": command,
                            "volumeMounts": [{"name": "data", "mountPath": "/var/lib/etcd"}]}],
            "volumes": [{"name": "data", "emptyDir": {}}]}
    return new_pod(etcd_pod_name(job), namespace, spec, labels={ETCD_LABEL: job},
                   annotations={"trimaran.io/image-policy": "host"})
