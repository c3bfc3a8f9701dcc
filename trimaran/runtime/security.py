"""A container's ``securityContext`` as the sandbox enforces it: user and group, capabilities,
the seccomp filter and a read-only root.

The bar is a non-privileged container of containerd/CRI-O:

- capabilities: containerd's default set without ``NET_RAW`` (as Podman's default; raw sockets
  are refused unless ``capabilities.add`` asks for them), which is also exactly what Pod
  Security's baseline level lets a pod add, ``capabilities.drop`` (``ALL`` too)
  and ``add`` on top; a non-root user gets only what ``add`` names, as the kubelet gives a
  non-root process no effective capabilities. ``privileged: true`` gives every capability and
  no seccomp filter (containerd's rule); admission decides whether a namespace may ask for it.
- seccomp ``RuntimeDefault`` (also when unset): containerd's default profile as a deny list
  built with libseccomp (``pyseccomp``): what it allows only with ``CAP_SYS_ADMIN`` and the
  like (mounts, new namespaces, modules, kexec, bpf, perf, keys, clock setting, swap, reboot,
  io_uring...) fails with EPERM; ``clone3`` fails with ENOSYS so that libc falls back to
  ``clone``, whose namespace flags the filter can see. ``Unconfined`` loads none;
  ``Localhost`` is refused (no profile files on this node).
- ``no_new_privs`` is always set: bubblewrap sets it for every sandbox, so
  ``allowPrivilegeEscalation: true`` cannot lift it (setuid binaries do not gain privileges).
- ``runAsNonRoot`` with uid 0 fails as the kubelet fails it (CreateContainerConfigError).
- ``/proc`` and ``/sys`` are masked as the kubelet asks (``procMount: Default``): see
  ``trimaran.runtime.sandbox``; ``privileged`` or ``procMount: Unmasked`` leave them as they are.
"""

from __future__ import annotations

import errno
import functools
import tempfile
from collections.abc import Mapping
from dataclasses import dataclass

from trimaran.runtime.env import ConfigError

__all__ = [
    "CAPABILITIES",
    "DEFAULT_CAPABILITIES",
    "NOBODY",
    "ContainerSecurity",
    "container_security",
    "seccomp_program",
    "DENIED_SYSCALLS",
    "NAMESPACE_FLAGS",
    "PERSONALITY_FLAGS",
    "PERSONALITY_QUERY_BIT",
]

# Every capability Linux defines (capability.h), as securityContext names them.
CAPABILITIES = frozenset({
    "CHOWN", "DAC_OVERRIDE", "DAC_READ_SEARCH", "FOWNER", "FSETID", "KILL", "SETGID", "SETUID",
    "SETPCAP", "LINUX_IMMUTABLE", "NET_BIND_SERVICE", "NET_BROADCAST", "NET_ADMIN", "NET_RAW",
    "IPC_LOCK", "IPC_OWNER", "SYS_MODULE", "SYS_RAWIO", "SYS_CHROOT", "SYS_PTRACE", "SYS_PACCT",
    "SYS_ADMIN", "SYS_BOOT", "SYS_NICE", "SYS_RESOURCE", "SYS_TIME", "SYS_TTY_CONFIG", "MKNOD",
    "LEASE", "AUDIT_WRITE", "AUDIT_CONTROL", "SETFCAP", "MAC_OVERRIDE", "MAC_ADMIN", "SYSLOG",
    "WAKE_ALARM", "BLOCK_SUSPEND", "AUDIT_READ", "PERFMON", "BPF", "CHECKPOINT_RESTORE",
})
DEFAULT_CAPABILITIES = frozenset({
    "CHOWN", "DAC_OVERRIDE", "FSETID", "FOWNER", "MKNOD", "SETGID", "SETUID", "SETFCAP",
    "SETPCAP", "NET_BIND_SERVICE", "SYS_CHROOT", "KILL", "AUDIT_WRITE",
})
# The uid and gid a pod runs as where no user namespace can be made and the control plane is
# root: an unprivileged user, never root.
NOBODY = 65534

_RUNTIME_DEFAULT = "RuntimeDefault"
_SECCOMP_TYPES = ("RuntimeDefault", "Unconfined", "Localhost")
DENIED_SYSCALLS = (
    # mounts, old and new API, and changing root
    "mount", "umount", "umount2", "pivot_root", "fsopen", "fsconfig", "fsmount", "fspick",
    "move_mount", "open_tree", "mount_setattr",
    # joining namespaces (creating them: unshare and clone below)
    "setns",
    # the kernel itself
    "init_module", "finit_module", "delete_module", "kexec_load", "kexec_file_load", "reboot",
    "swapon", "swapoff", "acct", "quotactl", "quotactl_fd", "syslog", "iopl", "ioperm", "vhangup",
    "lookup_dcookie", "nfsservctl", "create_module", "get_kernel_syms", "query_module", "uselib",
    "ustat", "sysfs", "_sysctl", "vm86", "vm86old",
    # the clock
    "settimeofday", "clock_settime", "clock_adjtime", "stime",
    # kernel interfaces containerd leaves to CAP_SYS_ADMIN and friends
    "bpf", "perf_event_open", "fanotify_init", "open_by_handle_at", "name_to_handle_at",
    "add_key", "request_key", "keyctl", "userfaultfd",
    "io_uring_setup", "io_uring_enter", "io_uring_register",
)
NAMESPACE_FLAGS = (
    0x00020000,  # CLONE_NEWNS
    0x02000000,  # CLONE_NEWCGROUP
    0x04000000,  # CLONE_NEWUTS
    0x08000000,  # CLONE_NEWIPC
    0x10000000,  # CLONE_NEWUSER
    0x20000000,  # CLONE_NEWPID
    0x40000000,  # CLONE_NEWNET
    0x00000080,  # CLONE_NEWTIME
)
# personality(2) flags that weaken the process's own protections (ASLR off, executable
# data); the query value 0xffffffff has bit 31 set and stays allowed.
PERSONALITY_FLAGS = (0x0040000, 0x0100000, 0x0200000, 0x0400000, 0x0800000, 0x8000000)
PERSONALITY_QUERY_BIT = 0x80000000


@dataclass(frozen=True)
class ContainerSecurity:
    """What the sandbox enforces for one container.

    ``capabilities`` are names without ``CAP_``; ``seccomp`` is the profile to load
    (``RuntimeDefault``) or ``None`` for none. ``groups`` are the supplementary groups
    (``supplementalGroups``, then ``fsGroup``); ``unmasked`` leaves ``/proc`` and ``/sys``
    unmasked and writable where they are (``privileged``, or ``procMount: Unmasked``), as the
    kubelet sends empty masked and read-only path lists then.
    """

    uid: int
    gid: int
    capabilities: frozenset[str]
    seccomp: str | None
    read_only_root: bool
    privileged: bool
    groups: tuple[int, ...] = ()
    unmasked: bool = False


def _cap_names(values: object, field: str) -> set[str]:
    if values is None:
        return set()
    if not isinstance(values, list):
        raise ConfigError(f"{field}: must be a list of capability names")
    names: set[str] = set()
    for index, value in enumerate(values):
        name = str(value).upper()
        name = name[4:] if name.startswith("CAP_") else name
        if name != "ALL" and name not in CAPABILITIES:
            raise ConfigError(f"{field}[{index}]: unknown capability {value!r}")
        names.add(name)
    return names


def _int_field(context: Mapping, key: str, field: str) -> int | None:
    value = context.get(key)
    if value is None:
        return None
    if isinstance(value, bool) or not isinstance(value, int) or not 0 <= value < 2**32 - 1:
        raise ConfigError(f"{field}.{key}: must be an integer from 0 to 4294967294, not {value!r}")
    return value


def container_security(pod: Mapping, container: Mapping, index: int, *, init: bool = False,
                       image_user: tuple[int, int] | None = None) -> ContainerSecurity:
    """The container's effective security context: its own ``securityContext`` over the
    pod's. ``index`` is its position in ``containers`` (or ``initContainers`` when ``init``),
    for the field paths of errors. ``image_user`` is the image's ``User`` as (uid, gid), used
    where ``runAsUser`` (and then ``runAsGroup``) is unset, as the kubelet does. Raises
    ``ConfigError`` with the kubelet's message when the
    container must not start."""
    spec: Mapping = pod.get("spec") or {}
    meta: Mapping = pod.get("metadata") or {}
    pod_context: Mapping = spec.get("securityContext") or {}
    own: Mapping = container.get("securityContext") or {}
    where = f"spec.{'initContainers' if init else 'containers'}[{index}].securityContext"

    uid = _int_field(own, "runAsUser", where)
    if uid is None:
        uid = _int_field(pod_context, "runAsUser", "spec.securityContext")
    gid = _int_field(own, "runAsGroup", where)
    if gid is None:
        gid = _int_field(pod_context, "runAsGroup", "spec.securityContext")
    if uid is None and image_user is not None:
        uid, gid = image_user[0], image_user[1] if gid is None else gid
    uid = uid or 0
    gid = gid or 0
    non_root = own.get("runAsNonRoot")
    if non_root is None:
        non_root = pod_context.get("runAsNonRoot")
    if non_root and uid == 0:
        pod_name = f"{meta.get('namespace') or 'default'}/{meta.get('name') or ''}"
        raise ConfigError(f'container has runAsNonRoot and image will run as root '
                          f'(pod: "{pod_name}", container: {container.get("name")})')

    profile = own.get("seccompProfile") or pod_context.get("seccompProfile") or {}
    profile_type = profile.get("type") or _RUNTIME_DEFAULT
    if profile_type not in _SECCOMP_TYPES:
        raise ConfigError(f"{where}.seccompProfile.type: must be one of {', '.join(_SECCOMP_TYPES)}, "
                          f"not {profile_type!r}")
    if profile_type == "Localhost":
        raise ConfigError(f"{where}.seccompProfile: Localhost profiles "
                          f"({profile.get('localhostProfile')!r}) are not supported on this node; "
                          f"use RuntimeDefault or Unconfined")

    privileged = bool(own.get("privileged"))
    caps_field: Mapping = own.get("capabilities") or {}
    add = _cap_names(caps_field.get("add"), f"{where}.capabilities.add")
    drop = _cap_names(caps_field.get("drop"), f"{where}.capabilities.drop")
    if privileged or "ALL" in add:
        capabilities = set(CAPABILITIES)
    elif "ALL" in drop:
        capabilities = add
    else:
        capabilities = ((DEFAULT_CAPABILITIES if uid == 0 else set()) | add) - drop
    unconfined = profile_type == "Unconfined" or (privileged and not own.get("seccompProfile"))
    seccomp = None if unconfined else _RUNTIME_DEFAULT
    groups = list(pod_context.get("supplementalGroups") or [])
    if pod_context.get("fsGroup") is not None:
        groups.append(pod_context["fsGroup"])
    for group in groups:
        if isinstance(group, bool) or not isinstance(group, int) or not 0 <= group < 2**32 - 1:
            raise ConfigError(f"spec.securityContext: supplementalGroups and fsGroup must be integers from 0 to "
                              f"4294967294, not {group!r}")
    proc_mount = own.get("procMount") or "Default"
    return ContainerSecurity(
        uid=uid,
        gid=gid,
        capabilities=frozenset(capabilities),
        seccomp=seccomp,
        read_only_root=bool(own.get("readOnlyRootFilesystem")),
        privileged=privileged,
        groups=tuple(dict.fromkeys(groups)),
        unmasked=privileged or proc_mount == "Unmasked",
    )


@functools.cache
def seccomp_program(profile: str = _RUNTIME_DEFAULT) -> bytes:
    """The compiled BPF program of a profile (what bubblewrap's ``--seccomp FD`` reads),
    compiled once per process."""
    if profile != _RUNTIME_DEFAULT:
        raise ValueError(f"no seccomp profile {profile!r}")
    import pyseccomp as seccomp  # the control plane's only user of libseccomp

    denied = seccomp.ERRNO(errno.EPERM)
    rules = seccomp.SyscallFilter(seccomp.ALLOW)
    for name in DENIED_SYSCALLS:
        rules.add_rule(denied, name)
    for flag in NAMESPACE_FLAGS:
        for name in ("unshare", "clone"):
            rules.add_rule(denied, name, seccomp.Arg(0, seccomp.MASKED_EQ, flag, flag))
    rules.add_rule(seccomp.ERRNO(errno.ENOSYS), "clone3")
    for flag in PERSONALITY_FLAGS:
        rules.add_rule(denied, "personality",
                       seccomp.Arg(0, seccomp.MASKED_EQ, flag | PERSONALITY_QUERY_BIT, flag))
    with tempfile.TemporaryFile() as out:
        rules.export_bpf(out)
        out.seek(0)
        return out.read()
