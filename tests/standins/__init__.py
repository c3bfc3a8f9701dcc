"""Stand-ins for public images, built here and served from a loopback registry under the public
names a manifest writes (``busybox``, ``nginx:1.27``, ``python:3.11-slim``, ``tensorflow/serving``,
``seldonio/mock_classifier_rest:1.3``, ``k8s.gcr.io/pause``), pulled through a registry mirror
(containerd's hosts.toml) as an offline site would: nothing is downloaded.

- ``tensorflow/serving``: TensorFlow Serving's REST API on port 8501 (``model_server.py``) for the
  tiny linear models under ``/models`` (``half_plus_two``, TF Serving's own test model, and
  ``my_model``), chosen by ``MODEL_NAME`` as the real image's.
- ``seldonio/mock_classifier_rest:1.3``: Seldon's microservice REST API on port 9000
  (``seldon_microservice.py``), answering as the mock classifier.
- ``nginx``: busybox's httpd on port 80; ``python``: Debian's python3 (with ``python``);
  ``pause``: a process that sleeps until TERM.

Fixtures: ``public_mirror`` (session: the registry holding every public name), and
:func:`write_mirror_config` writes the ``certs.d`` directory naming it for a home;
:func:`seed_001_manifests` is seed 001's Deployment and Service.
"""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from tests.imagekit import BuiltImages, ImageSpec, Layer, Registry

HERE = Path(__file__).resolve().parent
#: Docker Hub's repositories (and tags) each stand-in is pushed as, in the mirror.
HUB_NAMES = {
    "busybox": ["library/busybox:latest", "library/busybox:1.36"],
    "standin-nginx": ["library/nginx:latest", "library/nginx:1.27", "library/nginx:1.15.4"],
    "standin-python": ["library/python:latest", "library/python:3.11-slim", "library/python:3.11"],
    "standin-tf-serving": ["tensorflow/serving:latest", "tensorflow/serving:2.14.1"],
    "standin-seldon-mock": ["seldonio/mock_classifier_rest:1.3"],
}
#: Kubernetes' image registries (the old and the new name) hold the pause image at ``pause``.
K8S_REGISTRIES = ("k8s.gcr.io", "registry.k8s.io")
K8S_NAMES = {"standin-pause": ["pause:2.0", "pause:3.9", "pause:latest"]}
#: y = w*x + b per model, in the model server's ``/models/NAME/1/model.json``.
MODELS = {"half_plus_two": {"w": 0.5, "b": 2.0}, "my_model": {"w": 2.0, "b": 1.0}}
TF_REST_PORT = 8501
SELDON_PORT = 9000

_PAUSE = "trap 'exit 0' TERM INT; while :; do sleep 3600 & wait $!; done"


def build_standins(images: BuiltImages) -> None:
    """Tag the stand-ins in the image kit's layout (small layers on ``busybox`` and ``debian-python``)."""
    layout = images.layout
    server = (HERE / "model_server.py").read_text()
    microservice = (HERE / "seldon_microservice.py").read_text()
    models = {f"models/{name}/1/model.json": json.dumps(model) for name, model in MODELS.items()}
    layout.build("standin-tf-serving", [Layer(files={"usr/bin/tf_serving_standin.py": server, **models})],
                 ImageSpec(entrypoint=["python3", "/usr/bin/tf_serving_standin.py"],
                           env=["PATH=/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin",
                                "MODEL_BASE_PATH=/models", "MODEL_NAME=model"]),
                 base="debian-python")
    layout.build("standin-seldon-mock", [Layer(files={"microservice/seldon_microservice.py": microservice})],
                 ImageSpec(cmd=["python3", "/microservice/seldon_microservice.py"], working_dir="/microservice",
                           env=["PATH=/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin",
                                "PREDICTIVE_UNIT_SERVICE_PORT=9000"]),
                 base="debian-python")
    layout.build("standin-python", [Layer(symlinks={"usr/bin/python": "python3"})], ImageSpec(cmd=["python3"]),
                 base="debian-python")
    layout.build("standin-nginx", [Layer(files={"usr/share/nginx/html/index.html":
                                                "<h1>Welcome to nginx!</h1>\n"})],
                 ImageSpec(cmd=["httpd", "-f", "-p", "80", "-h", "/usr/share/nginx/html"]), base="busybox")
    layout.build("standin-pause", [], ImageSpec(entrypoint=["/bin/sh", "-c", _PAUSE]), base="busybox")


def push_public(registry: Registry, images: BuiltImages) -> None:
    """Push every stand-in under its public names (Docker Hub's, then Kubernetes' registries' paths)."""
    for tag, names in {**HUB_NAMES, **K8S_NAMES}.items():
        for name in names:
            registry.push(images, tag, name)


def write_mirror_config(config_path: Path, mirror_host: str, *, upstream: str | None = None) -> None:
    """containerd's ``certs.d``: ``docker.io`` and Kubernetes' registries served by ``mirror_host``
    (plain HTTP, pull and resolve); ``upstream`` replaces each ``server`` (a dead address proves
    that nothing came from the real registry)."""
    for registry, server in [("docker.io", "https://registry-1.docker.io"),
                             *((r, f"https://{r}") for r in K8S_REGISTRIES)]:
        directory = config_path / registry
        directory.mkdir(parents=True, exist_ok=True)
        (directory / "hosts.toml").write_text(
            f'server = "{upstream or server}"\n\n'
            f'[host."http://{mirror_host}"]\n  capabilities = ["pull", "resolve"]\n')


def seed_001_manifests(replicas: int = 3, *, fixed_port: bool = False, service_type: str = "LoadBalancer",
                       name: str = "tf-serving") -> list[dict]:
    """Seed 001's row: a ``tensorflow/serving`` Deployment of ``replicas`` serving ``half_plus_two``
    on 8501, behind a Service of ``service_type`` on 8501. ``fixed_port`` keeps 8501 as the real
    image binds it (every pod its own network); otherwise each replica takes ``--rest_api_port=$(PORT)``,
    the compatibility path where pods share the host's network."""
    labels = {"app": name}
    container = {"name": "serving", "image": "tensorflow/serving",
                 "env": [{"name": "MODEL_NAME", "value": "half_plus_two"}],
                 "ports": [{"name": "http", "containerPort": TF_REST_PORT}],
                 "readinessProbe": {"httpGet": {"path": "/v1/models/half_plus_two", "port": "http"},
                                    "periodSeconds": 1}}
    if not fixed_port:
        container["args"] = ["--rest_api_port=$(PORT)"]
    return [
        {"apiVersion": "apps/v1", "kind": "Deployment", "metadata": {"name": name, "labels": labels},
         "spec": {"replicas": replicas, "selector": {"matchLabels": labels},
                  "template": {"metadata": {"labels": labels}, "spec": {"containers": [container]}}}},
        {"apiVersion": "v1", "kind": "Service", "metadata": {"name": name},
         "spec": {"type": service_type, "selector": labels,
                  "ports": [{"name": "http", "port": TF_REST_PORT, "targetPort": TF_REST_PORT}]}},
    ]


@pytest.fixture(scope="session")
def public_mirror(registry: Registry, test_images: BuiltImages) -> Registry:
    """The session's loopback registry, holding every stand-in under its public names."""
    build_standins(test_images)
    push_public(registry, test_images)
    return registry
