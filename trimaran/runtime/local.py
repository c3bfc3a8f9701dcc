"""Pods as local processes: each pod run is a shim process supervising its containers, each
container run by crun from an OCI bundle (a root control plane with crun: see ``oci.py``) or a
bubblewrap sandbox, showing the pod the same layout.

Layout under ``home``::

    pods/<uid>/pod.json                 namespace, name, uid (orphan sweeps after a restart)
    pods/<uid>/volumes/<volume>/        emptyDirs: live as long as the pod
    pods/<uid>/runs/<attempt>/          one start of the pod: spec.json, shim files, hosts,
                                        configMap/secret contents (see shim.py), the
                                        service-account files (serviceaccount/), crun's
                                        bundles (bundles/<container>/)
    pods/<uid>/ns/{user,ipc,uts}        the pod's shared namespaces, pinned while it runs (crun)
    crun/<pod uid>-<attempt>-<container>/
                                        crun's state of a running container
    logs/<namespace>/<pod>/<container>/<attempt>.log
                                        and its rotated files <attempt>.log.<n> (see shim.py):
                                        ``containerLogMaxSize`` and ``containerLogMaxFiles`` from
                                        TRIMARAN_CONTAINER_LOG_MAX_SIZE (10Mi) and
                                        TRIMARAN_CONTAINER_LOG_MAX_FILES (5)
    volumes/<namespace>/<claim>/        persistentVolumeClaims

The runtime keeps no state in memory that matters: a new ``LocalRuntime`` on the same home
(after the control plane restarted) sees running pods through ``known_pods`` / ``pod_status``.

A container's environment is, lowest first: the "image" environment (the host plays the
image: its ``PATH`` with this Python's bin directory in front, so ``python`` in a manifest is
the control plane's interpreter; ``HOME``, ``HOSTNAME``, locale; ``PYTHONUNBUFFERED=1`` as ML
images set it, so logs stream), the ``kubernetes`` service's variables (with a
``service_account``), the pod's ``envFrom``/``env``, then ``env_extra`` (device
assignment such as ``CUDA_VISIBLE_DEVICES``, which the pod cannot override, as with a device
plugin). ``$(VAR)`` expansion sees only the pod's own and the service variables, as in Kubernetes.

``home`` is hidden inside every sandbox: a pod reads its own token at
/var/run/secrets/kubernetes.io/serviceaccount, its own volumes at their mountPaths, and nothing
else of the home. Each container runs as its ``securityContext`` says
(:func:`trimaran.runtime.security.container_security`); the seccomp program is written into the
run directory once per run and handed to bubblewrap by the shim.
"""

from __future__ import annotations

import json
import logging
import os
import pwd
import shutil
import signal
import subprocess
import sys
import tempfile
import threading
import time
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path, PurePosixPath

from trimaran.api.meta import pod_hostname
from trimaran.api.quantity import QuantityError, parse_memory
from trimaran.runtime import cgroups, claims, oci
from trimaran.runtime import shim as _shim
from trimaran.runtime import streaming as _streaming
from trimaran.runtime.env import ConfigError, Lookup, expand_command, resolve_env
from trimaran.runtime.gpus import driver_files, is_gpu_resource
from trimaran.runtime.idmap import IdMap, IdRangeError, PodsRange, container_idmap, hand_to_pods, pods_range
from trimaran.runtime.network import CLUSTER_DOMAIN, PodAddress, PodNetwork, pool_size_from_env, resolv_conf
from trimaran.runtime.node import Node, StorageUsage, container_requests
from trimaran.runtime.qos import container_resources, pod_cgroup, pod_pids_limit_from_env
from trimaran.runtime.sandbox import (
    SandboxUnavailable,
    build_argv,
    build_image_argv,
    build_tool_argv,
    find_bwrap,
    gpu_device_paths,
    hosts_file,
    userns_available,
)
from trimaran.runtime.security import ContainerSecurity, container_security, seccomp_program
from trimaran.runtime.serviceaccount import MOUNT_PATH, ServiceAccountAccess, automounts_token, write_service_account
from trimaran.runtime.stats import NodeUsage, collect
from trimaran.runtime.timings import NODE_TIMINGS
from trimaran.runtime.volumes import Mount, Owner, container_mounts, prepare_volumes

__all__ = ["ContainerStatus", "PodProcessStatus", "PodNotFound", "ImageRun", "LocalRuntime", "image_user",
           "log_files", "log_rotation_from_env", "port_mappings", "shim_pool_size_from_env"]

log = logging.getLogger(__name__)

_SHIM = str(Path(_shim.__file__).resolve())
_SERVICE_MARK = "  # trimaran service"  # ends the /etc/hosts lines update_service_hosts owns
_STOP_SLACK_S = 5.0  # beyond the grace period, before the runtime kills what the shim did not
_POLL_S = 0.01


class PodNotFound(LookupError):
    """The runtime has no state for this pod uid."""


def log_rotation_from_env(env: Mapping[str, str] | None = None) -> tuple[int, int]:
    """``(containerLogMaxSize, containerLogMaxFiles)`` from ``TRIMARAN_CONTAINER_LOG_MAX_SIZE`` (a
    quantity: ``10Mi``) and ``TRIMARAN_CONTAINER_LOG_MAX_FILES``, the kubelet's 10Mi and 5 by
    default. Raises ``ValueError`` for a value the kubelet would refuse (a size under 1Ki, fewer
    than 2 files: the kubelet keeps the live file and at least one rotated)."""
    env = os.environ if env is None else env
    size_text = env.get("TRIMARAN_CONTAINER_LOG_MAX_SIZE")
    files_text = env.get("TRIMARAN_CONTAINER_LOG_MAX_FILES")
    try:
        size = parse_memory(size_text) if size_text else _shim.DEFAULT_LOG_MAX_SIZE
    except QuantityError as exc:
        raise ValueError(f"TRIMARAN_CONTAINER_LOG_MAX_SIZE: {exc}") from None
    files = int(files_text) if files_text else _shim.DEFAULT_LOG_MAX_FILES
    if size < 1024:
        raise ValueError(f"TRIMARAN_CONTAINER_LOG_MAX_SIZE must be at least 1Ki, not {size_text}")
    if files < 2:
        raise ValueError(f"TRIMARAN_CONTAINER_LOG_MAX_FILES must be at least 2, not {files_text}")
    return size, files


def port_mappings(spec: Mapping) -> list[dict]:
    """The containers' ``hostPort``s as CNI's portmap capability takes them."""
    return [{"hostPort": int(p["hostPort"]), "containerPort": int(p.get("containerPort") or p["hostPort"]),
             "protocol": str(p.get("protocol") or "TCP").lower(),
             **({"hostIP": p["hostIP"]} if p.get("hostIP") else {})}
            for c in spec.get("containers") or [] for p in c.get("ports") or [] if p.get("hostPort")]


def shim_pool_size_from_env(env: Mapping[str, str] | None = None) -> int:
    """``TRIMARAN_SHIM_POOL``: how many shims wait started ahead (0 to 16, 2 by default)."""
    return pool_size_from_env(env, "TRIMARAN_SHIM_POOL", "shims")


def log_files(path: Path) -> list[Path]:
    """A container run's log as files in the order they were written: the rotated ones that are
    kept, oldest first, then ``path`` (which may not exist yet)."""
    return [*(Path(p) for p in _shim.rotated_logs(str(path))), path]


@dataclass(frozen=True)
class ImageRun:
    """A container's image, pulled and unpacked: what the container runs instead of a host
    process. ``reference`` is the image as resolved (``docker.io/library/busybox:latest``),
    ``image_id`` what the kubelet reports as ``imageID`` (``docker.io/library/busybox@sha256:…``);
    ``rootfs`` the unpacked root filesystem (shared by every container of the image, never
    written); the rest is the image's config (``env`` as ``K=V``)."""

    reference: str
    image_id: str
    rootfs: Path
    entrypoint: tuple[str, ...] | None = None
    cmd: tuple[str, ...] | None = None
    env: tuple[str, ...] = ()
    working_dir: str = ""
    user: str = ""


log = logging.getLogger(__name__)

_DEFAULT_PATH = "/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin"  # containerd's
_SETSID = shutil.which("setsid")  # util-linux's, for a host-process container on a terminal


def _passwd_entries(path: Path) -> list[list[str]]:
    try:
        return [line.split(":") for line in path.read_text(errors="replace").splitlines() if line and line[0] != "#"]
    except OSError:
        return []


def image_user(rootfs: Path, user: str) -> tuple[int, int]:
    """The image config's ``User`` (``uid``, ``uid:gid``, ``name``, ``name:group``) as numbers,
    names looked up in the image's own /etc/passwd and /etc/group as the runtimes do; the group
    defaults to the user's primary group there (0 when the image does not list the uid).
    Raises ``ConfigError`` for a name the image does not know."""
    name, _, group = user.partition(":")
    passwd = _passwd_entries(rootfs / "etc" / "passwd")
    if name.isdigit():
        uid = int(name)
        entry = next((e for e in passwd if len(e) > 3 and e[2] == name), None)
    else:
        entry = next((e for e in passwd if len(e) > 3 and e[0] == name), None)
        if entry is None or not entry[2].isdigit():
            raise ConfigError(f"unable to find user {name}: no matching entries in passwd file")
        uid = int(entry[2])
    if not group:
        gid = int(entry[3]) if entry is not None and entry[3].isdigit() else 0
    elif group.isdigit():
        gid = int(group)
    else:
        found = next((e for e in _passwd_entries(rootfs / "etc" / "group") if len(e) > 2 and e[0] == group), None)
        if found is None or not found[2].isdigit():
            raise ConfigError(f"unable to find group {group}: no matching entries in group file")
        gid = int(found[2])
    return uid, gid


def _image_home(rootfs: Path, uid: int) -> str:
    entry = next((e for e in _passwd_entries(rootfs / "etc" / "passwd") if len(e) > 5 and e[2] == str(uid)), None)
    return entry[5] if entry is not None and entry[5] else "/"


@dataclass(frozen=True)
class ContainerStatus:
    """One container as its processes stand: ``state`` is ``waiting``, ``running`` or
    ``terminated``. ``attempt`` is the pod run the state belongs to (its log file's number).

    ``reason`` is, when terminated: Completed, Error, OOMKilled, StartError or ShimLost (the
    supervisor vanished without recording the exit: reported as exit code 137); when waiting:
    ContainerCreating or PodInitializing.
    """

    name: str
    state: str
    attempt: int
    reason: str | None = None
    message: str | None = None
    pid: int | None = None
    exit_code: int | None = None
    signal: int | None = None
    started_at: str | None = None
    finished_at: str | None = None

    def to_k8s(self) -> dict:
        """As a Kubernetes ``ContainerState`` (``{"running": {"startedAt": …}}`` etc.)."""
        if self.state == "running":
            return {"running": {"startedAt": self.started_at}}
        if self.state == "terminated":
            terminated = {
                "exitCode": self.exit_code,
                "reason": self.reason,
                "startedAt": self.started_at,
                "finishedAt": self.finished_at,
            }
            if self.signal:
                terminated["signal"] = self.signal
            if self.message:
                terminated["message"] = self.message
            return {"terminated": terminated}
        waiting = {"reason": self.reason}
        if self.message:
            waiting["message"] = self.message
        return {"waiting": waiting}


@dataclass(frozen=True)
class PodProcessStatus:
    """The processes of a pod: per container (init containers apart), in spec order."""

    uid: str
    attempt: int
    shim_alive: bool
    init_containers: dict[str, ContainerStatus] = field(default_factory=dict)
    containers: dict[str, ContainerStatus] = field(default_factory=dict)


def _no_lookup(kind: str, namespace: str, name: str) -> None:
    return None


def _image_env(hostname: str, uid: int) -> dict[str, str]:
    path = os.environ.get("PATH") or "/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin"
    bin_dir = str(Path(sys.executable).parent)
    if bin_dir not in path.split(":"):
        path = f"{bin_dir}:{path}"
    # As the runtimes do: the user's home from the "image's" passwd, else /.
    try:
        home = "/root" if uid == 0 else pwd.getpwuid(uid).pw_dir
    except KeyError:
        home = "/"
    env = {"PATH": path, "HOME": home, "HOSTNAME": hostname, "PYTHONUNBUFFERED": "1"}
    for name in ("LANG", "LC_ALL", "TZ"):
        if name in os.environ:
            env[name] = os.environ[name]
    return env


class LocalRuntime:
    """Runs pods under ``home``. Thread-safe; state lives in files, so any number of
    runtimes on the same home (one at a time in practice) see the same pods."""

    def __init__(self, home: Path, *, node: Node | None = None, use_cgroups: bool = True,
                 log_rotation: tuple[int, int] | None = None, pids_limit: int | None = None,
                 shim_pool: int = 0) -> None:
        """``node`` supplies the node name and the capacity that unset ``resourceFieldRef``
        limits report (the host's without it). ``use_cgroups=False`` runs pods without cgroups
        (memory limits by RLIMIT_AS) even where they are writable. ``log_rotation`` is
        ``(containerLogMaxSize, containerLogMaxFiles)``, by default :func:`log_rotation_from_env`'s;
        ``pids_limit`` each pod's (-1: unlimited), by default ``TRIMARAN_POD_PIDS_LIMIT``'s.
        ``shim_pool``: how many shims wait started ahead once a pod has started (0: none; the
        control plane's is :func:`shim_pool_size_from_env`'s); :meth:`close` ends them."""
        self.home = Path(home)
        self.node = node
        self.cgroups = cgroups.detect(str(self.home)) if use_cgroups else None
        if pids_limit is None:
            pids_limit = pod_pids_limit_from_env()
        self.pids_limit = None if pids_limit == -1 else pids_limit
        self.log_max_size, self.log_max_files = log_rotation or log_rotation_from_env()
        # Set by the control plane once it serves: pods then get the in-cluster configuration
        # (service env, token files). None runs pods without it.
        self.service_account: ServiceAccountAccess | None = None
        # Cluster services every pod resolves (name -> address), as cluster DNS would answer.
        self.service_hosts: dict[str, str] = {}
        # Set by the control plane where pods get a network namespace and IP each (CNI); None
        # keeps them on the host's network.
        self.network: PodNetwork | None = None
        self._children: dict[str, subprocess.Popen] = {}  # run dir → shim spawned here
        self._lock = threading.Lock()
        # Shims started ahead, waiting for a run (an interpreter's start-up off each pod's path).
        self.shim_pool = shim_pool
        self._standby: list[subprocess.Popen] = []
        self._standby_filler: threading.Thread | None = None
        self._standby_wanted = threading.Condition(self._lock)
        self._closing = False

    # -- paths ------------------------------------------------------------------------

    def _pod_dir(self, uid: str) -> Path:
        return self.home / "pods" / uid

    def _runs(self, uid: str) -> list[Path]:
        runs_dir = self._pod_dir(uid) / "runs"
        try:
            names = [p.name for p in runs_dir.iterdir() if p.name.isdigit()]
        except FileNotFoundError:
            return []
        return [runs_dir / n for n in sorted(names, key=int)]

    def _pod_log_dir(self, namespace: str, pod_name: str) -> Path:
        return self.home / "logs" / namespace / pod_name

    # -- starting -----------------------------------------------------------------------

    def start_pod(
        self,
        pod: Mapping[str, object],
        *,
        attempt: int,
        env_extra: Mapping[str, str] | None = None,
        hosts: Mapping[str, str] | None = None,
        lookup: Lookup | None = None,
        containers: Sequence[str] | None = None,
        on_exit: Callable[[], None] | None = None,
        images: Mapping[str, ImageRun] | None = None,
    ) -> PodAddress | None:
        """Start a run of the pod and return once its shim process exists (milliseconds); return
        its address on the pod network (None without one).

        ``pod`` is the Pod dict (``metadata.uid`` required). ``attempt`` numbers the run and
        its log files; a restart in place is ``start_pod(pod, attempt=n + 1)`` once the last
        run has ended. ``containers`` restarts only those app containers, which must have
        ended, while the others run on (init containers are not rerun); by default the init
        containers run, then all containers, and nothing of the pod may still be running.
        ``env_extra`` overrides the pod's environment (GPU assignment from ``Node.admit``);
        ``hosts`` (name → IP) goes into the sandbox's /etc/hosts; ``lookup(kind, namespace,
        name)`` reads ConfigMaps and Secrets. ``on_exit`` is called (from a helper thread) when
        this run's shim ends, so a caller can react at once instead of polling. ``images``
        (container name → :class:`ImageRun`) names the containers that run their image; the
        others run as host processes.

        Raises ``SandboxUnavailable`` (bubblewrap missing), ``ConfigError`` (env, command),
        ``VolumeError`` or ``NetworkError`` before anything is started. The pod's network is set
        up before its first run and kept across runs until :meth:`remove_pod`.
        """
        bwrap = find_bwrap()
        if bwrap is None:
            raise SandboxUnavailable()
        meta: Mapping = pod.get("metadata") or {}  # type: ignore[assignment]
        spec: Mapping = pod.get("spec") or {}  # type: ignore[assignment]
        uid = str(meta.get("uid") or "")
        if not uid:
            raise ValueError("pod has no metadata.uid")
        namespace = str(meta.get("namespace") or "default")
        name = str(meta.get("name") or "")
        pod_dir = self._pod_dir(uid)
        run_dir = pod_dir / "runs" / str(attempt)
        wanted = {str(c.get("name")) for c in spec.get("containers") or []} if containers is None \
            else set(containers)
        busy = self._unfinished_containers(uid)
        if (containers is None and busy) or wanted & busy:
            # Two copies of a container would fight over its volumes and ports.
            raise RuntimeError(
                f"pod {namespace}/{name}: {', '.join(sorted(busy))} still running; "
                f"stop_pod first or restart only finished containers"
            )
        # Runs whose shim was killed leave their containers' overlays mounted.
        for old_run in self._runs(uid):
            if not self._run_alive(old_run):
                _shim.release_overlays_under(str(old_run))
                self._remove_cgroups(old_run)
        if run_dir.exists():
            shutil.rmtree(run_dir)
        run_dir.mkdir(parents=True)
        _shim.write_json(str(pod_dir / "pod.json"), {"namespace": namespace, "name": name, "uid": uid})
        address = None
        if self.network is not None:
            try:
                address = self.network.setup(uid, namespace, name, bool(spec.get("hostNetwork")),
                                             port_mappings(spec))
            except BaseException:
                shutil.rmtree(run_dir, ignore_errors=True)
                raise
            # What the downward API (status.podIP, status.hostIP) and /etc/hosts read.
            gateway = self.network.plan.gateway
            pod = {**pod, "status": {**(pod.get("status") or {}), "podIP": address.ip, "podIPs": [{"ip": address.ip}],
                                     "hostIP": gateway, "hostIPs": [{"ip": gateway}]}}
        try:
            files_began = time.perf_counter()
            run_spec = self._run_spec(pod, uid, namespace, name, attempt, run_dir, bwrap,
                                      env_extra or {}, hosts or {}, lookup or _no_lookup, containers,
                                      images or {}, address.ip if address else None)
            if address is not None and address.netns:
                run_spec["netns"] = address.netns  # the shim joins it before starting any container
            log_dir = self._pod_log_dir(namespace, name)
            log_dir.mkdir(parents=True, exist_ok=True)
            _shim.write_json(str(log_dir / "containers.json"),
                             {"containers": [c.get("name") for c in spec.get("containers") or []]})
            _shim.write_json(str(run_dir / "spec.json"), run_spec)
            NODE_TIMINGS.add("run.files", time.perf_counter() - files_began)
            spawned = time.monotonic()
            proc = self._spawn_shim(run_dir)
            if on_exit is not None:
                threading.Thread(target=_call_after_exit, args=(proc, run_dir, spawned, on_exit), daemon=True,
                                 name=f"shim-wait-{name}").start()
        except BaseException:
            # No half-made run: pod_status must not report a start that never happened.
            shutil.rmtree(run_dir, ignore_errors=True)
            raise
        return address

    def _run_spec(
        self,
        pod: Mapping,
        uid: str,
        namespace: str,
        name: str,
        attempt: int,
        run_dir: Path,
        bwrap: str,
        env_extra: Mapping[str, str],
        hosts: Mapping[str, str],
        lookup: Lookup,
        only: Sequence[str] | None,
        images: Mapping[str, ImageRun],
        pod_ip: str | None = None,
    ) -> dict:
        spec: Mapping = pod.get("spec") or {}
        status: Mapping = pod.get("status") or {}
        hostname = pod_hostname(str(spec.get("hostname") or name))
        pod_ip = pod_ip or str(status.get("podIP") or "127.0.0.1")
        access = self.service_account
        all_hosts: dict[str, str] = dict(self.service_hosts)
        if access is not None:
            all_hosts.update(access.hosts())
        for alias in spec.get("hostAliases") or []:
            for host in alias.get("hostnames") or []:
                all_hosts[host] = alias.get("ip")
        all_hosts.update(hosts)
        hosts_path = run_dir / "hosts"
        # As the kubelet: a pod naming a subdomain finds its own fully qualified name in /etc/hosts.
        subdomain = spec.get("subdomain")
        fqdn = f"{hostname}.{subdomain}.{namespace}.svc.{CLUSTER_DOMAIN}" if subdomain else None
        hosts_path.write_text(hosts_file(hostname, all_hosts, pod_ip, fqdn))
        hostname_path = run_dir / "hostname"
        hostname_path.write_text(hostname + "\n")
        resolv_path = None
        if self.network is not None and not spec.get("hostNetwork"):
            # On the pod network names resolve through cluster DNS, as the kubelet writes it (dnsPolicy).
            resolv_path = run_dir / "resolv.conf"
            resolv_path.write_text(resolv_conf(dict(spec), namespace, self.network.plan.dns_ip, _host_resolv_conf()))
        spec_security: Mapping = spec.get("securityContext") or {}
        # Where pods' ids map into a range of their own, what the pod is given belongs to its
        # root inside; else to the control plane, which is then the pod's own uid.
        pods = pods_range() if userns_available(bwrap) else None
        owner = None
        if pods is not None and pods.owner is None:
            fs_group = spec_security.get("fsGroup")
            owner = Owner(pods.uid, pods.gid, None if not isinstance(fs_group, int) or fs_group >= 65536
                          else pods.gid + fs_group)
        volumes = prepare_volumes(pod, pod_dir=self._pod_dir(uid), run_dir=run_dir,
                                  home=self.home, lookup=lookup, owner=owner)
        node_kwargs = {}
        if self.node is not None:
            node_kwargs = {"node_cpu": self.node.capacity.cpu, "node_memory": self.node.capacity.memory,
                           "node_name": self.node.name}
        log_dir = self._pod_log_dir(namespace, name)
        token_dir = None
        if access is not None and automounts_token(spec):
            token_dir = write_service_account(access, namespace, run_dir / "serviceaccount",
                                              str(spec.get("serviceAccountName") or "default"))
            if owner is not None:
                _give_token(token_dir, owner, pod, pods.uid)
        service_env = access.env() if access is not None else None
        hidden = [str(self.home)]
        crun_root = self.home / "crun"  # crun's state: per home, so two control planes never meet
        # A pod of one container has nothing to share its namespaces with: crun makes its own,
        # sparing the pins (a fork and six mounts and unmounts per pod).
        shared_namespaces = len(spec.get("initContainers") or []) + len(spec.get("containers") or []) > 1
        seccomp_path = run_dir / "seccomp.bpf"

        def container_spec(container: Mapping, index: int, init: bool) -> dict:
            cname = str(container.get("name"))
            image = images.get(cname)
            user = image_user(image.rootfs, image.user) if image is not None and image.user else None
            security = container_security(pod, container, index, init=init, image_user=user)
            idmap = _idmap(cname, security, pods)
            # crun, where it runs pods (a root control plane), writes the maps and the filter itself.
            use_oci = idmap is not None and idmap.run_as is not None and oci.oci_available()
            if security.seccomp is not None and not use_oci and not seccomp_path.exists():
                seccomp_path.write_bytes(seccomp_program(security.seccomp))
            own_env = resolve_env(pod, container, lookup, service_env=service_env, **node_kwargs)
            if image is None:
                command = expand_command(container, own_env)
                if container.get("tty") and not use_oci and _SETSID:
                    # On the shim's terminal under bubblewrap: a session of its own in its pid
                    # namespace whose controlling terminal it is (as crun's console gives its
                    # containers), so a shell's job control and ^C work; the host's setsid, which a
                    # host-process container sees. -w: its exit code, should it have to fork.
                    command = [_SETSID, "--ctty", "--wait", *command]
            else:
                command = expand_command(container, own_env, image.entrypoint or (), image.cmd or ())
            mounts = container_mounts(container, volumes, own_env, owner)
            # A container that mounts a volume of its own there keeps it, as on a cluster.
            if token_dir is not None and all(PurePosixPath(m.target) != PurePosixPath(MOUNT_PATH) for m in mounts):
                mounts.append(Mount(MOUNT_PATH, token_dir, read_only=True))
            limits = (container.get("resources") or {}).get("limits") or {}
            try:
                memory_limit = parse_memory(limits["memory"]) if limits.get("memory") else None
            except QuantityError as exc:
                raise ConfigError(f"container {cname!r}: limits.memory: {exc}") from None
            termination_log = run_dir / f"{cname}.termination-log"
            termination_log.touch()
            termination_log.chmod(0o666)  # writable by any runAsUser
            wants_gpu = any(is_gpu_resource(r) for r in container_requests(container).gpus)
            log_target = str(container.get("terminationMessagePath") or "/dev/termination-log")
            overlay = None
            if image is None:
                argv = build_argv(
                    command, mounts=mounts, hostname=hostname, hosts_path=hosts_path,
                    hostname_path=hostname_path, resolv_path=resolv_path, working_dir=container.get("workingDir"),
                    devices=gpu_device_paths() if wants_gpu else (),
                    termination_log=(termination_log, log_target), bwrap=bwrap, hidden=hidden,
                    security=security, mapped=idmap is not None,
                )
                env = {**_image_env(hostname, security.uid), **own_env, **env_extra}
            else:
                layer = run_dir / "rootfs" / cname
                overlay = {"lower": str(image.rootfs), "upper": str(layer / "upper"),
                           "work": str(layer / "work"), "merged": str(layer / "merged")}
                for key in ("upper", "work", "merged"):
                    Path(overlay[key]).mkdir(parents=True)
                # The overlay's root is the upper layer's directory: it must be the image's root
                # (its owner, so that root inside may write /; its mode).
                lower_root = image.rootfs.stat()
                os.chown(overlay["upper"], lower_root.st_uid, lower_root.st_gid)
                os.chmod(overlay["upper"], lower_root.st_mode & 0o7777)
                driver = driver_files() if wants_gpu else None
                try:
                    argv = build_image_argv(
                        command, image_root=image.rootfs, root=layer / "merged", mounts=mounts,
                        hostname=hostname, hosts_path=hosts_path, hostname_path=hostname_path, resolv_path=resolv_path,
                        working_dir=str(container.get("workingDir") or image.working_dir or "/"),
                        devices=driver.devices if driver else (), read_only_files=driver.files if driver else (),
                        termination_log=(termination_log, log_target), bwrap=bwrap, security=security,
                        mapped=idmap is not None,
                    )
                except ValueError as exc:
                    raise ConfigError(f"container {cname!r}: {exc}") from None
                image_env = dict(item.partition("=")[::2] for item in image.env)
                # As containerd: PATH and HOME from the image when it sets them.
                base = {"PATH": _DEFAULT_PATH, "HOME": _image_home(image.rootfs, security.uid)}
                env = {**base, **image_env, "HOSTNAME": hostname, **own_env, **env_extra}
            if container.get("tty"):
                env.setdefault("TERM", "xterm")  # as containerd sets for a container on a terminal
            bundle = None
            if use_oci:
                # crun runs it from a bundle describing the same container (see runtime/oci.py).
                bundle_dir = run_dir / "bundles" / cname
                (bundle_dir / "rootfs").mkdir(parents=True)
                config, skeleton, fresh_root = oci.bundle(argv, env=env, security=security, idmap=idmap)
                if container.get("tty"):
                    config["process"]["terminal"] = True  # crun makes it and hands the shim its master
                if not fresh_root:
                    # Relative to the bundle, where crun starts: the pods' uid that resolves it
                    # could not pass the home's private directories on an absolute path.
                    config["root"]["path"] = os.path.relpath(config["root"]["path"], bundle_dir)
                cid = oci.container_id(uid, attempt, cname)
                bundle = {"config": config, "bundle": str(bundle_dir), "root": str(crun_root), "id": cid,
                          "pod_namespaces": str(self._pod_dir(uid) / "ns") if shared_namespaces else None,
                          "rootfs": {"path": str(bundle_dir / "rootfs"), "uid": idmap.host_uid(security.uid),
                                     "gid": idmap.host_gid(security.gid), "skeleton": skeleton} if fresh_root else None}
                argv = oci.run_argv(str(oci.find_crun()), crun_root, bundle_dir, cid)
            return {
                "name": cname,
                "argv": argv,
                "seccomp": None if security.seccomp is None or bundle else str(seccomp_path),
                "env": env,
                "log": str(log_dir / cname / f"{attempt}.log"),
                "log_max_size": self.log_max_size,
                "log_max_files": self.log_max_files,
                "memory_limit": memory_limit,
                "resources": container_resources(container),
                "termination_log": str(termination_log),
                "termination_message_policy": container.get("terminationMessagePolicy") or "File",
                "stdin": bool(container.get("stdin")),
                "stdin_once": bool(container.get("stdinOnce")),
                "tty": bool(container.get("tty")),
                **({"overlay": overlay} if overlay else {}),
                **({"oci": bundle} if bundle else {"idmap": idmap.to_json()} if idmap else {}),
            }

        app = [(i, c) for i, c in enumerate(spec.get("containers") or []) if only is None or c.get("name") in only]
        if only is not None:
            missing = set(only) - {c.get("name") for _, c in app}
            if missing:
                raise ValueError(f"pod {namespace}/{name} has no container {sorted(missing)}")
        init = [] if only is not None else list(spec.get("initContainers") or [])
        grace = spec.get("terminationGracePeriodSeconds")
        return {
            "uid": uid,
            "namespace": namespace,
            "name": name,
            "attempt": attempt,
            "grace_seconds": float(30 if grace is None else grace),
            "cgroups": pod_cgroup(pod, self.cgroups, self.pids_limit) if self.cgroups else None,
            "init_containers": [container_spec(c, i, True) for i, c in enumerate(init)],
            "containers": [container_spec(c, i, False) for i, c in app],
        }

    def _spawn_shim(self, run_dir: Path) -> subprocess.Popen:
        proc = self._hand_to_standby(run_dir)
        if proc is None:
            with NODE_TIMINGS.timed("shim.spawn"):
                proc = _with_stop_blocked(lambda: self._popen_shim(run_dir))
        stat = _shim.proc_stat(proc.pid)
        # Written here as well as by the shim, so the pod is tracked from this instant.
        _shim.write_json(str(run_dir / "shim.pid"),
                         {"pid": proc.pid, "startTicks": stat[3] if stat else None})
        with self._lock:
            self._children[str(run_dir)] = proc
        return proc

    # -- shims started ahead ------------------------------------------------------------------

    def _hand_to_standby(self, run_dir: Path) -> subprocess.Popen | None:
        """A shim started ahead, given ``run_dir`` (see ``shim._await_run``), or None when none is
        ready. Taking one has another started (``shim_pool`` wait; none before the first pod)."""
        if not self.shim_pool:
            return None
        with self._lock:
            proc = self._standby.pop(0) if self._standby else None
            if self._standby_filler is None and not self._closing:
                self._standby_filler = threading.Thread(target=self._keep_standby, name="shim-standby", daemon=True)
                self._standby_filler.start()
            self._standby_wanted.notify()
        if proc is None:
            return None
        with NODE_TIMINGS.timed("shim.handoff"):
            try:
                assert proc.stdin is not None
                proc.stdin.write(os.fsencode(run_dir) + b"\n")
                proc.stdin.close()
            except OSError:
                proc.kill()  # it died waiting, or cannot be told: a new one does the run
                proc.wait()
                return None
        return proc

    def _keep_standby(self) -> None:
        while True:
            with self._lock:
                while not self._closing and len(self._standby) >= self.shim_pool:
                    self._standby_wanted.wait()
                if self._closing:
                    return
            try:
                proc = _with_stop_blocked(lambda: subprocess.Popen(
                    _shim.command(_shim.STANDBY), stdin=subprocess.PIPE, stdout=subprocess.DEVNULL,
                    stderr=subprocess.DEVNULL, cwd="/", start_new_session=True))
            except OSError as exc:
                log.warning("cannot start a shim ahead: %s", exc)
                with self._lock:
                    if not self._closing:
                        self._standby_wanted.wait()
                continue
            with self._lock:
                if self._closing:
                    break
                self._standby.append(proc)
        _end_standby(proc)

    def close(self) -> None:
        """At control-plane stop: the shims started ahead end (pods' shims run on)."""
        with self._lock:
            self._closing = True
            self._standby_wanted.notify_all()
            filler = self._standby_filler
        if filler is not None:
            filler.join()
        with self._lock:
            standby, self._standby = self._standby, []
        for proc in standby:
            _end_standby(proc)

    @staticmethod
    def _popen_shim(run_dir: Path) -> subprocess.Popen:
        with open(run_dir / "shim.log", "wb") as shim_log:
            return subprocess.Popen(
                _shim.command(str(run_dir)),
                stdin=subprocess.DEVNULL,
                stdout=shim_log,
                stderr=subprocess.STDOUT,
                cwd="/",
                # Its own session: the shim (and so the pod) outlives the control plane.
                start_new_session=True,
            )

    # -- liveness -------------------------------------------------------------------------

    def _reap(self) -> None:
        # Shims spawned by this process stay zombies until waited for.
        with self._lock:
            for key, proc in list(self._children.items()):
                if proc.poll() is not None:
                    del self._children[key]

    def _run_alive(self, run_dir: Path) -> bool:
        self._reap()
        record = _shim.read_json(str(run_dir / "shim.pid"))
        return bool(record) and _shim.process_alive(record["pid"], record.get("startTicks"))

    def _unfinished_containers(self, uid: str) -> set[str]:
        """Containers (init ones too) of live runs that have not recorded an exit."""
        busy: set[str] = set()
        for run_dir in self._runs(uid):
            if not self._run_alive(run_dir):
                continue
            spec = _shim.read_json(str(run_dir / "spec.json")) or {}
            for container in (spec.get("init_containers") or []) + (spec.get("containers") or []):
                if not (run_dir / f"{container['name']}.exit.json").exists():
                    busy.add(container["name"])
        return busy

    def _container_records(self, run_dir: Path) -> list[dict]:
        spec = _shim.read_json(str(run_dir / "spec.json")) or {}
        records = []
        for container in (spec.get("init_containers") or []) + (spec.get("containers") or []):
            record = _shim.read_json(str(run_dir / f"{container['name']}.pid"))
            if record:
                records.append(record)
        return records

    def is_alive(self, pod_uid: str) -> bool:
        """Whether any process of the pod still runs (pid reuse cannot fool it: each process
        is matched by its start time too)."""
        for run_dir in self._runs(pod_uid):
            if self._run_alive(run_dir):
                return True
            if any(_shim.process_alive(r["pid"], r.get("startTicks"))
                   for r in self._container_records(run_dir)):
                return True
        return False

    def known_pods(self) -> list[str]:
        """Uids of every pod with state here, running or not (for re-adoption and orphan
        sweeps after a control-plane restart)."""
        try:
            return sorted(p.name for p in (self.home / "pods").iterdir() if p.is_dir())
        except FileNotFoundError:
            return []

    def running_pods(self) -> list[str]:
        """Uids of the pods that have a live process."""
        return [uid for uid in self.known_pods() if self.is_alive(uid)]

    def pod_of_process(self, pid: int) -> str | None:
        """The uid of this home's pod that process ``pid`` belongs to, else None. Read from the
        kernel's process tree (a pod's processes descend from its run's shim, in their own pid
        namespace, so they cannot move out), never from what the process says of itself."""
        pods = self.home.resolve() / "pods"
        while pid > 1:
            stat = _shim.proc_stat(pid)
            if stat is None:
                return None
            try:
                argv = Path(f"/proc/{pid}/cmdline").read_bytes().split(b"\0")
                # A shim started ahead names no run: it works in its run's directory.
                cwd = os.readlink(f"/proc/{pid}/cwd") if argv[6:7] == [_shim.STANDBY.encode()] else None
            except OSError:
                return None
            if len(argv) > 6 and argv[5] == _SHIM.encode():
                run_dir = Path(cwd or os.fsdecode(argv[6])).resolve()
                record = _shim.read_json(str(run_dir / "shim.pid")) or {}
                # The record, which only the runtime writes, tells a real shim from a look-alike.
                if run_dir.parent.parent.parent == pods and record.get("pid") == pid \
                        and record.get("startTicks") in (None, stat[3]):
                    return run_dir.parent.parent.name
            pid = stat[1]
        return None

    def pod_identity(self, pod_uid: str) -> tuple[str, str] | None:
        """``(namespace, name)`` the pod was started as, if known."""
        record = _shim.read_json(str(self._pod_dir(pod_uid) / "pod.json"))
        return (record["namespace"], record["name"]) if record else None

    # -- status ---------------------------------------------------------------------------

    def pod_status(self, pod_uid: str) -> PodProcessStatus:
        """Each container's state from its latest run. Raises ``PodNotFound``."""
        runs = self._runs(pod_uid)
        if not runs:
            raise PodNotFound(pod_uid)
        init_latest: dict[str, Path] = {}
        app_latest: dict[str, Path] = {}
        specs: dict[Path, dict] = {}
        for run_dir in runs:
            spec = _shim.read_json(str(run_dir / "spec.json"))
            if spec is None:
                continue
            specs[run_dir] = spec
            for container in spec.get("init_containers") or []:
                init_latest[container["name"]] = run_dir
            for container in spec.get("containers") or []:
                app_latest[container["name"]] = run_dir
        alive = {run_dir: self._run_alive(run_dir) for run_dir in specs}
        latest = runs[-1]
        return PodProcessStatus(
            uid=pod_uid,
            attempt=int(latest.name),
            shim_alive=any(alive.values()),
            init_containers={n: self._container_status(n, r, specs[r], alive[r], True)
                             for n, r in init_latest.items()},
            containers={n: self._container_status(n, r, specs[r], alive[r], False)
                        for n, r in app_latest.items()},
        )

    def _container_status(
        self, name: str, run_dir: Path, spec: dict, shim_alive: bool, is_init: bool
    ) -> ContainerStatus:
        attempt = int(run_dir.name)
        exit_path = run_dir / f"{name}.exit.json"
        record = _shim.read_json(str(exit_path))
        if record is None:
            started = _shim.read_json(str(run_dir / f"{name}.pid"))
            if shim_alive or (started and _shim.process_alive(started["pid"], started.get("startTicks"))):
                if started:
                    return ContainerStatus(name, "running", attempt, pid=started["pid"],
                                           started_at=started.get("startedAt"))
                has_init = bool(spec.get("init_containers"))
                reason = "PodInitializing" if has_init and not is_init else "ContainerCreating"
                return ContainerStatus(name, "waiting", attempt, reason=reason)
            # The shim is gone. If it finished on its own terms, a container without a
            # record was deliberately not started (an init container failed, or a stop).
            if (run_dir / "shim.done").exists() and not started:
                has_init = bool(spec.get("init_containers"))
                reason = "PodInitializing" if has_init and not is_init else "ContainerCreating"
                return ContainerStatus(name, "waiting", attempt, reason=reason)
            shim_pid = (_shim.read_json(str(run_dir / "shim.pid")) or {}).get("pid")
            record = {
                "exitCode": 137,
                "signal": None,
                "reason": "ShimLost",
                "message": f"the pod's supervisor process (shim, pid {shim_pid}) ended without "
                           f"recording this container's exit (killed, or the machine restarted)",
                "startedAt": (started or {}).get("startedAt"),
                "finishedAt": _shim.utc_now(),
            }
            # Recorded once, so that later calls report the same finish time.
            _shim.write_json(str(exit_path), record)
        return ContainerStatus(
            name,
            "terminated",
            attempt,
            reason=record.get("reason"),
            message=record.get("message"),
            exit_code=record.get("exitCode"),
            signal=record.get("signal"),
            started_at=record.get("startedAt"),
            finished_at=record.get("finishedAt"),
        )

    # -- stopping -------------------------------------------------------------------------

    def stop_pod(self, pod_uid: str, grace_seconds: float = 5.0) -> None:
        """Stop every process of the pod: SIGTERM, SIGKILL after ``grace_seconds``. Blocks
        until none is left; stopping a stopped or unknown pod does nothing."""
        runs = self._runs(pod_uid)
        shims: list[dict] = []
        doomed: list[tuple[int, int]] = []
        for run_dir in runs:
            record = _shim.read_json(str(run_dir / "shim.pid"))
            if record and self._run_alive(run_dir):
                shims.append(record)
                doomed += _shim.descendants(record["pid"])
                _shim.write_json(str(run_dir / "stop.json"), {"graceSeconds": grace_seconds})
                _signal(record["pid"], signal.SIGTERM)
            for container in self._container_records(run_dir):
                if container.get("startTicks") is not None:
                    doomed.append((container["pid"], container["startTicks"]))
        deadline = time.monotonic() + grace_seconds + _STOP_SLACK_S
        while any(self._shim_alive(s) for s in shims) and time.monotonic() < deadline:
            time.sleep(_POLL_S)
        for record in shims:
            if self._shim_alive(record):
                # The shim did not finish in time: kill it, then its containers, here.
                _signal(record["pid"], signal.SIGKILL)
                doomed += _shim.descendants(record["pid"])
        for run_dir in runs:
            self._remove_cgroups(run_dir)
        if self.cgroups is not None:
            cgroups.remove_pod(self.cgroups, pod_uid)
        deadline = time.monotonic() + _STOP_SLACK_S
        while True:
            left = [(p, t) for p, t in doomed if _shim.process_alive(p, t)]
            if not left and not any(self._shim_alive(s) for s in shims):
                # A shim killed before it unmounted leaves its containers' overlays behind.
                _shim.release_overlays_under(str(self._pod_dir(pod_uid)))
                return
            if time.monotonic() > deadline:
                raise RuntimeError(f"pod {pod_uid}: processes {[p for p, _ in left]} survived SIGKILL")
            for pid, _ in left:
                _signal(pid, signal.SIGKILL)
            time.sleep(_POLL_S)

    def _remove_cgroups(self, run_dir: Path) -> None:
        """Kill and remove what a run's containers left in their cgroups (its shim is gone). Found
        by the run's spec, not the containers' records: a shim killed while it started a container
        wrote no record, and what it had started (waiting for it, forever) is in the cgroup."""
        spec = _shim.read_json(str(run_dir / "spec.json")) or {}
        pod = spec.get("cgroups")
        if not pod:
            return
        hierarchy = cgroups.Hierarchy.from_json(pod["hierarchy"])
        for container in (spec.get("init_containers") or []) + (spec.get("containers") or []):
            cgroups.remove(hierarchy, f"{pod['pod']}/{container['name']}-{spec['attempt']}")

    def release_network(self, pod_uid: str) -> None:
        """The pod has ended for good (the kubelet's StopPodSandbox): its network namespace goes back
        to the pool where nothing of the pod can be left in it, else it is torn down."""
        if self.network is not None:
            self.network.release(pod_uid, self._netns_reusable(pod_uid))

    def _netns_reusable(self, pod_uid: str) -> bool:
        """Whether the pod's netns is as its CNI ADD left it, and nothing of the pod's address is
        left on the machine: each run's shim saw no IPv4 packet through it (so no socket of a
        connection lingers in it, and conntrack holds no flow of the address); and every container
        of every run was in a user namespace of its own (none was the netns's owner, so none could
        change its interfaces, routes or sysctls)."""
        runs = self._runs(pod_uid)
        if not runs or self.is_alive(pod_uid):
            return False
        for run_dir in runs:
            netns = (_shim.read_json(str(run_dir / "shim.done")) or {}).get("netns") or {}
            spec = _shim.read_json(str(run_dir / "spec.json"))
            if netns.get("packets") != 0 or spec is None:
                return False
            for container in (spec.get("init_containers") or []) + (spec.get("containers") or []):
                oci_linux = ((container.get("oci") or {}).get("config") or {}).get("linux") or {}
                if not (oci_linux.get("uidMappings") or container.get("idmap")):
                    return False
        return True

    def sweep_cgroups(self) -> list[str]:
        """Remove the cgroups of this home's pods that no longer run (their processes were killed
        with their shim, or the pod was removed while the control plane was down); return their uids."""
        if self.cgroups is None:
            return []
        swept = [uid for uid in cgroups.pod_uids(self.cgroups) if not self.is_alive(uid)]
        for uid in swept:
            cgroups.remove_pod(self.cgroups, uid)
        return swept

    def release_cgroups(self) -> None:
        """Kill and remove every cgroup of this home (its control plane and pods have stopped)."""
        if self.cgroups is not None:
            cgroups.remove_home(self.cgroups)

    def part_timings(self) -> dict[str, tuple[int, float]]:
        """The node's timings of each part of pods' starts and ends (``runtime.timings``)."""
        return NODE_TIMINGS.snapshot()

    def stats(self) -> NodeUsage:
        """The node's counters and those of every running container (see `trimaran.runtime.stats`)."""
        return collect(self.cgroups)

    def _shim_alive(self, record: dict) -> bool:
        self._reap()
        return _shim.process_alive(record["pid"], record.get("startTicks"))

    def remove_pod(self, pod_uid: str) -> None:
        """Stop the pod if needed (no grace) and delete its state and emptyDirs. Its logs
        stay until ``delete_logs``; PVC volumes stay."""
        if self.is_alive(pod_uid):
            self.stop_pod(pod_uid, grace_seconds=0)
        if self.cgroups is not None:
            cgroups.remove_pod(self.cgroups, pod_uid)
        # Never delete through a mounted overlay (its writes would land in nothing).
        _shim.release_overlays_under(str(self._pod_dir(pod_uid)))
        shutil.rmtree(self._pod_dir(pod_uid), ignore_errors=True)
        # crun's state of a container whose shim was killed (crun removes it when it ends itself).
        for state in (self.home / "crun").glob(f"{pod_uid}-*"):
            shutil.rmtree(state, ignore_errors=True)
        if self._pod_dir(pod_uid).exists():
            _remove_as_pods(self._pod_dir(pod_uid))
        if self.network is not None:
            self.network.teardown(pod_uid)

    # -- logs ---------------------------------------------------------------------------

    def storage_usage(self, pod: Mapping[str, object]) -> StorageUsage:
        """What the pod holds on the home's filesystem, as the kubelet counts ephemeral storage:
        each container's writable layers (every run's) and logs (every attempt's, rotated files
        too), and each disk-backed emptyDir. Files are counted by the blocks they hold."""
        meta: Mapping = pod.get("metadata") or {}  # type: ignore[assignment]
        spec: Mapping = pod.get("spec") or {}  # type: ignore[assignment]
        pod_dir = self._pod_dir(str(meta.get("uid")))
        logs = self._pod_log_dir(str(meta.get("namespace") or "default"), str(meta.get("name")))
        containers = {}
        for container in [*(spec.get("initContainers") or []), *(spec.get("containers") or [])]:
            name = str(container.get("name"))
            layers = sum(_disk_usage(run / "rootfs" / name / "upper") for run in self._runs(str(meta.get("uid"))))
            containers[name] = layers + _disk_usage(logs / name)
        volumes = {
            str(v.get("name")): _disk_usage(pod_dir / "volumes" / str(v.get("name")))
            for v in spec.get("volumes") or []
            if "emptyDir" in v and (v.get("emptyDir") or {}).get("medium") != "Memory"
        }
        return StorageUsage(containers, volumes)

    def volume_dir(self, pod_uid: str, volume_name: str) -> Path:
        """Where a pod's (disk-backed) emptyDir volume lives on the host, e.g. to read a metrics
        file the pod writes there."""
        return self._pod_dir(pod_uid) / "volumes" / volume_name

    def log_path(
        self, namespace: str, pod_name: str, container: str | None = None, attempt: int | None = None
    ) -> Path:
        """The log file of a container run: the pod's first container and its latest attempt
        by default. The file may not exist yet (the container has not started)."""
        log_dir = self._pod_log_dir(namespace, pod_name)
        if container is None:
            recorded = _shim.read_json(str(log_dir / "containers.json")) or {}
            names = recorded.get("containers") or sorted(
                p.name for p in log_dir.glob("*") if p.is_dir()
            )
            if not names:
                raise FileNotFoundError(f"no logs for pod {namespace}/{pod_name}")
            container = names[0]
        if attempt is None:
            attempts = self.log_attempts(namespace, pod_name, container)
            attempt = attempts[-1] if attempts else 0
        return log_dir / container / f"{attempt}.log"

    def log_files(
        self, namespace: str, pod_name: str, container: str | None = None, attempt: int | None = None
    ) -> list[Path]:
        """:meth:`log_path` with the files it rotated into before it, oldest first."""
        return log_files(self.log_path(namespace, pod_name, container, attempt))

    def log_attempts(self, namespace: str, pod_name: str, container: str) -> list[int]:
        """Attempts that have a log file, oldest first (the one before the last is what
        ``kubectl logs --previous`` shows)."""
        directory = self._pod_log_dir(namespace, pod_name) / container
        try:
            return sorted(int(p.stem) for p in directory.glob("*.log") if p.stem.isdigit())
        except FileNotFoundError:
            return []

    # -- streaming (kubectl exec) ------------------------------------------------------------

    def container_pid(self, pod_uid: str, container: str) -> tuple[int, int | None] | None:
        """``(pid, start ticks)`` of the runtime process the shim recorded for ``container``'s
        running attempt, or None when it has none (not started, ended, or its shim is gone)."""
        for run_dir in reversed(self._runs(pod_uid)):
            record = _shim.read_json(str(run_dir / f"{container}.pid"))
            if record is None:
                continue
            if (run_dir / f"{container}.exit.json").exists() or not self._run_alive(run_dir):
                return None
            return record["pid"], record.get("startTicks")
        return None

    def container_starting(self, pod_uid: str, container: str) -> bool:
        """Whether ``container`` is about to run: its pod's latest run is alive and has neither
        started nor ended it yet (a pod may be Running a moment before each container is)."""
        runs = self._runs(pod_uid)
        if not runs or not self._run_alive(runs[-1]):
            return False
        spec = _shim.read_json(str(runs[-1] / "spec.json")) or {}
        names = {c["name"] for c in (spec.get("init_containers") or []) + (spec.get("containers") or [])}
        return container in names and not (runs[-1] / f"{container}.pid").exists() \
            and not (runs[-1] / f"{container}.exit.json").exists()

    def exec(self, pod_uid: str, container: str, argv: list[str], *, tty: bool, stdin: bool, stdout: bool,
             stderr: bool, size: tuple[int, int] | None = None) -> _streaming.ExecProcess:
        """Run ``argv`` in the pod's running ``container``, as ``kubectl exec`` does (see
        ``runtime/streaming.py``), on a terminal of ``size`` (width, height) with ``tty``. Raises
        ``streaming.ContainerNotFound`` when it is not running."""
        found = self.container_pid(pod_uid, container)
        if found is None:
            raise _streaming.ContainerNotFound(container)
        return _streaming.start_exec(found[0], found[1], container, argv, tty=tty, stdin=stdin, stdout=stdout,
                                     stderr=stderr, size=size, oci=self._oci(pod_uid, container))

    def attach(self, pod_uid: str, container: str) -> _streaming.AttachedStdin | None:
        """The running ``container``'s stdin for an attach session, lent by its shim (see
        ``runtime/streaming.py``); None where it has none to lend (no ``stdin: true``, or
        ``stdinOnce`` closed it), or it does not run."""
        if self.container_pid(pod_uid, container) is None:
            return None
        for run_dir in reversed(self._runs(pod_uid)):
            if (run_dir / f"{container}.pid").exists():
                return _streaming.attach_stdin(str(run_dir / f"{container}.attach"))
        return None

    def _oci(self, pod_uid: str, container: str) -> dict | None:
        """The running container's crun state (``root``, ``id``, ``bundle``), None for bubblewrap's."""
        for run_dir in reversed(self._runs(pod_uid)):
            if (run_dir / f"{container}.pid").exists():
                spec = _shim.read_json(str(run_dir / "spec.json")) or {}
                for entry in (spec.get("init_containers") or []) + (spec.get("containers") or []):
                    if entry.get("name") == container:
                        return entry.get("oci")
                return None
        return None

    def delete_logs(self, namespace: str, pod_name: str) -> None:
        """Forget a deleted pod's logs."""
        shutil.rmtree(self._pod_log_dir(namespace, pod_name), ignore_errors=True)

    # -- what controllers ask of the node besides pods (see NodeAPI) --------------------------

    def update_service_hosts(self, pod_uid: str, hosts: Mapping[str, str]) -> None:
        """Make ``hosts`` (name → IP) the Services' lines of the running pod's /etc/hosts, in place
        (each run's file is bound into its sandbox by inode), as cluster DNS would answer them."""
        lines = [f"{ip}\t{name}{_SERVICE_MARK}\n" for name, ip in hosts.items()]
        for path in (run / "hosts" for run in self._runs(pod_uid)):
            try:
                with open(path, "r+", encoding="utf-8") as handle:
                    kept = [line for line in handle if not line.endswith(_SERVICE_MARK + "\n")]
                    handle.seek(0)
                    handle.write("".join(kept + lines))
                    handle.truncate()
            except FileNotFoundError:
                continue  # a run that failed before its sandbox was made
            except OSError as exc:
                log.warning("cannot update %s: %s", path, exc)

    def pod_at_address(self, ip: str) -> tuple[str, str] | None:
        """``(namespace, name)`` of the pod that has ``ip`` on the pod network now, or None (also
        where pods share the host's network)."""
        return self.network.pod_at(ip) if self.network is not None else None

    def provision_claim(self, namespace: str, claim: str, *, reclaim_delete: bool) -> str:
        """Provision the claim's local volume (a directory, idempotent); where it lies, to show."""
        return str(claims.provision(self.home, namespace, claim, reclaim_delete))

    def release_claim(self, namespace: str, claim: str) -> None:
        """The claim is deleted: remove its volume where it goes with it."""
        claims.release(self.home, namespace, claim)

    def released_claims(self) -> list[tuple[str, str]]:
        """``(namespace, claim)`` of volumes that go with their claims and are still here."""
        return claims.released(self.home)

    def seed_claim_path(self, namespace: str, claim: str, sub_path: str, copy_of: str | None) -> bool:
        """Make ``sub_path`` of the claim's volume, a copy of its sibling ``copy_of`` (see
        ``claims.seed_sub_path``); False when that is missing and it starts empty."""
        return claims.seed_sub_path(self.home, namespace, claim, sub_path, copy_of)

    def make_pod_writable(self, path: Path) -> None:
        """Make the host directory ``path``, where it is missing, for pods to write in through a
        ``hostPath`` volume: world-writable and, as root, the pods' root's, as an emptyDir (its
        missing parents are made as any directory). Raises ``OSError``."""
        if not path.is_dir():
            path.mkdir(parents=True, exist_ok=True)
            hand_to_pods(path)


def _idmap(name: str, security: ContainerSecurity, pods: PodsRange | None) -> IdMap | None:
    """The container's user namespace in ``pods`` (``None``: bubblewrap's single id)."""
    if pods is None:
        return None
    try:
        return container_idmap(security.uid, security.gid, security.groups, pods)
    except IdRangeError as exc:
        raise ConfigError(f"container {name!r}: {exc}") from None


def _host_resolv_conf() -> str:
    try:
        return Path("/etc/resolv.conf").read_text()
    except OSError:
        return ""


def _give_token(directory: Path, owner: Owner, pod: Mapping, base_uid: int) -> None:
    """The service-account files for a pod whose ids are mapped: its root's, readable by its
    containers as the kubelet makes a projected token: 0600 and owned by the containers' uid
    where they all run as one, else 0644 (0640 with fsGroup's group)."""
    spec: Mapping = pod.get("spec") or {}
    pod_context: Mapping = spec.get("securityContext") or {}
    uids = {((c.get("securityContext") or {}).get("runAsUser", pod_context.get("runAsUser")))
            for c in [*(spec.get("initContainers") or []), *(spec.get("containers") or [])]}
    owner.give(directory)
    directory.chmod(0o755)
    only = next(iter(uids)) if len(uids) == 1 else None
    for path in directory.iterdir():
        owner.give(path)
        if isinstance(only, int) and 0 < only < 65536:
            os.chown(path, base_uid + only, -1)
        elif path.stat().st_mode & 0o077 == 0:
            path.chmod(0o640 if owner.fs_group is not None else 0o644)


def _remove_as_pods(path: Path) -> None:
    """Remove what an ordinary user's pods left under ``path`` owned by subordinate ids (a
    process that switched uid inside): as root of a sandbox whose ids are the user and its
    range, the only place the user may touch them."""
    pods = pods_range()
    if pods is None or pods.owner is None or not userns_available():
        return
    idmap = container_idmap(0, 0, (), pods)
    argv = build_tool_argv(["rm", "-rf", "--", str(path)], writable=[path.parent], mapped=True)
    with tempfile.NamedTemporaryFile("w", suffix=".json") as spec:
        json.dump({"argv": argv, "idmap": idmap.to_json()}, spec)
        spec.flush()
        subprocess.run(_shim.command("--run", spec.name), stdin=subprocess.DEVNULL,
                       capture_output=True, timeout=300, check=False)


def _disk_usage(path: Path) -> int:
    """Bytes the files under ``path`` hold on disk (``du``: blocks, links not followed, each inode
    once, mounts below it not entered)."""
    total, seen = 0, set()
    try:
        device = path.lstat().st_dev
    except OSError:
        return 0
    stack = [str(path)]
    while stack:
        try:
            entries = os.scandir(stack.pop())
        except OSError:
            continue  # gone meanwhile, or unreadable
        with entries:
            for entry in entries:
                try:
                    stat = entry.stat(follow_symlinks=False)
                except OSError:
                    continue
                if stat.st_dev != device or (stat.st_ino in seen and stat.st_nlink > 1):
                    continue
                if stat.st_nlink > 1:
                    seen.add(stat.st_ino)
                total += stat.st_blocks * 512
                if entry.is_dir(follow_symlinks=False):
                    stack.append(entry.path)
    return total


def _with_stop_blocked(spawn: Callable[[], subprocess.Popen]) -> subprocess.Popen:
    # Blocked across the spawn (the child inherits the mask through exec) until the shim has its
    # handlers: a stop_pod right after start_pod then stops the pod in order.
    previous_mask = signal.pthread_sigmask(signal.SIG_BLOCK, _shim.STOP_SIGNALS)
    try:
        return spawn()
    finally:
        signal.pthread_sigmask(signal.SIG_SETMASK, previous_mask)


def _end_standby(proc: subprocess.Popen) -> None:
    """End a shim started ahead that no run took: at end of its stdin it exits."""
    try:
        assert proc.stdin is not None
        proc.stdin.close()
        proc.wait(timeout=5)
    except (OSError, subprocess.TimeoutExpired):
        proc.kill()
        proc.wait()


def _call_after_exit(proc: subprocess.Popen, run_dir: Path, spawned: float, callback: Callable[[], None]) -> None:
    proc.wait()
    _count_shim_timings(run_dir, spawned, time.monotonic())
    callback()


def _count_shim_timings(run_dir: Path, spawned: float, noticed: float) -> None:
    """Add what the shim spawned at ``spawned`` (monotonic) recorded of its run to the node's timings
    (see `trimaran.runtime.timings`); nothing for a shim that ended without ``shim.done``."""
    stamps = (_shim.read_json(str(run_dir / "shim.done")) or {}).get("timings")
    if not stamps:
        return
    began, done = stamps["main"], stamps["done"]
    NODE_TIMINGS.add("shim.startup", began - spawned)
    starts = [c["start"] for c in stamps["containers"].values() if "start" in c]
    if starts:
        NODE_TIMINGS.add("shim.prepare", min(starts) - began)
    # A container's end is its reaping and the removal of its cgroup.
    ended = [c["reaped"] + c.get("cgroup.remove", 0.0) for c in stamps["containers"].values() if "reaped" in c]
    for container in stamps["containers"].values():
        for part in ("cgroup.create", "cgroup.remove"):
            if part in container:
                NODE_TIMINGS.add(part, container[part])
        if "spawned" in container and "reaped" in container:
            NODE_TIMINGS.add("container.run", container["reaped"] - container["spawned"])
    if ended:
        NODE_TIMINGS.add("shim.finish", done - max(ended))
    NODE_TIMINGS.add("exit.noticed", noticed - done)


def _signal(pid: int, sig: int) -> None:
    try:
        os.kill(pid, sig)
    except (ProcessLookupError, PermissionError):
        pass

