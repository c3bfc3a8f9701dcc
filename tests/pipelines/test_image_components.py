"""Lightweight components under ``--image-policy image``: each step runs in the image its component
names (pulled from a registry on loopback), with the kfp runtime mounted read-only and its
packages_to_install installed from the home's local wheels or an index it names on loopback; an image
without python3, or a package found nowhere, fails the step saying so."""

from __future__ import annotations

import base64
import copy
import functools
import hashlib
import threading
import zipfile
from collections.abc import Iterator
from http.server import SimpleHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path

import pytest

from tests.conftest import ControlPlaneHandle, module_plane
from tests.helpers import host_ip, poll
from tests.imagekit import ImageSpec, Layer, registry, test_images  # noqa: F401 (fixtures)
from tests.pipelines.kfp_corpus import compiled
from trimaran.api.pipelines import TRIMARAN_API_VERSION
from trimaran.cli.client import Client

NS = "default"


@pytest.fixture(scope="module")
def plane(tmp_path_factory: pytest.TempPathFactory) -> Iterator[ControlPlaneHandle]:
    with pytest.MonkeyPatch.context() as env:
        env.setenv("TRIMARAN_IMAGE_POLICY", "image")  # the control plane's node policy, as --image-policy sets it
        with module_plane(tmp_path_factory, "pipelines-images") as handle:
            yield handle


@pytest.fixture(scope="module")
def python_image(registry, test_images) -> str:  # noqa: F811 (fixtures)
    return registry.push(test_images, "debian-python", "test/kfp-python:1.0")


@pytest.fixture(scope="module")
def busybox_image(registry, test_images) -> str:  # noqa: F811 (fixtures)
    return registry.push(test_images, "busybox", "test/kfp-busybox:1.0")


@pytest.fixture(scope="module")
def old_python_image(registry, test_images) -> str:  # noqa: F811 (fixtures)
    """busybox with a fake python3 that says it is 3.8 (no image with an old Python is at hand offline)."""
    fake = "#!/bin/sh\ncase \"$*\" in *-V*) echo 'Python 3.8.18' ;; esac\nexit 1\n"
    test_images.layout.build("busybox-fake-python38", [Layer(files={"usr/bin/python3": fake},
                                                             executables=["usr/bin/python3"])],
                             ImageSpec(cmd=["sh"]), base="busybox")
    return registry.push(test_images, "busybox-fake-python38", "test/kfp-fake-python38:1.0")


def write_wheel(directory: Path, name: str, version: str, module: str, source: str) -> Path:
    """A pure-Python wheel of one module, as pip installs it (METADATA, WHEEL, RECORD)."""
    dist = f"{name.replace('-', '_')}-{version}"
    files = {f"{module}.py": source,
             f"{dist}.dist-info/METADATA": f"Metadata-Version: 2.1\nName: {name}\nVersion: {version}\n",
             f"{dist}.dist-info/WHEEL": "Wheel-Version: 1.0\nRoot-Is-Purelib: true\nTag: py3-none-any\n"}

    def digest(text: str) -> str:
        return base64.urlsafe_b64encode(hashlib.sha256(text.encode()).digest()).rstrip(b"=").decode()
    record = [f"{path},sha256={digest(text)},{len(text.encode())}" for path, text in files.items()]
    files[f"{dist}.dist-info/RECORD"] = "\n".join([*record, f"{dist}.dist-info/RECORD,,"]) + "\n"
    path = directory / f"{dist}-py3-none-any.whl"
    directory.mkdir(parents=True, exist_ok=True)
    with zipfile.ZipFile(path, "w") as wheel:
        for member, text in files.items():
            wheel.writestr(member, text)
    return path


def run_in(api: Client, name: str, images: dict[str, str], replace: tuple[str, str] | None = None) -> dict:
    """The corpus pipeline with each executor's image set (by component name), run to its end."""
    spec = copy.deepcopy(compiled("image_components").pipeline_spec)
    for label, executor in spec["deploymentSpec"]["executors"].items():
        container = executor["container"]
        container["image"] = images[label.removeprefix("exec-")]
        if replace:
            container["command"] = [part.replace(*replace) for part in container["command"]]
    api.create("Run", NS, {"apiVersion": TRIMARAN_API_VERSION, "kind": "Run",
                           "metadata": {"name": name, "namespace": NS},
                           "spec": {"pipelineSpec": spec, "parameters": {"name": "trimaran"}}})

    def done() -> dict | None:
        run = api.get("Run", NS, name)
        return run if (run.get("status") or {}).get("state") in ("SUCCEEDED", "FAILED") else None
    return poll(done, timeout=120, interval=0.2, what=f"run {name} to finish")


def tasks(run: dict) -> dict[str, dict]:
    return {t["name"]: t for t in run["status"]["tasks"]}


def test_steps_run_in_their_image_with_kfp_and_local_wheels(plane, api, python_image):
    write_wheel(plane.home / "pipelines" / "wheels", "trimaran-greeting", "1.0", "trimaran_greeting",
                "def greet(name):\n    return f'hello {name}'\n")
    run = run_in(api, "in-image", {"write": python_image, "greet": python_image})
    assert run["status"]["state"] == "SUCCEEDED", run["status"].get("message")
    steps = tasks(run)
    assert steps["greet"]["outputs"]["parameters"] == {"Output": "hello trimaran"}
    assert steps["write"]["outputs"]["parameters"] == {"Output": "3.11"}  # Debian bookworm's python3
    pod = api.get("Pod", NS, steps["write"]["podName"])
    assert pod["status"]["containerStatuses"][0]["imageID"].startswith(python_image.rsplit(":", 1)[0] + "@sha256:")


def test_a_package_without_a_local_wheel_fails_the_step_naming_it(plane, api, python_image):
    run = run_in(api, "no-wheel", {"write": python_image, "greet": python_image},
                 replace=("trimaran-greeting==1.0", "trimaran-greeting==2.0"))
    assert run["status"]["state"] == "FAILED"
    message = run["status"]["message"]
    assert message.startswith("task greet failed: exit code 1"), message
    assert (f"packages_to_install (trimaran-greeting==2.0) cannot be installed in image {python_image} from the "
            f"local wheels in {plane.home / 'pipelines' / 'wheels'}") in message


def test_packages_come_from_an_index_the_component_names_on_loopback(api, python_image, tmp_path):
    write_wheel(tmp_path / "simple" / "trimaran-greeting", "trimaran-greeting", "3.0", "trimaran_greeting",
                "def greet(name):\n    return f'indexed {name}'\n")
    server = ThreadingHTTPServer((host_ip(), 0), functools.partial(SimpleHTTPRequestHandler, directory=str(tmp_path)))
    threading.Thread(target=server.serve_forever, daemon=True).start()
    try:
        index = f"http://{host_ip()}:{server.server_port}/simple"  # as pip_index_urls=[...] compiles
        run = run_in(api, "from-index", {"write": python_image, "greet": python_image},
                     replace=("'trimaran-greeting==1.0'",
                              f"--index-url {index} --trusted-host {host_ip()} 'trimaran-greeting==3.0'"))
    finally:
        server.shutdown()
        server.server_close()
    assert run["status"]["state"] == "SUCCEEDED", run["status"].get("message")
    assert tasks(run)["greet"]["outputs"]["parameters"] == {"Output": "indexed trimaran"}


def test_an_image_without_python3_fails_the_step_naming_the_image(api, python_image, busybox_image):
    run = run_in(api, "no-python", {"write": busybox_image, "greet": python_image})
    assert run["status"]["state"] == "FAILED"
    message = run["status"]["message"]
    assert message.startswith("task write failed: exit code 127"), message
    assert f"trimaran: image {busybox_image} has no python3" in message
    assert tasks(run)["greet"]["state"] == "SKIPPED"


def test_an_image_with_a_python_older_than_39_fails_the_step_naming_it_fake_python38(api, python_image,
                                                                                    old_python_image):
    run = run_in(api, "old-python", {"write": old_python_image, "greet": python_image})
    assert run["status"]["state"] == "FAILED"
    message = run["status"]["message"]
    assert message.startswith("task write failed: exit code 1"), message
    assert f"trimaran: image {old_python_image} has Python 3.8.18: kfp needs Python 3.9 or later" in message
