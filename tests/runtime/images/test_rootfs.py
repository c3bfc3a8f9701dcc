"""Unpacked root filesystems: the Debian python3 image runs, ownership is kept as the pods' ids
(root's unpack runs under their mapping), and a user without privileges pulls too (umoci's
rootless unpack)."""

from __future__ import annotations

import os
import subprocess
import sys
import tempfile
from pathlib import Path

import pytest

from tests.imagekit import REPO_ROOT, BuiltImages, Registry
from trimaran.runtime.idmap import pods_range
from trimaran.runtime.images import ImageStore, parse_reference

NOBODY = 65534


def test_the_debian_image_runs_python_from_its_rootfs(registry: Registry, test_images: BuiltImages,
                                                      tmp_path: Path) -> None:
    image = ImageStore(tmp_path / "images").pull(parse_reference(registry.push(test_images, "debian-python",
                                                                               "rootfs/debian:1")))
    assert image.config.cmd == ["python3"]
    if os.geteuid() == 0:
        # A root pull keeps the image's owners (shadow's group, setgid bits), as the pods' ids: it
        # unpacks under their mapping, so root's files are the pods' root's, never the host's.
        pods = pods_range()
        shadow = (image.rootfs / "etc" / "shadow").stat()
        assert pods is not None and pods.uid > 0
        assert (shadow.st_uid, shadow.st_gid, shadow.st_mode & 0o7777) == (pods.uid, pods.gid + 42, 0o640)
    result = subprocess.run(
        ["bwrap", "--ro-bind", str(image.rootfs), "/", "--proc", "/proc", "--dev", "/dev", "--unshare-all",
         "--clearenv", "--setenv", "PATH", "/usr/bin:/bin", "python3", "-c",
         "import sys, platform; print(sys.version_info[:2], platform.freedesktop_os_release()['ID'])"],
        capture_output=True, text=True, timeout=60, check=False)
    assert result.returncode == 0, result.stderr
    assert result.stdout.strip() == "(3, 11) debian"


@pytest.mark.skipif(os.geteuid() != 0, reason="as a non-root user every pull is already rootless")
def test_a_user_without_privileges_pulls_with_a_rootless_unpack(registry: Registry, test_images: BuiltImages) -> None:
    as_nobody = ["setpriv", f"--reuid={NOBODY}", f"--regid={NOBODY}", "--clear-groups", "--"]
    python = os.path.realpath(sys.executable)
    if subprocess.run([*as_nobody, "test", "-x", python], check=False).returncode != 0:
        # As on a machine whose Python lies under a 0700 /root (pyenv's): no ordinary user can run
        # it, so none could run Trimaran with it either.
        pytest.skip(f"an unprivileged user cannot execute this suite's Python ({python})")
    ref = registry.push(test_images, "busybox", "rootfs/busybox:1")
    # Outside pytest's tmp directory, which only root may enter.
    with tempfile.TemporaryDirectory(prefix="trimaran-rootless-") as home:
        os.chown(home, NOBODY, NOBODY)
        script = ("import sys; from pathlib import Path; from trimaran.runtime.images import ImageStore, "
                  "parse_reference; image = ImageStore(Path(sys.argv[1])).pull(parse_reference(sys.argv[2])); "
                  "print(image.rootfs)")
        result = subprocess.run(
            [*as_nobody, sys.executable, "-c", script, f"{home}/images", ref],
            capture_output=True, text=True, timeout=120, check=False, cwd=REPO_ROOT,
            env={"HOME": home, "PATH": os.environ["PATH"]})
        assert result.returncode == 0, result.stderr
        rootfs = Path(result.stdout.strip())
        assert (rootfs / "bin" / "busybox").stat().st_uid == NOBODY
        assert os.readlink(rootfs / "bin" / "sh") == "busybox"
