"""Containers run by an OCI runtime (crun, from the distribution) from a bundle per container.

The sandbox's layout (what a pod sees, :mod:`trimaran.runtime.sandbox`) is written once, in
bubblewrap's option language (``build_argv``, ``build_image_argv``); :func:`bundle` reads that
command line and writes the same container as an OCI runtime's ``config.json``, so both runtimes
show a pod exactly the same filesystem:

- ``root``: a container that runs its image has the overlay's merged directory; a host-process
  container has a fresh tmpfs (``rootfs`` in the bundle, mounted by the shim in a mount
  namespace of crun's own, owned by the container's root, so it ends with the container) in
  which the shim first makes the directories and symlinks bubblewrap would make (``skeleton``);
  the host's read-only directories are then bind mounts like every other;
- ``mounts``: the runtimes' defaults (``/proc``; ``/dev`` a tmpfs with ``/dev/pts``,
  ``/dev/mqueue`` and the pod's ``/dev/shm``), the host's ``/sys`` read-only (bound, not a new
  sysfs: the pod is in the host's network namespace, whose sysfs a user namespace may not
  mount), volumes, ``/etc/hosts``, ``/etc/hostname`` and (images) ``/etc/resolv.conf``, each
  read-only bind recursively so (``rro``);
- ``linux.maskedPaths``/``readonlyPaths``: the kubelet's lists (:data:`sandbox.MASKED_PATHS`,
  :data:`sandbox.READ_ONLY_PATHS`), none for ``privileged`` or ``procMount: Unmasked``;
- ``linux.namespaces``: user (``uidMappings``/``gidMappings`` into the pods' range, as
  :mod:`trimaran.runtime.idmap` says), pid, ipc, uts, mount; ``network`` by path where the pod
  has a network namespace of its own, else none (the host's);
- ``process``: args behind an init (``tini``, bound at :data:`INIT_PATH`: as under bubblewrap, the
  container's command is not its pid namespace's init, so a SIGTERM it has no handler for still
  ends it, and it exits 128+N when signal N kills it; ``-p SIGKILL``: it dies with crun, and crun
  with the shim, as bubblewrap's ``--die-with-parent``), env, cwd, user (uid, gid, supplementary
  groups), capabilities (bounding = effective = permitted = the container's set; ambient and
  inheritable too for a non-root user, who would otherwise lose them at exec, as bubblewrap gives
  them), ``noNewPrivileges`` always (as under bubblewrap), rlimits inherited from the shim;
- ``linux.seccomp``: ``RuntimeDefault`` in its deny-list form (Docker's shape: default
  ``SCMP_ACT_ALLOW`` and the calls containerd's profile allows only with ``CAP_SYS_ADMIN`` and the
  like answered EPERM, ``clone``/``unshare`` with a namespace flag EPERM, ``clone3`` ENOSYS so libc
  falls back to ``clone``): the same calls the bubblewrap path's compiled program blocks
  (:mod:`trimaran.runtime.security`), smaller than containerd's allow-list of ~350 names. crun
  loads that compiled program itself (annotation ``run.oci.seccomp_bpf_data``), which spares it
  compiling the section at every start.

The shim (the pod's conmon) runs ``crun run`` in the foreground as its child (:func:`run_argv`)
with its state under the home (``$TRIMARAN_HOME/crun``), so two control planes never share
container ids; ids carry the pod's uid, attempt and container name.

crun is used where the control plane is root (crun writes the id maps itself and, running as
root, opens every bind source, so nothing needs staging as for the unprivileged bubblewrap) and
crun and ``tini-static`` are installed; ``TRIMARAN_RUNTIME=bwrap`` keeps bubblewrap. An ordinary
user's control plane keeps bubblewrap (its ``newuidmap`` path).
"""

from __future__ import annotations

import base64
import functools
import os
import shutil
from collections.abc import Mapping, Sequence
from pathlib import Path

from trimaran.runtime.idmap import IdMap
from trimaran.runtime.sandbox import MASKED_PATHS, READ_ONLY_PATHS
from trimaran.runtime.security import (
    DENIED_SYSCALLS,
    NAMESPACE_FLAGS,
    PERSONALITY_FLAGS,
    PERSONALITY_QUERY_BIT,
    ContainerSecurity,
    seccomp_program,
)

__all__ = ["INIT_PATH", "find_crun", "find_init", "oci_available", "bundle", "container_id", "run_argv",
           "seccomp_section"]

INIT_PATH = "/dev/init"  # where the init is bound in every container (docker run --init's role)
_EPERM, _ENOSYS = 1, 38
_DEV_MOUNTS = (
    {"destination": "/dev", "type": "tmpfs", "source": "tmpfs",
     "options": ["nosuid", "strictatime", "mode=755", "size=65536k"]},
    {"destination": "/dev/pts", "type": "devpts", "source": "devpts",
     "options": ["nosuid", "noexec", "newinstance", "ptmxmode=0666", "mode=0620"]},
    {"destination": "/dev/mqueue", "type": "mqueue", "source": "mqueue", "options": ["nosuid", "noexec", "nodev"]},
)
_PROC_MOUNT = {"destination": "/proc", "type": "proc", "source": "proc", "options": ["nosuid", "noexec", "nodev"]}
_BIND_OPTIONS = {"--bind": False, "--bind-try": False, "--ro-bind": True, "--ro-bind-try": True,
                 "--dev-bind": False, "--dev-bind-try": False}
# bubblewrap options that take arguments and that the config says in its own fields.
_FIELDS = {"--hostname": 1, "--chdir": 1, "--cap-add": 1, "--cap-drop": 1, "--uid": 1, "--gid": 1, "--seccomp": 1}


def find_crun() -> str | None:
    """Path of the crun executable, if installed."""
    return shutil.which("crun") or ("/usr/bin/crun" if os.access("/usr/bin/crun", os.X_OK) else None)


def find_init() -> str | None:
    """The static ``tini`` (bound into images, which lack this host's libraries)."""
    return shutil.which("tini-static") or ("/usr/bin/tini-static" if os.access("/usr/bin/tini-static", os.X_OK)
                                           else None)


@functools.cache
def oci_available() -> bool:
    """Whether containers run by crun here (see the module's docstring)."""
    if os.environ.get("TRIMARAN_RUNTIME", "") == "bwrap" or os.geteuid() != 0:
        return False
    return find_crun() is not None and find_init() is not None


def seccomp_section() -> dict:
    """RuntimeDefault as an OCI ``linux.seccomp`` section (the deny-list form)."""
    def masked(flag: int, mask: int | None = None) -> dict:
        # libseccomp's MASKED_EQ: (arg & value) == valueTwo.
        return {"index": 0, "value": flag if mask is None else mask, "valueTwo": flag, "op": "SCMP_CMP_MASKED_EQ"}

    syscalls: list[dict] = [{"names": list(DENIED_SYSCALLS), "action": "SCMP_ACT_ERRNO", "errnoRet": _EPERM}]
    # One rule per flag: the conditions of one rule are ANDed, rules are ORed.
    syscalls += [{"names": ["unshare", "clone"], "action": "SCMP_ACT_ERRNO", "errnoRet": _EPERM,
                  "args": [masked(flag)]} for flag in NAMESPACE_FLAGS]
    syscalls.append({"names": ["clone3"], "action": "SCMP_ACT_ERRNO", "errnoRet": _ENOSYS})
    syscalls += [{"names": ["personality"], "action": "SCMP_ACT_ERRNO", "errnoRet": _EPERM,
                  "args": [masked(flag, flag | PERSONALITY_QUERY_BIT)]} for flag in PERSONALITY_FLAGS]
    return {"defaultAction": "SCMP_ACT_ALLOW",
            "architectures": ["SCMP_ARCH_X86_64", "SCMP_ARCH_X86", "SCMP_ARCH_X32"], "syscalls": syscalls}


@functools.cache
def _program_base64(profile: str) -> str:
    return base64.b64encode(seccomp_program(profile)).decode()


@functools.cache
def _seccomp_section_cached() -> dict:
    return seccomp_section()


def _under(path: str, directory: str) -> bool:
    return path == directory or path.startswith(directory.rstrip("/") + "/")


def bundle(argv: Sequence[str], *, env: Mapping[str, str], security: ContainerSecurity, idmap: IdMap,
           netns: str | None = None) -> tuple[dict, list[list], bool]:
    """The OCI config of the container bubblewrap's ``argv`` (from ``sandbox.build_argv`` or
    ``build_image_argv``) describes, ``env`` its environment, ``idmap`` its user namespace,
    ``netns`` the pod's network namespace (``None``: the host's).

    Returns ``(config, skeleton, fresh_root)``: ``fresh_root`` says the root is a tmpfs the shim
    mounts at the bundle's ``rootfs`` (host-process containers), in which it first makes the
    ``skeleton`` entries (``["dir", path, mode]``, ``["symlink", target, path]``); else the root
    is the directory the argv binds at ``/`` (the image's overlay)."""
    mounts: list[dict] = []
    skeleton: list[list] = []
    masked: list[str] = []
    read_only: list[str] = []
    root_path = "rootfs"
    fresh_root = False
    root_read_only = False
    hostname = ""
    cwd = "/"
    perms: int | None = None
    size: int | None = None
    index = 1
    command: list[str] = []
    while index < len(argv):
        option = argv[index]
        if option == "--":
            command = list(argv[index + 1:])
            break
        if option in _BIND_OPTIONS:
            source, target = argv[index + 1], argv[index + 2]
            index += 3
            if target in MASKED_PATHS:
                masked.append(target)
                continue
            if target in READ_ONLY_PATHS and source == target:
                read_only.append(target)
                continue
            if target == "/":
                root_path = source
                continue
            if option.endswith("-try") and not os.path.exists(source):
                continue
            # rro (read-only submounts too, as bubblewrap's binds) only for a directory: crun 1.8
            # cannot apply it to a file, which holds no submounts anyway.
            read_only_option = "rro" if os.path.isdir(source) else "ro"
            options = ["rbind", read_only_option if _BIND_OPTIONS[option] else "rw"]
            if not option.startswith("--dev"):
                options.append("nosuid")
            mounts.append({"destination": target, "type": "bind", "source": source, "options": options})
            continue
        if option == "--tmpfs":
            target = argv[index + 1]
            index += 2
            if target == "/" and not mounts:
                fresh_root = True
            elif target in MASKED_PATHS:
                masked.append(target)
            else:
                options = ["nosuid", "nodev", f"mode={perms if perms is not None else 0o755:o}"]
                if size is not None:
                    options.append(f"size={size}")
                mounts.append({"destination": target, "type": "tmpfs", "source": "tmpfs", "options": options})
            perms = size = None
            continue
        if option in ("--dir", "--symlink"):
            values = argv[index + 1:index + (2 if option == "--dir" else 3)]
            index += 1 + len(values)
            path = values[-1]
            # Only what lies in the fresh root itself; a directory inside a mount (a working
            # directory in a volume) is made by crun as the container's cwd.
            if fresh_root and not any(_under(path, m["destination"]) for m in mounts):
                skeleton.append(["dir", path, perms if perms is not None else 0o755] if option == "--dir"
                                else ["symlink", values[0], path])
            perms = None
            continue
        if option == "--remount-ro":
            target = argv[index + 1]
            index += 2
            if target == "/":
                root_read_only = True
            elif target not in masked:
                for mount in reversed(mounts):
                    if mount["destination"] == target:
                        mount["options"].append("ro")
                        break
            continue
        if option == "--perms":
            perms = int(argv[index + 1], 8)
        elif option == "--size":
            size = int(argv[index + 1])
        elif option == "--dev":
            mounts += [dict(m, options=list(m["options"])) for m in _DEV_MOUNTS]
        elif option == "--proc":
            mounts.append(dict(_PROC_MOUNT, options=list(_PROC_MOUNT["options"])))
        elif option == "--hostname":
            hostname = argv[index + 1]
        elif option == "--chdir":
            cwd = argv[index + 1]
        arity = 1 if option in ("--perms", "--size", "--dev", "--proc") else _FIELDS.get(option, 0)
        index += 1 + arity
    init = find_init()
    if init is None or not command:
        raise ValueError("no init (tini-static) or no command for the container")
    mounts.append({"destination": INIT_PATH, "type": "bind", "source": init, "options": ["bind", "ro", "nosuid"]})
    caps = [f"CAP_{name}" for name in sorted(security.capabilities)]
    capabilities = {"bounding": caps, "effective": caps, "permitted": caps}
    if security.uid != 0:
        capabilities.update(inheritable=caps, ambient=caps)
    namespaces: list[dict] = [{"type": kind} for kind in ("user", "pid", "ipc", "uts", "mount")]
    if netns is not None:
        namespaces.append({"type": "network", "path": netns})
    linux: dict = {
        "namespaces": namespaces,
        "uidMappings": [{"containerID": a, "hostID": b, "size": c} for a, b, c in idmap.uid_map],
        "gidMappings": [{"containerID": a, "hostID": b, "size": c} for a, b, c in idmap.gid_map],
        "maskedPaths": masked,
        "readonlyPaths": read_only,
    }
    annotations = {}
    if security.seccomp is not None:
        linux["seccomp"] = _seccomp_section_cached()
        # crun loads this program, the one bubblewrap gets, instead of compiling the section with
        # libseccomp at every start (2 ms of CPU a container); the section says the same for
        # any other runtime.
        annotations["run.oci.seccomp_bpf_data"] = _program_base64(security.seccomp)
    config = {
        "ociVersion": "1.0.2",
        "process": {
            "terminal": False,
            "user": {"uid": security.uid, "gid": security.gid, "additionalGids": list(security.groups)},
            "args": [INIT_PATH, "-p", "SIGKILL", "--", *command],
            "env": [f"{key}={value}" for key, value in env.items()],
            "cwd": cwd,
            "capabilities": capabilities,
            "noNewPrivileges": True,
        },
        "root": {"path": root_path, "readonly": root_read_only},
        "hostname": hostname,
        "mounts": mounts,
        "linux": linux,
        "annotations": annotations,
    }
    return config, skeleton, fresh_root


def container_id(pod_uid: str, attempt: int, name: str) -> str:
    """The container's id in crun's state: the pod's uid, its attempt, the container's name."""
    return f"{pod_uid}-{attempt}-{name}"


def run_argv(crun: str, state_root: Path, bundle_dir: Path, cid: str) -> list[str]:
    """``crun run`` in the foreground: the caller (the shim) keeps its stdio and waits for it.
    No cgroup manager: the shim puts crun's process in the container's cgroup before exec, and
    the container inherits it. Errors go to ``crun.log`` in the bundle, for the exit's reason."""
    return [crun, "--root", str(state_root), f"--log=file:{bundle_dir / 'crun.log'}", "--cgroup-manager=disabled",
            "run", "--bundle", str(bundle_dir), cid]
