"""The node's side of ``kubectl exec``: a command run inside a running container.

As containerd's exec, the command joins the container's namespaces (user, mount, pid, network,
IPC, UTS), its root and working directory, its environment and its user, by ``nsenter`` (util-linux)
pointed at the container's first process. That process is found from the shim's ``<container>.pid``
record: the recorded process (bubblewrap, or an OCI runtime's) is an ancestor of the container's,
which is the first descendant in a pid namespace of its own (past bubblewrap's pid 1, which is
only its reaper). Both bubblewrap and crun containers are entered the same way.

A container run by crun is entered by ``crun exec`` instead, as containerd runs ``runc exec``: the
command gets the container's own process spec (its user, working directory, environment,
capabilities, no_new_privs, rlimits) with only the arguments changed, and the container's seccomp
filter, which nsenter cannot load (the filter forbids nsenter's own setns).

A bubblewrap container (an ordinary user's) is entered by nsenter. Entering a user namespace gives a
process every capability in it: where the container sees the host's ``/usr/bin/setpriv``
(host-process pods, whose root is the host's read-only directories), the command runs under it with
the container's capability bounding set and no_new_privs; an image without it gets the user
namespace root's full set. Neither gets bubblewrap's seccomp filter.
"""

from __future__ import annotations

import fcntl
import json
import os
import shutil
import signal
import socket
import struct
import subprocess
import termios
import time
from dataclasses import dataclass, field

from trimaran.runtime import shim as _shim

__all__ = ["AttachedStdin", "ContainerNotFound", "ExecProcess", "attach_stdin", "container_process", "start_exec"]

_NAMESPACES = (("user", "--user"), ("mnt", "--mount"), ("pid", "--pid"), ("net", "--net"), ("ipc", "--ipc"),
               ("uts", "--uts"))

# How long kill() waits for crun exec to write the command's pid (it does once the command runs).
_PID_FILE_WAIT = 5.0


class ContainerNotFound(LookupError):
    """No running container of that name: the kubelet's words, which kubectl prints after
    ``unable to upgrade connection:``."""

    def __init__(self, name: str) -> None:
        super().__init__(f'container not found ("{name}")')


@dataclass
class ExecProcess:
    """A command running in a container. ``stdin``/``stdout``/``stderr`` are this side's ends
    (non-blocking; ``None`` where not asked for); with a TTY, ``stdout`` is the terminal's master,
    which also takes stdin, and ``stderr`` is ``None`` (a terminal merges them, as upstream)."""

    proc: subprocess.Popen
    stdin: int | None
    stdout: int | None
    stderr: int | None
    tty: bool
    # crun's record of the command's pid: crun exec starts it in a session of its own, inside the
    # container's pid namespace, out of reach of a signal to crun's process group.
    pid_file: str | None = None
    _closed: set[int] = field(default_factory=set)

    @property
    def pid(self) -> int:
        return self.proc.pid

    def resize(self, width: int, height: int) -> None:
        """Set the terminal's size (``TIOCSWINSZ``; the foreground program gets SIGWINCH)."""
        if self.tty and self.stdout is not None and self.stdout not in self._closed:
            fcntl.ioctl(self.stdout, termios.TIOCSWINSZ, struct.pack("HHHH", height, width, 0, 0))

    def close_stdin(self) -> None:
        """End of the caller's input: EOF for the command (a TTY gets ^D, as a terminal would)."""
        if self.tty:
            if self.stdout is not None and self.stdout not in self._closed:
                try:
                    os.write(self.stdout, b"\x04")
                except OSError:
                    pass
        elif self.stdin is not None:
            self.close(self.stdin)

    def close(self, fd: int) -> None:
        if fd not in self._closed:
            self._closed.add(fd)
            os.close(fd)

    def kill(self) -> None:
        """End the command and whatever it started in its session (the caller went away).

        Blocks for as long as crun takes to record the command's pid (at most a few seconds): the
        command may already run before crun writes the file, and killing crun first would leave it
        running, reparented, out of reach."""
        groups = [self.proc.pid]
        if self.pid_file is not None:
            deadline = time.monotonic() + _PID_FILE_WAIT
            while True:
                try:
                    with open(self.pid_file, encoding="ascii") as handle:
                        groups.insert(0, os.getpgid(int(handle.read().strip())))
                    break
                except (OSError, ValueError):
                    # Not written yet; or the command ended (crun then ends too).
                    if self.proc.poll() is not None or time.monotonic() > deadline:
                        break
                    time.sleep(0.01)
        for group in groups:
            try:
                os.killpg(group, signal.SIGKILL)
            except OSError:
                pass

    def release(self) -> None:
        for fd in (self.stdin, self.stdout, self.stderr):
            if fd is not None:
                self.close(fd)
        if self.pid_file is not None:
            try:
                os.unlink(self.pid_file)
            except OSError:
                pass


@dataclass
class AttachedStdin:
    """An attach session's hold on a container's stdin (``stdin: true``), lent by its shim:
    ``fd`` is the write end of the container's stdin pipe, or its terminal's master (``tty``:
    input, and ``TIOCSWINSZ``; the output is the shim's to read, into the log). The session lasts
    while ``conn`` is open (non-blocking), on which the shim sends a NUL byte each time it wrote
    output into the log, and which it closes when the container ends; :meth:`end_input` tells the
    shim the input ended (``stdinOnce``: the container's stdin is closed)."""

    conn: socket.socket
    fd: int | None
    tty: bool

    def resize(self, width: int, height: int) -> None:
        """Set the terminal's size (the container's foreground program gets SIGWINCH)."""
        if self.tty and self.fd is not None:
            fcntl.ioctl(self.fd, termios.TIOCSWINSZ, struct.pack("HHHH", height, width, 0, 0))

    def end_input(self) -> None:
        """The client's input ended: this session writes no more (a terminal keeps its master, which
        resizes it)."""
        if not self.tty and self.fd is not None:
            os.close(self.fd)
            self.fd = None
        try:
            self.conn.shutdown(socket.SHUT_WR)
        except OSError:
            pass

    def release(self) -> None:
        if self.fd is not None:
            os.close(self.fd)
            self.fd = None
        self.conn.close()


def attach_stdin(path: str) -> AttachedStdin | None:
    """Connect to the shim's attach socket ``path`` (``<container>.attach`` in its run directory);
    None where the container has none (no ``stdin: true``, it ended, or ``stdinOnce`` closed it)."""
    name, directory = _shim.unix_path(path)
    conn = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM | socket.SOCK_CLOEXEC)
    try:
        conn.settimeout(5.0)
        conn.connect(name)
        message, fd = _shim.received_fd(conn)
    except OSError:
        conn.close()
        return None
    finally:
        os.close(directory)
    try:
        tty = bool(json.loads(message.rstrip(b"\0")).get("tty"))
    except (ValueError, AttributeError):
        tty = False
    if fd is None:
        conn.close()
        return None
    os.set_blocking(fd, False)
    conn.setblocking(False)
    return AttachedStdin(conn, fd, tty)


def _ns(pid: int | str, kind: str) -> str | None:
    try:
        return os.readlink(f"/proc/{pid}/ns/{kind}")
    except OSError:
        return None


def _children(pid: int) -> list[int]:
    try:
        with open(f"/proc/{pid}/task/{pid}/children", encoding="ascii") as handle:
            return [int(p) for p in handle.read().split()]
    except OSError:
        return []


def container_process(pid: int) -> int:
    """The container's own first process under ``pid`` (the runtime's process the shim recorded):
    the first process, breadth first, in a pid namespace other than ``pid``'s, past bubblewrap's
    init; ``pid`` itself where nothing below it is (a container without a pid namespace)."""
    outer = _ns(pid, "pid")
    queue = [pid]
    while queue:
        current = queue.pop(0)
        if current != pid and _ns(current, "pid") != outer:
            children = _children(current)
            if _shim._comm(current) == "bwrap" and children:
                return children[0]
            return current
        queue.extend(_children(current))
    return pid


_RUNTIMES = frozenset({"bwrap", "crun", "runc", "runc:[2:INIT]"})


def _started(pid: int, timeout: float = 5.0) -> int | None:
    """:func:`container_process` once it runs the container's program: a container recorded as
    started may still be its runtime setting up its root (a moment, then it execs)."""
    deadline = time.monotonic() + timeout
    while _shim.proc_stat(pid) is not None:
        target = container_process(pid)
        if target != pid and _shim._comm(target) not in _RUNTIMES:
            return target
        if time.monotonic() > deadline:
            return target
        time.sleep(0.01)
    return None


def _cgroup_lines(pid: int | str) -> dict[str, str]:
    """``/proc/PID/cgroup`` as {controllers (``""`` for cgroup v2): path}."""
    lines: dict[str, str] = {}
    with open(f"/proc/{pid}/cgroup", encoding="utf-8") as handle:
        for line in handle:
            _, controllers, path = line.rstrip("\n").split(":", 2)
            lines[controllers] = path
    return lines


def _cgroup_mounts() -> dict[str, tuple[str, str]]:
    """Each cgroup hierarchy's {controllers (``""`` for v2): (mount point, root within it)}."""
    mounts: dict[str, tuple[str, str]] = {}
    with open("/proc/self/mountinfo", encoding="utf-8") as handle:
        for line in handle:
            fields = line.split()
            dash = fields.index("-")
            fstype, options = fields[dash + 1], fields[dash + 3].split(",")
            if fstype == "cgroup2":
                mounts.setdefault("", (fields[4], fields[3]))
            elif fstype == "cgroup":
                names = [o for o in options if o not in ("rw", "ro") and not o.startswith(("clone_children",
                                                                                           "release_agent"))]
                mounts.setdefault(",".join(sorted(names)), (fields[4], fields[3]))
    return mounts


def _container_cgroups(target: int) -> list[str]:
    """The ``cgroup.procs`` files of ``target``'s cgroups that are not ours: an exec'd command joins
    them, so it counts against the container's limits as the kubelet's exec does."""
    try:
        theirs, ours, mounts = _cgroup_lines(target), _cgroup_lines("self"), _cgroup_mounts()
    except (OSError, ValueError):
        return []
    files = []
    for controllers, path in theirs.items():
        if ours.get(controllers) == path:
            continue
        mount = mounts.get(",".join(sorted(controllers.split(","))) if controllers else "")
        if mount is None or not path.startswith(mount[1]):
            continue
        procs = os.path.join(mount[0], path[len(mount[1]):].lstrip("/"), "cgroup.procs")
        if os.access(procs, os.W_OK):
            files.append(procs)
    return files


# capabilities(7) by number, as setpriv names them.
_CAPS = ("chown dac_override dac_read_search fowner fsetid kill setgid setuid setpcap linux_immutable "
         "net_bind_service net_broadcast net_admin net_raw ipc_lock ipc_owner sys_module sys_rawio sys_chroot "
         "sys_ptrace sys_pacct sys_admin sys_boot sys_nice sys_resource sys_time sys_tty_config mknod lease "
         "audit_write audit_control setfcap mac_override mac_admin syslog wake_alarm block_suspend audit_read "
         "perfmon bpf checkpoint_restore").split()


def _confinement(target: int) -> list[str]:
    """``setpriv`` arguments that give the command the container's capability bounding set and
    no_new_privs, where the container has the host's setpriv; else nothing."""
    if not os.path.exists(f"/proc/{target}/root/usr/bin/setpriv"):
        return []
    fields: dict[str, str] = {}
    with open(f"/proc/{target}/status", encoding="ascii") as handle:
        for line in handle:
            name, _, value = line.partition(":")
            fields[name] = value.strip()
    bounding = int(fields.get("CapBnd", "0"), 16)
    kept = [name for bit, name in enumerate(_CAPS) if bounding >> bit & 1]
    argv = ["/usr/bin/setpriv", "--bounding-set=" + ",".join(["-all", *("+" + c for c in kept)]), "--inh-caps=-all"]
    if fields.get("NoNewPrivs") == "1":
        argv.append("--no-new-privs")
    return [*argv, "--"]


def _environ(pid: int) -> dict[str, str]:
    with open(f"/proc/{pid}/environ", "rb") as handle:
        raw = handle.read()
    env: dict[str, str] = {}
    for item in raw.split(b"\0"):
        name, sep, value = item.partition(b"=")
        if sep:
            env[os.fsdecode(name)] = os.fsdecode(value)
    return env


def _inside(host_id: int, map_path: str) -> int:
    """``host_id`` as the container's user namespace numbers it (its ``uid_map``/``gid_map``)."""
    try:
        with open(map_path, encoding="ascii") as handle:
            for line in handle:
                inside, outside, count = (int(v) for v in line.split())
                if outside <= host_id < outside + count:
                    return inside + host_id - outside
    except (OSError, ValueError):
        pass
    return host_id


def _ids(pid: int, in_userns: bool) -> tuple[int, int]:
    uid = gid = 0
    with open(f"/proc/{pid}/status", encoding="ascii") as handle:
        for line in handle:
            if line.startswith("Uid:"):
                uid = int(line.split()[1])
            elif line.startswith("Gid:"):
                gid = int(line.split()[1])
    if in_userns:
        return _inside(uid, f"/proc/{pid}/uid_map"), _inside(gid, f"/proc/{pid}/gid_map")
    return uid, gid


def _setgroups_denied(pid: int) -> bool:
    try:
        with open(f"/proc/{pid}/setgroups", encoding="ascii") as handle:
            return handle.read().strip() == "deny"
    except OSError:
        return False


def _host_uid(pid: int) -> int:
    return os.stat(f"/proc/{pid}").st_uid


def _crun_exec(oci: dict, argv: list[str], tty: bool) -> tuple[list[str], int, str] | None:
    """``crun exec`` of ``argv`` with the container's process spec (see the module's docstring),
    the read end of the pipe that carries that spec (``--process /proc/self/fd/N``) and the file
    crun writes the command's pid to; None where crun or the container's bundle is not there."""
    crun = shutil.which("crun")
    try:
        with open(os.path.join(oci["bundle"], "config.json"), encoding="utf-8") as handle:
            process = dict(json.load(handle)["process"])
    except (OSError, ValueError, KeyError, TypeError):
        return None
    if crun is None:
        return None
    # The kubelet's terminal is ours (a pty whose slave the command gets): crun is not asked for one.
    process.update(args=argv, terminal=False)
    process.pop("consoleSize", None)
    if tty and not any(e.startswith("TERM=") for e in process.get("env") or []):
        process["env"] = [*(process.get("env") or []), "TERM=xterm"]  # as containerd sets for a terminal
    data = json.dumps(process).encode()
    read, write = os.pipe()
    try:
        if len(data) > 65536:
            fcntl.fcntl(write, 1031, min(len(data), 1 << 20))  # F_SETPIPE_SZ: a large environment
        os.write(write, data)
    except OSError:
        os.close(read)
        return None
    finally:
        os.close(write)
    pid_file = os.path.join(oci["bundle"], f"exec-{os.getpid()}-{read}-{time.monotonic_ns()}.pid")
    return [crun, "--root", oci["root"], "--cgroup-manager=disabled", "exec", "--process",
            f"/proc/self/fd/{read}", "--pid-file", pid_file, oci["id"]], read, pid_file


def _nsenter_exec(target: int, name: str, argv: list[str]) -> tuple[list[str], dict[str, str]]:
    """``nsenter`` into bubblewrap's container ``target`` (see the module's docstring), and the
    environment to give it. Raises ``ContainerNotFound`` when it is gone, ``FileNotFoundError``
    when this machine has no nsenter."""
    nsenter = shutil.which("nsenter")
    if nsenter is None:
        raise FileNotFoundError("nsenter (util-linux) is not installed on this node")
    try:
        env = _environ(target)
        own_userns = _ns(target, "user") != _ns("self", "user")
        uid, gid = _ids(target, own_userns)
        credentials = [f"--setuid={uid}", f"--setgid={gid}"]
        if own_userns and _setgroups_denied(target) and _host_uid(target) == os.geteuid():
            # An unprivileged user's namespace (setgroups denied, so nsenter could not set ids):
            # the container runs as this user, whose ids it keeps.
            credentials = ["--preserve-credentials"]
        flags = [flag for kind, flag in _NAMESPACES if _ns(target, kind) != _ns("self", kind)]
        confinement = _confinement(target) if own_userns else []
    except OSError:
        raise ContainerNotFound(name) from None
    return [nsenter, f"--target={target}", *flags, "--root", "--wd", *credentials, "--", *confinement, *argv], env


def start_exec(pid: int, start_ticks: int | None, name: str, argv: list[str], *, tty: bool, stdin: bool,
               stdout: bool, stderr: bool, size: tuple[int, int] | None = None,
               oci: dict | None = None) -> ExecProcess:
    """Run ``argv`` in the container whose runtime process is ``pid`` (started at ``start_ticks``);
    ``oci`` (``root``, ``id``, ``bundle``): the container is crun's, entered by ``crun exec``.

    Raises ``ContainerNotFound`` when that process is gone, and ``FileNotFoundError`` when this
    machine has no ``nsenter``."""
    if not _shim.process_alive(pid, start_ticks):
        raise ContainerNotFound(name)
    target = _started(pid)
    if target is None:
        raise ContainerNotFound(name)
    spec_fd: int | None = None
    pid_file: str | None = None
    crun = _crun_exec(oci, argv, tty) if oci else None
    if crun is not None:
        command, spec_fd, pid_file = crun
        env: dict[str, str] = {}  # the command's environment is the container's, in its process spec
    else:
        command, env = _nsenter_exec(target, name, argv)
        if tty:
            env.setdefault("TERM", "xterm")  # as containerd sets for a terminal
    cgroups = _container_cgroups(target)
    if cgroups:
        # Into the container's cgroups before nsenter forks the command (Popen has no such option,
        # and a preexec function is unsafe in this threaded process): a shell's echo, then exec.
        command = ["/bin/sh", "-c", 'while [ "$1" != -- ]; do echo $$ > "$1" || exit 126; shift; done; shift; '
                   'exec "$@"', "sh", *cgroups, "--", *command]
    ours: list[int] = []
    theirs: list[int] = []
    try:
        if tty:
            master, slave = os.openpty()
            ours.append(master)
            theirs.append(slave)
            if size and size[0] > 0 and size[1] > 0:
                fcntl.ioctl(master, termios.TIOCSWINSZ, struct.pack("HHHH", size[1], size[0], 0, 0))
            # setsid -c: a session of its own with the terminal as its controlling one, so ^C
            # reaches the foreground program and a hang-up ends the session.
            command = ["setsid", "-c", *command]
            child_in = child_out = child_err = slave
            mine_in, mine_out, mine_err = (master if stdin else None), master, None
        else:
            child_in: int | None = subprocess.DEVNULL  # type: ignore[no-redef]
            mine_in = mine_out = mine_err = None
            if stdin:
                r, w = os.pipe2(os.O_CLOEXEC)
                ours.append(w)
                theirs.append(r)
                child_in, mine_in = r, w
            child_out = child_err = subprocess.DEVNULL  # type: ignore[assignment]
            if stdout:
                r, w = os.pipe2(os.O_CLOEXEC)
                ours.append(r)
                theirs.append(w)
                child_out, mine_out = w, r
            if stderr:
                r, w = os.pipe2(os.O_CLOEXEC)
                ours.append(r)
                theirs.append(w)
                child_err, mine_err = w, r
        proc = subprocess.Popen(command, stdin=child_in, stdout=child_out, stderr=child_err, env=env,
                                start_new_session=not tty, close_fds=True,
                                pass_fds=() if spec_fd is None else (spec_fd,))
    except BaseException:
        for fd in ours:
            os.close(fd)
        raise
    finally:
        for fd in theirs:
            os.close(fd)
        if spec_fd is not None:
            os.close(spec_fd)
    for fd in {mine_in, mine_out, mine_err} - {None}:
        os.set_blocking(fd, False)  # type: ignore[arg-type]
    return ExecProcess(proc, mine_in if not tty else (master if stdin else None), mine_out, mine_err, tty, pid_file)
