"""A cgroup per pod and per container, laid out as the kubelet's cgroupfs driver lays them out.

Standard library only: the shim imports it (as a module beside it, ``import cgroups``), and the
runtime as ``trimaran.runtime.cgroups``. Each home has a parent of its own, named by a digest of
the home, so two control planes never share a cgroup::

    <hierarchy>/trimaran-<digest>/kubepods/pod<uid>/<container>-<attempt>              Guaranteed
    <hierarchy>/trimaran-<digest>/kubepods/burstable/pod<uid>/<container>-<attempt>    Burstable
    <hierarchy>/trimaran-<digest>/kubepods/besteffort/pod<uid>/<container>-<attempt>   BestEffort

Two drivers, chosen by :func:`detect` when the runtime starts:

- **v2** (the unified hierarchy, when its root offers ``cpu``, ``memory`` and ``pids``): one
  directory per cgroup; ``cpu.max``, ``cpu.weight``, ``memory.max`` with ``memory.swap.max`` 0,
  ``pids.max``; usage from ``cpu.stat`` and ``memory.current`` / ``memory.stat``; OOM kills from
  ``memory.events``.
- **v1** (a controller per mount, as on hosts that still mount them so): the same relative path
  under each of ``cpu``, ``cpuacct``, ``memory`` and ``pids``; ``cpu.cfs_quota_us`` over a
  ``cpu.cfs_period_us`` of 100000, ``cpu.shares``, ``memory.limit_in_bytes`` (and the
  ``memsw`` limit and ``swappiness`` 0, so swap cannot stretch it), ``pids.max``; usage from
  ``cpuacct.usage`` and ``memory.usage_in_bytes`` / ``memory.stat``; OOM kills from
  ``memory.oom_control``.

Values are the kubelet's (``pkg/kubelet/cm/helpers_linux.go``): shares = milliCPU × 1024 / 1000
(at least 2), quota = milliCPU × 100 µs per 100 ms period (at least 1 ms), and on v2 a weight of
1 + (shares − 2) × 9999 / 262142. The pod's cgroup holds ``pids.max`` (the kubelet's
``podPidsLimit``), the sum of its containers' requests as shares, and the sums of their limits
where every container has one.

The shim creates a container's cgroup (and its pod's, which may have been removed when the pod's
last container ended) with :func:`create`, and the container's first process joins it before it
execs (:func:`join`, in the child), so everything the container starts is counted and limited.
With an OCI runtime, that process is the runtime's (crun with ``--cgroup-manager=disabled``), whose
container inherits the cgroup. A process started in a running container later (an exec) joins
it the same way: its directories are in the container's record (``cgroupDirs``, see the shim).
"""

from __future__ import annotations

import errno
import os
import signal
import time

__all__ = [
    "PERIOD_US",
    "Hierarchy",
    "detect",
    "home_name",
    "cpu_shares",
    "cpu_quota",
    "cpu_weight",
    "create",
    "join",
    "oom_kills",
    "procs",
    "kill",
    "prune",
    "remove",
    "pod_rel",
    "remove_pod",
    "remove_home",
    "pod_uids",
    "usage",
]

PERIOD_US = 100_000
V1_CONTROLLERS = ("cpu", "cpuacct", "memory", "pids")
V2_CONTROLLERS = ("cpu", "memory", "pids")
QOS_DIRS = {"Guaranteed": "", "Burstable": "burstable", "BestEffort": "besteffort"}
_CREATE_TRIES = 5


def home_name(home: str) -> str:
    """The home's parent cgroup's name: ``trimaran-`` and a digest of the home's real path."""
    import hashlib  # here: the shim, which never names a home, starts without it

    digest = hashlib.sha256(os.path.realpath(home).encode()).hexdigest()[:12]
    return f"trimaran-{digest}"


def cpu_shares(milli: int | None) -> int:
    """``cpu.shares`` for a request of ``milli`` millicores, as the kubelet computes it."""
    return max(2, (milli or 0) * 1024 // 1000)


def cpu_quota(milli: int) -> int:
    """The CFS quota in µs per :data:`PERIOD_US` for a limit of ``milli`` millicores."""
    return max(1000, milli * PERIOD_US // 1000)


def cpu_weight(shares: int) -> int:
    """``cpu.weight`` on v2 from v1 shares (the kubelet's ``CpuSharesToCpuWeight``)."""
    return 1 + (max(2, min(shares, 262144)) - 2) * 9999 // 262142


class Hierarchy:
    """Where this home's cgroups live: ``version`` 1 or 2, and ``bases``, the home's parent
    directory in each controller's hierarchy (on v2 one directory, under the key ``""``)."""

    def __init__(self, version: int, bases: dict[str, str]) -> None:
        self.version = version
        self.bases = dict(bases)

    def to_json(self) -> dict:
        return {"version": self.version, "bases": self.bases}

    @classmethod
    def from_json(cls, data: dict) -> Hierarchy:
        return cls(int(data["version"]), dict(data["bases"]))

    def dir(self, controller: str, rel: str) -> str:
        """The directory of cgroup ``rel`` (relative to the home's parent) in ``controller``'s hierarchy."""
        return os.path.join(self.bases["" if self.version == 2 else controller], rel)

    def dirs(self, rel: str) -> list[str]:
        """Every directory of cgroup ``rel``, one per hierarchy."""
        return list(dict.fromkeys(os.path.join(base, rel) for base in self.bases.values()))

    def __eq__(self, other: object) -> bool:
        return isinstance(other, Hierarchy) and self.to_json() == other.to_json()

    def __repr__(self) -> str:
        return f"Hierarchy({self.version}, {self.bases!r})"


def _mounts() -> list[tuple[str, str, list[str]]]:
    out = []
    with open("/proc/self/mounts", encoding="utf-8") as handle:
        for line in handle:
            parts = line.split()
            if len(parts) >= 4:
                out.append((parts[1].replace("\\040", " "), parts[2], parts[3].split(",")))
    return out


def _read(path: str) -> str | None:
    try:
        with open(path, encoding="ascii") as handle:
            return handle.read()
    except OSError:
        return None


def _write(path: str, text: str) -> bool:
    try:
        with open(path, "w", encoding="ascii") as handle:
            handle.write(text)
        return True
    except OSError:
        return False


def detect(home: str) -> Hierarchy | None:
    """This machine's hierarchy for ``home``'s pods: v2 where the unified hierarchy's root offers
    cpu, memory and pids and may be written, else v1 where each of those controllers (and cpuacct)
    is mounted writable, else None (no cgroups: memory limits fall back to ``RLIMIT_AS``).
    Nothing is created until a pod starts."""
    name = home_name(home)
    mounts = _mounts()
    for mountpoint, fstype, _ in mounts:
        if fstype != "cgroup2":
            continue
        offered = (_read(os.path.join(mountpoint, "cgroup.controllers")) or "").split()
        if all(c in offered for c in V2_CONTROLLERS) and os.access(mountpoint, os.W_OK):
            return Hierarchy(2, {"": os.path.join(mountpoint, name)})
    bases: dict[str, str] = {}
    for mountpoint, fstype, options in mounts:
        if fstype != "cgroup":
            continue
        for controller in V1_CONTROLLERS:
            if controller in options and controller not in bases and os.access(mountpoint, os.W_OK):
                bases[controller] = os.path.join(mountpoint, name)
    if all(c in bases for c in V1_CONTROLLERS):
        return Hierarchy(1, bases)
    return None


# -- creating and joining ---------------------------------------------------------------------


def _settings(h: Hierarchy, limits: dict) -> list[tuple[str, str, str]]:
    """``(controller, file, value)`` to write for ``limits`` (``cpu_shares``, ``cpu_quota``,
    ``memory``, ``pids``: ints or None), in an order the kernel accepts."""
    shares = int(limits.get("cpu_shares") or 2)
    quota = limits.get("cpu_quota")
    memory = limits.get("memory")
    pids = limits.get("pids")
    if h.version == 2:
        out = [("cpu", "cpu.weight", str(cpu_weight(shares))),
               ("cpu", "cpu.max", f"{quota if quota else 'max'} {PERIOD_US}")]
        if memory:
            out += [("memory", "memory.max", str(memory)), ("memory", "memory.swap.max", "0")]
        out.append(("pids", "pids.max", str(pids) if pids else "max"))
        return out
    out = [("cpu", "cpu.shares", str(shares)), ("cpu", "cpu.cfs_period_us", str(PERIOD_US)),
           ("cpu", "cpu.cfs_quota_us", str(quota if quota else -1))]
    if memory:
        # memsw must stay at or above the limit: the limit first, memsw, then the limit again
        # (where memsw was below a raised limit, the first write failed).
        out += [("memory", "memory.swappiness", "0"), ("memory", "memory.limit_in_bytes", str(memory)),
                ("memory", "memory.memsw.limit_in_bytes", str(memory)),
                ("memory", "memory.limit_in_bytes", str(memory))]
    out.append(("pids", "pids.max", str(pids) if pids else "max"))
    return out


# Written where the kernel has them (swap accounting is a build and boot option); the others
# must take, or the cgroup would not limit what it should.
_OPTIONAL = ("memory.swappiness", "memory.memsw.limit_in_bytes", "memory.swap.max")


def _apply(h: Hierarchy, rel: str, limits: dict) -> None:
    """Write ``limits`` into cgroup ``rel``; raises ``OSError`` naming a file that refused its value."""
    taken: dict[str, bool] = {}
    for controller, filename, value in _settings(h, limits):
        taken[filename] = _write(os.path.join(h.dir(controller, rel), filename), value)
    refused = [f for f, ok in taken.items() if not ok and f not in _OPTIONAL]
    if refused:
        raise OSError(errno.EINVAL, f"cgroup {rel}: {', '.join(refused)} refused the value")


def _make(h: Hierarchy, rel: str) -> None:
    """Create ``rel`` and its parents in every hierarchy; on v2 each level down to ``rel``'s parent
    delegates the controllers to its children (the root too: it may hold processes itself)."""
    if h.version == 2:
        base = h.bases[""]
        levels = [os.path.dirname(base), base]
        levels += [os.path.join(base, *rel.split("/")[:i]) for i in range(1, rel.count("/") + 1)]
        for level in levels:
            if level != levels[0]:
                try:
                    os.mkdir(level)
                except FileExistsError:
                    pass
            enabled = (_read(os.path.join(level, "cgroup.subtree_control")) or "").split()
            for controller in V2_CONTROLLERS:
                if controller not in enabled:
                    _write(os.path.join(level, "cgroup.subtree_control"), f"+{controller}")
        try:
            os.mkdir(os.path.join(base, rel))
        except FileExistsError:
            pass
        return
    for path in h.dirs(rel):
        os.makedirs(path, exist_ok=True)


def create(h: Hierarchy, pod_rel: str, pod_limits: dict, name: str, limits: dict) -> str:
    """Create the pod's cgroup ``pod_rel`` (with ``pod_limits``) if need be, and in it the
    container's, ``name``, with ``limits`` (see :func:`_settings`); return the container's path
    relative to the home's parent. Raises ``OSError`` when the cgroups cannot be made or refuse
    a limit (nothing is left of them then).

    Another pod's last container may be removing the parents meanwhile (:func:`prune`), so a
    level that vanished under us is made again."""
    rel = f"{pod_rel}/{name}"
    for attempt in range(_CREATE_TRIES):
        try:
            # The container's first: once it exists its pod's cannot be pruned, so the pod's
            # values written next stay.
            _make(h, rel)
            break
        except FileNotFoundError:
            if attempt == _CREATE_TRIES - 1:
                raise
    try:
        _apply(h, pod_rel, pod_limits)
        _apply(h, rel, limits)
    except OSError:
        remove(h, rel)
        raise
    return rel


def join(h: Hierarchy, rel: str, pid: int = 0) -> None:
    """Move process ``pid`` (0: the caller) into cgroup ``rel`` in every hierarchy. Safe between
    fork and exec: it only opens and writes files."""
    for path in h.dirs(rel):
        fd = os.open(os.path.join(path, "cgroup.procs"), os.O_WRONLY | os.O_CLOEXEC)
        try:
            os.write(fd, str(pid or os.getpid()).encode())
        finally:
            os.close(fd)


def oom_kills(h: Hierarchy, rel: str) -> int:
    """How many processes of cgroup ``rel`` (its children's too) the OOM killer killed."""
    text = _read(h.dir("memory", os.path.join(rel, "memory.events" if h.version == 2 else "memory.oom_control")))
    for line in (text or "").splitlines():
        key, _, value = line.partition(" ")
        if key == "oom_kill":
            return int(value)
    return 0


# -- removing -----------------------------------------------------------------------------------


def procs(path: str) -> list[int]:
    """The pids in a cgroup directory (none when it is gone)."""
    text = _read(os.path.join(path, "cgroup.procs"))
    return [int(line) for line in (text or "").split()]


def kill(path: str, deadline_s: float = 5.0) -> None:
    """SIGKILL everything in one cgroup directory and remove it (its processes may be forking
    meanwhile; its children, if any, first)."""
    try:
        children = [e.path for e in os.scandir(path) if e.is_dir(follow_symlinks=False)]
    except OSError:
        return
    for child in children:
        kill(child, deadline_s)
    kill_file = os.path.join(path, "cgroup.kill")
    end = time.monotonic() + deadline_s
    while time.monotonic() < end:
        if os.path.exists(kill_file):
            _write(kill_file, "1")
        for pid in procs(path):
            try:
                os.kill(pid, signal.SIGKILL)
            except (ProcessLookupError, PermissionError):
                pass
        try:
            os.rmdir(path)
            return
        except FileNotFoundError:
            return
        except OSError:
            time.sleep(0.01)


def prune(h: Hierarchy, rel: str) -> None:
    """Remove the empty ancestors of ``rel`` up to the home's parent (inclusive): a level still
    holding a cgroup stays (rmdir refuses it)."""
    parts = rel.split("/")[:-1]
    for path in h.bases.values():
        levels = [os.path.join(path, *parts[:i]) for i in range(len(parts), 0, -1)] + [path]
        for level in levels:
            try:
                os.rmdir(level)
            except OSError as exc:
                if exc.errno != errno.ENOENT:
                    break


def remove(h: Hierarchy, rel: str) -> None:
    """Kill what runs in cgroup ``rel`` and remove it, in every hierarchy, then its empty ancestors."""
    for path in h.dirs(rel):
        kill(path)
    prune(h, rel)


def pod_rel(qos: str, uid: str) -> str:
    """A pod's cgroup, relative to the home's parent."""
    return "/".join(p for p in ("kubepods", QOS_DIRS[qos], f"pod{uid}") if p)


def remove_pod(h: Hierarchy, uid: str) -> None:
    """Kill and remove a pod's cgroup, whatever its QoS class, with its containers'."""
    for qos in QOS_DIRS:
        rel = pod_rel(qos, uid)
        if any(os.path.isdir(p) for p in h.dirs(rel)):
            remove(h, rel)


def remove_home(h: Hierarchy) -> None:
    """Kill and remove every cgroup of the home (its control plane has stopped)."""
    for base in h.bases.values():
        kill(base)


def pod_uids(h: Hierarchy) -> list[str]:
    """Uids of the pods that have a cgroup under the home's parent."""
    found = []
    for base in dict.fromkeys(h.bases.values()):
        for qos_dir in QOS_DIRS.values():
            try:
                entries = os.listdir(os.path.join(base, "kubepods", qos_dir))
            except OSError:
                continue
            found += [e[3:] for e in entries if e.startswith("pod") and e not in QOS_DIRS.values()]
    return sorted(set(found))


# -- usage --------------------------------------------------------------------------------------


def _stat_value(text: str | None, key: str) -> int:
    for line in (text or "").splitlines():
        name, _, value = line.partition(" ")
        if name == key:
            return int(value)
    return 0


def _usage_of(h: Hierarchy, rel: str) -> tuple[int, int] | None:
    """``(cpu nanoseconds, memory working set bytes)`` of cgroup ``rel``: the working set is
    usage less inactive file pages, as cAdvisor (and so the kubelet's eviction) counts it."""
    if h.version == 2:
        cpu = _read(h.dir("cpu", f"{rel}/cpu.stat"))
        current = _read(h.dir("memory", f"{rel}/memory.current"))
        if cpu is None or current is None:
            return None
        inactive = _stat_value(_read(h.dir("memory", f"{rel}/memory.stat")), "inactive_file")
        return _stat_value(cpu, "usage_usec") * 1000, max(0, int(current) - inactive)
    cpu = _read(h.dir("cpuacct", f"{rel}/cpuacct.usage"))
    current = _read(h.dir("memory", f"{rel}/memory.usage_in_bytes"))
    if cpu is None or current is None:
        return None
    inactive = _stat_value(_read(h.dir("memory", f"{rel}/memory.stat")), "total_inactive_file")
    return int(cpu), max(0, int(current) - inactive)


def usage(h: Hierarchy) -> dict[str, dict[str, tuple[int, int, int]]]:
    """Every running container's counters: pod uid → container name → ``(attempt, cpu
    nanoseconds, working set bytes)`` (of the latest attempt where two are there)."""
    out: dict[str, dict[str, tuple[int, int, int]]] = {}
    for uid in pod_uids(h):
        for qos in QOS_DIRS:
            pod = pod_rel(qos, uid)
            try:
                names = os.listdir(h.dir("memory", pod))
            except OSError:
                continue
            for entry in names:
                name, _, attempt = entry.rpartition("-")
                if not name or not attempt.isdigit() or not os.path.isdir(h.dir("memory", f"{pod}/{entry}")):
                    continue
                counters = _usage_of(h, f"{pod}/{entry}")
                previous = out.get(uid, {}).get(name)
                if counters is not None and (previous is None or previous[0] < int(attempt)):
                    out.setdefault(uid, {})[name] = (int(attempt), *counters)
    return out

