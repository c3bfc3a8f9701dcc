"""kubernetes: kfp-kubernetes' platform document (as kfp-kubernetes 2.17 writes it) on a step's pod:
volumes, env, scheduling and metadata; names taken from task inputs; what cannot be applied is an
error naming it."""

from __future__ import annotations

import copy

import pytest

from tests.pipelines.kfp_corpus import compiled
from trimaran.api.loader import validate
from trimaran.pipelines.kubernetes import PlatformError, apply_config, executor_config

RUN_LABELS = {"pipelines.trimaran.io/run": "r", "team": "runs-own"}


def _pod() -> dict:
    return {"apiVersion": "v1", "kind": "Pod", "metadata": {"name": "p", "labels": dict(RUN_LABELS)},
            "spec": {"restartPolicy": "Never", "containers": [{"name": "main", "image": "python:3.11",
                                                               "command": ["python3"], "env": []}]}}


def test_the_corpus_platform_document_on_a_pod() -> None:
    config = executor_config(compiled("kubernetes").platform_spec, "exec-inspect")
    assert executor_config(compiled("kubernetes").platform_spec, "exec-other") == {}
    pod = _pod()
    apply_config(pod, config, {"path": "mode"})
    spec, container = pod["spec"], pod["spec"]["containers"][0]
    mounted = {m["mountPath"]: next(v for v in spec["volumes"] if v["name"] == m["name"])
               for m in container["volumeMounts"]}
    assert mounted["/data"]["persistentVolumeClaim"] == {"claimName": "pipeline-data"}
    assert mounted["/etc/secret"]["secret"] == {"secretName": "pipeline-secret", "optional": False}
    assert mounted["/etc/config"]["configMap"] == {"name": "pipeline-config", "optional": False}
    assert container["env"] == [
        {"name": "PASSWORD", "valueFrom": {"secretKeyRef": {"name": "pipeline-secret", "key": "password",
                                                            "optional": False}}},
        {"name": "MODE", "valueFrom": {"configMapKeyRef": {"name": "pipeline-config", "key": "mode",
                                                           "optional": False}}}]
    assert spec["nodeSelector"] == {"kubernetes.io/os": "linux"}
    assert spec["tolerations"] == [{"key": "dedicated", "operator": "Equal", "value": "pipelines",
                                    "effect": "NoSchedule"}]
    assert pod["metadata"]["labels"] == RUN_LABELS  # the run's labels are kept over the pipeline's
    assert pod["metadata"]["annotations"] == {"note": "from kfp-kubernetes"}
    validate(pod)  # a pod the API accepts


def test_names_from_task_inputs_and_other_settings() -> None:
    config = {
        "pvcMount": [{"pvcNameParameter": {"componentInputParameter": "pipelinechannel--claim"},
                      "mountPath": "/work", "subPath": "a"}],
        "secretAsEnv": [{"secretNameParameter": {"taskOutputParameter": {"producerTask": "make",
                                                                         "outputParameterKey": "Output"}},
                         "keyToEnv": [{"secretKey": "k", "envVar": "K"}], "optional": True}],
        "fieldPathAsEnv": [{"name": "POD", "fieldPath": "metadata.name"}],
        "emptyDirMounts": [{"volumeName": "scratch", "mountPath": "/scratch", "medium": "Memory"}],
        "enabledSharedMemory": {"volumeName": "shm", "size": "1Gi"},
        "nodeSelector": {"nodeSelectorJson": {"runtimeValue": {"constant": {"disk": "ssd"}}}},
        "tolerations": [{"tolerationJson": {"componentInputParameter": "tol"}}],
        "imagePullSecret": [{"secretName": "regcred"}], "imagePullPolicy": "Never",
        "activeDeadlineSeconds": "60", "securityContext": {"runAsNonRoot": True},
    }
    pod = _pod()
    apply_config(pod, config, {"pipelinechannel--claim": "shared", "pipelinechannel--make-Output": "made",
                               "tol": [{"key": "gpu", "operator": "Exists"}]})
    spec, container = pod["spec"], pod["spec"]["containers"][0]
    assert spec["volumes"][0]["persistentVolumeClaim"] == {"claimName": "shared"}
    assert container["volumeMounts"][0] == {"name": spec["volumes"][0]["name"], "mountPath": "/work", "subPath": "a"}
    assert container["env"][0]["valueFrom"]["secretKeyRef"] == {"name": "made", "key": "k", "optional": True}
    assert container["env"][1] == {"name": "POD", "valueFrom": {"fieldRef": {"fieldPath": "metadata.name"}}}
    assert [v.get("emptyDir") for v in spec["volumes"][1:]] == [{"medium": "Memory"},
                                                                 {"medium": "Memory", "sizeLimit": "1Gi"}]
    assert container["volumeMounts"][2]["mountPath"] == "/dev/shm"
    assert spec["nodeSelector"] == {"disk": "ssd"} and spec["tolerations"] == [{"key": "gpu", "operator": "Exists"}]
    assert spec["imagePullSecrets"] == [{"name": "regcred"}] and container["imagePullPolicy"] == "Never"
    assert spec["activeDeadlineSeconds"] == 60 and container["securityContext"] == {"runAsNonRoot": True}


def test_what_cannot_be_applied_is_an_error_naming_it() -> None:
    with pytest.raises(PlatformError, match="nodeAffinity is not supported"):
        apply_config(_pod(), {"nodeAffinity": [{"matchExpressions": []}]}, {})
    with pytest.raises(PlatformError, match="pvcMount: the task has no input 'pipelinechannel--claim'"):
        apply_config(_pod(), {"pvcMount": [{"pvcNameParameter": {"componentInputParameter": "pipelinechannel--claim"},
                                            "mountPath": "/w"}]}, {})
    config = copy.deepcopy(executor_config(compiled("kubernetes").platform_spec, "exec-inspect"))
    del config["secretAsEnv"][0]["secretNameParameter"], config["secretAsEnv"][0]["secretName"]
    with pytest.raises(PlatformError, match="secretAsEnv: no name given"):
        apply_config(_pod(), config, {})
