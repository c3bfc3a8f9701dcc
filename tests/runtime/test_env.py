"""Container environment: envFrom, valueFrom, $(VAR) expansion."""

from __future__ import annotations

import base64

import pytest

from trimaran.runtime.env import ConfigError, expand, expand_command, resolve_env

POD = {
    "metadata": {"name": "mnist-worker-0", "namespace": "team", "uid": "uid-1",
                 "labels": {"replica-index": "0"}, "annotations": {"note": "hi"}},
    "spec": {"nodeName": "box", "containers": []},
    "status": {"podIP": "127.0.0.3"},
}

OBJECTS = {
    ("ConfigMap", "team", "settings"): {"data": {"LR": "0.1", "EPOCHS": "3", "bad=key": "x"},
                                        "binaryData": {"BLOB": base64.b64encode(b"\x00").decode()}},
    ("Secret", "team", "creds"): {"data": {"TOKEN": base64.b64encode(b"s3cret").decode()},
                                  "stringData": {"USER": "alice"}},
}


def lookup(kind: str, namespace: str, name: str) -> dict | None:
    return OBJECTS.get((kind, namespace, name))


def env_of(container: dict) -> dict[str, str]:
    return resolve_env(POD, {"name": "c", **container}, lookup, node_cpu=4, node_memory=8 * 2**30)


@pytest.mark.parametrize(
    ("text", "expected"),
    [
        ("$(A)", "a"),
        ("x$(A)y$(B)z", "xaybz"),
        ("$$(A)", "$(A)"),
        ("$$$(A)", "$a"),
        ("$(MISSING)", "$(MISSING)"),
        ("$(A", "$(A"),
        ("$A", "$A"),
        ("50$", "50$"),
        ("$$", "$"),
        ("$()", "$()"),
        ("$(A)$(A)", "aa"),
        ("(A)", "(A)"),
    ],
)
def test_expand_matches_kubernetes(text: str, expected: str) -> None:
    assert expand(text, {"A": "a", "B": "b"}) == expected


def test_values_reference_earlier_variables_only() -> None:
    env = env_of({"env": [
        {"name": "FIRST", "value": "one"},
        {"name": "SECOND", "value": "$(FIRST)-two-$(THIRD)"},
        {"name": "THIRD", "value": "three"},
        {"name": "ESCAPED", "value": "$$(FIRST)"},
    ]})
    assert env["SECOND"] == "one-two-$(THIRD)"
    assert env["ESCAPED"] == "$(FIRST)"


def test_field_refs() -> None:
    def field(path: str) -> dict:
        return {"valueFrom": {"fieldRef": {"fieldPath": path}}}

    env = env_of({"env": [
        {"name": "NAME", **field("metadata.name")},
        {"name": "NS", **field("metadata.namespace")},
        {"name": "UID", **field("metadata.uid")},
        {"name": "INDEX", **field("metadata.labels['replica-index']")},
        {"name": "NOTE", **field("metadata.annotations['note']")},
        {"name": "ABSENT", **field("metadata.labels['nope']")},
        {"name": "IP", **field("status.podIP")},
        {"name": "NODE", **field("spec.nodeName")},
    ]})
    assert env == {"NAME": "mnist-worker-0", "NS": "team", "UID": "uid-1", "INDEX": "0",
                   "NOTE": "hi", "ABSENT": "", "IP": "127.0.0.3", "NODE": "box"}


def test_resource_field_refs() -> None:
    container = {
        "resources": {"limits": {"cpu": "1500m", "memory": "1Gi"}, "requests": {"cpu": "250m"}},
        "env": [
            {"name": "CPU_LIMIT", "valueFrom": {"resourceFieldRef": {"resource": "limits.cpu"}}},
            {"name": "CPU_REQ_M", "valueFrom": {"resourceFieldRef": {"resource": "requests.cpu",
                                                                      "divisor": "1m"}}},
            {"name": "MEM_MI", "valueFrom": {"resourceFieldRef": {"resource": "limits.memory",
                                                                  "divisor": "1Mi"}}},
            {"name": "MEM_REQ", "valueFrom": {"resourceFieldRef": {"resource": "requests.memory"}}},
        ],
    }
    env = env_of(container)
    # cpu rounds up to whole divisors; requests default to limits.
    assert env == {"CPU_LIMIT": "2", "CPU_REQ_M": "250", "MEM_MI": "1024", "MEM_REQ": str(2**30)}
    unset = env_of({"env": [
        {"name": "CPU", "valueFrom": {"resourceFieldRef": {"resource": "limits.cpu"}}},
        {"name": "MEM", "valueFrom": {"resourceFieldRef": {"resource": "limits.memory",
                                                           "divisor": "1Gi"}}},
    ]})
    assert unset == {"CPU": "4", "MEM": "8"}  # the node's allocatable


def test_config_map_and_secret_refs() -> None:
    env = env_of({"env": [
        {"name": "LR", "valueFrom": {"configMapKeyRef": {"name": "settings", "key": "LR"}}},
        {"name": "TOKEN", "valueFrom": {"secretKeyRef": {"name": "creds", "key": "TOKEN"}}},
        {"name": "USER", "valueFrom": {"secretKeyRef": {"name": "creds", "key": "USER"}}},
        {"name": "OPT", "valueFrom": {"configMapKeyRef": {"name": "gone", "key": "x",
                                                          "optional": True}}},
        {"name": "OPT_KEY", "valueFrom": {"secretKeyRef": {"name": "creds", "key": "x",
                                                           "optional": True}}},
        {"name": "URL", "value": "https://$(USER):$(TOKEN)@host"},
    ]})
    assert env == {"LR": "0.1", "TOKEN": "s3cret", "USER": "alice",
                   "URL": "https://alice:s3cret@host"}


def test_env_from_with_prefix_and_override() -> None:
    env = env_of({
        "envFrom": [{"configMapRef": {"name": "settings"}},
                    {"secretRef": {"name": "creds"}, "prefix": "DB_"},
                    {"configMapRef": {"name": "gone", "optional": True}}],
        "env": [{"name": "EPOCHS", "value": "$(EPOCHS)0"}],
    })
    # binaryData and keys that cannot be variable names are left out, as the kubelet does.
    assert env == {"LR": "0.1", "EPOCHS": "30", "DB_TOKEN": "s3cret", "DB_USER": "alice"}


@pytest.mark.parametrize(
    ("container", "message"),
    [
        ({"env": [{"name": "X", "valueFrom": {"configMapKeyRef": {"name": "gone", "key": "k"}}}]},
         'configmap "gone" not found'),
        ({"env": [{"name": "X", "valueFrom": {"configMapKeyRef": {"name": "settings", "key": "k"}}}]},
         "couldn't find key k in ConfigMap team/settings"),
        ({"env": [{"name": "X", "valueFrom": {"secretKeyRef": {"name": "nope", "key": "k"}}}]},
         'secret "nope" not found'),
        ({"env": [{"name": "X", "valueFrom": {"secretKeyRef": {"name": "creds", "key": "k"}}}]},
         "couldn't find key k in Secret team/creds"),
        ({"envFrom": [{"secretRef": {"name": "nope"}}]}, 'secret "nope" not found'),
        ({"env": [{"name": "X", "valueFrom": {"configMapKeyRef": {"name": "settings",
                                                                  "key": "BLOB"}}}]},
         "couldn't find key BLOB in ConfigMap team/settings"),
    ],
)
def test_missing_references_are_config_errors(container: dict, message: str) -> None:
    with pytest.raises(ConfigError, match=message.replace("(", r"\(")):
        env_of(container)


def test_command_and_args_expansion() -> None:
    container = {"name": "c", "command": ["python", "$(SCRIPT)"],
                 "args": ["--lr=$(LR)", "$$(LR)", "$(UNSET)"]}
    assert expand_command(container, {"SCRIPT": "train.py", "LR": "0.1"}) == [
        "python", "train.py", "--lr=0.1", "$(LR)", "$(UNSET)"]


def test_command_is_required() -> None:
    with pytest.raises(ConfigError, match="set command"):
        expand_command({"name": "c", "args": ["train.py"]}, {})
