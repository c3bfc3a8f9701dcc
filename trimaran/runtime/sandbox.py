"""The bubblewrap command line that runs one container.

The sandbox root is a tmpfs holding the host's top-level entries bound read-only (symlinks
such as /bin -> usr/bin recreated), so the host's programs and the control plane's Python
(including /root/.pyenv and /work) are visible while nothing outside volumes is writable on
the host, and new mount points such as /app or /output can be created. On top come a fresh
/dev, /proc and /tmp, the volumes at their mountPaths, a private /dev/shm (64Mi as the
container runtimes' default, or the sizeLimit of a memory emptyDir mounted there), a pid,
IPC and UTS namespace with the pod's hostname, and generated /etc/hosts and /etc/hostname.
The network is the host's: replicas reach each other over loopback.

A mount point whose parent is a read-only host directory (``/etc/config`` with /etc from the
host) cannot be created in that directory; the directories on its way are rebuilt as tmpfs
directories whose entries are bound one by one instead.
"""

from __future__ import annotations

import glob
import os
import shutil
import sys
from collections.abc import Mapping, Sequence
from dataclasses import replace
from pathlib import Path, PurePosixPath

from trimaran.runtime.volumes import Mount

__all__ = [
    "SandboxUnavailable",
    "DEFAULT_SHM_SIZE",
    "find_bwrap",
    "sandbox_available",
    "gpu_device_paths",
    "hosts_file",
    "build_argv",
]

DEFAULT_SHM_SIZE = 64 * 1024 * 1024
_FRESH_AT_ROOT = ("proc", "dev", "tmp")  # replaced by --proc, --dev and --tmpfs


class SandboxUnavailable(RuntimeError):
    """bubblewrap is missing: pods cannot run without writing to the host's paths."""

    def __init__(self) -> None:
        super().__init__(
            "bubblewrap (bwrap) is not installed; trimaran runs every pod in a bubblewrap "
            "sandbox so that volumes appear at their mountPaths without touching the host. "
            "Install it with `apt-get install bubblewrap` (Debian/Ubuntu) or "
            "`dnf install bubblewrap` (Fedora/RHEL)."
        )


def find_bwrap() -> str | None:
    """Path of the bwrap executable, if installed."""
    found = shutil.which("bwrap")
    if found:
        return found
    return "/usr/bin/bwrap" if os.access("/usr/bin/bwrap", os.X_OK) else None


def sandbox_available() -> bool:
    """Whether pods can be started (bubblewrap is installed)."""
    return find_bwrap() is not None


def gpu_device_paths() -> list[str]:
    """The NVIDIA device nodes a GPU container needs: every GPU's node (CUDA_VISIBLE_DEVICES
    then selects by index, which needs them all), the control and UVM nodes, MIG capabilities."""
    return sorted(glob.glob("/dev/nvidia*"))


def hosts_file(hostname: str, hosts: Mapping[str, str], pod_ip: str = "127.0.0.1") -> str:
    """An /etc/hosts in the kubelet's layout: localhost entries, then ``hosts`` (name → ip)
    grouped by address, with the pod's own hostname mapped to ``pod_ip`` unless given."""
    by_ip: dict[str, list[str]] = {}
    for name, ip in hosts.items():
        by_ip.setdefault(ip, []).append(name)
    if hostname not in hosts:
        by_ip.setdefault(pod_ip, []).insert(0, hostname)
    lines = [
        "# Kubernetes-managed hosts file (written by trimaran).",
        "127.0.0.1\tlocalhost",
        "::1\tlocalhost ip6-localhost ip6-loopback",
        "fe00::0\tip6-localnet",
        "fe00::0\tip6-mcastprefix",
        "fe00::1\tip6-allnodes",
        "fe00::2\tip6-allrouters",
    ]
    lines += [f"{ip}\t{' '.join(names)}" for ip, names in by_ip.items()]
    return "\n".join(lines) + "\n"


def _needs_creating(path: str, under_mounts: Sequence[str]) -> bool:
    if os.path.lexists(path):
        return False
    # Inside another mount the point is created in that volume, not in a host directory.
    return not any(path.startswith(m.rstrip("/") + "/") for m in under_mounts)


def _through_host_links(path: str, mount_targets: Sequence[str]) -> str:
    """Where a mount point lands when a directory on its way is a host symlink (``/var/run`` →
    ``/run``): the sandbox recreates the host's symlinks, and bubblewrap cannot create a mount
    point through one, so the mount goes to the directory the link leads to."""
    pure = PurePosixPath(path)
    if (pure.parts[1:2] and pure.parts[1] in _FRESH_AT_ROOT) or any(
            path.startswith(m.rstrip("/") + "/") for m in mount_targets):
        return path
    existing = pure
    while not os.path.lexists(existing):
        existing = existing.parent
    return str(PurePosixPath(os.path.realpath(existing)) / pure.relative_to(existing))


def _rebuilt_dirs(paths: Sequence[str], mount_targets: Sequence[str]) -> set[str]:
    rebuilt: set[str] = set()
    for path in paths:
        if not _needs_creating(path, mount_targets):
            continue
        parent = PurePosixPath(path).parent
        while not os.path.isdir(parent):
            parent = parent.parent
        if parent.parts[1:2] and parent.parts[1] in _FRESH_AT_ROOT:
            continue  # /tmp, /dev and /proc are fresh and writable inside the sandbox
        for ancestor in (parent, *parent.parents):
            if str(ancestor) != "/":
                rebuilt.add(str(ancestor))
    return rebuilt


def _bind_dir(directory: str, rebuilt: set[str]) -> list[str]:
    args: list[str] = []
    with os.scandir(directory) as entries:
        for entry in sorted(entries, key=lambda e: e.name):
            if directory == "/" and entry.name in _FRESH_AT_ROOT:
                continue
            path = os.path.join(directory, entry.name)
            if entry.is_symlink():
                args += ["--symlink", os.readlink(path), path]
            elif path in rebuilt and entry.is_dir(follow_symlinks=False):
                args += ["--dir", path, *_bind_dir(path, rebuilt)]
            else:
                # -try: an entry removed since the scan is simply absent, not a failed start.
                args += ["--ro-bind-try", path, path]
    return args


def interpreter_paths(prefixes: Sequence[str] | None = None) -> list[str]:
    """The Python environments pods run with that a fresh /tmp would hide.

    Pods run this machine's Python (the control plane's interpreter comes first on PATH). When
    that environment lives under /tmp (a checkout there, a CI clone), it must stay visible in the
    sandbox, read-only, at the same path.
    """
    if prefixes is None:
        # Trimaran's own checkout too: an editable install there is what `import trimaran`
        # (report_metrics, the SDK's trial runner) finds inside a pod.
        checkout = str(Path(__file__).resolve().parents[2])
        prefixes = [sys.prefix, sys.base_prefix, sys.exec_prefix, checkout]
    found: list[str] = []
    for prefix in prefixes:
        real = os.path.realpath(prefix)
        parts = PurePosixPath(real).parts
        if len(parts) > 2 and parts[1] in _FRESH_AT_ROOT and os.path.isdir(real) and real not in found:
            found.append(real)
    return found


def build_argv(
    command: Sequence[str],
    *,
    mounts: Sequence[Mount],
    hostname: str,
    hosts_path: Path,
    hostname_path: Path,
    working_dir: str | None = None,
    devices: Sequence[str] = (),
    termination_log: tuple[Path, str] | None = None,
    bwrap: str | None = None,
    keep_visible: Sequence[str] | None = None,
    hidden: Sequence[str] = (),
) -> list[str]:
    """The full argv (bwrap …  -- command) for one container.

    ``hosts_path`` / ``hostname_path`` are the generated files bound at /etc/hosts and
    /etc/hostname; ``devices`` are host device nodes bound in (GPUs); ``termination_log`` is
    (host file, path in the sandbox) for the container's termination message. Raises
    :class:`SandboxUnavailable` when bwrap is missing. ``keep_visible`` are directories under
    the fresh /tmp to bind read-only (default: :func:`interpreter_paths`). ``hidden`` are host
    directories the container must not read (other pods' state), covered by an empty tmpfs.
    """
    bwrap = bwrap or find_bwrap()
    if bwrap is None:
        raise SandboxUnavailable()
    if len(hostname) > 64:
        raise ValueError(f"hostname {hostname!r} is longer than 64 characters")
    cwd = working_dir or "/"
    written = [m.target for m in mounts]
    mounts = [replace(m, target=_through_host_links(m.target, written)) for m in mounts]
    targets = [m.target for m in mounts]
    to_create = [*targets, cwd]
    if termination_log:
        to_create.append(termination_log[1])
    args = [bwrap, "--tmpfs", "/", *_bind_dir("/", _rebuilt_dirs(to_create, targets))]
    args += ["--dev", "/dev", "--proc", "/proc", "--tmpfs", "/tmp"]
    for path in interpreter_paths() if keep_visible is None else keep_visible:
        args += ["--ro-bind", path, path]
    for path in hidden:
        if os.path.isdir(path):
            # Bind sources below are read from the host's tree, so hiding does not hide them.
            args += ["--tmpfs", path]
    for device in devices:
        args += ["--dev-bind-try", device, device]
    # Parents before children, so a mount inside another volume lands in that volume.
    for mount in sorted(mounts, key=lambda m: len(PurePosixPath(m.target).parts)):
        if mount.source is None:
            if mount.size is not None:
                args += ["--size", str(mount.size)]
            args += ["--tmpfs", mount.target]
        else:
            args += ["--ro-bind" if mount.read_only else "--bind", str(mount.source), mount.target]
    if "/dev/shm" not in targets:
        args += ["--size", str(DEFAULT_SHM_SIZE), "--tmpfs", "/dev/shm"]
    args += ["--ro-bind", str(hosts_path), "/etc/hosts"]
    args += ["--ro-bind", str(hostname_path), "/etc/hostname"]
    if termination_log:
        args += ["--bind", str(termination_log[0]), termination_log[1]]
    if _needs_creating(cwd, targets) or any(cwd.startswith(t.rstrip("/") + "/") for t in targets):
        args += ["--dir", cwd]
    args += [
        "--unshare-pid",
        "--unshare-ipc",
        "--unshare-uts",
        "--hostname", hostname,
        "--die-with-parent",
        "--chdir", cwd,
        "--",
        *command,
    ]
    return args
