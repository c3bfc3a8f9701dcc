"""core/v1: quantities, pod spec rules and defaults, ConfigMap, Secret, Namespace."""

from __future__ import annotations

import base64
from decimal import Decimal
from typing import Any

import pytest

from tests.api.builders import container, pod
from trimaran.api import (
    ManifestError,
    ResourceRequirements,
    is_extended_resource,
    parse_cpu,
    parse_memory,
    parse_quantity,
    validate,
)


def problems(obj: dict[str, Any]) -> list[str]:
    with pytest.raises(ManifestError) as info:
        validate(obj)
    return info.value.problems


# --- quantities ---------------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("q", "cores"),
    [
        ("500m", 0.5),
        ("2", 2.0),
        (2, 2.0),
        (0.5, 0.5),
        ("1.5", 1.5),
        ("100m", 0.1),
        ("1e3", 1000.0),
        ("2k", 2000.0),
        ("250000u", 0.25),
        ("0", 0.0),
        (".5", 0.5),
        ("+1", 1.0),
    ],
)
def test_parse_cpu(q: Any, cores: float) -> None:
    assert parse_cpu(q) == pytest.approx(cores)


@pytest.mark.parametrize(
    ("q", "size"),
    [
        ("4Gi", 4 * 2**30),
        ("1G", 10**9),
        ("128Mi", 128 * 2**20),
        ("1Ki", 1024),
        ("1k", 1000),
        ("1e3", 1000),
        ("1E3", 1000),
        ("1E", 10**18),
        ("1Ei", 2**60),
        ("1.5Gi", 3 * 2**29),
        ("500m", 1),
        ("1Ti", 2**40),
        ("2M", 2 * 10**6),
        (1024, 1024),
        ("0.5Ki", 512),
        ("16Gi", 16 * 2**30),
    ],
)
def test_parse_memory(q: Any, size: int) -> None:
    assert parse_memory(q) == size


def test_parse_quantity_is_exact() -> None:
    assert parse_quantity("100m") == Decimal("0.1")
    assert parse_quantity("3n") == Decimal("3e-9")


@pytest.mark.parametrize(
    "bad",
    [
        "",
        "abc",
        "1GB",
        "1gi",
        "Gi",
        "1.2.3",
        "--1",
        "1e",
        "1 Gi",
        " 1",
        "1e999",
        True,
        None,
        [1],
        float("nan"),
        float("inf"),
        "1" * 100,
    ],
)
def test_parse_quantity_rejects(bad: Any) -> None:
    with pytest.raises(ValueError):
        parse_quantity(bad)


def test_quantity_error_message_is_kubernetes() -> None:
    with pytest.raises(ValueError, match=r"quantities must match the regular expression '\^\(\[\+-\]\?\[0-9\.\]\+\)"):
        parse_quantity("4 gigs")


def test_quantity_fields_accept_numbers_and_store_strings() -> None:
    obj = pod(
        {"containers": [container("c", resources={"limits": {"cpu": 2, "memory": "1Gi"}, "requests": {"cpu": 0.5}})]}
    )
    resources = validate(obj).object["spec"]["containers"][0]["resources"]
    assert resources == {"limits": {"cpu": "2", "memory": "1Gi"}, "requests": {"cpu": "0.5", "memory": "1Gi"}}


def test_bad_quantity_in_manifest_names_the_field() -> None:
    [p] = problems(pod({"containers": [container("c", resources={"requests": {"memory": "lots"}})]}))
    assert p.startswith(
        'Pod "p": spec.containers[0].resources.requests.memory: Invalid value: "lots": quantities must match'
    )


def test_extended_resources() -> None:
    assert is_extended_resource("nvidia.com/gpu")
    assert is_extended_resource("nvidia.com/mig-3g.20gb")
    assert not is_extended_resource("cpu")
    assert not is_extended_resource("kubernetes.io/something")
    # A pod's requests default to its limits, so both are reported.
    found = problems(pod({"containers": [container("c", resources={"limits": {"nvidia.com/gpu": "0.5"}})]}))
    assert found == [
        f'Pod "p": spec.containers[0].resources.{section}[nvidia.com/gpu]: Invalid value: "0.5": must be an integer'
        for section in ("limits", "requests")
    ]
    [p] = problems(pod({"containers": [container("c", resources={"requests": {"nvidia.com/gpu": "1"}})]}))
    assert "resources.limits: Required value: Limit must be set for non overcommitable resources" in p
    [p] = problems(
        pod(
            {
                "containers": [
                    container("c", resources={"requests": {"nvidia.com/gpu": "1"}, "limits": {"nvidia.com/gpu": "2"}})
                ]
            }
        )
    )
    assert p.endswith('requests[nvidia.com/gpu]: Invalid value: "1": must be equal to nvidia.com/gpu limit of 2')


def test_requests_above_limits() -> None:
    [p] = problems(pod({"containers": [container("c", resources={"requests": {"cpu": "2"}, "limits": {"cpu": "1"}})]}))
    assert p == (
        'Pod "p": spec.containers[0].resources.requests.cpu: Invalid value: "2": '
        "must be less than or equal to cpu limit of 1"
    )


def test_negative_quantity() -> None:
    [p] = problems(pod({"containers": [container("c", resources={"requests": {"memory": "-1Gi"}})]}))
    assert p.endswith('requests.memory: Invalid value: "-1Gi": must be greater than or equal to 0')


def test_effective_requests() -> None:
    r = ResourceRequirements.model_validate({"limits": {"cpu": "2", "nvidia.com/gpu": 1}, "requests": {"cpu": "1"}})
    assert r.effective_requests() == {"cpu": "1", "nvidia.com/gpu": "1"}


# --- pods ---------------------------------------------------------------------------------------


def test_pod_defaults() -> None:
    spec = validate(pod({"containers": [container("c")]})).object["spec"]
    assert spec["restartPolicy"] == "Always"
    assert spec["terminationGracePeriodSeconds"] == 30


def test_pod_requires_image_and_containers() -> None:
    assert problems(pod({"containers": [{"name": "c"}]})) == ['Pod "p": spec.containers[0].image: Required value']
    assert problems(pod({"containers": []})) == ['Pod "p": spec.containers: Required value']
    assert problems(pod({})) == ['Pod "p": spec.containers: Required value']


def test_pod_name_is_a_subdomain() -> None:
    assert validate(pod({"containers": [container("c")]}, name="a.b-c")).object["metadata"]["name"] == "a.b-c"
    [p] = problems(pod({"containers": [container("c")]}, name="A_b"))
    assert 'metadata.name: Invalid value: "A_b": a lowercase RFC 1123 subdomain' in p


def test_container_names() -> None:
    [p] = problems(pod({"containers": [container("Main")]}))
    assert 'spec.containers[0].name: Invalid value: "Main": a lowercase RFC 1123 label' in p
    [p] = problems(pod({"containers": [container("c")], "initContainers": [container("c")]}))
    assert p.endswith('spec.containers[0].name: Duplicate value: "c"')


def test_ports() -> None:
    [p] = problems(pod({"containers": [container("c", ports=[{"containerPort": 70000}])]}))
    assert p.endswith(
        "spec.containers[0].ports[0].containerPort: Invalid value: 70000: must be between 1 and 65535, inclusive"
    )
    [p] = problems(pod({"containers": [container("c", ports=[{"name": "my_port", "containerPort": 80}])]}))
    assert 'ports[0].name: Invalid value: "my_port": must contain only alpha-numeric characters' in p
    [p] = problems(
        pod(
            {
                "containers": [
                    container("c", ports=[{"name": "a", "containerPort": 80}, {"name": "a", "containerPort": 81}])
                ]
            }
        )
    )
    assert p.endswith('ports[1].name: Duplicate value: "a"')
    [p] = problems(pod({"containers": [container("c", ports=[{"containerPort": 80, "protocol": "HTTP"}])]}))
    assert 'ports[0].protocol: Unsupported value: "HTTP": supported values: "TCP", "UDP", "SCTP"' in p


def test_env_value_from() -> None:
    env = [
        {"name": "POD_NAME", "valueFrom": {"fieldRef": {"fieldPath": "metadata.name"}}},
        {"name": "APP", "valueFrom": {"fieldRef": {"fieldPath": "metadata.labels['app']"}}},
        {
            "name": "CPU",
            "valueFrom": {"resourceFieldRef": {"containerName": "c", "resource": "limits.cpu", "divisor": "1m"}},
        },
        {"name": "CFG", "valueFrom": {"configMapKeyRef": {"name": "cm", "key": "k", "optional": True}}},
        {"name": "PW", "valueFrom": {"secretKeyRef": {"name": "s", "key": "password"}}},
    ]
    out = validate(
        pod({"containers": [container("c", env=env, envFrom=[{"prefix": "X_", "configMapRef": {"name": "cm"}}])]})
    )
    assert out.object["spec"]["containers"][0]["env"] == env
    assert out.warnings == []


@pytest.mark.parametrize(
    ("env", "expected"),
    [
        (
            {"name": "A", "value": "1", "valueFrom": {"fieldRef": {"fieldPath": "metadata.name"}}},
            'env[0].valueFrom: Invalid value: "": may not be specified when `value` is not empty',
        ),
        (
            {"name": "A", "valueFrom": {}},
            'env[0].valueFrom: Invalid value: "": must specify one of: `fieldRef`, `resourceFieldRef`, '
            "`configMapKeyRef` or `secretKeyRef`",
        ),
        (
            {"name": "A", "valueFrom": {"fieldRef": {"fieldPath": "spec.containers"}}},
            'env[0].valueFrom.fieldRef.fieldPath: Unsupported value: "spec.containers"',
        ),
        (
            {"name": "A", "valueFrom": {"resourceFieldRef": {"resource": "limits.gpu"}}},
            'env[0].valueFrom.resourceFieldRef.resource: Unsupported value: "limits.gpu"',
        ),
        ({"name": "A=B", "value": "x"}, 'env[0].name: Invalid value: "A=B"'),
        ({"name": "A", "value": 1}, "env[0].value: Invalid value: 1: must be of type string"),
        ({"value": "x"}, "env[0].name: Required value"),
    ],
)
def test_env_rules(env: dict[str, Any], expected: str) -> None:
    [p] = problems(pod({"containers": [container("c", env=[env])]}))
    assert expected in p


def test_volumes() -> None:
    volumes = [
        {"name": "scratch", "emptyDir": {}},
        {"name": "shm", "emptyDir": {"medium": "Memory", "sizeLimit": "1Gi"}},
        {"name": "data", "hostPath": {"path": "/data", "type": "DirectoryOrCreate"}},
        {"name": "claim", "persistentVolumeClaim": {"claimName": "c", "readOnly": True}},
        {
            "name": "code",
            "configMap": {
                "name": "code",
                "items": [{"key": "a.py", "path": "a.py", "mode": 0o755}],
                "defaultMode": 0o644,
                "optional": False,
            },
        },
        {"name": "creds", "secret": {"secretName": "s", "defaultMode": 0o400}},
        {"name": "nfs", "nfs": {"server": "x", "path": "/"}},
        {"name": "api", "downwardAPI": {"items": []}},
    ]
    mounts = [{"name": v["name"], "mountPath": f"/mnt/{v['name']}"} for v in volumes]
    mounts[0]["subPath"] = "sub"
    mounts[1]["readOnly"] = True
    out = validate(pod({"containers": [container("c", volumeMounts=mounts)], "volumes": volumes}))
    assert out.object["spec"]["volumes"] == volumes
    assert out.object["spec"]["containers"][0]["volumeMounts"] == mounts
    assert out.warnings == []


@pytest.mark.parametrize(
    ("volumes", "mounts", "expected"),
    [
        ([{"name": "v"}], [], "spec.volumes[0]: Required value: must specify a volume type"),
        (
            [{"name": "v", "emptyDir": {}, "hostPath": {"path": "/x"}}],
            [],
            "spec.volumes[0].hostPath: Forbidden: may not specify more than 1 volume type",
        ),
        (
            [{"name": "v", "emptyDir": {}}, {"name": "v", "emptyDir": {}}],
            [],
            'spec.volumes[1].name: Duplicate value: "v"',
        ),
        ([{"name": "V", "emptyDir": {}}], [], 'spec.volumes[0].name: Invalid value: "V"'),
        ([{"name": "v", "hostPath": {}}], [], "spec.volumes[0].hostPath.path: Required value"),
        (
            [{"name": "v", "configMap": {"name": "c", "defaultMode": 0o1777}}],
            [],
            "spec.volumes[0].configMap.defaultMode: Invalid value: 1023: "
            "must be a number between 0 and 0777 (octal), both inclusive",
        ),
        (
            [{"name": "v", "secret": {"secretName": "s", "items": [{"key": "k", "path": "../k"}]}}],
            [],
            "spec.volumes[0].secret.items[0].path: Invalid value: \"../k\": must not contain '..'",
        ),
        (
            [{"name": "v", "emptyDir": {"medium": "Disk"}}],
            [],
            'spec.volumes[0].emptyDir.medium: Unsupported value: "Disk"',
        ),
        ([], [{"name": "missing", "mountPath": "/x"}], 'spec.containers[0].volumeMounts[0].name: Not found: "missing"'),
        (
            [{"name": "v", "emptyDir": {}}],
            [{"name": "v", "mountPath": "/x"}, {"name": "v", "mountPath": "/x"}],
            'spec.containers[0].volumeMounts[1].mountPath: Invalid value: "/x": must be unique',
        ),
        (
            [{"name": "v", "emptyDir": {}}],
            [{"name": "v", "mountPath": "/x", "subPath": "/abs"}],
            'volumeMounts[0].subPath: Invalid value: "/abs": must be a relative path',
        ),
        (
            [{"name": "v", "emptyDir": {"sizeLimit": "big"}}],
            [],
            'spec.volumes[0].emptyDir.sizeLimit: Invalid value: "big"',
        ),
    ],
)
def test_volume_rules(volumes: list[Any], mounts: list[Any], expected: str) -> None:
    found = problems(pod({"containers": [container("c", volumeMounts=mounts)], "volumes": volumes}))
    assert any(expected in p for p in found), found


def test_node_affinity_operators() -> None:
    exprs = [
        {"key": "a", "operator": "In", "values": ["x"]},
        {"key": "b", "operator": "NotIn", "values": ["y"]},
        {"key": "c", "operator": "Exists"},
        {"key": "d", "operator": "DoesNotExist"},
        {"key": "e", "operator": "Gt", "values": ["1"]},
        {"key": "f", "operator": "Lt", "values": ["10"]},
    ]
    affinity = {
        "nodeAffinity": {
            "requiredDuringSchedulingIgnoredDuringExecution": {"nodeSelectorTerms": [{"matchExpressions": exprs}]},
            "preferredDuringSchedulingIgnoredDuringExecution": [
                {"weight": 10, "preference": {"matchExpressions": exprs[:1]}}
            ],
        },
        "podAntiAffinity": {"anything": "kept"},
    }
    out = validate(pod({"containers": [container("c")], "affinity": affinity})).object
    assert out["spec"]["affinity"] == affinity


@pytest.mark.parametrize(
    ("expr", "expected"),
    [
        (
            {"key": "a", "operator": "In"},
            "values: Required value: must be specified when `operator` is 'In' or 'NotIn'",
        ),
        (
            {"key": "a", "operator": "Exists", "values": ["x"]},
            "values: Forbidden: may not be specified when `operator` is 'Exists'",
        ),
        (
            {"key": "a", "operator": "Gt", "values": ["1", "2"]},
            "values: Required value: must be specified single value",
        ),
        ({"key": "a", "operator": "Lt", "values": ["ten"]}, 'values[0]: Invalid value: "ten": must be an integer'),
        ({"key": "a", "operator": "Near", "values": ["x"]}, 'operator: Unsupported value: "Near"'),
        ({"key": "a/b/c", "operator": "Exists"}, 'key: Invalid value: "a/b/c": a qualified name'),
    ],
)
def test_node_affinity_rules(expr: dict[str, Any], expected: str) -> None:
    affinity = {
        "nodeAffinity": {
            "requiredDuringSchedulingIgnoredDuringExecution": {"nodeSelectorTerms": [{"matchExpressions": [expr]}]}
        }
    }
    [p] = problems(pod({"containers": [container("c")], "affinity": affinity}))
    assert (
        "spec.affinity.nodeAffinity.requiredDuringSchedulingIgnoredDuringExecution.nodeSelectorTerms[0]"
        ".matchExpressions[0]." in p
    )
    assert expected in p


def test_preferred_weight_range() -> None:
    affinity = {"nodeAffinity": {"preferredDuringSchedulingIgnoredDuringExecution": [{"weight": 0, "preference": {}}]}}
    [p] = problems(pod({"containers": [container("c")], "affinity": affinity}))
    assert p.endswith(
        "preferredDuringSchedulingIgnoredDuringExecution[0].weight: Invalid value: 0: must be in the range 1-100"
    )


@pytest.mark.parametrize(
    ("toleration", "expected"),
    [
        ({"key": "k", "operator": "Exists", "value": "v"}, "value must be empty when `operator` is 'Exists'"),
        ({"operator": "Equal", "value": "v"}, "operator must be Exists when `key` is empty"),
        (
            {"key": "k", "effect": "NoSchedule", "tolerationSeconds": 5},
            "effect must be 'NoExecute' when `tolerationSeconds` is set",
        ),
        ({"key": "k", "effect": "Sometimes"}, 'tolerations[0].effect: Unsupported value: "Sometimes"'),
    ],
)
def test_toleration_rules(toleration: dict[str, Any], expected: str) -> None:
    [p] = problems(pod({"containers": [container("c")], "tolerations": [toleration]}))
    assert expected in p


def test_tolerations_accepted() -> None:
    tolerations = [
        {"operator": "Exists"},
        {"key": "k", "operator": "Equal", "value": "v", "effect": "NoExecute", "tolerationSeconds": 30},
        {"key": "nvidia.com/gpu", "effect": "NoSchedule"},
    ]
    assert (
        validate(pod({"containers": [container("c")], "tolerations": tolerations})).object["spec"]["tolerations"]
        == tolerations
    )


def test_node_selector_syntax() -> None:
    [p] = problems(pod({"containers": [container("c")], "nodeSelector": {"gpu": "yes please"}}))
    assert 'spec.nodeSelector: Invalid value: "yes please": a valid label must be an empty string' in p


def test_known_but_unmodelled_fields_kept_without_warnings() -> None:
    spec = {
        "containers": [
            container(
                "c",
                livenessProbe={"exec": {"command": ["true"]}},
                stdin=True,
                terminationMessagePolicy="FallbackToLogsOnError",
                securityContext={"runAsUser": 1000},
            )
        ],
        "dnsPolicy": "ClusterFirst",
        "imagePullSecrets": [{"name": "r"}],
        "hostNetwork": False,
        "hostIPC": False,
        "securityContext": {"fsGroup": 100},
        "schedulerName": "volcano",
        "priorityClassName": "high",
        "serviceAccountName": "trainer",
        "hostname": "h",
        "subdomain": "s",
        "activeDeadlineSeconds": 60,
    }
    out = validate(pod(spec))
    assert out.warnings == []
    for key, value in spec.items():
        if key != "containers":
            assert out.object["spec"][key] == value


def test_pod_status_round_trips() -> None:
    obj = pod({"containers": [container("c")]})
    obj["status"] = {
        "phase": "Failed",
        "podIP": "127.0.0.2",
        "hostIP": "127.0.0.1",
        "startTime": "2026-01-01T00:00:00Z",
        "conditions": [{"type": "Ready", "status": "False"}],
        "containerStatuses": [
            {
                "name": "c",
                "restartCount": 2,
                "ready": False,
                "state": {
                    "terminated": {
                        "exitCode": 137,
                        "signal": 9,
                        "reason": "OOMKilled",
                        "startedAt": "2026-01-01T00:00:01Z",
                        "finishedAt": "2026-01-01T00:00:09Z",
                    }
                },
                "lastState": {"terminated": {"exitCode": 1, "reason": "Error"}},
            }
        ],
    }
    assert validate(obj).object["status"] == obj["status"]


def test_pod_status_phase_checked() -> None:
    obj = pod({"containers": [container("c")]})
    obj["status"] = {"phase": "Exploded"}
    [p] = problems(obj)
    assert 'status.phase: Unsupported value: "Exploded"' in p


# --- ConfigMap, Secret, Namespace ---------------------------------------------------------------


def test_configmap() -> None:
    cm = {
        "apiVersion": "v1",
        "kind": "ConfigMap",
        "metadata": {"name": "code"},
        "data": {"train.py": "print(1)\n"},
        "binaryData": {"blob": base64.b64encode(b"\0\1").decode()},
    }
    assert validate(cm).object == {**cm, "metadata": {"name": "code", "namespace": "default"}}


def test_configmap_rules() -> None:
    cm = {
        "apiVersion": "v1",
        "kind": "ConfigMap",
        "metadata": {"name": "c"},
        "data": {"a b": "x", "k": "v"},
        "binaryData": {"k": "!!!"},
    }
    found = problems(cm)
    assert any('data: Invalid value: "a b": a valid config key' in p for p in found)
    assert any('data.k: Invalid value: "k": duplicate of key present in binaryData' in p for p in found)
    assert any('binaryData.k: Invalid value: "!!!": must be base64-encoded' in p for p in found)


def test_secret_string_data_folded_into_data() -> None:
    secret = {
        "apiVersion": "v1",
        "kind": "Secret",
        "metadata": {"name": "s"},
        "data": {"a": base64.b64encode(b"old").decode(), "b": base64.b64encode(b"keep").decode()},
        "stringData": {"a": "new"},
    }
    out = validate(secret).object
    assert out["type"] == "Opaque"
    assert "stringData" not in out
    assert {k: base64.b64decode(v) for k, v in out["data"].items()} == {"a": b"new", "b": b"keep"}


def test_secret_data_must_be_base64() -> None:
    [p] = problems({"apiVersion": "v1", "kind": "Secret", "metadata": {"name": "s"}, "data": {"k": "not base64!"}})
    assert p == 'Secret "s": data.k: Invalid value: "not base64!": must be base64-encoded'


def test_namespace_is_cluster_scoped() -> None:
    out = validate({"apiVersion": "v1", "kind": "Namespace", "metadata": {"name": "team-a", "namespace": "x"}}).object
    assert out["metadata"] == {"name": "team-a"}
    assert out["status"] == {"phase": "Active"}
    [p] = problems({"apiVersion": "v1", "kind": "Namespace", "metadata": {"name": "a.b"}})
    assert 'metadata.name: Invalid value: "a.b": a lowercase RFC 1123 label' in p


def test_namespace_of_namespaced_objects() -> None:
    [p] = problems({**pod({"containers": [container("c")]}), "metadata": {"name": "p", "namespace": "Team_A"}})
    assert 'metadata.namespace: Invalid value: "Team_A"' in p
