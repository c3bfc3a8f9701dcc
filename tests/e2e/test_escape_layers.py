"""Image layers that try to reach the host: the node pulls each from a registry on loopback and
the host stays as it was, checked from outside, with the control plane run by this user and (when
this user is root) by an ordinary one.

Each attack is an image of its own (busybox plus the layers that attack), so that an unpacker that
refuses the first bad member does not hide what the next one would have done. Whatever the node
does with such an image (refuse the pull with a reason, or run it), nothing outside the image's own
root filesystem changes, no device node is created on the host, and no file it unpacked is a
setuid program owned by the host's root.
"""

from __future__ import annotations

import hashlib
import json
import os
import stat
import tarfile
import tempfile
from collections.abc import Iterator
from pathlib import Path

import pytest

from tests.conftest import ControlPlaneHandle
from tests.e2e.test_escape import escape_plane  # noqa: F401 (fixture: this user and nobody)
from tests.helpers import poll
from tests.imagekit import ImageSpec, Layer, registry, test_images  # noqa: F401 (fixtures)
from trimaran.runtime import sandbox_available

pytestmark = pytest.mark.skipif(not sandbox_available(), reason="bubblewrap is not installed")

UP = "../" * 12  # more parents than any home is deep
# Reasons a pod waits with when its image is refused: what the kubelet reports for a bad image.
REFUSED = {"ErrImagePull", "ImagePullBackOff", "CreateContainerError", "InvalidImageName"}


def _member(name: str, kind: bytes, *, mode: int = 0o644, data: bytes = b"", link: str = "",
            device: tuple[int, int] = (0, 0)) -> tuple[tarfile.TarInfo, bytes]:
    info = tarfile.TarInfo(name)
    info.type, info.mode, info.size, info.linkname = kind, mode, len(data), link
    info.uid = info.gid = 0
    info.devmajor, info.devminor = device
    info.mtime = 1_700_000_000
    return info, data


def _attacks(target: Path) -> dict[str, tuple[list[Layer], str]]:
    """Each attack: its layers on top of busybox, and the shell command its pod runs (a write
    through whatever the layers left, should the pull succeed)."""
    t = str(target).lstrip("/")
    busybox = Path("/bin/busybox").read_bytes() if Path("/bin/busybox").exists() else b"\x7fELF"
    return {
        "dotdot": ([Layer(raw=[_member(f"{UP}{t}/dotdot", tarfile.REGTYPE, data=b"escaped"),
                               _member(f"./{UP}{t}/victim", tarfile.REGTYPE, data=b"escaped")])],
                   "true"),
        "abs-symlink": ([Layer(symlinks={"escape": str(target)}),
                         Layer(raw=[_member("escape/through-symlink", tarfile.REGTYPE, data=b"escaped"),
                                    _member("escape/victim", tarfile.REGTYPE, data=b"escaped")])],
                        "echo escaped > /escape/from-pod; echo escaped > /escape/victim"),
        "rel-symlink": ([Layer(symlinks={"up": UP.rstrip("/")}),
                         Layer(raw=[_member(f"up/{t}/through-relative", tarfile.REGTYPE, data=b"escaped")])],
                        "true"),
        "hardlink": ([Layer(raw=[_member("hl-abs", tarfile.LNKTYPE, link=f"/{t}/victim"),
                                 _member("hl-rel", tarfile.LNKTYPE, link=f"{UP}{t}/victim")])],
                     "echo escaped > /hl-abs; echo escaped > /hl-rel"),
        "symlink-then-hardlink": ([Layer(symlinks={"door": str(target)}),
                                   Layer(raw=[_member("hl", tarfile.LNKTYPE, link="door/victim")])],
                                  "echo escaped > /hl"),
        "devices": ([Layer(raw=[_member("mem", tarfile.CHRTYPE, mode=0o666, device=(1, 1)),
                                _member("disk", tarfile.BLKTYPE, mode=0o666, device=(8, 0))])],
                    "head -c 1 /mem; echo escaped > /disk"),
        "setuid": ([Layer(raw=[_member("bin/suid", tarfile.REGTYPE, mode=0o4755, data=busybox),
                               _member("bin/sgid", tarfile.REGTYPE, mode=0o2755, data=busybox)])],
                   "true"),
        "whiteouts": ([Layer(raw=[_member(f"{UP}{t}/.wh.victim", tarfile.REGTYPE),
                                  _member(f"{UP}{t}/keep/.wh..wh..opq", tarfile.REGTYPE)])],
                      "true"),
        "whiteout-through-symlink": ([Layer(symlinks={"wl": str(target)}),
                                      Layer(raw=[_member("wl/.wh.victim", tarfile.REGTYPE),
                                                 _member("wl/keep/.wh..wh..opq", tarfile.REGTYPE)])],
                                     "true"),
    }


def _snapshot(root: Path) -> dict[str, tuple[int, int, str]]:
    """Every entry under ``root``: (mode, link count, content digest) by relative path."""
    found: dict[str, tuple[int, int, str]] = {}
    for directory, dirs, files in os.walk(root):
        for name in [*dirs, *files]:
            path = Path(directory, name)
            info = path.lstat()
            digest = hashlib.sha256(path.read_bytes()).hexdigest() if stat.S_ISREG(info.st_mode) else ""
            found[str(path.relative_to(root))] = (info.st_mode, info.st_nlink, digest)
    return found


@pytest.fixture(scope="module")
def target() -> Iterator[Path]:
    """The host directory every attack aims at: outside any home, readable by everyone."""
    root = Path(tempfile.mkdtemp(prefix="trimaran-layer-target-"))
    (root / "victim").write_text("as it was\n")
    (root / "keep").mkdir()
    (root / "keep" / "inner").write_text("kept\n")
    root.chmod(0o755)
    yield root
    for directory, _, files in os.walk(root):
        for name in files:
            Path(directory, name).chmod(0o644)
    import shutil
    shutil.rmtree(root, ignore_errors=True)


@pytest.fixture(scope="module")
def attack_images(target: Path, registry, test_images) -> dict[str, tuple[str, str]]:  # noqa: F811 (fixtures)
    """Each attack's image reference in the registry, and its pod's command."""
    pushed: dict[str, tuple[str, str]] = {}
    for name, (layers, command) in _attacks(target).items():
        # Tagged per target directory: another run beside this one aims at a directory of its own. By
        # its digest: mkdtemp's suffix may hold "_" next to "-", which an OCI ref.name must not.
        tag = f"escape-{name}-{hashlib.sha256(str(target).encode()).hexdigest()[:12]}"
        test_images.layout.build(tag, layers, ImageSpec(), base="busybox")
        pushed[name] = (registry.push(test_images, tag, f"escape/{name}:1"), command)
    return pushed


def _settled(plane: ControlPlaneHandle, name: str) -> dict | None:
    """The pod once it has run to its end or the node has refused its image; None before."""
    status = (plane.client().get("Pod", "default", name) or {}).get("status") or {}
    if status.get("phase") in ("Succeeded", "Failed"):
        return status
    waiting = [(s.get("state") or {}).get("waiting") or {} for s in status.get("containerStatuses") or []]
    return status if any(w.get("reason") in REFUSED for w in waiting) else None


# The mappings differ in who owns what is unpacked, not in what may reach the host: two suffice.
@pytest.mark.parametrize("escape_plane", ["this-user", "nobody"], indirect=True)
def test_no_image_layer_reaches_the_host(escape_plane: ControlPlaneHandle,  # noqa: F811 (fixture)
                                         attack_images: dict[str, tuple[str, str]], target: Path) -> None:
    plane = escape_plane
    before = _snapshot(target)
    outcomes: dict[str, str] = {}
    for name, (image, command) in attack_images.items():
        pod = {"apiVersion": "v1", "kind": "Pod", "metadata": {"name": f"layer-{name}"},
               "spec": {"restartPolicy": "Never", "containers": [{
                   "name": "main", "image": image, "args": ["sh", "-c", command]}]}}
        plane.cli("apply", "-f", "-", input=json.dumps(pod))
        status = poll(lambda n=f"layer-{name}": _settled(plane, n), timeout=180, interval=0.2,
                      what=f"the {name} pod to run or be refused")
        waiting = [(s.get("state") or {}).get("waiting") or {} for s in status.get("containerStatuses") or []]
        refused = [w for w in waiting if w.get("reason") in REFUSED]
        outcomes[name] = refused[0]["reason"] if refused else status["phase"]
        # A refused image says why, for the user who applied it.
        assert all(w.get("message") for w in refused), (name, status)
        plane.cli("delete", "pod", f"layer-{name}")
        assert _snapshot(target) == before, f"the {name} image changed the host ({outcomes})"

    # From outside: nothing the node unpacked is a device node or a program that runs as host root.
    for directory, _, files in os.walk(plane.home / "images"):
        for entry in files:
            info = Path(directory, entry).lstat()
            assert not (stat.S_ISCHR(info.st_mode) or stat.S_ISBLK(info.st_mode)), Path(directory, entry)
            assert not (info.st_mode & (stat.S_ISUID | stat.S_ISGID) and info.st_uid == 0), Path(directory, entry)
