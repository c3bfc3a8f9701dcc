"""Which host ids a pod's user namespace maps its ids to: no pod is ever the host's uid 0.

Three cases, chosen once per process by :func:`pods_range` and applied per container by
:func:`container_idmap`:

- **The control plane is root**: a subordinate range reserved for pods, as Docker's
  ``userns-remap`` does. The range is the ``trimaran`` entry of ``/etc/subuid`` and
  ``/etc/subgid`` (65536 ids); where there is none, one is appended after the highest range in
  use (and above every uid of ``/etc/passwd``), so an administrator can move it by writing the
  entry first. Container id N is host id BASE+N, in every container of every pod: root inside
  is BASE outside, owning nothing of the host, and the control plane (root) can still read and
  remove whatever a pod wrote. bubblewrap runs as BASE+uid, and the root shim writes the maps
  (see ``shim.spawn_mapped``).
- **An ordinary user with a subordinate range** (its ``/etc/subuid`` and ``/etc/subgid``
  entries, by name or uid, and ``newuidmap``/``newgidmap`` from Debian's ``uidmap``), as
  rootless Podman does: the container's own uid U is the user, every other id 0..65535 a
  subordinate id. U being the user (rather than root inside, as Podman's default) is what lets
  the control plane, an ordinary user, remove what the container wrote and read its files
  without entering a namespace; ids the process switches to (an image's ``su``) stay
  subordinate, never the user's.
- **Otherwise** (an ordinary user without an entry, or without ``newuidmap``): one id,
  bubblewrap's own ``--uid``/``--gid``, so the pod is the user's own uid: never host root,
  since the control plane is not root.

Ids inside are 0..65535 in the first two cases, as the kubelet's user namespaces; a container
asking for a uid or gid above that is refused (:class:`IdRangeError`).
"""

from __future__ import annotations

import fcntl
import functools
import os
import pwd
import shutil
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path

__all__ = [
    "RANGE_SIZE",
    "RANGE_NAME",
    "IdRangeError",
    "PodsRange",
    "IdMap",
    "subordinate_ranges",
    "reserve_range",
    "pods_range",
    "container_idmap",
    "hand_to_pods",
]

RANGE_SIZE = 65536
RANGE_NAME = "trimaran"
# Docker's and useradd's first subordinate id: ids below belong to the host's own users.
_FIRST_SUBORDINATE = 100000
SUBUID = Path("/etc/subuid")
SUBGID = Path("/etc/subgid")

Extent = tuple[int, int, int]  # (first id inside, first id outside, count), as uid_map writes it


class IdRangeError(ValueError):
    """A container id outside the pods' range (0..65535)."""


@dataclass(frozen=True)
class PodsRange:
    """The host ids pods map to. ``uid``/``gid`` are the first subordinate ids; ``owner`` is
    the ordinary user's ``(uid, gid)`` when the control plane is not root (``None`` as root)."""

    uid: int
    gid: int
    owner: tuple[int, int] | None = None


@dataclass(frozen=True)
class IdMap:
    """One container's user namespace: ``uid_map``/``gid_map`` extents, the host uid, gid and
    groups bubblewrap runs as (``None``: as the control plane itself), and whether the maps are
    written through ``newuidmap``/``newgidmap`` (an ordinary user) or directly (root)."""

    uid_map: tuple[Extent, ...]
    gid_map: tuple[Extent, ...]
    run_as: tuple[int, int, tuple[int, ...]] | None
    helper: bool

    def host_uid(self, uid: int) -> int:
        """The host uid of ``uid`` inside."""
        return _outside(self.uid_map, uid)

    def host_gid(self, gid: int) -> int:
        """The host gid of ``gid`` inside."""
        return _outside(self.gid_map, gid)

    def to_json(self) -> dict:
        """As the shim's spec carries it."""
        return {"uid_map": [list(e) for e in self.uid_map], "gid_map": [list(e) for e in self.gid_map],
                "run_as": None if self.run_as is None else [self.run_as[0], self.run_as[1], list(self.run_as[2])],
                "helper": self.helper}


def _outside(extents: Sequence[Extent], inner: int) -> int:
    for first, outside, count in extents:
        if first <= inner < first + count:
            return outside + inner - first
    raise IdRangeError(f"id {inner} is not mapped")


def subordinate_ranges(path: Path) -> list[tuple[str, int, int]]:
    """``(name, first, count)`` of every well-formed entry of an ``/etc/subuid``-style file."""
    try:
        text = path.read_text()
    except FileNotFoundError:
        return []
    found = []
    for line in text.splitlines():
        parts = line.strip().split(":")
        if len(parts) == 3 and parts[1].isdigit() and parts[2].isdigit():
            found.append((parts[0], int(parts[1]), int(parts[2])))
    return found


def _entry(path: Path, names: Sequence[str]) -> tuple[int, int] | None:
    return next(((first, count) for name, first, count in subordinate_ranges(path) if name in names), None)


def reserve_range(name: str = RANGE_NAME, count: int = RANGE_SIZE, *, subuid: Path = SUBUID,
                  subgid: Path = SUBGID, passwd_max: int | None = None) -> tuple[int, int]:
    """The first uid and gid of ``name``'s ranges, appending an entry of ``count`` ids to each
    file that has none, after the highest range of either file (one base for both, as
    ``useradd`` gives) and above every uid of ``/etc/passwd``. An existing entry is honoured
    (an entry shorter than ``count`` is refused). Files are changed under an exclusive lock."""
    if passwd_max is None:
        passwd_max = max((entry.pw_uid for entry in pwd.getpwall() if entry.pw_uid < 2**32 - 2), default=0)
    subgid.touch(mode=0o644, exist_ok=True)
    subuid.touch(mode=0o644, exist_ok=True)
    with open(subuid, "r+") as uid_file, open(subgid, "r+") as gid_file:
        fcntl.flock(uid_file, fcntl.LOCK_EX)
        fcntl.flock(gid_file, fcntl.LOCK_EX)
        entries = {path: _entry(path, [name]) for path in (subuid, subgid)}
        for path, entry in entries.items():
            if entry is not None and entry[1] < count:
                raise IdRangeError(f"{path}: the {name!r} range holds {entry[1]} ids; pods need {count}")
        used = [first + size for path in (subuid, subgid) for _, first, size in subordinate_ranges(path)]
        base = max([_FIRST_SUBORDINATE, passwd_max + 1, *used])
        for path, handle in ((subuid, uid_file), (subgid, gid_file)):
            if entries[path] is None:
                handle.seek(0, os.SEEK_END)
                if handle.tell() and not path.read_text().endswith("\n"):
                    handle.write("\n")
                handle.write(f"{name}:{base}:{count}\n")
                entries[path] = (base, count)
    return entries[subuid][0], entries[subgid][0]  # type: ignore[index]


@functools.cache
def pods_range() -> PodsRange | None:
    """The pods' range for this process's user (see the module's docstring); ``None`` where a
    pod gets one id only. Read (and reserved, as root) once per process."""
    if os.geteuid() == 0:
        uid, gid = reserve_range()
        return PodsRange(uid, gid)
    if shutil.which("newuidmap") is None or shutil.which("newgidmap") is None:
        return None
    me = os.geteuid()
    try:
        names = [pwd.getpwuid(me).pw_name, str(me)]
    except KeyError:
        names = [str(me)]
    uids, gids = _entry(SUBUID, names), _entry(SUBGID, names)
    # Every id of the pods' range but the container's own is subordinate: 65535 of them.
    if uids is None or gids is None or uids[1] < RANGE_SIZE - 1 or gids[1] < RANGE_SIZE - 1:
        return None
    return PodsRange(uids[0], gids[0], owner=(me, os.getegid()))


def hand_to_pods(path: Path) -> None:
    """A directory the control plane made for pods to write in (a pipeline task's outputs, a
    trial's checkpoints): world-writable, as the kubelet makes an emptyDir, so any ``runAsUser``
    may write; and, as root, owned by the pods' root (BASE), as the runtime's own volumes are, so
    a pod's root may also change its mode. Pods' ids are never the control plane's when it is
    root, so a directory it made with its own umask would be closed to them."""
    path.chmod(0o777)
    if os.geteuid() == 0:
        pods = pods_range()
        if pods is not None:
            os.chown(path, pods.uid, pods.gid)


def _keep_id(own: int, inner: int, first_subordinate: int) -> tuple[Extent, ...]:
    """``inner`` → ``own``, the rest of 0..65535 → subordinate ids in order."""
    extents = [(0, first_subordinate, inner), (inner, own, 1),
               (inner + 1, first_subordinate + inner, RANGE_SIZE - inner - 1)]
    return tuple(e for e in extents if e[2] > 0)


def container_idmap(uid: int, gid: int, groups: Sequence[int] = (),
                    pods: PodsRange | None = None) -> IdMap | None:
    """The user namespace of a container running as ``uid``/``gid`` with supplementary
    ``groups`` (ids inside), in ``pods`` (default :func:`pods_range`); ``None`` where the
    container gets bubblewrap's single-id map. Raises :class:`IdRangeError` for an id above
    65535 where a range is in use."""
    pods = pods_range() if pods is None else pods
    if pods is None:
        return None
    for what, value in (("runAsUser", uid), ("runAsGroup", gid), *(("supplementalGroups", g) for g in groups)):
        if value >= RANGE_SIZE:
            raise IdRangeError(f"{what} {value} is outside the ids pods may use on this node (0 to {RANGE_SIZE - 1})")
    if pods.owner is None:
        uid_map = ((0, pods.uid, RANGE_SIZE),)
        gid_map = ((0, pods.gid, RANGE_SIZE),)
        idmap = IdMap(uid_map, gid_map, None, helper=False)
        host_groups = tuple(dict.fromkeys(idmap.host_gid(g) for g in groups))
        return IdMap(uid_map, gid_map, (idmap.host_uid(uid), idmap.host_gid(gid), host_groups), helper=False)
    # bubblewrap runs as the user, whose supplementary groups newgidmap cannot map: they stay
    # unmapped (nogroup inside), as under rootless Podman.
    return IdMap(_keep_id(pods.owner[0], uid, pods.uid), _keep_id(pods.owner[1], gid, pods.gid), None, helper=True)
