"""The image store against the distribution's registry on loopback: pulls, the cache, and every
way a pull fails leaving nothing half-written."""

from __future__ import annotations

import fcntl
import json
import os
import socket
import threading
import time
from pathlib import Path

import pytest

from tests.imagekit import BuiltImages, ImageSpec, Layer, Registry, docker_config_secret, free_port, start_registry
from tests.runtime.helpers import wait_for
from trimaran.runtime.images import ImagePullError, ImageStore, credentials_from_secrets, parse_reference

AMD64 = ("linux", "amd64")


def assert_nothing_half_written(store: ImageStore) -> None:
    """No image, reference or workspace left by a failed pull; every blob kept is whole."""
    assert store.images() == []
    assert list((store.root / "refs").iterdir()) == []
    assert [p.name for p in (store.root / "tmp").iterdir()] in ([], [".lock"])
    assert store.verify_blobs() == []


@pytest.fixture(scope="module")
def layered(test_images: BuiltImages) -> BuiltImages:
    """Images layered on busybox: whiteouts and an opaque directory, and one per platform with an index."""
    layout = test_images.layout
    lower = Layer(files={"etc/removed.txt": "gone", "data/keep/a.txt": "kept", "data/opaque/old.txt": "hidden",
                         "data/opaque/sub/deep.txt": "hidden"})
    upper = Layer(whiteouts=["etc/removed.txt"], opaque=["data/opaque"], files={"data/opaque/new.txt": "new"})
    layout.build("whiteouts", [lower, upper], ImageSpec(entrypoint=["/bin/sh", "-c"], cmd=["cat /data/keep/a.txt"],
                                                        env=["PATH=/bin", "GREETING=hi"], working_dir="/data",
                                                        user="65534:65534", labels={"team": "ml"}), base="busybox")
    for arch in ("amd64", "arm64"):
        layout.build(f"only-{arch}", [Layer(files={"platform": arch})], ImageSpec(cmd=["sh"]), base="busybox",
                     architecture=arch)
    layout.build_index("multi", {"linux/arm64": "only-arm64", "linux/amd64": "only-amd64"})
    layout.build_index("multi-arm64-only", {"linux/arm64": "only-arm64"})
    return test_images


@pytest.fixture
def store(tmp_path: Path) -> ImageStore:
    return ImageStore(tmp_path / "images", platform=AMD64)


def test_pull_unpacks_the_image_and_lookup_finds_it(registry: Registry, layered: BuiltImages,
                                                    store: ImageStore) -> None:
    ref = parse_reference(registry.push(layered, "busybox", "pull/busybox:1"))
    assert store.lookup(ref) is None
    messages: list[str] = []
    image = store.pull(ref, progress=messages.append)
    assert image.reference == str(ref) and image.digest.startswith("sha256:") and image.id.startswith("sha256:")
    assert image.size > 500_000  # the compressed busybox layer
    assert os.access(image.rootfs / "bin" / "busybox", os.X_OK)
    assert os.readlink(image.rootfs / "bin" / "ls") == "busybox"
    assert "root:x:0:0" in (image.rootfs / "etc" / "passwd").read_text()
    assert image.config.cmd == ["sh"] and image.config.entrypoint == []
    assert any(m.startswith("Copying") for m in messages) and any(m.startswith("Unpacking") for m in messages)
    assert store.lookup(ref) == image
    again: list[str] = []
    assert store.pull(ref, progress=again.append) == image and again == []  # resolved to a known digest: no copy


def test_whiteouts_and_opaque_directories_and_the_config(registry: Registry, layered: BuiltImages,
                                                         store: ImageStore) -> None:
    image = store.pull(parse_reference(registry.push(layered, "whiteouts", "pull/whiteouts:1")))
    root = image.rootfs
    assert not (root / "etc" / "removed.txt").exists() and (root / "etc" / "passwd").exists()
    assert sorted(os.listdir(root / "data" / "opaque")) == ["new.txt"]
    assert (root / "data" / "keep" / "a.txt").read_text() == "kept"
    assert not [p for p in root.rglob(".wh.*")]
    config = image.config
    assert (config.entrypoint, config.cmd) == (["/bin/sh", "-c"], ["cat /data/keep/a.txt"])
    assert (config.env, config.working_dir, config.user, config.labels) == (
        ["PATH=/bin", "GREETING=hi"], "/data", "65534:65534", {"team": "ml"})


def test_an_index_gives_the_amd64_image_and_a_digest_reference_pins_it(registry: Registry, layered: BuiltImages,
                                                                       store: ImageStore) -> None:
    ref = parse_reference(registry.push(layered, "multi", "pull/multi:1"))
    image = store.pull(ref)
    assert (image.rootfs / "platform").read_text() == "amd64"
    by_digest = parse_reference(f"{ref.name}@{image.digest}")
    assert store.lookup(by_digest).rootfs == image.rootfs  # the digest is known here: no registry needed
    pinned = ImageStore(store.root.parent / "other", platform=AMD64).pull(by_digest)
    assert (pinned.id, pinned.digest, pinned.reference) == (image.id, image.digest, str(by_digest))
    arm = ImageStore(store.root.parent / "arm", platform=("linux", "arm64")).pull(ref)
    assert (arm.rootfs / "platform").read_text() == "arm64" and arm.id != image.id


def test_a_docker_manifest_list_gives_the_amd64_image(registry: Registry, layered: BuiltImages,
                                                     store: ImageStore) -> None:
    ref = parse_reference(registry.push(layered, "multi", "pull/docker-list:1", docker_format=True))
    image = store.pull(ref)
    assert (image.rootfs / "platform").read_text() == "amd64" and image.config.cmd == ["sh"]


def test_no_amd64_image_is_a_clear_error(registry: Registry, layered: BuiltImages, store: ImageStore) -> None:
    index = parse_reference(registry.push(layered, "multi-arm64-only", "pull/arm-index:1"))
    with pytest.raises(ImagePullError, match=r"no matching manifest for linux/amd64 .*linux/arm64"):
        store.pull(index)
    single = parse_reference(registry.push(layered, "only-arm64", "pull/arm-single:1"))
    with pytest.raises(ImagePullError, match="the image is for linux/arm64, this node runs linux/amd64"):
        store.pull(single)
    assert_nothing_half_written(store)


def test_zstd_layers_are_unpacked(registry: Registry, layered: BuiltImages, store: ImageStore) -> None:
    ref = parse_reference(registry.push(layered, "whiteouts", "pull/zstd:1", zstd=True))
    image = store.pull(ref)
    assert sorted(os.listdir(image.rootfs / "data" / "opaque")) == ["new.txt"]
    assert not (image.rootfs / "etc" / "removed.txt").exists()


def test_unknown_image_and_unknown_digest_are_not_found(registry: Registry, store: ImageStore) -> None:
    with pytest.raises(ImagePullError, match=r"pull/nothing-here:1 not found in registry 127\.0\.0\.1"):
        store.pull(parse_reference(f"{registry.host}/pull/nothing-here:1"))
    with pytest.raises(ImagePullError, match="not found"):
        store.pull(parse_reference(f"{registry.host}/pull/busybox@sha256:{'0' * 64}"))
    assert_nothing_half_written(store)


def test_an_unreachable_registry_is_a_clear_error(store: ImageStore) -> None:
    with pytest.raises(ImagePullError, match=r"registry 127\.0\.0\.1:\d+ is unreachable"):
        store.pull(parse_reference(f"127.0.0.1:{free_port()}/team/app:1"))
    assert_nothing_half_written(store)


def test_a_private_image_needs_the_pull_secret(auth_registry: Registry, layered: BuiltImages,
                                               store: ImageStore) -> None:
    ref = parse_reference(auth_registry.push(layered, "busybox", "private/busybox:1"))
    with pytest.raises(ImagePullError, match="unauthorized: authentication required .*add an imagePullSecrets"):
        store.pull(ref)
    user, password = auth_registry.credentials
    wrong = credentials_from_secrets([docker_config_secret(auth_registry.host, user, "wrong")])
    with pytest.raises(ImagePullError, match="unauthorized: .*credentials of the pod's imagePullSecrets were refused"):
        store.pull(ref, credentials=wrong)
    assert_nothing_half_written(store)
    other_registry = credentials_from_secrets([docker_config_secret("127.0.0.1:1", user, password)])
    right = credentials_from_secrets([docker_config_secret(auth_registry.host, user, password)])
    image = store.pull(ref, credentials=[*other_registry, *wrong, *right])
    assert (image.rootfs / "bin" / "busybox").exists()


def test_a_corrupt_layer_is_a_digest_mismatch_and_leaves_nothing(tmp_path: Path, layered: BuiltImages,
                                                                 store: ImageStore) -> None:
    own = start_registry(tmp_path / "registry")
    try:
        layered.layout.build("corrupt-me", [Layer(files={"payload": os.urandom(64 * 1024)})], ImageSpec(),
                             base="busybox")
        ref = parse_reference(own.push(layered, "corrupt-me", "pull/corrupt:1"))
        layer = layered.layout.manifest("corrupt-me")["layers"][-1]["digest"]
        data = bytearray(own.blob_path(layer).read_bytes())
        data[len(data) // 2] ^= 0xFF  # same length, other bytes
        own.blob_path(layer).write_bytes(bytes(data))
        with pytest.raises(ImagePullError, match=r"does not match its digest \(corrupt layer"):
            store.pull(ref)
    finally:
        own.stop()
    assert_nothing_half_written(store)
    assert not store._blob(layer).exists()


def test_an_unwritable_cache_is_a_clear_error(tmp_path: Path, registry: Registry, layered: BuiltImages) -> None:
    ref = parse_reference(registry.push(layered, "busybox", "pull/busybox:1"))
    not_a_directory = tmp_path / "file"
    not_a_directory.write_text("")
    with pytest.raises(ImagePullError, match=r"image cache .*/file/images is not writable: Not a directory"):
        ImageStore(not_a_directory / "images").pull(ref)


def test_concurrent_pulls_of_one_reference_share_one_fetch(registry: Registry, layered: BuiltImages,
                                                           store: ImageStore) -> None:
    ref = parse_reference(registry.push(layered, "busybox", "pull/busybox:1"))
    second_waiting = threading.Event()
    messages: list[str] = []

    def first_progress(message: str) -> None:
        messages.append(message)
        second_waiting.wait(timeout=30)  # hold the first pull until the second has joined it

    results: dict[str, object] = {}
    first = threading.Thread(target=lambda: results.__setitem__("first", store.pull(ref, progress=first_progress)))
    second = threading.Thread(target=lambda: results.__setitem__("second", store.pull(ref, progress=messages.append)))
    first.start()
    wait_for(lambda: messages, timeout=30, what="the first pull to start copying")
    second.start()
    wait_for(lambda: store.pulls_in_flight() == {str(ref): 2}, timeout=30, what="the second pull to join the first")
    second_waiting.set()
    first.join(timeout=60)
    second.join(timeout=60)
    assert results["first"] == results["second"]
    assert sum(m.startswith("Copying") for m in messages) == 1
    assert store.pulls_in_flight() == {}


def test_lookups_share_one_rootfs(registry: Registry, layered: BuiltImages, store: ImageStore) -> None:
    ref = parse_reference(registry.push(layered, "busybox", "pull/busybox:1"))
    store.pull(ref)
    rootfs = {store.lookup(ref).rootfs for _ in range(10)}
    assert len(rootfs) == 1 and len(store.images()) == 1
    meta = json.loads((store.images()[0] / "image.json").read_text())
    assert meta["id"] == store.lookup(ref).id


def test_a_dead_pulls_workspace_is_removed_and_a_live_ones_kept(registry: Registry, layered: BuiltImages,
                                                               store: ImageStore) -> None:
    ref = parse_reference(registry.push(layered, "busybox", "pull/busybox:1"))
    dead, live = store.root / "tmp" / "pull-dead", store.root / "tmp" / "pull-live"
    for workspace in (dead, live):
        (workspace / "bundle" / "rootfs").mkdir(parents=True)
        (workspace / ".lock").touch()
    with open(live / ".lock") as held:
        fcntl.flock(held, fcntl.LOCK_EX)  # as a pull in another process holds its workspace
        store.pull(ref)
        assert not dead.exists() and live.is_dir()


def test_a_registry_that_never_answers_times_out(tmp_path: Path) -> None:
    with socket.socket() as silent:
        silent.bind(("127.0.0.1", 0))
        silent.listen(8)  # connections complete in the backlog and are never answered
        store = ImageStore(tmp_path / "images", timeout=3)
        started = time.monotonic()
        with pytest.raises(ImagePullError, match="ran past 3 s"):
            store.pull(parse_reference(f"127.0.0.1:{silent.getsockname()[1]}/team/app:1"))
    assert time.monotonic() - started < 30
    assert_nothing_half_written(store)


def test_two_stores_on_one_cache_pulling_at_once_keep_one_image(registry: Registry, layered: BuiltImages,
                                                                tmp_path: Path) -> None:
    ref = parse_reference(registry.push(layered, "whiteouts", "pull/whiteouts:1"))
    stores = [ImageStore(tmp_path / "images", platform=AMD64) for _ in range(2)]  # as two processes would
    results: list[object] = []
    threads = [threading.Thread(target=lambda s=s: results.append(s.pull(ref))) for s in stores]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join(timeout=120)
    assert len(results) == 2 and results[0] == results[1]
    assert len(stores[0].images()) == 1 and stores[0].verify_blobs() == []
    assert [p.name for p in (tmp_path / "images" / "tmp").iterdir()] == [".lock"]
