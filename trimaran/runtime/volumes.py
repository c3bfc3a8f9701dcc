"""Pod volumes as host directories, and each container's mounts of them.

Layout (``home`` is the runtime's home directory):

- ``emptyDir``: ``<pod_dir>/volumes/<volume>``, kept across container restarts and removed
  with the pod; ``medium: Memory`` is a tmpfs inside the sandbox instead (size from
  ``sizeLimit``), private to each container of the pod.
- ``hostPath``: the path itself; ``DirectoryOrCreate`` / ``FileOrCreate`` create it, the other
  types check it, and a path that does not exist is an error (never created silently).
- ``persistentVolumeClaim``: ``<home>/volumes/<namespace>/<claimName>``, created on first use,
  outliving pods: the one-node stand-in for a PersistentVolume.
- ``configMap`` / ``secret``: keys written as files into ``<run_dir>/volumes/<volume>``
  (``items`` pick keys and paths, ``defaultMode``/``mode`` set permissions), mounted read-only.
- ``csi`` of an object-storage driver (:func:`storage_volume_uris`): a directory of the pod's own,
  as an emptyDir, that the pod's ``storage-initializer`` init container (which the kubelet adds)
  fills inside the pod's sandbox; writable to that container only, read-only to every other.

Ownership, where pods' ids map into a range of their own (an :class:`Owner`, the control plane
being root: see :mod:`trimaran.runtime.idmap`): what the runtime makes for a pod belongs to the
pod's root (host id BASE), as the kubelet's files belong to a container's root: emptyDirs (0777
as the kubelet makes them), a claim's directory when it is made (0777, as hostPath
provisioners make them; one the control plane made before keeps its contents' owners), the
configMap and secret files. ``fsGroup`` then owns them as a group, as the kubelet's volume
ownership management does: group read (and write and setgid on emptyDirs). Elsewhere files stay
the control plane's, which is then the pod's own uid. hostPath volumes are never changed.
"""

from __future__ import annotations

import os
import posixpath
from collections.abc import Mapping
from dataclasses import dataclass
from pathlib import Path, PurePosixPath

from trimaran.api.core import GCSFUSE_DRIVER, STORAGE_DRIVER
from trimaran.api.quantity import QuantityError, parse_memory
from trimaran.runtime.claims import claim_dir
from trimaran.runtime.env import ConfigError, Lookup, config_data, expand

__all__ = ["STORAGE_INITIALIZER", "VolumeError", "Mount", "PodVolume", "Owner", "prepare_volumes",
           "container_mounts", "storage_volume_uris"]

_DEFAULT_MODE = 0o644
#: The init container that fills a pod's object-storage CSI volumes (KServe's name for it).
STORAGE_INITIALIZER = "storage-initializer"
_SUPPORTED = ("emptyDir", "hostPath", "persistentVolumeClaim", "configMap", "secret", "csi")


class VolumeError(Exception):
    """A volume cannot be set up (the pod stays ContainerCreating with a FailedMount event)."""


@dataclass(frozen=True)
class PodVolume:
    """A pod volume made ready on the host. ``source`` is ``None`` for a memory-backed emptyDir."""

    name: str
    source: Path | None
    read_only: bool = False
    size: int | None = None
    #: The one container that may write a read-only volume (the storage initializer filling it).
    writer: str | None = None


@dataclass(frozen=True)
class Mount:
    """One mount in a container's sandbox: a host path bound at ``target``, or a fresh tmpfs
    (``source is None``) of ``size`` bytes (the kernel's default when ``None``)."""

    target: str
    source: Path | None
    read_only: bool = False
    size: int | None = None


@dataclass(frozen=True)
class Owner:
    """Host ids that own what a pod's volumes hold: ``uid``/``gid`` (the pod's root) and the
    host gid of ``fsGroup``, if set."""

    uid: int
    gid: int
    fs_group: int | None = None

    def give(self, path: Path, extra_mode: int = 0) -> None:
        """Make ``path`` the pod's (fsGroup's group, with ``extra_mode`` for the group)."""
        os.lchown(path, self.uid, self.gid if self.fs_group is None else self.fs_group)
        if self.fs_group is not None and extra_mode:
            path.chmod(path.stat().st_mode & 0o7777 | extra_mode)


def _relative(path: str, what: str) -> PurePosixPath:
    pure = PurePosixPath(path)
    if pure.is_absolute() or ".." in pure.parts or not pure.parts:
        raise VolumeError(f"{what} {path!r} must be a relative path without '..'")
    return pure


def _materialise(
    kind: str,
    volume: Mapping[str, object],
    source: Mapping[str, object],
    namespace: str,
    lookup: Lookup,
    target: Path,
    owner: Owner | None,
) -> None:
    name = str(source.get("name") if kind == "ConfigMap" else source.get("secretName") or "")
    optional = bool(source.get("optional"))
    obj = lookup(kind, namespace, name)
    target.mkdir(parents=True, exist_ok=True)
    if owner is not None:
        owner.give(target)
    if obj is None:
        if optional:
            return
        raise VolumeError(
            f'MountVolume.SetUp failed for volume "{volume.get("name")}" : '
            f'{kind.lower()} "{name}" not found'
        )
    try:
        data = config_data(kind, obj)
    except ConfigError as exc:
        raise VolumeError(str(exc)) from None
    default_mode = int(source.get("defaultMode") or _DEFAULT_MODE)  # type: ignore[call-overload]
    items = source.get("items")
    if items:
        chosen: list[tuple[str, PurePosixPath, int]] = []
        for item in items:  # type: ignore[union-attr]
            key = str(item.get("key"))
            if key not in data:
                if optional:
                    continue
                noun = "config" if kind == "ConfigMap" else "secret"
                raise VolumeError(
                    f'MountVolume.SetUp failed for volume "{volume.get("name")}" : '
                    f"{kind.lower()} references non-existent {noun} key: {key}"
                )
            chosen.append((key, _relative(str(item.get("path") or key), "item path"),
                           int(item.get("mode") or default_mode)))
    else:
        chosen = [(key, _relative(key, "key"), default_mode) for key in data]
    for key, rel, mode in chosen:
        path = target / rel
        for directory in reversed([target / p for p in rel.parents if str(p) != "."]):
            if not directory.is_dir():
                directory.mkdir()
                if owner is not None:
                    owner.give(directory)
        path.write_bytes(data[key])
        path.chmod(mode)
        if owner is not None:
            owner.give(path, 0o040)


def _host_path(volume_name: str, source: Mapping[str, object]) -> Path:
    path = Path(str(source.get("path") or ""))
    kind = str(source.get("type") or "")
    if not path.is_absolute():
        raise VolumeError(f"volume {volume_name!r}: hostPath.path must be absolute")
    if kind == "DirectoryOrCreate":
        path.mkdir(mode=0o755, parents=True, exist_ok=True)
    elif kind == "FileOrCreate":
        path.parent.mkdir(mode=0o755, parents=True, exist_ok=True)
        path.touch(mode=0o644, exist_ok=True)
    checks = {
        "Directory": (path.is_dir, "a directory"),
        "DirectoryOrCreate": (path.is_dir, "a directory"),
        "File": (path.is_file, "a file"),
        "FileOrCreate": (path.is_file, "a file"),
        "Socket": (path.is_socket, "a socket"),
        "CharDevice": (path.is_char_device, "a character device"),
        "BlockDevice": (path.is_block_device, "a block device"),
    }
    if kind in checks:
        check, noun = checks[kind]
        if not check():
            raise VolumeError(f"volume {volume_name!r}: hostPath type check failed: {path} is not {noun}")
    elif kind:
        raise VolumeError(f"volume {volume_name!r}: unknown hostPath type {kind!r}")
    elif not path.exists():
        raise VolumeError(
            f"volume {volume_name!r}: hostPath {path} does not exist "
            f"(set type: DirectoryOrCreate to have it created)"
        )
    return path


def storage_volume_uris(pod: Mapping[str, object]) -> dict[str, str]:
    """The pod's CSI volumes that name object storage: volume name -> storage URI. ``STORAGE_DRIVER``
    takes any URI ``trimaran.serving.storage.fetch`` does (``volumeAttributes.uri``);
    ``GCSFUSE_DRIVER`` is GKE's Cloud Storage FUSE as users write it: ``bucketName``, and
    ``mountOptions`` whose ``only-dir=`` picks a prefix. Raises ``VolumeError`` naming the field of
    a driver or attribute this node cannot serve."""
    uris = {}
    for index, volume in enumerate((pod.get("spec") or {}).get("volumes") or []):  # type: ignore[union-attr]
        if "csi" not in volume:
            continue
        csi = volume.get("csi") or {}
        field = f"spec.volumes[{index}].csi"
        attributes = csi.get("volumeAttributes") or {}
        driver = csi.get("driver")
        if driver == STORAGE_DRIVER:
            uri = attributes.get("uri")
            if not uri:
                raise VolumeError(f"{field}.volumeAttributes.uri: required by driver {STORAGE_DRIVER}")
        elif driver == GCSFUSE_DRIVER:
            bucket = attributes.get("bucketName")
            if not bucket:
                raise VolumeError(f"{field}.volumeAttributes.bucketName: required by driver {GCSFUSE_DRIVER}")
            options = dict(o.strip().partition("=")[::2] for o in str(attributes.get("mountOptions") or "").split(","))
            prefix = options.get("only-dir", "").strip("/")
            uri = f"gs://{bucket}/{prefix}" if prefix else f"gs://{bucket}"
        else:
            raise VolumeError(f"{field}.driver: unsupported driver {driver!r}; supported: "
                              f"{STORAGE_DRIVER}, {GCSFUSE_DRIVER}")
        uris[str(volume.get("name"))] = str(uri)
    return uris


def prepare_volumes(
    pod: Mapping[str, object], *, pod_dir: Path, run_dir: Path, home: Path, lookup: Lookup,
    owner: Owner | None = None,
) -> dict[str, PodVolume]:
    """Make every volume of the pod exist on the host; returns them by name.

    ``pod_dir`` holds what lives as long as the pod (emptyDirs), ``run_dir`` what is
    rewritten at each start (configMap/secret contents, so they follow updates); ``owner`` who
    owns what is made (see the module's docstring).
    """
    meta = pod.get("metadata") or {}
    spec = pod.get("spec") or {}
    namespace = str(meta.get("namespace") or "default")  # type: ignore[union-attr]
    volumes: dict[str, PodVolume] = {}
    for volume in spec.get("volumes") or []:  # type: ignore[union-attr]
        name = str(volume.get("name"))
        if "emptyDir" in volume:
            empty = volume.get("emptyDir") or {}
            if empty.get("medium") == "Memory":
                limit = empty.get("sizeLimit")
                try:
                    size = parse_memory(limit) if limit else None
                except QuantityError as exc:
                    raise VolumeError(f"volume {name!r}: sizeLimit: {exc}") from None
                volumes[name] = PodVolume(name, None, size=size)
            else:
                volumes[name] = PodVolume(name, _pod_directory(pod_dir, name, owner))
        elif "hostPath" in volume:
            volumes[name] = PodVolume(name, _host_path(name, volume["hostPath"]))
        elif "persistentVolumeClaim" in volume:
            claim = volume["persistentVolumeClaim"]
            claim_name = str(claim.get("claimName") or "")
            _relative(claim_name, "claimName")
            path = claim_dir(home, namespace, claim_name)
            path.mkdir(parents=True, exist_ok=True)
            if owner is not None and path.stat().st_uid == os.geteuid():
                # Made by the control plane (now, or before pods had ids of their own).
                path.chmod(0o777)
                os.chown(path, owner.uid, owner.gid)
            volumes[name] = PodVolume(name, path, read_only=bool(claim.get("readOnly")))
        elif "configMap" in volume or "secret" in volume:
            kind = "ConfigMap" if "configMap" in volume else "Secret"
            target = run_dir / "volumes" / name
            _materialise(kind, volume, volume.get("configMap") or volume.get("secret") or {},
                         namespace, lookup, target, owner)
            volumes[name] = PodVolume(name, target, read_only=True)
        elif "csi" in volume:
            volumes[name] = PodVolume(name, _pod_directory(pod_dir, name, owner), read_only=True,
                                      writer=STORAGE_INITIALIZER)
        else:
            kinds = [k for k in volume if k != "name"]
            raise VolumeError(
                f"volume {name!r}: unsupported volume type {', '.join(kinds) or '(none)'}; "
                f"supported: {', '.join(_SUPPORTED)}"
            )
    return volumes


def _pod_directory(pod_dir: Path, name: str, owner: Owner | None) -> Path:
    path = pod_dir / "volumes" / name
    path.mkdir(parents=True, exist_ok=True)
    # World-writable as the kubelet makes it: any runAsUser (and the unprivileged uid
    # pods run as where no user namespace can be made) may write; the home is 0700.
    path.chmod(0o777)
    if owner is not None:
        owner.give(path, 0o2070)
    return path


def container_mounts(
    container: Mapping[str, object], volumes: Mapping[str, PodVolume], env: Mapping[str, str],
    owner: Owner | None = None,
) -> list[Mount]:
    """The container's ``volumeMounts`` resolved to host paths. ``subPath`` (and
    ``subPathExpr``, expanded with the container's ``env``) is created inside writable
    volumes when missing, as the kubelet does (``owner``'s, as :func:`prepare_volumes`)."""
    mounts: list[Mount] = []
    for mount in container.get("volumeMounts") or []:  # type: ignore[union-attr]
        name = str(mount.get("name"))
        target = str(mount.get("mountPath") or "")
        if not target.startswith("/"):
            raise VolumeError(f"volumeMount {name!r}: mountPath {target!r} must be absolute")
        # Kubernetes accepts "/data/" and "/a//b" as written (Katib's own pbt example ends its
        # path with a slash); bubblewrap needs the plain path to create the mount point.
        target = posixpath.normpath(target)
        if target.startswith("//"):
            target = target[1:]
        volume = volumes.get(name)
        if volume is None:
            raise VolumeError(f"volumeMount {name!r}: the pod has no volume of that name")
        read_only = bool(mount.get("readOnly")) or (volume.read_only and container.get("name") != volume.writer)
        sub = mount.get("subPath") or (
            expand(str(mount["subPathExpr"]), env) if mount.get("subPathExpr") else ""
        )
        if volume.source is None:
            if sub:
                raise VolumeError(f"volumeMount {name!r}: subPath is not supported on a memory emptyDir")
            mounts.append(Mount(target, None, read_only, volume.size))
            continue
        source = volume.source
        if sub:
            source = source / _relative(str(sub), "subPath")
            if not source.exists():
                if volume.read_only:
                    raise VolumeError(f"volumeMount {name!r}: subPath {sub!r} does not exist in the volume")
                made = [p for p in (source, *source.parents) if not p.exists()]
                source.mkdir(parents=True, exist_ok=True)
                for directory in made if owner is not None else ():
                    owner.give(directory)
        mounts.append(Mount(target, source, read_only))
    return mounts
