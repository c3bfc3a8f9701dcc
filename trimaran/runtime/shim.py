"""Per-pod supervisor: ``shim.command(STATE_DIR)`` runs it (``python -I -S -c LAUNCH shim.py STATE_DIR``),
or ``shim.command("--standby")`` starts one ahead, which waits for its state directory on stdin.

Standard library only, and importing nothing else of trimaran, so it starts in ~15 ms and
keeps running when the control plane that spawned it dies: it runs in its own session, and
the control plane, once restarted, re-adopts the pod by reading the files below.

It reads ``<state_dir>/spec.json``::

    {"uid": str, "namespace": str, "name": str, "attempt": int, "grace_seconds": float,
     "cgroups": {"hierarchy": H, "pod": str, "limits": L} | null,
     "init_containers": [C, ...], "containers": [C, ...]}
    C = {"name": str, "argv": [str], "env": {str: str}, "log": path,
         "log_max_size": int, "log_max_files": int,
         "memory_limit": int | null, "resources": L, "seccomp": path | null,
         "termination_log": path | null, "termination_message_policy": "File" | ...,
         "stdin": bool, "stdin_once": bool, "tty": bool}

    C may also hold ``"overlay": {"lower", "upper", "work", "merged"}`` (a container that runs
    its image): the shim mounts the image's root filesystem (``lower``, shared, never written)
    under a writable layer of this container's own at ``merged`` before it starts bubblewrap,
    and unmounts it once the container has ended (see :func:`mount_overlay`).

C may instead hold ``"oci": {"config", "bundle", "root", "id", "rootfs", "pod_namespaces"}`` (``argv`` is then
``crun ... run --bundle BUNDLE ID``, see ``trimaran.runtime.oci``): the shim writes ``config``
as the bundle's ``config.json`` and runs crun in the foreground as its child, in a mount
namespace of its own where the hybrid hierarchy's empty cgroup2 mount is not (crun 1.8 refuses
a hybrid host whose cgroup2 holds a controller, even without a cgroup manager) and, for
``rootfs`` (``{"path", "uid", "gid", "skeleton"}``), a tmpfs root holding the skeleton's
directories and symlinks (see :func:`_enter_crun_namespace`). ``pod_namespaces`` is the directory
where the pod's user, IPC and UTS namespaces are pinned (:func:`pin_pod_namespaces`), which the
container joins by path.

``seccomp`` is a compiled seccomp program for bubblewrap (``argv[0]``): the shim opens it and
passes it on a file descriptor (``--seccomp FD``).

C may also hold ``"idmap": {"uid_map", "gid_map", "run_as", "helper"}`` (see
``trimaran.runtime.idmap``): the container's user namespace maps its ids into the pods' range,
so no pod is the host's uid 0. bubblewrap then runs as ``run_as`` (host uid, gid, groups) where
given, and the shim writes its maps before letting it go on (:func:`spawn_mapped`).

runs the init containers one after another (stopping at the first failure), then all
containers together, each with stdout and stderr appended to its ``log``, and writes:

- ``shim.pid``: ``{"pid", "startTicks"}`` (start time in clock ticks since boot, to tell the
  process from a later one with the same pid);
- ``<container>.pid``: ``{"pid", "startTicks", "startedAt", "cgroup", "cgroupDirs",
  "memoryEnforcement"}``;
- ``<container>.exit.json``: ``{"exitCode", "signal", "reason", "message", "startedAt",
  "finishedAt"}`` with ``reason`` one of Completed, Error, OOMKilled, StartError;
- ``<container>.attach``, while a ``stdin`` container runs: a unix socket that lends its stdin to
  attach sessions (see :class:`_Stdin`). A ``tty`` container's stdio is a terminal whose output
  goes to the log: crun's (``process.terminal``, its master sent to ``<container>.console``, a
  socket that lasts until crun has sent it), or under bubblewrap a pty of the shim's;
- ``shim.done`` when it exits on its own terms (so a shim that vanished without it was lost):
  ``{"finishedAt", "timings", "netns"}``, ``timings`` its own and its containers' times on the
  monotonic clock (see ``trimaran.runtime.timings``), ``netns`` (where the pod has one)
  ``{"packets"}``: IPv4 packets into and out of it during this run (-1: unknown).

Logs rotate as the kubelet rotates them (``containerLogMaxSize``, ``containerLogMaxFiles``): a
container's stdout and stderr are one pipe that the shim copies into ``log`` (``splice``, so the
bytes never enter Python, but for the last MiB before a rotation, read to cut at a line's end),
and once ``log`` holds ``log_max_size`` bytes it is renamed ``<log>.<n>`` (``n`` counting up)
and a new ``log`` begun; of the renamed files the newest
``log_max_files - 1`` are kept. Copying rather than letting the container write the file itself
is what bounds the files: a rotation that looks at the size now and then (copytruncate) lets a
fast writer fill a small disk between two looks. Output that finds the disk full is read and
dropped (a line in the log says how much), so the container never blocks on a full disk.

The exit records and ``shim.done`` are written into files of their own size reserved when the
container (or the shim) starts (``<record>.reserve``, renamed into place), so that a disk that a
pod filled meanwhile does not keep its exit from being recorded.

Exit codes follow Kubernetes: a process killed by signal N exits 128+N (bubblewrap already
reports its child's death that way). SIGTERM or SIGINT to the shim stops the pod: SIGTERM to
the containers' processes (never to bubblewrap, which would die at once and take the
container down with SIGKILL, skipping its grace period), then SIGKILL to everything after the
grace period (``stop.json``'s ``graceSeconds``, else the spec's ``grace_seconds``).

Each container runs in a cgroup of its own inside its pod's (``trimaran.runtime.cgroups``: ``H``
is its ``Hierarchy.to_json()``, ``pod`` the pod's cgroup, ``L`` the ``cpu_shares``, ``cpu_quota``,
``memory`` and ``pids`` to write), created when it starts and joined by its first process before
it execs; its CPU quota and weight, memory limit (an OOM kill in it makes the exit
``OOMKilled``) and the pod's pids limit apply there. Without cgroups (``"cgroups": null``),
``RLIMIT_AS`` caps a container's address space to its ``memory_limit`` instead; a failing
allocation then raises in the program rather than waking the OOM killer, so OOMKilled is
inferred when the container exits non-zero and its log ends with MemoryError, "Cannot allocate
memory" or std::bad_alloc. RLIMIT_AS counts virtual memory, which runtimes such as PyTorch
reserve generously: a cgroup is much to be preferred.
"""

from __future__ import annotations

import errno
import fcntl
import json
import os
import resource
import select
import signal
import stat
import subprocess
import sys
import time

TYPE_CHECKING = False  # typing's, without importing typing (the shim starts in milliseconds)
if TYPE_CHECKING:
    import socket

try:
    from . import cgroups  # imported by the runtime, as part of its package
except ImportError:
    # Run as the shim (see _LAUNCH), or as a script under -I, which leaves its directory off the
    # path: the module beside it.
    if os.path.dirname(os.path.realpath(__file__)) not in sys.path:
        sys.path.append(os.path.dirname(os.path.realpath(__file__)))
    import cgroups

__all__ = [
    "STOP_SIGNALS",
    "STANDBY",
    "proc_stat",
    "process_alive",
    "descendants",
    "read_json",
    "write_json",
    "reserve_record",
    "write_reserved",
    "rotated_logs",
    "LogWriter",
    "DEFAULT_LOG_MAX_SIZE",
    "DEFAULT_LOG_MAX_FILES",
    "utc_now",
    "mount_overlay",
    "unmount_overlay",
    "overlay_mounts_under",
    "release_overlays_under",
    "stage_sources",
    "spawn_mapped",
    "command",
    "main",
]

STOP_SIGNALS = (signal.SIGTERM, signal.SIGINT)
_OOM_MARKERS = (b"MemoryError", b"Cannot allocate memory", b"std::bad_alloc")
_RESCAN_S = 0.05
_TAIL_BYTES = 8192
_MESSAGE_BYTES = 4096
_FALLBACK_LOG_BYTES = 2048
_FALLBACK_LOG_LINES = 80
# The kubelet's containerLogMaxSize and containerLogMaxFiles, for a spec that does not say.
DEFAULT_LOG_MAX_SIZE = 10 * 1024 * 1024
DEFAULT_LOG_MAX_FILES = 5
_COPY_BYTES = 1 << 20  # per splice; also the pipe's size, where the kernel allows it
_COPY_TURN_BYTES = 8 << 20  # copied for one container before the loop looks at the others again
_LINE_SLACK = 16 * 1024  # how far a file may pass its size to end a line begun in it
# Room kept for an exit record: a 4096-byte termination message, JSON-escaped, and the fields.
_RECORD_RESERVE = 32 * 1024


# -- small helpers, shared with trimaran.runtime.local ---------------------------------------


def utc_now() -> str:
    """Now in RFC 3339 at second precision, as Kubernetes writes timestamps."""
    return time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime())


def read_json(path: str) -> dict | None:
    """A JSON file's object, or ``None`` when missing or (being replaced) unreadable."""
    try:
        with open(path, encoding="utf-8") as handle:
            return json.load(handle)
    except (OSError, ValueError):
        return None


def write_json(path: str, data: dict) -> None:
    """Write atomically, so a reader never sees half a file."""
    tmp = f"{path}.tmp{os.getpid()}"
    text = json.dumps(data)  # in one piece: json.dump encodes in Python, dumps in C (a run's spec: ms)
    with open(tmp, "w", encoding="utf-8") as handle:
        handle.write(text)
    os.replace(tmp, path)


def reserve_record(path: str, size: int = _RECORD_RESERVE) -> None:
    """Set ``size`` bytes of disk aside for the record ``path`` (see :func:`write_reserved`);
    nothing is reserved where the disk is already full."""
    try:
        fd = os.open(f"{path}.reserve", os.O_WRONLY | os.O_CREAT | os.O_CLOEXEC, 0o644)
    except OSError:
        return
    try:
        os.posix_fallocate(fd, 0, size)
    except OSError:
        os.close(fd)
        _unlink(f"{path}.reserve")
        return
    os.close(fd)


def write_reserved(path: str, data: dict) -> None:
    """Write ``data`` as :func:`write_json` does, into the space :func:`reserve_record` set aside
    for it when there is some (overwriting allocated blocks needs no free space), so that a full
    disk cannot keep it from being written."""
    reserve = f"{path}.reserve"
    text = json.dumps(data).encode()
    try:
        fd = os.open(reserve, os.O_WRONLY | os.O_CLOEXEC)
    except OSError:
        write_json(path, data)
        return
    try:
        if len(text) > os.fstat(fd).st_size:
            raise OSError(errno.EFBIG, "record larger than its reserve")
        os.pwrite(fd, text, 0)
        os.ftruncate(fd, len(text))
    except OSError:
        os.close(fd)
        _unlink(reserve)
        write_json(path, data)
        return
    os.close(fd)
    os.replace(reserve, path)


def _unlink(path: str) -> None:
    try:
        os.unlink(path)
    except OSError:
        pass


def rotated_logs(path: str) -> list[str]:
    """The rotated files of the log ``path`` (``<path>.<n>``), oldest first."""
    directory, base = os.path.split(path)
    prefix = base + "."
    try:
        names = os.listdir(directory or ".")
    except OSError:
        return []
    numbers = sorted(int(n[len(prefix):]) for n in names if n.startswith(prefix) and n[len(prefix):].isdigit())
    return [f"{path}.{n}" for n in numbers]


class LogWriter:
    """Copies a container's output from the read end of its pipe into its log file, rotating the
    file at ``max_size`` bytes and keeping ``max_files`` files in all (the live one included)."""

    def __init__(self, path: str, max_size: int, max_files: int) -> None:
        self.path = path
        self.max_size = max(1, max_size)
        self.max_files = max(1, max_files)
        existing = rotated_logs(path)
        self._next = int(existing[-1].rsplit(".", 1)[1]) + 1 if existing else 1
        self.fd = -1
        self.size = 0
        self.start_offset = 0  # where this run's output begins in the file it began in
        self.dropped = 0  # bytes read and thrown away since the disk filled
        self.rotations = 0
        self._splice = hasattr(os, "splice")
        self._open()
        self.start_offset = self.size

    def _open(self) -> None:
        # No O_APPEND: splice refuses a file opened for appending. Only this writer writes it; it
        # reads its last byte back to rotate at a line's end.
        self.fd = os.open(self.path, os.O_RDWR | os.O_CREAT | os.O_CLOEXEC, 0o644)
        self.size = os.lseek(self.fd, 0, os.SEEK_END)

    def _rotate(self) -> bool:
        """Begin a new live file; False where that failed (the disk is full: the file then grows
        past its size rather than output being lost)."""
        try:
            os.replace(self.path, f"{self.path}.{self._next}")  # the open descriptor follows the file
        except OSError:
            return False
        self._next += 1
        self.rotations += 1
        rotated = rotated_logs(self.path)
        for old in rotated[:max(0, len(rotated) - (self.max_files - 1))]:
            _unlink(old)
        try:
            fd = os.open(self.path, os.O_RDWR | os.O_CREAT | os.O_CLOEXEC, 0o644)
        except OSError:
            return False
        os.close(self.fd)
        self.fd, self.size = fd, 0
        return True

    def _ends_line(self) -> bool:
        return self.size == 0 or os.pread(self.fd, 1, self.size - 1) == b"\n"

    def _write_all(self, data: bytes | memoryview) -> None:
        view = memoryview(data)
        while view:
            written = os.write(self.fd, view)
            self.size += written
            view = view[written:]

    def _put(self, data: bytes) -> None:
        """Append ``data``, rotating where the file would pass its size: after the last whole line
        that fits, so that a file begins with a line (a line longer than a file is cut)."""
        while data:
            if self.size >= self.max_size and not self._rotate():
                self._write_all(data)
                return
            room = self.max_size - self.size
            if len(data) <= room:
                self._write_all(data)
                return
            cut = data.rfind(b"\n", 0, room) + 1
            if not cut and self.size == 0:
                cut = room  # a line longer than a whole file: cut it
            elif not cut and not self._ends_line():
                # The line already begun does not fit: end it in this file, unless it is too long.
                cut = data.find(b"\n", room, room + _LINE_SLACK) + 1 or room
            self._write_all(data[:cut])
            data = data[cut:]
            if data and not self._rotate():
                self._write_all(data)
                return

    def copy(self, source: int, budget: int = _COPY_TURN_BYTES) -> bool:
        """Copy what ``source`` (non-blocking) holds, up to about ``budget`` bytes; False once
        every writer has closed it (end of file)."""
        moved = 0
        while moved < budget:
            try:
                if self.dropped:
                    self._write_all(f"[trimaran: {self.dropped} bytes of output dropped: the disk was "
                                    f"full]\n".encode())
                    self.dropped = 0
                if self._splice and self.max_size - self.size > _COPY_BYTES:
                    n = self._splice_some(source)  # far from the next rotation: no copy through Python
                else:
                    n = self._read_some(source)
            except BlockingIOError:
                return True
            except OSError as exc:
                if exc.errno == errno.EIO:
                    return False  # a terminal's master once no process holds its slave: its end
                if exc.errno not in (errno.ENOSPC, errno.EDQUOT):
                    raise
                n = self._drop(source)
            if n is None:
                return True
            if n == 0:
                return False
            moved += n
        return True

    def _splice_some(self, source: int) -> int:
        try:
            n = os.splice(source, self.fd, _COPY_BYTES)
        except OSError as exc:
            if exc.errno != errno.EINVAL:
                raise
            self._splice = False  # a filesystem without splice: copy through memory
            return self._read_some(source)
        self.size += n
        return n

    def _read_some(self, source: int) -> int:
        data = os.read(source, _COPY_BYTES)
        try:
            self._put(data)
        except OSError as exc:
            if exc.errno not in (errno.ENOSPC, errno.EDQUOT):
                raise
            self.dropped += len(data)  # counted whole: where the write stopped is not known here
        return len(data)

    def _drop(self, source: int) -> int | None:
        try:
            data = os.read(source, _COPY_BYTES)
        except BlockingIOError:
            return None
        self.dropped += len(data)
        return len(data)

    def close(self) -> None:
        if self.fd >= 0:
            os.close(self.fd)
            self.fd = -1


def proc_stat(pid: int) -> tuple[str, int, int, int] | None:
    """``(state, ppid, pgrp, start_ticks)`` from /proc/<pid>/stat, or ``None`` if gone."""
    try:
        with open(f"/proc/{pid}/stat", "rb") as handle:
            raw = handle.read()
    except OSError:
        return None
    # The command name may contain spaces and parentheses: split after the last ")".
    fields = raw[raw.rfind(b")") + 2:].split()
    return fields[0].decode(), int(fields[1]), int(fields[2]), int(fields[19])


def process_alive(pid: int, start_ticks: int | None) -> bool:
    """Whether the process that had ``start_ticks`` still runs (a zombie does not; a new
    process that reused the pid does not match)."""
    stat = proc_stat(pid)
    if stat is None or stat[0] in ("Z", "X"):
        return False
    return start_ticks is None or stat[3] == start_ticks


def _comm(pid: int) -> str:
    try:
        with open(f"/proc/{pid}/comm", encoding="utf-8", errors="replace") as handle:
            return handle.read().strip()
    except OSError:
        return ""


def descendants(pid: int) -> list[tuple[int, int]]:
    """Every live descendant of ``pid`` as ``(pid, start_ticks)``, by walking /proc."""
    children: dict[int, list[tuple[int, int]]] = {}
    for name in os.listdir("/proc"):
        if not name.isdigit():
            continue
        stat = proc_stat(int(name))
        if stat is None or stat[0] in ("Z", "X"):
            continue
        children.setdefault(stat[1], []).append((int(name), stat[3]))
    found: list[tuple[int, int]] = []
    queue = [pid]
    while queue:
        for child in children.get(queue.pop(), []):
            found.append(child)
            queue.append(child[0])
    return found


def _signal(pid: int, sig: int) -> None:
    try:
        os.kill(pid, sig)
    except (ProcessLookupError, PermissionError):
        pass


# -- the root filesystem of a container that runs its image -----------------------------------


def _which(name: str) -> str | None:
    for directory in (os.environ.get("PATH") or "/usr/sbin:/usr/bin:/sbin:/bin").split(os.pathsep):
        path = os.path.join(directory, name)
        if os.access(path, os.X_OK):
            return path
    return None


def _quiet(argv: list[str]) -> subprocess.CompletedProcess:
    return subprocess.run(argv, stdin=subprocess.DEVNULL, capture_output=True, timeout=60)


def mount_overlay(overlay: dict) -> str:
    """Mount ``overlay`` (``lower``, ``upper``, ``work``, ``merged``); return which overlay
    was used. Raises ``OSError`` with the mounter's message.

    As root, the kernel's overlayfs (``volatile``: the upper layer is thrown away with the
    container, so its unmount need not sync it; 0.25 s otherwise); fuse-overlayfs where that
    fails (an overlay on an overlay) or without root. ``TRIMARAN_OVERLAY=fuse|kernel`` forces one.
    The kernel's is preferred because a container's files then cost no trip through a FUSE
    daemon: a warm busybox start took 2-5 ms more than a host process with overlayfs, 10-12 ms
    with fuse-overlayfs and 64 ms under load (bench/RESULTS.md, "Issue 12")."""
    for key in ("lower", "upper", "work"):
        if "," in overlay[key] or ":" in overlay[key]:
            raise OSError(f"overlay {key} directory {overlay[key]!r} has a ',' or ':' in its path")
    options = f"lowerdir={overlay['lower']},upperdir={overlay['upper']},workdir={overlay['work']}"
    forced = os.environ.get("TRIMARAN_OVERLAY")
    errors = []
    if forced != "fuse" and (os.geteuid() == 0 or forced == "kernel"):
        for extra in (",volatile", ""):  # volatile needs Linux 5.10
            done = _quiet(["mount", "-t", "overlay", "overlay", "-o", options + extra, overlay["merged"]])
            if done.returncode == 0:
                return "overlayfs"
        errors.append(f"overlayfs: {done.stderr.decode(errors='replace').strip()}")
    fuse = _which("fuse-overlayfs")
    if forced != "kernel":
        if fuse is None:
            errors.append("fuse-overlayfs is not installed (apt-get install fuse-overlayfs)")
        else:
            # allow_other: a pod run without a user namespace (setpriv) is not the mounting user.
            extra = ",allow_other" if os.geteuid() == 0 else ""
            done = _quiet([fuse, "-o", options + extra, overlay["merged"]])
            if done.returncode == 0:
                return "fuse-overlayfs"
            errors.append(f"fuse-overlayfs: {done.stderr.decode(errors='replace').strip()}")
    raise OSError("; ".join(errors))


def _mount_points() -> list[str]:
    points = []
    with open("/proc/self/mountinfo", encoding="utf-8", errors="replace") as handle:
        for line in handle:
            fields = line.split(" ", 5)
            if len(fields) > 4:
                # Spaces and the like are written as octal escapes.
                points.append(fields[4].encode().decode("unicode_escape"))
    return points


def overlay_mounts_under(directory: str) -> list[str]:
    """Mount points at or below ``directory`` (deepest first)."""
    prefix = os.path.realpath(directory).rstrip("/") + "/"
    return sorted((p for p in _mount_points() if (p + "/").startswith(prefix)), key=len, reverse=True)


def unmount_overlay(merged: str) -> None:
    """Unmount a container's root filesystem if it is mounted; lazily when it is busy."""
    if os.path.realpath(merged) not in _mount_points():
        return
    fusermount = _which("fusermount3") or _which("fusermount")
    for argv in ([fusermount, "-u", merged] if fusermount else None, ["umount", merged],
                 [fusermount, "-u", "-z", merged] if fusermount else None, ["umount", "-l", merged]):
        if argv is not None and _quiet(argv).returncode == 0:
            return


def _overlay_daemons(directory: str) -> list[int]:
    """fuse-overlayfs processes serving a mount below ``directory``."""
    needle = os.path.realpath(directory).encode()
    found = []
    for name in os.listdir("/proc"):
        if not name.isdigit():
            continue
        try:
            with open(f"/proc/{name}/cmdline", "rb") as handle:
                argv = handle.read().split(b"\0")
        except OSError:
            continue
        if argv and os.path.basename(argv[0]) == b"fuse-overlayfs" and any(needle in a for a in argv[1:]):
            found.append(int(name))
    return found


def release_overlays_under(directory: str) -> None:
    """Unmount every overlay below ``directory`` and end its fuse-overlayfs: for runs whose shim
    did not get to (killed, or the machine's control plane stopped it)."""
    for point in overlay_mounts_under(directory):
        unmount_overlay(point)
    for pid in _overlay_daemons(directory):
        _signal(pid, signal.SIGTERM)


_CLONE_NEWNET = 0x40000000
def netns_packets() -> int:
    """IPv4 packets this process's network namespace has received and sent (its ``Ip:`` counters)."""
    try:
        with open("/proc/self/net/snmp", encoding="ascii") as handle:
            rows = [line.split() for line in handle if line.startswith("Ip:")]
        counters = dict(zip(rows[0][1:], rows[1][1:], strict=True))
        return int(counters["InReceives"]) + int(counters["OutRequests"])
    except (OSError, IndexError, KeyError, ValueError):
        return -1


def join_netns(path: str) -> None:
    """Enter the pod's network namespace (a pinned nsfs file), so that every container this shim
    starts is in it. The shim is single-threaded here, so the whole process moves."""
    import ctypes  # only here: the shim starts faster without it

    libc = ctypes.CDLL(None, use_errno=True)
    fd = os.open(path, os.O_RDONLY | os.O_CLOEXEC)
    try:
        if libc.setns(fd, _CLONE_NEWNET) != 0:
            err = ctypes.get_errno()
            raise SystemExit(f"shim: cannot join the network namespace {path}: {os.strerror(err)}")
    finally:
        os.close(fd)


# -- user namespaces mapped into the pods' range ---------------------------------------------

# Where bind sources the sandbox's host uid cannot reach are staged (see stage_sources). It
# exists on the host (empty, root's); the tmpfs on it lives in one container's mount namespace.
STAGE_DIR = "/run/trimaran-stage"
_CLONE_NEWNS = 0x00020000
_MS_NOSUID, _MS_NODEV, _MS_BIND, _MS_REC, _MS_SLAVE = 0x2, 0x4, 0x1000, 0x4000, 0x80000
_MS_RDONLY, _MS_REMOUNT = 0x1, 0x20
# crun (as runc) copies its own binary before it enters a container, so that a container cannot
# overwrite the host's through /proc/PID/exe (CVE-2019-5736): a few ms of every container start.
# It skips that where this is set and its binary is on a read-only mount, which the shim makes
# in crun's own mount namespace (_enter_crun_namespace); a pod's user namespace cannot remount it.
CLONED_BINARY_ENV = "_LIBCONTAINER_CLONED_BINARY"
_BIND_OPTIONS = ("--bind", "--ro-bind", "--bind-try", "--ro-bind-try")
# How many arguments each bubblewrap option the sandbox writes takes (the rest take none).
_BWRAP_ARITY = {
    "--tmpfs": 1, "--dir": 1, "--proc": 1, "--dev": 1, "--remount-ro": 1, "--perms": 1, "--size": 1,
    "--hostname": 1, "--chdir": 1, "--cap-add": 1, "--cap-drop": 1, "--uid": 1, "--gid": 1,
    "--seccomp": 1, "--userns-block-fd": 1, "--info-fd": 1, "--setenv": 2, "--symlink": 2,
    "--dev-bind": 2, "--dev-bind-try": 2, **dict.fromkeys(_BIND_OPTIONS, 2),
}


def _reachable(path: str, uid: int, gids: frozenset[int], cache: dict[str, bool]) -> bool:
    """Whether ``uid`` (with ``gids``) may look ``path`` up: search permission on every
    directory above it, as written and as resolved (bubblewrap resolves each source)."""
    for candidate in dict.fromkeys((os.path.abspath(path), os.path.realpath(path))):
        directory = os.path.dirname(candidate)
        while True:
            if directory not in cache:
                try:
                    info = os.stat(directory)
                except OSError:
                    cache[directory] = False
                else:
                    bit = stat.S_IXUSR if info.st_uid == uid else stat.S_IXGRP if info.st_gid in gids else stat.S_IXOTH
                    cache[directory] = bool(info.st_mode & bit)
            if not cache[directory]:
                return False
            if directory == "/":
                break
            directory = os.path.dirname(directory)
    return True


def stage_sources(argv: list[str], uid: int, gids: list[int]) -> tuple[list[str], list[tuple[str, str, bool]]]:
    """bubblewrap's ``argv`` with every bind source ``uid`` cannot look up (the 0700
    ``$TRIMARAN_HOME``, a Python under ``/root``, a hostPath under a private directory) replaced
    by a path under :data:`STAGE_DIR`, and the ``(source, staged path, is_dir)`` binds that make
    those paths: made as root in the container's own mount namespace just before bubblewrap
    runs (:func:`spawn_mapped`), so nothing of the host changes and they end with the container.
    bubblewrap runs as an unprivileged host uid and resolves every source itself, hence this;
    a missing ``-try`` source it cannot even look up is dropped, as bubblewrap would skip it."""
    out = [argv[0]]
    staged: list[tuple[str, str, bool]] = []
    cache: dict[str, bool] = {}
    groups = frozenset(gids)
    index = 1
    while index < len(argv):
        option = argv[index]
        if option == "--":
            out += argv[index:]
            break
        arity = _BWRAP_ARITY.get(option, 0)
        values = argv[index + 1:index + 1 + arity]
        index += 1 + arity
        if option in _BIND_OPTIONS and not _reachable(values[0], uid, groups, cache):
            if not os.path.exists(values[0]):
                if option.endswith("-try"):
                    continue
            else:
                path = f"{STAGE_DIR}/{len(staged)}"
                staged.append((values[0], path, os.path.isdir(values[0])))
                values = [path, values[1]]
        out += [option, *values]
    return out, staged


def _make_stage(libc: object, staged: list[tuple[str, str, bool]]) -> None:
    """In the child, as root: a mount namespace of its own (following the host's mounts, never
    sending its own back), a tmpfs on :data:`STAGE_DIR`, and each staged bind."""
    def check(result: int, what: str) -> None:
        if result != 0:
            import ctypes

            errno = ctypes.get_errno()
            raise OSError(errno, f"{what}: {os.strerror(errno)}")

    check(libc.unshare(_CLONE_NEWNS), "unshare(CLONE_NEWNS)")
    check(libc.mount(b"none", b"/", None, _MS_REC | _MS_SLAVE, None), "making / a slave mount")
    check(libc.mount(b"tmpfs", STAGE_DIR.encode(), b"tmpfs", _MS_NOSUID | _MS_NODEV, b"mode=0711"),
          f"mounting a tmpfs on {STAGE_DIR}")
    for source, path, is_dir in staged:
        if is_dir:
            os.mkdir(path)
        else:
            os.close(os.open(path, os.O_CREAT | os.O_WRONLY, 0o600))
        check(libc.mount(source.encode(), path.encode(), None, _MS_BIND | _MS_REC, None), f"binding {source}")


_MNT_DETACH = 0x2
_PR_SET_PDEATHSIG = 1
# The hybrid hierarchy's cgroup2 mount, hidden from crun (see the module's docstring).
_UNIFIED = b"/sys/fs/cgroup/unified"


def _enter_crun_namespace(libc: object, rootfs: dict | None, runtime: str) -> None:
    """In the child, as root, before crun runs: a mount namespace of its own (following the
    host's mounts), without the hybrid hierarchy's cgroup2 mount, where the ``runtime``'s binary
    is a read-only bind mount of itself (see :data:`CLONED_BINARY_ENV`), and the fresh root of a
    host-process container: a tmpfs owned by the container's uid (as bubblewrap's tmpfs root),
    with the skeleton's directories and symlinks, owned alike so that crun, root of the pod's user
    namespace, may make mount points in them. All of it ends with the container."""
    def check(result: int, what: str) -> None:
        if result != 0:
            import ctypes

            errno = ctypes.get_errno()
            raise OSError(errno, f"{what}: {os.strerror(errno)}")

    # crun dies with the shim (and the container's init with crun: tini -p), as bubblewrap's
    # --die-with-parent: a killed shim leaves nothing running.
    check(libc.prctl(_PR_SET_PDEATHSIG, signal.SIGKILL, 0, 0, 0), "prctl(PR_SET_PDEATHSIG)")
    check(libc.unshare(_CLONE_NEWNS), "unshare(CLONE_NEWNS)")
    check(libc.mount(b"none", b"/", None, _MS_REC | _MS_SLAVE, None), "making / a slave mount")
    libc.umount2(_UNIFIED, _MNT_DETACH)  # absent on a host that is not hybrid
    binary = os.path.realpath(runtime).encode()
    check(libc.mount(binary, binary, None, _MS_BIND, None), f"binding {runtime}")
    check(libc.mount(None, binary, None, _MS_REMOUNT | _MS_BIND | _MS_RDONLY, None), f"making {runtime} read-only")
    if rootfs is None:
        return
    root, uid, gid = rootfs["path"], rootfs["uid"], rootfs["gid"]
    check(libc.mount(b"tmpfs", root.encode(), b"tmpfs", _MS_NOSUID | _MS_NODEV,
                     f"mode=0755,uid={uid},gid={gid}".encode()), f"mounting a tmpfs on {root}")
    for entry in rootfs["skeleton"]:
        path = root + (entry[1] if entry[0] == "dir" else entry[2])
        parent = os.path.dirname(path)
        missing = []
        while not os.path.lexists(parent):
            missing.append(parent)
            parent = os.path.dirname(parent)
        for directory in reversed(missing):
            os.mkdir(directory, 0o755)
            os.lchown(directory, uid, gid)
        if entry[0] == "dir":
            if not os.path.lexists(path):
                os.mkdir(path)
                os.chmod(path, entry[2])
                os.lchown(path, uid, gid)
        elif not os.path.lexists(path):
            os.symlink(entry[1], path)
            os.lchown(path, uid, gid)


_CLONE_NEWUSER, _CLONE_NEWIPC, _CLONE_NEWUTS = 0x10000000, 0x08000000, 0x04000000
POD_NAMESPACES = ("user", "ipc", "uts")


def pin_pod_namespaces(libc: object, directory: str, hostname: str, uid_map: list, gid_map: list) -> None:
    """The pod's user, IPC and UTS namespaces, shared by all its containers (as the sandbox
    (pause) container holds them for containerd), pinned by bind mounts at ``directory/<type>``
    so that they outlive any one container and shim (a container restarted in place joins them
    again). Made once per pod, by a child that unshares them and sets the pod's hostname; its
    ids are mapped as every container's (``uid_map``, ``gid_map`` extents). The runtime unmounts
    the pins with the pod's directory."""
    os.makedirs(directory, mode=0o700, exist_ok=True)
    with open(os.path.join(directory, ".lock"), "w") as lock:
        fcntl.flock(lock, fcntl.LOCK_EX)
        if all(os.path.ismount(os.path.join(directory, kind)) for kind in POD_NAMESPACES):
            return
        ready_r, ready_w = os.pipe()
        done_r, done_w = os.pipe()
        pid = os.fork()
        if pid == 0:
            try:
                os.close(ready_r)
                os.close(done_w)
                name = hostname.encode()
                made = (libc.unshare(_CLONE_NEWUSER | _CLONE_NEWIPC | _CLONE_NEWUTS) == 0
                        and libc.sethostname(name, len(name)) == 0)
                os.write(ready_w, b"1" if made else b"0")
                os.read(done_r, 1)  # stay in them until they are pinned
            finally:
                os._exit(0)
        os.close(ready_w)
        os.close(done_r)
        try:
            if os.read(ready_r, 1) != b"1":
                raise OSError(f"making the pod's namespaces (user, ipc, uts) failed in pid {pid}")
            for kind, extents in (("uid", uid_map), ("gid", gid_map)):
                with open(f"/proc/{pid}/{kind}_map", "w", encoding="ascii") as handle:
                    handle.write("".join(f"{a} {b} {c}\n" for a, b, c in extents))
            for kind in POD_NAMESPACES:
                pin = os.path.join(directory, kind)
                if os.path.ismount(pin):
                    libc.umount2(pin.encode(), _MNT_DETACH)  # a half-made set of an earlier try
                os.close(os.open(pin, os.O_CREAT | os.O_WRONLY, 0o600))
                if libc.mount(f"/proc/{pid}/ns/{kind}".encode(), pin.encode(), None, _MS_BIND, None) != 0:
                    raise OSError(f"pinning the pod's {kind} namespace at {pin} failed")
        finally:
            os.close(ready_r)
            os.close(done_w)
            os.waitpid(pid, 0)


def release_pod_namespaces(libc: object, directory: str, runs_dir: str, own_run: str) -> None:
    """Unpin the pod's namespaces (see :func:`pin_pod_namespaces`) once no shim of the pod runs
    but this one (``own_run``), which is ending: as a pod sandbox goes with the pod's last
    container here, so that a finished pod leaves no mount behind. A later start makes them anew."""
    if not os.path.isdir(directory):
        return
    with open(os.path.join(directory, ".lock"), "w") as lock:
        fcntl.flock(lock, fcntl.LOCK_EX)
        for run in os.listdir(runs_dir):
            run_dir = os.path.join(runs_dir, run)
            if run_dir == own_run or os.path.exists(os.path.join(run_dir, "shim.done")):
                continue
            record = read_json(os.path.join(run_dir, "shim.pid"))
            if record and process_alive(record["pid"], record.get("startTicks")):
                return
        for kind in POD_NAMESPACES:
            libc.umount2(os.path.join(directory, kind).encode(), _MNT_DETACH)


def _write_maps(pid: int, idmap: dict) -> None:
    """The child's uid and gid maps: written directly by root, else through newuidmap and
    newgidmap, which check the extents against /etc/subuid and /etc/subgid."""
    for kind in ("uid", "gid"):
        extents = idmap[f"{kind}_map"]
        if idmap.get("helper"):
            tool = _which(f"new{kind}map") or f"new{kind}map"
            done = _quiet([tool, str(pid), *(str(v) for extent in extents for v in extent)])
            if done.returncode != 0:
                raise OSError(f"new{kind}map: {done.stderr.decode(errors='replace').strip()}")
        else:
            with open(f"/proc/{pid}/{kind}_map", "w", encoding="ascii") as handle:
                handle.write("".join(f"{a} {b} {c}\n" for a, b, c in extents))


def _read_all(fd: int) -> bytes:
    chunks = []
    while chunk := os.read(fd, 4096):
        chunks.append(chunk)
    return b"".join(chunks)


def spawn_mapped(argv: list[str], idmap: dict, *, before_exec: object = None,
                 pass_fds: tuple[int, ...] = (), **popen: object) -> subprocess.Popen:
    """Start bubblewrap (``argv``, which unshares the user namespace and names no ``--uid``)
    with the container's ids mapped by ``idmap`` (``uid_map``, ``gid_map`` extents, ``run_as``
    and ``helper`` as ``trimaran.runtime.idmap.IdMap.to_json`` writes them).

    bubblewrap runs as ``run_as`` where given (the control plane is root): its own host uid is
    then the container's uid outside, so no ``--uid`` is needed, and bind sources that uid
    cannot look up are staged first (:func:`stage_sources`). It stops once it has made the
    namespace (``--userns-block-fd``), tells its child's pid (``--info-fd``), and goes on once
    the maps are written. ``before_exec`` runs in the child first (cgroup, limits), as root.
    Raises ``OSError`` (the process is killed) when the namespace cannot be set up."""
    run_as = idmap.get("run_as")
    staged: list[tuple[str, str, bool]] = []
    libc = None
    if run_as is not None:
        argv, staged = stage_sources(argv, run_as[0], [run_as[1], *run_as[2]])
        if staged:
            import ctypes  # only here: the shim starts faster without it

            libc = ctypes.CDLL(None, use_errno=True)
            os.makedirs(STAGE_DIR, mode=0o711, exist_ok=True)
    block_r, block_w = os.pipe()
    info_r, info_w = os.pipe()
    argv = [argv[0], "--userns-block-fd", str(block_r), "--info-fd", str(info_w), *argv[1:]]

    def child() -> None:
        if callable(before_exec):
            before_exec()
        if staged:
            _make_stage(libc, staged)
        if run_as is not None:
            os.setgroups(list(run_as[2]))
            os.setresgid(run_as[1], run_as[1], run_as[1])
            os.setresuid(run_as[0], run_as[0], run_as[0])

    try:
        proc = subprocess.Popen(argv, preexec_fn=child, pass_fds=(*pass_fds, block_r, info_w), **popen)
    finally:
        os.close(block_r)
        os.close(info_w)
    try:
        try:
            info = json.loads(_read_all(info_r) or b"{}")
        finally:
            os.close(info_r)
        if "child-pid" not in info:
            # bubblewrap ended before making the namespace; its message is in its output.
            return proc
        _write_maps(int(info["child-pid"]), idmap)
        os.write(block_w, b"1")
    except (OSError, ValueError) as exc:
        _signal(proc.pid, signal.SIGKILL)
        proc.wait()
        raise OSError(f"setting up the container's user namespace: {exc}") from None
    finally:
        os.close(block_w)
    return proc


# -- a container's stdin, for attach --------------------------------------------------------


def unix_path(path: str) -> tuple[str, int]:
    """A name for the unix socket ``path`` that fits ``sun_path`` (108 bytes) however deep its
    directory lies: ``/proc/self/fd/N/NAME``, N a descriptor of the directory (``O_PATH``), which the
    caller closes once it has bound or connected (or passes on to a child that will)."""
    directory, name = os.path.split(path)
    fd = os.open(directory or ".", os.O_PATH | os.O_DIRECTORY | os.O_CLOEXEC)
    return f"/proc/self/fd/{fd}/{name}", fd


def _listen(path: str) -> socket.socket:
    import socket  # only for a container with a stdin: the shim starts faster without it

    _unlink(path)
    name, fd = unix_path(path)
    listener = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM | socket.SOCK_CLOEXEC)
    try:
        listener.bind(name)
        listener.listen(8)
    except OSError:
        listener.close()
        raise
    finally:
        os.close(fd)
    listener.setblocking(False)
    return listener


def received_fd(conn: socket.socket) -> tuple[bytes, int | None]:
    """A message and the descriptor that came with it (SCM_RIGHTS), if one did."""
    import array
    import socket

    fds = array.array("i")
    message, ancillary, _, _ = conn.recvmsg(4096, socket.CMSG_SPACE(fds.itemsize))
    for level, kind, data in ancillary:
        if level == socket.SOL_SOCKET and kind == socket.SCM_RIGHTS:
            fds.frombytes(data[:len(data) - len(data) % fds.itemsize])
    for extra in fds[1:]:
        os.close(extra)
    return message, fds[0] if fds else None


class _Stdin:
    """A container's stdin (``stdin: true``) held by the shim, as containerd's shim holds it: the
    write end of a pipe, or the terminal's master (``tty: true``, which the shim also reads the
    output from, so it is only lent here). Attach sessions connect to ``<container>.attach`` and
    are handed a copy of it (``{"tty"}`` and the descriptor, SCM_RIGHTS), then a NUL byte each time
    the shim has written the container's output into its log (the log is the one copy of the output:
    the session reads it at once, and a slow one holds nothing here); a session ends when it
    closes its connection (or shuts down its writing: its input ended). ``once`` (``stdinOnce``):
    the first session's end closes the pipe, and the container reads end of file; a terminal is
    left open, as containerd's CRI leaves it (it closes a stdinOnce stdin only without a tty)."""

    def __init__(self, path: str, fd: int, tty: bool, once: bool) -> None:
        self.path, self.fd, self.tty, self.once = path, fd, tty, once
        self.listener: socket.socket | None = _listen(path)
        self.sessions: dict[int, socket.socket] = {}

    def fds(self) -> list[int]:
        return ([self.listener.fileno()] if self.listener is not None else []) + list(self.sessions)

    def ready(self, fd: int) -> None:
        """``fd`` (the listener or a session) is readable."""
        import array
        import socket

        if self.listener is not None and fd == self.listener.fileno():
            try:
                conn, _ = self.listener.accept()
            except OSError:
                return
            try:
                conn.sendmsg([json.dumps({"tty": self.tty}).encode()],
                           [(socket.SOL_SOCKET, socket.SCM_RIGHTS, array.array("i", [self.fd]).tobytes())])
            except OSError:
                conn.close()
                return
            conn.setblocking(False)
            self.sessions[conn.fileno()] = conn
            return
        conn = self.sessions.get(fd)
        if conn is None:
            return
        try:
            if conn.recv(4096):
                return  # a session says nothing; what it might is ignored
        except BlockingIOError:
            return
        except OSError:
            pass
        del self.sessions[fd]
        conn.close()
        if self.once and not self.tty:
            self.close()

    def wrote(self) -> None:
        """Tell each session the log grew (a session whose socket is full has been told already)."""
        for conn in self.sessions.values():
            try:
                conn.send(b"\0")
            except OSError:
                pass  # full (it will read the log anyway), or gone (its end is read in ready)

    def close(self) -> None:
        """No more sessions: the socket goes, and the pipe (never the terminal, which is not ours)."""
        if self.listener is not None:
            self.listener.close()
            self.listener = None
            _unlink(self.path)
        for conn in self.sessions.values():
            conn.close()
        self.sessions.clear()
        if not self.tty and self.fd >= 0:
            os.close(self.fd)
            self.fd = -1


# -- the supervisor -----------------------------------------------------------------------


def _prepare_bundle(oci: dict, before_exec: object, runtime: str) -> object:
    """Write the bundle's ``config.json`` (and clear its error log and any state a killed run
    left under the same id); return what the child runs before crun: ``before_exec``, then
    :func:`_enter_crun_namespace`."""
    import ctypes  # only for crun's containers: the shim starts faster without it

    libc = ctypes.CDLL(None, use_errno=True)
    config = dict(oci["config"])
    shared = oci.get("pod_namespaces")
    if shared:
        # Join the pod's namespaces: their ids are mapped, their hostname set, once for all.
        linux = config["linux"] = dict(config["linux"])
        pin_pod_namespaces(libc, shared, config.pop("hostname", ""),
                           [[m["containerID"], m["hostID"], m["size"]] for m in linux.pop("uidMappings")],
                           [[m["containerID"], m["hostID"], m["size"]] for m in linux.pop("gidMappings")])
        linux["namespaces"] = [dict(ns, path=os.path.join(shared, ns["type"])) if ns["type"] in POD_NAMESPACES
                               else ns for ns in linux["namespaces"]]
    write_json(os.path.join(oci["bundle"], "config.json"), config)
    with open(os.path.join(oci["bundle"], "crun.log"), "wb"):
        pass
    if os.path.isdir(os.path.join(oci["root"], oci["id"])):
        _quiet([_which("crun") or "crun", "--root", oci["root"], "delete", "--force", oci["id"]])
    rootfs = oci.get("rootfs")

    def child() -> None:
        if callable(before_exec):
            before_exec()
        _enter_crun_namespace(libc, rootfs, runtime)

    return child


class _Container:
    def __init__(self, spec: dict, state_dir: str, attempt: int, pod_cgroup: dict | None) -> None:
        self.spec = spec
        self.name: str = spec["name"]
        self.state_dir = state_dir
        self.attempt = attempt
        self.pod_cgroup = pod_cgroup
        self.hierarchy = cgroups.Hierarchy.from_json(pod_cgroup["hierarchy"]) if pod_cgroup else None
        self.proc: subprocess.Popen | None = None
        self.pidfd: int | None = None
        self.cgroup: str | None = None  # relative to the home's parent cgroup
        self.enforcement: str | None = None
        self.started_at = ""
        self.log: LogWriter | None = None
        self.pipe: int | None = None  # the read end of the container's stdout and stderr (or its terminal's master)
        self.stdin: _Stdin | None = None  # what attach sessions write to (``stdin: true``)
        self.exit_code: int | None = None
        self.terminated: set[int] = set()
        # Monotonic stamps and durations for the runtime's per-part timings (shim.done's "timings").
        self.timings: dict[str, float] = {}

    def _file(self, suffix: str) -> str:
        return os.path.join(self.state_dir, f"{self.name}{suffix}")

    def start(self) -> None:
        self.timings["start"] = time.monotonic()
        limit = self.spec.get("memory_limit")
        hierarchy, pod = self.hierarchy, self.pod_cgroup
        if hierarchy is not None and pod is not None:
            began = time.monotonic()
            try:
                # Named by container and attempt, as the runtime finds it again when this shim is gone.
                self.cgroup = cgroups.create(hierarchy, pod["pod"], pod["limits"], f"{self.name}-{self.attempt}",
                                             self.spec.get("resources") or {})
                self.enforcement = f"cgroup-v{hierarchy.version}" if limit else None
            except OSError as exc:
                print(f"shim: no cgroup for {self.name}: {exc}", file=sys.stderr)
            self.timings["cgroup.create"] = time.monotonic() - began
        if limit and self.cgroup is None:
            self.enforcement = "rlimit"
        cgroup, rlimit = self.cgroup, (limit if self.enforcement == "rlimit" else None)

        terminal = bool(self.spec.get("tty"))
        oci = self.spec.get("oci")

        def before_exec() -> None:
            # In the child, before bwrap runs: a process group of its own (Popen's
            # process_group needs Python 3.11), and the cgroup, so that every process of the
            # container is counted from its first instruction.
            os.setpgid(0, 0)
            if cgroup is not None:
                cgroups.join(hierarchy, cgroup)
            if rlimit is not None:
                resource.setrlimit(resource.RLIMIT_AS, (rlimit, rlimit))

        log_path = self.spec["log"]
        os.makedirs(os.path.dirname(log_path), exist_ok=True)
        reserve_record(self._file(".exit.json"))
        self.started_at = utc_now()
        argv = list(self.spec["argv"])
        overlay = self.spec.get("overlay")
        if overlay:
            try:
                mount_overlay(overlay)
            except (OSError, subprocess.SubprocessError) as exc:
                self._record(128, None, "StartError", f"mounting the image's root filesystem: {exc}")
                return
        seccomp_fd: int | None = None
        write_end: int | None = None
        stdin_read: int | None = None  # the container's end of its stdin pipe
        stdin_write: int | None = None
        console: socket.socket | None = None  # where crun sends the terminal it made
        console_dir: int | None = None
        try:
            self.log = LogWriter(log_path, int(self.spec.get("log_max_size") or DEFAULT_LOG_MAX_SIZE),
                                 int(self.spec.get("log_max_files") or DEFAULT_LOG_MAX_FILES))
            stdin: int = subprocess.DEVNULL
            if terminal and oci:
                # As containerd: crun makes the terminal inside the container (its own devpts, so
                # ``tty`` names it) and sends us its master; crun's own words go to crun.log.
                console = _listen(self._file(".console"))
                name, console_dir = unix_path(self._file(".console"))
                argv[argv.index("run") + 1:argv.index("run") + 1] = ["--console-socket", name]
                write_end = os.open(os.devnull, os.O_WRONLY | os.O_CLOEXEC)
            elif terminal:
                # A terminal of the shim's: its slave is the container's stdio, its master the output.
                # No one's controlling terminal here: the container's command takes it in its pid
                # namespace (``setsid --ctty``, see runtime/local.py), so a shell's job control works.
                self.pipe, write_end = os.openpty()
                os.set_blocking(self.pipe, False)
                stdin = write_end
            else:
                self.pipe, write_end = os.pipe2(os.O_CLOEXEC)
                os.set_blocking(self.pipe, False)
                try:
                    fcntl.fcntl(self.pipe, fcntl.F_SETPIPE_SZ, _COPY_BYTES)  # fewer wake-ups for a chatty one
                except OSError:
                    pass
                if self.spec.get("stdin"):
                    stdin_read, stdin_write = os.pipe2(os.O_CLOEXEC)
                    stdin = stdin_read
            if self.spec.get("seccomp"):
                seccomp_fd = os.open(self.spec["seccomp"], os.O_RDONLY | os.O_CLOEXEC)
                argv[1:1] = ["--seccomp", str(seccomp_fd)]
            self.timings["spawned"] = time.monotonic()
            passed = tuple(fd for fd in (seccomp_fd, console_dir) if fd is not None)
            popen = {"env": self.spec["env"], "cwd": "/", "stdin": stdin, "stdout": write_end,
                     "stderr": subprocess.STDOUT, "pass_fds": passed}
            if oci:
                # The container's environment is in its config; crun, root on the host, gets
                # none of it (an LD_PRELOAD of the pod's must not reach it).
                popen["env"] = {"PATH": "/usr/sbin:/usr/bin:/sbin:/bin", CLONED_BINARY_ENV: "1"}
                self.proc = subprocess.Popen(argv, preexec_fn=_prepare_bundle(oci, before_exec, argv[0]), **popen)
            elif self.spec.get("idmap"):
                self.proc = spawn_mapped(argv, self.spec["idmap"], before_exec=before_exec, **popen)
            else:
                self.proc = subprocess.Popen(argv, preexec_fn=before_exec, **popen)
        except (OSError, subprocess.SubprocessError) as exc:
            # The program or bwrap is missing, the seccomp program unreadable, joining the cgroup
            # failed, or the log could not be opened.
            self._close_output()
            if console is not None:
                console.close()
                _unlink(self._file(".console"))
            if stdin_write is not None:
                os.close(stdin_write)
            self._record(128, None, "StartError", f"failed to start {argv[0]!r}: {exc}")
            return
        finally:
            for fd in (seccomp_fd, write_end, stdin_read, console_dir):
                if fd is not None:
                    os.close(fd)
        if console is not None:
            self._receive_console(console)
        held = self.pipe if terminal else stdin_write
        if self.spec.get("stdin") and held is not None:
            try:
                # Before the start is recorded: whoever sees the container running may attach.
                self.stdin = _Stdin(self._file(".attach"), held, terminal, bool(self.spec.get("stdin_once")))
            except OSError as exc:
                print(f"shim: no attach socket for {self.name}: {exc}", file=sys.stderr)
                if stdin_write is not None:
                    os.close(stdin_write)
        elif stdin_write is not None:
            os.close(stdin_write)
        stat = proc_stat(self.proc.pid)
        try:
            write_json(self._file(".pid"), {
                "pid": self.proc.pid,
                "startTicks": stat[3] if stat else None,
                "startedAt": self.started_at,
                "cgroup": self.cgroup,
                "cgroupDirs": self.hierarchy.dirs(self.cgroup) if self.hierarchy and self.cgroup else [],
                "memoryEnforcement": self.enforcement,
            })
        except OSError as exc:
            # A full disk: the container runs on under this shim, which records its exit.
            print(f"shim: recording the start of {self.name}: {exc}", file=sys.stderr)
        try:
            self.pidfd = os.pidfd_open(self.proc.pid)
        except (AttributeError, OSError):
            self.pidfd = None  # the main loop then polls on a short timeout

    def _receive_console(self, listener: socket.socket) -> None:
        """The terminal's master, which crun sends once it has made the container (or nothing, if
        crun ends first: its reason is in crun.log)."""
        assert self.proc is not None
        try:
            while self.proc.poll() is None:
                ready, _, _ = select.select([listener], [], [], _RESCAN_S)
                if not ready:
                    continue
                conn, _ = listener.accept()
                with conn:
                    conn.setblocking(True)
                    _, master = received_fd(conn)
                if master is not None:
                    os.set_blocking(master, False)
                    self.pipe = master
                    return
        except OSError as exc:
            print(f"shim: receiving the terminal of {self.name}: {exc}", file=sys.stderr)
        finally:
            listener.close()
            _unlink(self._file(".console"))

    @property
    def running(self) -> bool:
        return self.proc is not None and self.exit_code is None

    def copy_output(self) -> None:
        """Move what the container wrote into its log (called when its pipe is readable)."""
        if self.pipe is not None and self.log is not None:
            if self.stdin is not None and self.stdin.tty:
                # A terminal's master is one open file with the copies attach sessions hold: one
                # made blocking there must not hang this loop.
                os.set_blocking(self.pipe, False)
            more = self.log.copy(self.pipe)
            if self.stdin is not None and self.stdin.sessions:
                self.stdin.wrote()
            if not more:
                self._close_output()

    def _close_output(self) -> None:
        if self.pipe is not None:
            os.close(self.pipe)
            self.pipe = None
        if self.log is not None:
            self.log.close()

    def _processes(self) -> list[int]:
        assert self.proc is not None
        pids = {self.proc.pid, *(p for p, _ in descendants(self.proc.pid))}
        if self.hierarchy and self.cgroup:
            pids.update(cgroups.procs(self.hierarchy.dirs(self.cgroup)[0]))
        return sorted(pids)

    def terminate(self) -> None:
        """SIGTERM to the container's own processes, each once. bubblewrap is left out: it
        does not forward signals and dies of SIGTERM, which kills its child at once. Called
        again during the grace period, because a process still being set up by bubblewrap
        (so still named bwrap) when the stop came must get its SIGTERM once it runs. Under crun,
        crun itself and the container's init (its child, which passes the signal on) are left
        out the same way."""
        assert self.proc is not None
        oci = bool(self.spec.get("oci"))
        for pid in self._processes():
            stat = proc_stat(pid) if oci else None
            if stat is not None and (pid == self.proc.pid or stat[1] == self.proc.pid):
                continue
            if pid not in self.terminated and _comm(pid) not in ("bwrap", "crun"):
                self.terminated.add(pid)
                _signal(pid, signal.SIGTERM)

    def kill(self) -> None:
        """SIGKILL to everything: the process group, every descendant, the cgroup."""
        assert self.proc is not None
        try:
            os.killpg(self.proc.pid, signal.SIGKILL)
        except (ProcessLookupError, PermissionError):
            pass
        for pid in self._processes():
            _signal(pid, signal.SIGKILL)

    def reap(self) -> bool:
        """Record the exit if the process ended; True when it did."""
        assert self.proc is not None
        returncode = self.proc.poll()
        if returncode is None:
            return False
        if self.pidfd is not None:
            os.close(self.pidfd)
            self.pidfd = None
        # Nothing of the container may outlive it: stray processes in its group or cgroup.
        try:
            os.killpg(self.proc.pid, signal.SIGKILL)
        except (ProcessLookupError, PermissionError):
            pass
        self.timings["reaped"] = time.monotonic()
        oom = False
        if self.hierarchy and self.cgroup:
            oom = cgroups.oom_kills(self.hierarchy, self.cgroup) > 0
            cgroups.remove(self.hierarchy, self.cgroup)
            self.timings["cgroup.remove"] = time.monotonic() - self.timings["reaped"]
        # Its last words, before they are read for the exit's reason. A process that slipped out
        # of the group and cgroup and kept the pipe open is not waited for: the read stops when
        # the pipe is empty, and closing it ends that process's writes.
        if self.pipe is not None and self.log is not None:
            self.log.copy(self.pipe, budget=1 << 62)
        if self.stdin is not None:
            self.stdin.close()
            self.stdin = None
        self._close_output()
        runtime = os.path.basename(self.spec["argv"][0])
        sandboxed = runtime in ("bwrap", "crun")
        signum: int | None = None
        if returncode < 0:
            signum = -returncode
            exit_code = 128 + signum
        else:
            exit_code = returncode
            if sandboxed and 128 < returncode <= 128 + 64:
                signum = returncode - 128  # bubblewrap's report of a signalled child
        tail = self._log_tail(_TAIL_BYTES)
        if sandboxed and returncode == 1 and tail.startswith(b"bwrap: "):
            # bubblewrap could not set up the sandbox or exec the command.
            self._record(128, None, "StartError", tail.decode(errors="replace").strip()[:_MESSAGE_BYTES])
            return True
        if runtime == "crun" and returncode != 0:
            error = self._crun_error(tail, returncode)
            if error is not None:
                self._record(128, None, "StartError", error[:_MESSAGE_BYTES])
                return True
        if self.enforcement == "rlimit" and exit_code != 0:
            oom = any(marker in tail for marker in _OOM_MARKERS)
        reason = "OOMKilled" if oom and exit_code != 0 else ("Completed" if exit_code == 0 else "Error")
        message = self._termination_message(exit_code)
        self._record(exit_code, signum, reason, message)
        return True

    def _crun_error(self, tail: bytes, returncode: int) -> str | None:
        """Why crun could not start the container (its log), or why the init could not run the
        command (tini's fatal line, exit 127); ``None`` when the container ran."""
        try:
            with open(os.path.join(self.spec["oci"]["bundle"], "crun.log"), "rb") as handle:
                logged = handle.read(_MESSAGE_BYTES).decode(errors="replace").strip()
        except OSError:
            logged = ""
        if logged:
            return logged
        if returncode == 127 and b"[FATAL tini" in tail:
            line = tail[tail.rindex(b"[FATAL tini"):].split(b"\n", 1)[0]
            return line.decode(errors="replace").split("] ", 1)[-1]
        return None

    def _log_tail(self, size: int) -> bytes:
        """The last ``size`` bytes this run wrote, from the live file and, where it rotated since
        the run began, the one before it."""
        writer = self.log
        if writer is None:
            return b""
        files = [self.spec["log"]]
        if writer.rotations:
            files[:0] = rotated_logs(self.spec["log"])[-1:]
        tail = b""
        for index, path in enumerate(reversed(files)):
            began_here = writer.rotations == index  # the live file is index 0, the one before it 1
            floor = writer.start_offset if began_here else 0
            try:
                with open(path, "rb") as log:
                    end = log.seek(0, os.SEEK_END)
                    log.seek(max(floor, end - (size - len(tail))))
                    tail = log.read() + tail
            except OSError:
                pass
            if len(tail) >= size:
                break
        return tail

    def _termination_message(self, exit_code: int) -> str | None:
        path = self.spec.get("termination_log")
        if path:
            try:
                with open(path, "rb") as handle:
                    text = handle.read(_MESSAGE_BYTES)
                if text:
                    return text.decode(errors="replace")
            except OSError:
                pass
        if exit_code != 0 and self.spec.get("termination_message_policy") == "FallbackToLogsOnError":
            lines = self._log_tail(_FALLBACK_LOG_BYTES).splitlines()[-_FALLBACK_LOG_LINES:]
            return b"\n".join(lines).decode(errors="replace") or None
        return None

    def _record(self, exit_code: int, signum: int | None, reason: str, message: str | None) -> None:
        self.exit_code = exit_code
        if self.spec.get("overlay"):
            # Before the exit is recorded: whoever sees the exit sees no mount left.
            unmount_overlay(self.spec["overlay"]["merged"])
        write_reserved(self._file(".exit.json"), {
            "exitCode": exit_code,
            "signal": signum,
            "reason": reason,
            "message": message,
            "startedAt": self.started_at,
            "finishedAt": utc_now(),
        })


class _Shim:
    def __init__(self, state_dir: str) -> None:
        self.state_dir = state_dir
        self.stop_requested = False
        self.kill_at: float | None = None
        self.started: list[_Container] = []
        # Handlers first: a stop that arrives while the spec is read must not be lost.
        self.wake_r, wake_w = os.pipe()
        os.set_blocking(self.wake_r, False)
        os.set_blocking(wake_w, False)
        signal.set_wakeup_fd(wake_w)
        for signum in STOP_SIGNALS:
            signal.signal(signum, self._on_stop)
        # The runtime spawns the shim with these blocked, so that a stop sent before the
        # handlers existed is pending now rather than having killed the shim outright.
        signal.pthread_sigmask(signal.SIG_UNBLOCK, STOP_SIGNALS)
        self.spec = read_json(os.path.join(state_dir, "spec.json"))
        if self.spec is None:
            raise SystemExit(f"shim: cannot read {state_dir}/spec.json")
        self.packets_before: int | None = None
        if self.spec.get("netns"):
            join_netns(self.spec["netns"])
            self.packets_before = netns_packets()
        reserve_record(os.path.join(state_dir, "shim.done"))

    def _on_stop(self, signum: int, frame: object) -> None:
        self.stop_requested = True

    def _containers(self, key: str) -> list[_Container]:
        return [
            _Container(c, self.state_dir, self.spec["attempt"], self.spec.get("cgroups"))
            for c in self.spec.get(key) or []
        ]

    def run(self) -> None:
        for container in self._containers("init_containers"):
            if self.stop_requested:
                return
            self.started.append(container)
            container.start()
            self._wait([container])
            if container.exit_code != 0:
                return  # the kubelet decides whether to restart; later ones never start
        containers = self._containers("containers")
        if self.stop_requested:
            return
        for container in containers:
            self.started.append(container)
            container.start()
        self._wait(containers)

    def timings(self, began: float) -> dict:
        """When this shim's ``main`` began and each started container's stamps (see ``_Container``),
        on the machine's monotonic clock, which the runtime's clock is too."""
        return {"main": began, "containers": {c.name: c.timings for c in self.started}, "done": time.monotonic()}

    def _grace(self) -> float:
        stop = read_json(os.path.join(self.state_dir, "stop.json")) or {}
        return float(stop.get("graceSeconds", self.spec.get("grace_seconds", 30)))

    def _wait(self, containers: list[_Container]) -> None:
        while True:
            for container in containers:
                if container.running:
                    container.reap()
            running = [c for c in containers if c.running]
            if not running:
                return
            now = time.monotonic()
            if self.stop_requested and self.kill_at is None:
                self.kill_at = now + self._grace()
            if self.kill_at is not None:
                for container in running:
                    if now >= self.kill_at:
                        container.kill()
                    else:
                        container.terminate()
            poller = select.poll()
            poller.register(self.wake_r, select.POLLIN)
            outputs: dict[int, _Container] = {}
            inputs: dict[int, _Stdin] = {}
            for container in running:
                if container.pidfd is not None:
                    poller.register(container.pidfd, select.POLLIN)
                if container.pipe is not None:
                    outputs[container.pipe] = container
                    poller.register(container.pipe, select.POLLIN)
                if container.stdin is not None:
                    for fd in container.stdin.fds():
                        inputs[fd] = container.stdin
                        poller.register(fd, select.POLLIN)
            # Without pidfds, exits are noticed by polling; while stopping, new processes
            # are looked for (see terminate) and the kill deadline is kept.
            timeout: float | None = None
            if self.kill_at is not None or any(c.pidfd is None for c in running):
                timeout = _RESCAN_S
            if self.kill_at is not None and now < self.kill_at:
                timeout = min(_RESCAN_S, self.kill_at - now)
            for fd, _ in poller.poll(None if timeout is None else timeout * 1000):
                if fd in outputs:
                    outputs[fd].copy_output()
                elif fd in inputs:
                    inputs[fd].ready(fd)
            try:
                while os.read(self.wake_r, 512):
                    pass
            except BlockingIOError:
                pass


# The shim starts from its cached bytecode: run as a script, its source (over a thousand lines)
# would be compiled again at every container start, 5 ms of each pod's start. Imported by file
# name from its own directory (appended, so no name there shadows the standard library), with no
# package to import, it keeps starting in milliseconds; its path stays on the command line, where
# the runtime finds its shims (``LocalRuntime.pod_of_process``).
_LAUNCH = ("import sys; sys.path.append(sys.argv[1].rpartition('/')[0]); import shim; "
           "shim.exit(shim.main(sys.argv[1:]))")


def exit(code: int) -> None:  # noqa: A001 - the launcher's sys.exit, as the shim ends
    """End the process with ``code`` now: its output flushed, without the interpreter's finalization
    (milliseconds of every pod's end, before the runtime sees its shim gone)."""
    for stream in (sys.stdout, sys.stderr):
        try:
            stream.flush()
        except (OSError, ValueError):
            pass
    os._exit(code)


def command(*args: str) -> list[str]:
    """The command that runs the shim with ``args`` (``STATE_DIR``, ``--standby`` or ``--run SPEC``)."""
    return [sys.executable, "-I", "-S", "-c", _LAUNCH, os.path.realpath(__file__), *args]


STANDBY = "--standby"


def _await_run() -> str | None:
    """A shim started ahead (``shim.py --standby``, its stdin a pipe from the runtime): wait for
    the run directory the runtime hands it (a line), then take the run's output files and make
    the directory its working directory (where ``LocalRuntime.pod_of_process`` finds its run, its
    command line naming none). None at end of file: the runtime closed the pipe (it stopped, or
    died)."""
    import ctypes  # noqa: F401 - what a run loads (its netns, crun's namespace): loaded while it waits

    line = sys.stdin.buffer.readline()
    if not line.endswith(b"\n"):
        return None
    state_dir = os.path.abspath(os.fsdecode(line[:-1]))
    log_fd = os.open(os.path.join(state_dir, "shim.log"), os.O_WRONLY | os.O_CREAT | os.O_APPEND, 0o644)
    null_fd = os.open(os.devnull, os.O_RDONLY)
    os.dup2(null_fd, 0)
    os.dup2(log_fd, 1)
    os.dup2(log_fd, 2)
    os.close(null_fd)
    os.close(log_fd)
    os.chdir(state_dir)
    return state_dir


def main(argv: list[str]) -> int:
    """Entry point: ``shim.py STATE_DIR``; ``shim.py --standby`` (started ahead: the state
    directory comes on stdin, see :func:`_await_run`); or ``shim.py --run SPEC`` (``{"argv",
    "idmap"}``: run one bubblewrap command under :func:`spawn_mapped` and exit with its status)."""
    began = time.monotonic()
    if len(argv) == 3 and argv[1] == "--run":
        # One command (an image's unpacking) in a sandbox under the pods' id mapping, for a
        # caller with threads, where spawn_mapped's work between fork and exec is not safe.
        run = read_json(argv[2])
        if run is None:
            print(f"shim: cannot read {argv[2]}", file=sys.stderr)
            return 2
        try:
            return spawn_mapped(run["argv"], run["idmap"], stdin=subprocess.DEVNULL).wait()
        except OSError as exc:
            print(f"shim: {exc}", file=sys.stderr)
            return 125
    if len(argv) != 2:
        print("usage: python -I -S -m trimaran.runtime.shim STATE_DIR | --standby | --run SPEC", file=sys.stderr)
        return 2
    if argv[1] == STANDBY:
        state_dir = _await_run()
        if state_dir is None:
            return 0  # the runtime that started it has gone, or no longer needs it
        began = time.monotonic()
    else:
        state_dir = os.path.abspath(argv[1])
    if os.getsid(0) != os.getpid():
        # Started by hand rather than by the runtime (which spawns it as a session leader):
        # leave the caller's session so that its end does not end the pod.
        if os.fork():
            return 0
        os.setsid()
    shim = _Shim(state_dir)
    stat = proc_stat(os.getpid())
    write_json(os.path.join(state_dir, "shim.pid"),
               {"pid": os.getpid(), "startTicks": stat[3] if stat else None})
    shim.run()
    shared = next((c["oci"]["pod_namespaces"] for c in [*shim.spec.get("init_containers", []),
                                                        *shim.spec.get("containers", [])]
                   if (c.get("oci") or {}).get("pod_namespaces")), None)
    if shared:
        import ctypes

        release_pod_namespaces(ctypes.CDLL(None, use_errno=True), shared, os.path.dirname(state_dir), state_dir)
    done = {"finishedAt": utc_now(), "timings": shim.timings(began)}
    if shim.packets_before is not None:
        # Whether anything went through the pod's netns (nothing: no connection, no socket in
        # TIME_WAIT, no conntrack entry, so the runtime may give it to the next pod). Counters, not
        # /proc/net/tcp: that walks the machine's whole TCP table (ms).
        after = netns_packets()
        done["netns"] = {"packets": after - shim.packets_before if min(after, shim.packets_before) >= 0 else -1}
    write_reserved(os.path.join(state_dir, "shim.done"), done)
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv))
