"""The bubblewrap command line that runs one container, and so the layout of every container:
where crun runs containers (a root control plane), :func:`trimaran.runtime.oci.bundle` turns this
command line into the OCI bundle's ``config.json``, so both runtimes show a pod exactly what is
described below (crun's differences: a pod's containers share their user, IPC and UTS
namespaces, and the command runs behind ``tini`` as its pid namespace's init).

What a pod sees (everything else of the host is absent):

- read-only from the host: ``/usr``, ``/bin``, ``/sbin``, ``/lib*``, ``/opt``, ``/sys`` and
  ``/etc`` less its entries other users may not read (``/etc/shadow``, ``gshadow``,
  ``sudoers``, SSH host keys, ``/etc/ssl/private``...: covered by ``/dev/null`` or an empty
  tmpfs), and the control plane's Python (``sys.prefix``, its base and the checkout trimaran
  runs from, e.g. ``/root/.pyenv/versions/3.11.7`` and ``/work/main``, less its ``.git``) at
  their own paths;
- fresh: a tmpfs root (so new mount points such as /app can be created), ``/dev``,
  ``/proc`` (the pod's pid namespace; ``/proc/sys``, ``/proc/irq``, ``/proc/bus``, ``/proc/fs``
  and ``/proc/sysrq-trigger`` read-only, ``/proc/kcore``, ``/proc/keys``, ``/proc/timer_list``
  and the like masked, as ``/sys/firmware``), ``/tmp``, an empty ``/run`` (no host sockets) with
  ``/var/run`` and ``/var/lock`` leading there, an empty ``/var/tmp``, a private ``/dev/shm``
  (64Mi as the container runtimes' default, or the sizeLimit of a memory emptyDir mounted
  there), generated /etc/hosts and /etc/hostname;
- the pod's own volumes at their mountPaths.

Never visible: ``$TRIMARAN_HOME`` (the store, tokens, kubeconfig, keys, other pods' state and
volumes: covered by an empty tmpfs where it lies inside a visible directory), ``/root``,
``/home`` and so every user's SSH and cloud credentials, the rest of ``/var``, ``/run``,
``/mnt``, ``/srv``, ``/media`` and whatever else lies at the host's root.

The container runs in user, pid, IPC, mount and UTS namespaces of its own, as
``securityContext`` says (see :mod:`trimaran.runtime.security`): uid 0 inside unless
``runAsUser`` says otherwise, holding its capabilities only within those namespaces. No pod is
the host's uid 0: its ids map into the pods' range (:mod:`trimaran.runtime.idmap`; as root,
container id N is host id BASE+N of /etc/subuid's ``trimaran`` entry), and the shim writes the
maps while bubblewrap waits (``--userns-block-fd``, ``shim.spawn_mapped``); an ordinary user
without a subordinate range gets bubblewrap's own single id (``--uid``). Where no user
namespace can be made and the control plane is root, it runs as an unprivileged uid instead
(``setpriv``). ``/proc`` and ``/sys`` are masked and partly read-only as the kubelet asks of
containerd (:data:`MASKED_PATHS`, :data:`READ_ONLY_PATHS`; none for ``privileged`` or
``procMount: Unmasked``). The network is the host's: replicas reach each other over loopback.

A container that runs its image sees none of this host's filesystem: its root is the image's
root filesystem, writable through an overlay made per container (see :func:`build_image_argv`).

A mount point whose parent is a read-only host directory (``/etc/config`` with /etc from the
host) cannot be created in that directory; the directories on its way are rebuilt as tmpfs
directories whose entries are bound one by one instead.
"""

from __future__ import annotations

import functools
import glob
import logging
import os
import shutil
import stat
import subprocess
import sys
from collections.abc import Mapping, Sequence
from dataclasses import replace
from pathlib import Path, PurePosixPath

from trimaran.runtime.security import DEFAULT_CAPABILITIES, NOBODY, ContainerSecurity
from trimaran.runtime.volumes import Mount

__all__ = [
    "SandboxUnavailable",
    "DEFAULT_SHM_SIZE",
    "find_bwrap",
    "sandbox_available",
    "userns_available",
    "private_etc_entries",
    "interpreter_paths",
    "gpu_device_paths",
    "hosts_file",
    "proc_masks",
    "build_argv",
    "build_image_argv",
    "build_tool_argv",
    "path_in_root",
    "MASKED_PATHS",
    "READ_ONLY_PATHS",
]

log = logging.getLogger(__name__)

DEFAULT_SHM_SIZE = 64 * 1024 * 1024
_FRESH_AT_ROOT = ("proc", "dev", "tmp", "run", "var")  # made by bwrap, never the host's
# The host's top-level entries a host-mode process needs (symlinks such as /bin -> usr/bin are
# recreated as links).
_VISIBLE_AT_ROOT = ("bin", "sbin", "lib", "lib32", "lib64", "libx32", "usr", "etc", "opt", "sys")
_VAR_LINKS = (("../run", "/var/run"), ("../run/lock", "/var/lock"))
_RUNTIME_DIRS_ON_RO_ROOT = ("/tmp", "/run")  # read-only too when readOnlyRootFilesystem
# The kubelet's defaultMaskedPaths and defaultReadonlyPaths (pkg/securitycontext/util.go, "keep
# in sync with moby"): what containerd and CRI-O then hide or make read-only in every container.
MASKED_PATHS = ("/proc/asound", "/proc/acpi", "/proc/kcore", "/proc/keys", "/proc/latency_stats",
                "/proc/timer_list", "/proc/timer_stats", "/proc/sched_debug", "/proc/scsi", "/sys/firmware",
                "/sys/devices/virtual/powercap")
READ_ONLY_PATHS = ("/proc/bus", "/proc/fs", "/proc/irq", "/proc/sys", "/proc/sysrq-trigger")

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


@functools.cache
def userns_available(bwrap: str | None = None) -> bool:
    """Whether bubblewrap can make a user namespace here (checked once per process)."""
    bwrap = bwrap or find_bwrap()
    if bwrap is None:
        return False
    probe = [bwrap, "--unshare-user", "--ro-bind", "/", "/", "--", "true"]
    # The answer holds for the process's life, so one failure that passes (a busy machine's timeout,
    # user namespaces briefly at their limit) must not decide it: a few tries, and the last reason logged.
    reason = ""
    for _ in range(3):
        try:
            done = subprocess.run(probe, stdin=subprocess.DEVNULL, stdout=subprocess.DEVNULL,
                                  stderr=subprocess.PIPE, timeout=30)
        except (OSError, subprocess.TimeoutExpired) as exc:
            reason = str(exc)
            continue
        if done.returncode == 0:
            return True
        reason = done.stderr.decode(errors="replace").strip()
    log.warning("bubblewrap cannot make a user namespace here (%s): pods run without one", reason)
    return False


@functools.cache
def private_etc_entries(etc: str = "/etc") -> tuple[tuple[str, bool], ...]:
    """``(path, is_dir)`` of every entry under ``etc`` that other users may not read
    (``shadow``, ``sudoers``, SSH host keys, ``ssl/private``...). Where a pod gets the control
    plane's own uid (an ordinary user without a subordinate range), it could read what its
    owner may; these are covered up in every case. Walked once per process."""
    found: list[tuple[str, bool]] = []
    for root, dirs, files in os.walk(etc):
        for names, is_dir in ((files, False), (dirs, True)):
            for name in sorted(names):
                path = os.path.join(root, name)
                try:
                    mode = os.lstat(path).st_mode
                except OSError:
                    continue
                # A file others cannot read; a directory others cannot list or enter.
                private = (stat.S_ISDIR(mode) and mode & (stat.S_IROTH | stat.S_IXOTH) != stat.S_IROTH | stat.S_IXOTH
                           if is_dir else stat.S_ISREG(mode) and not mode & stat.S_IROTH)
                if private:
                    found.append((path, is_dir))
        # No need to look inside what is hidden whole.
        dirs[:] = [d for d in dirs if (os.path.join(root, d), True) not in found]
    return tuple(found)


def gpu_device_paths() -> list[str]:
    """The NVIDIA device nodes a GPU container needs: every GPU's node (CUDA_VISIBLE_DEVICES
    then selects by index, which needs them all), the control and UVM nodes, MIG capabilities."""
    return sorted(glob.glob("/dev/nvidia*"))


def hosts_file(hostname: str, hosts: Mapping[str, str], pod_ip: str = "127.0.0.1", fqdn: str | None = None) -> str:
    """An /etc/hosts in the kubelet's layout: localhost entries, then ``hosts`` (name → ip)
    grouped by address, with the pod's own hostname mapped to ``pod_ip`` unless given, after its
    ``fqdn`` (``host.subdomain.ns.svc.cluster.local``) when the pod names a subdomain."""
    by_ip: dict[str, list[str]] = {}
    for name, ip in hosts.items():
        by_ip.setdefault(ip, []).append(name)
    if hostname not in hosts:
        by_ip.setdefault(pod_ip, []).insert(0, hostname)
    if fqdn and fqdn not in hosts:
        own = by_ip[hosts.get(hostname, pod_ip)]
        own.insert(own.index(hostname), fqdn)
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


def _under(path: str, directory: str) -> bool:
    return path == directory or path.startswith(directory.rstrip("/") + "/")


def _tree_of(path: str, trees: Sequence[str]) -> str | None:
    """The read-only host directory bound in the sandbox that ``path`` lies in, if any."""
    return next((tree for tree in trees if _under(path, tree)), None)


def _through_links(path: str, mount_targets: Sequence[str], trees: Sequence[str]) -> str:
    """Where a mount point lands when a directory on its way is a symlink in the sandbox
    (``/var/run`` → ``/run``, or a host link inside a bound directory): bubblewrap cannot
    create a mount point through one, so the mount goes to the directory the link leads to."""
    if any(_under(path, m) and path != m for m in mount_targets):
        return path
    for target, link in _VAR_LINKS:
        if _under(path, link):
            return str(PurePosixPath(link).parent / target / PurePosixPath(path).relative_to(link))
    pure = PurePosixPath(path)
    if _tree_of(path, trees) is None and not (pure.parts[1:2] and pure.parts[1] in _VISIBLE_AT_ROOT):
        return path
    existing = pure
    while not os.path.lexists(existing):
        existing = existing.parent
    return str(PurePosixPath(os.path.realpath(existing)) / pure.relative_to(existing))


def _rebuilt_dirs(paths: Sequence[str], mount_targets: Sequence[str], trees: Sequence[str]) -> set[str]:
    """The directories of read-only bound trees that must be rebuilt (a tmpfs directory with
    each entry bound) because a mount point has to be created inside them."""
    rebuilt: set[str] = set()
    for path in paths:
        tree = _tree_of(path, trees)
        # Inside another mount the point is created in that volume, not in a host directory.
        if tree is None or os.path.lexists(path) or any(_under(path, m) and path != m for m in mount_targets):
            continue
        parent = PurePosixPath(path).parent
        while not os.path.isdir(parent):
            parent = parent.parent
        for ancestor in (parent, *parent.parents):
            if _under(str(ancestor), tree):
                rebuilt.add(str(ancestor))
    return rebuilt


def _bind_tree(directory: str, rebuilt: set[str]) -> list[str]:
    if directory not in rebuilt:
        # -try: an entry removed since the scan is simply absent, not a failed start.
        return ["--ro-bind-try", directory, directory]
    args = ["--dir", directory]
    with os.scandir(directory) as entries:
        for entry in sorted(entries, key=lambda e: e.name):
            path = os.path.join(directory, entry.name)
            if entry.is_symlink():
                args += ["--symlink", os.readlink(path), path]
            elif entry.is_dir(follow_symlinks=False):
                args += _bind_tree(path, rebuilt)
            else:
                args += ["--ro-bind-try", path, path]
    return args


def _visible_root() -> tuple[list[str], list[str]]:
    """The host's visible top-level entries: (symlink arguments, directories to bind)."""
    links: list[str] = []
    dirs: list[str] = []
    for name in _VISIBLE_AT_ROOT:
        path = "/" + name
        if os.path.islink(path):
            links += ["--symlink", os.readlink(path), path]
        elif os.path.isdir(path):
            dirs.append(path)
    return links, dirs


@functools.cache
def _trimaran_sources() -> tuple[str, ...]:
    """The checkouts ``import trimaran`` (report_metrics, the SDK's trial runner, the model
    server) comes from: the one running here, and the one an editable install of this Python maps
    it to (a pod's plain ``python`` finds that one, whatever PYTHONPATH the control plane had)."""
    found = [str(Path(__file__).resolve().parents[2])]
    for finder in sys.meta_path:
        find_spec = getattr(finder, "find_spec", None)
        spec = find_spec("trimaran", None) if find_spec is not None else None
        if spec is not None and spec.origin:
            found.append(str(Path(spec.origin).resolve().parents[1]))
    return tuple(dict.fromkeys(found))


def interpreter_paths(prefixes: Sequence[str] | None = None) -> list[str]:
    """The Python environments pods run with, outside the host directories every pod sees.

    Pods run this machine's Python (the control plane's interpreter comes first on PATH), so
    its prefixes must be visible, read-only, at the same paths: ``/root/.pyenv/...``, a
    virtual environment, a checkout under /tmp (a CI clone).
    """
    if prefixes is None:
        prefixes = [sys.prefix, sys.base_prefix, sys.exec_prefix, *_trimaran_sources()]
    visible = ["/" + name for name in _VISIBLE_AT_ROOT]
    found: list[str] = []
    for prefix in prefixes:
        real = os.path.realpath(prefix)
        if len(PurePosixPath(real).parts) > 2 and os.path.isdir(real) and real not in found \
                and not any(_under(real, v) for v in visible):
            found.append(real)
    # A venv inside the checkout is visible with it.
    return [p for p in found if not any(_under(p, q) and p != q for q in found)]


def proc_masks(security: ContainerSecurity) -> list[str]:
    """bwrap's options that mask :data:`MASKED_PATHS` (a file under ``/dev/null``, a directory
    under an empty read-only tmpfs) and bind :data:`READ_ONLY_PATHS` read-only, after ``/proc``
    and ``/sys`` are mounted; none for an unmasked container. Paths this kernel lacks are
    skipped. The read-only ones are the host's /proc entries bound over the pod's: their
    contents are the kernel's, not a pid namespace's (sysctls are read through the caller's
    namespaces), and bubblewrap takes bind sources from the host only."""
    if security.unmasked:
        return []
    args: list[str] = []
    for path in MASKED_PATHS:
        if os.path.isdir(path):
            args += ["--tmpfs", path, "--remount-ro", path]
        elif os.path.exists(path):
            args += ["--ro-bind", "/dev/null", path]
    for path in READ_ONLY_PATHS:
        if os.path.exists(path):
            args += ["--ro-bind", path, path]
    return args


def _security_args(security: ContainerSecurity, userns: bool, mapped: bool) -> tuple[list[str], list[str]]:
    """bwrap's options for the user, capabilities and namespaces, and the command's prefix.
    ``mapped``: the spawner maps the ids (``shim.spawn_mapped``): bubblewrap already runs as the
    container's uid outside, so it is not told one."""
    args: list[str] = []
    prefix: list[str] = []
    caps = set(security.capabilities)
    if userns and mapped:
        args += ["--unshare-user"]
    elif userns:
        args += ["--unshare-user", "--uid", str(security.uid), "--gid", str(security.gid)]
    elif os.geteuid() == 0:
        # No user namespace: capabilities would be the host's, so the command runs as an
        # unprivileged uid (setpriv, which needs SETUID and SETGID, drops them all with root).
        uid = security.uid or NOBODY
        gid = security.gid or NOBODY
        prefix = ["setpriv", f"--reuid={uid}", f"--regid={gid}", "--clear-groups", "--"]
        caps |= {"SETUID", "SETGID"}
    args += ["--cap-drop", "ALL"]
    for cap in sorted(caps):
        args += ["--cap-add", f"CAP_{cap}"]
    return args, prefix


def _resolved(bwrap: str | None, hostname: str, security: ContainerSecurity | None,
              userns: bool | None) -> tuple[str, ContainerSecurity, bool]:
    """The defaults both command lines start from: bwrap found, a root container with the default
    capabilities, user namespaces where bubblewrap can make them; a hostname the kernel takes."""
    bwrap = bwrap or find_bwrap()
    if bwrap is None:
        raise SandboxUnavailable()
    if len(hostname) > 64:
        raise ValueError(f"hostname {hostname!r} is longer than 64 characters")
    if security is None:
        security = ContainerSecurity(0, 0, DEFAULT_CAPABILITIES, None, read_only_root=False, privileged=False)
    return bwrap, security, userns_available(bwrap) if userns is None else userns


def _process_args(user_args: list[str], hostname: str, cwd: str, command: Sequence[str]) -> list[str]:
    """The tail both command lines end with: the user, the namespaces, and what runs where."""
    return [*user_args, "--unshare-pid", "--unshare-ipc", "--unshare-uts", "--hostname", hostname,
            "--die-with-parent", "--chdir", cwd, "--", *command]


def build_argv(
    command: Sequence[str],
    *,
    mounts: Sequence[Mount],
    hostname: str,
    hosts_path: Path,
    hostname_path: Path,
    resolv_path: Path | None = None,
    working_dir: str | None = None,
    devices: Sequence[str] = (),
    termination_log: tuple[Path, str] | None = None,
    bwrap: str | None = None,
    keep_visible: Sequence[str] | None = None,
    hidden: Sequence[str] = (),
    security: ContainerSecurity | None = None,
    userns: bool | None = None,
    mapped: bool = False,
) -> list[str]:
    """The full argv (bwrap …  -- command) for one container.

    ``hosts_path`` / ``hostname_path`` are the generated files bound at /etc/hosts and
    /etc/hostname, ``resolv_path`` the pod's own /etc/resolv.conf (cluster DNS, on the pod
    network; else the host's is seen); ``devices`` are host device nodes bound in (GPUs); ``termination_log`` is
    (host file, path in the sandbox) for the container's termination message. Raises
    :class:`SandboxUnavailable` when bwrap is missing. ``keep_visible`` are the host
    directories bound read-only besides the system's (default: :func:`interpreter_paths`).
    ``hidden`` are host directories the container must not read (``$TRIMARAN_HOME``), covered
    by an empty tmpfs where they lie in a visible directory. ``security`` defaults to a root
    container with the default capabilities; ``userns`` to :func:`userns_available`;
    ``mapped`` says the spawner maps the user namespace's ids into the pods' range
    (``shim.spawn_mapped``, :mod:`trimaran.runtime.idmap`). The seccomp program is not part of
    the argv: it is passed on a file descriptor by whoever spawns bwrap (``--seccomp FD``).
    """
    bwrap, security, userns = _resolved(bwrap, hostname, security, userns)
    cwd = working_dir or "/"
    links, system_dirs = _visible_root()
    extra = interpreter_paths() if keep_visible is None else list(keep_visible)
    trees = [*system_dirs, *(p for p in extra if not any(_under(p, d) for d in system_dirs))]
    written = [m.target for m in mounts]
    mounts = [replace(m, target=_through_links(m.target, written, trees)) for m in mounts]
    targets = [m.target for m in mounts]
    to_create = [*targets, cwd]
    if termination_log:
        to_create.append(termination_log[1])
    rebuilt = _rebuilt_dirs(to_create, targets, trees)
    args = [bwrap, "--tmpfs", "/", *links]
    for tree in system_dirs:
        args += _bind_tree(tree, rebuilt)
    args += ["--dev", "/dev", "--proc", "/proc", "--perms", "1777", "--tmpfs", "/tmp", "--tmpfs", "/run",
             "--dir", "/var", "--perms", "1777", "--dir", "/var/tmp"]
    for target, link in _VAR_LINKS:
        args += ["--symlink", target, link]
    for tree in trees[len(system_dirs):]:
        args += _bind_tree(tree, rebuilt)
    for path, is_dir in private_etc_entries():
        args += ["--tmpfs", path, "--remount-ro", path] if is_dir else ["--ro-bind", "/dev/null", path]
    # A checkout's .git may hold credentials in its remotes' URLs; pods never need it.
    git_dirs = [os.path.join(tree, ".git") for tree in trees[len(system_dirs):]]
    for path in [*hidden, *git_dirs]:
        if os.path.isdir(path) and _tree_of(path, trees) is not None:
            # Bind sources below are read from the host's tree, so hiding does not hide them.
            args += ["--tmpfs", path, "--remount-ro", path]
    args += proc_masks(security)
    for device in devices:
        args += ["--dev-bind-try", device, device]
    # Parents before children, so a mount inside another volume lands in that volume.
    for mount in sorted(mounts, key=lambda m: len(PurePosixPath(m.target).parts)):
        if mount.source is None:
            if mount.size is not None:
                args += ["--size", str(mount.size)]
            args += ["--perms", "1777", "--tmpfs", mount.target]
        else:
            args += ["--ro-bind" if mount.read_only else "--bind", str(mount.source), mount.target]
    if "/dev/shm" not in targets:
        args += ["--size", str(DEFAULT_SHM_SIZE), "--perms", "1777", "--tmpfs", "/dev/shm"]
    args += ["--ro-bind", str(hosts_path), "/etc/hosts"]
    args += ["--ro-bind", str(hostname_path), "/etc/hostname"]
    if resolv_path is not None:
        args += ["--ro-bind", str(resolv_path), "/etc/resolv.conf"]
    if termination_log:
        args += ["--bind", str(termination_log[0]), termination_log[1]]
    if not os.path.lexists(cwd) or _tree_of(cwd, trees) is None or any(_under(cwd, t) for t in targets):
        args += ["--dir", cwd]
    if security.read_only_root:
        # Volumes, /dev/shm and the termination log are mounts of their own and stay writable.
        for path in ("/", *_RUNTIME_DIRS_ON_RO_ROOT):
            args += ["--remount-ro", path]
    user_args, prefix = _security_args(security, userns, mapped)
    args += _process_args(user_args, hostname, cwd, [*prefix, *command])
    return args


def path_in_root(root: Path, path: str) -> str:
    """``path`` inside the container whose root filesystem is ``root``, with the symlinks on its
    way followed as the container would (``/var/run`` -> ``/run`` in Debian images), never out of
    ``root``: bubblewrap would follow an absolute link out of the new root while it sets it up.
    Components past one that does not exist are kept as written."""
    resolved: list[str] = []
    pending = list(reversed(PurePosixPath(path).parts[1:]))
    hops = 0
    while pending:
        part = pending.pop()
        if part in ("", "."):
            continue
        if part == "..":
            if resolved:
                resolved.pop()
            continue
        candidate = root.joinpath(*resolved, part)
        if not candidate.is_symlink():
            resolved.append(part)
            continue
        hops += 1
        if hops > 40:  # the kernel's limit on links in one lookup
            raise ValueError(f"{path}: too many levels of symbolic links in the image")
        target = PurePosixPath(os.readlink(candidate))
        if target.is_absolute():
            resolved = []
            pending.extend(reversed(target.parts[1:]))
        else:
            pending.extend(reversed(target.parts))
    return "/" + "/".join(resolved)


def build_image_argv(
    command: Sequence[str],
    *,
    image_root: Path,
    root: Path,
    mounts: Sequence[Mount],
    hostname: str,
    hosts_path: Path,
    hostname_path: Path,
    resolv_path: Path | None = None,
    working_dir: str = "/",
    devices: Sequence[str] = (),
    read_only_files: Sequence[tuple[str, str]] = (),
    termination_log: tuple[Path, str] | None = None,
    bwrap: str | None = None,
    security: ContainerSecurity | None = None,
    userns: bool | None = None,
    mapped: bool = False,
) -> list[str]:
    """The argv (bwrap … -- command) for a container that runs its image.

    ``root`` is the container's own writable view of the image (an overlay over
    ``image_root``, mounted by whoever starts it), bound at ``/``; nothing else of the host is
    visible but the volumes, ``devices`` and ``read_only_files`` (``(host path, path inside)``:
    the GPU driver's files). The rest is as :func:`build_argv`: fresh ``/dev``, ``/proc`` and
    ``/dev/shm``, the host's ``/sys`` read-only (as containerd mounts sysfs), both masked as
    :func:`proc_masks` says, the generated ``/etc/hosts`` and ``/etc/hostname``, the host's
    ``/etc/resolv.conf``, the termination log, the namespaces, capabilities and user of
    ``security``. Mount points are resolved through the image's symlinks
    (:func:`path_in_root`). Raises :class:`SandboxUnavailable` without bwrap, ``ValueError``
    where no user namespace can be made (the image has no ``setpriv`` to drop root with).
    """
    bwrap, security, userns = _resolved(bwrap, hostname, security, userns)
    if not userns:
        raise ValueError("running a container image needs user namespaces, which bubblewrap cannot "
                         "create here (kernel.unprivileged_userns_clone or user.max_user_namespaces)")

    def inside(path: str) -> str:
        return path_in_root(image_root, path)

    cwd = inside(working_dir or "/")
    args = [bwrap, "--bind", str(root), "/", "--dev", "/dev", "--proc", "/proc",
            "--ro-bind-try", "/sys", inside("/sys"), *proc_masks(security)]
    for device in devices:
        args += ["--dev-bind-try", device, device]
    for source, target in read_only_files:
        args += ["--ro-bind-try", source, inside(target)]
    # Parents before children, so a mount inside another volume lands in that volume.
    for mount in sorted(mounts, key=lambda m: len(PurePosixPath(m.target).parts)):
        target = inside(mount.target)
        if mount.source is None:
            if mount.size is not None:
                args += ["--size", str(mount.size)]
            args += ["--perms", "1777", "--tmpfs", target]
        else:
            args += ["--ro-bind" if mount.read_only else "--bind", str(mount.source), target]
    if "/dev/shm" not in {m.target for m in mounts}:
        args += ["--size", str(DEFAULT_SHM_SIZE), "--perms", "1777", "--tmpfs", "/dev/shm"]
    args += ["--ro-bind", str(hosts_path), inside("/etc/hosts")]
    args += ["--ro-bind", str(hostname_path), inside("/etc/hostname")]
    if resolv_path is not None:
        args += ["--ro-bind", str(resolv_path), inside("/etc/resolv.conf")]
    else:
        args += ["--ro-bind-try", "/etc/resolv.conf", inside("/etc/resolv.conf")]
    if termination_log:
        args += ["--bind", str(termination_log[0]), inside(termination_log[1])]
    args += ["--dir", cwd]
    if security.read_only_root:
        # Volumes, /dev/shm and the termination log are mounts of their own and stay writable.
        args += ["--remount-ro", "/"]
    user_args, _ = _security_args(security, userns, mapped)
    return [*args, *_process_args(user_args, hostname, cwd, command)]


def build_tool_argv(command: Sequence[str], *, writable: Sequence[Path], read_only: Sequence[Path] = (),
                    bwrap: str | None = None, mapped: bool = False) -> list[str]:
    """The argv for a node tool (umoci unpacking an image) in a sandbox of its own: root of a
    fresh user namespace with the default capabilities (so it can give files the image's
    owners within the namespace's ids), this host's system directories read-only, and only
    ``writable`` and ``read_only`` of the rest, at their own paths. ``mapped`` as for
    :func:`build_argv`; else uid 0 inside is the caller's own uid. No network."""
    bwrap = bwrap or find_bwrap()
    if bwrap is None:
        raise SandboxUnavailable()
    links, system_dirs = _visible_root()
    args = [bwrap, "--tmpfs", "/", *links]
    for tree in system_dirs:
        args += ["--ro-bind", tree, tree]
    for path, is_dir in private_etc_entries():
        args += ["--tmpfs", path, "--remount-ro", path] if is_dir else ["--ro-bind", "/dev/null", path]
    args += ["--dev", "/dev", "--proc", "/proc", "--tmpfs", "/tmp"]
    for path in read_only:
        args += ["--ro-bind", str(path), str(path)]
    for path in writable:
        args += ["--bind", str(path), str(path)]
    security = ContainerSecurity(0, 0, DEFAULT_CAPABILITIES, None, read_only_root=False, privileged=False)
    user_args, _ = _security_args(security, True, mapped)
    return [*args, *user_args, "--unshare-net", "--unshare-pid", "--unshare-ipc", "--die-with-parent",
            "--chdir", "/", "--", *command]
