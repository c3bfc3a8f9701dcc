"""The Pod Security Standards' checks, in upstream's words, and the pods each kind stands for."""

from __future__ import annotations

from typing import Any

import pytest

from trimaran.api import kinds
from trimaran.api.podsecurity import LevelVersion, Policy, evaluate, forbidden_detail, label_errors, policy_for

P = "pod-security.kubernetes.io/"


def spec(*containers: dict[str, Any], **fields: Any) -> dict[str, Any]:
    return {"containers": list(containers) or [{"name": "c"}], **fields}


def c(name: str = "c", **security: Any) -> dict[str, Any]:
    return {"name": name, "securityContext": security} if security else {"name": name}


RESTRICTED_OK = {"allowPrivilegeEscalation": False, "capabilities": {"drop": ["ALL"]}}
POD_OK = {"runAsNonRoot": True, "seccompProfile": {"type": "RuntimeDefault"}}


@pytest.mark.parametrize(("pod_spec", "meta", "expected"), [
    (spec(hostNetwork=True, hostIPC=True), {}, "host namespaces (hostIPC, hostNetwork)"),
    (spec(c("a", privileged=True), c("b", privileged=True)), {},
     'privileged (containers "a", "b" must not set securityContext.privileged=true)'),
    (spec(c(capabilities={"add": ["NET_RAW", "CHOWN", "SYS_ADMIN"]})), {},
     'non-default capabilities (container "c" must not include "NET_RAW", "SYS_ADMIN" in '
     "securityContext.capabilities.add)"),
    (spec({"name": "c", "ports": [{"containerPort": 80, "hostPort": 80}, {"containerPort": 1, "hostPort": 443}]}), {},
     'hostPort (container "c" uses hostPorts 443, 80)'),
    (spec(volumes=[{"name": "a", "hostPath": {"path": "/"}}, {"name": "b", "hostPath": {"path": "/x"}}]), {},
     'hostPath volumes (volumes "a", "b")'),
    (spec(c(seccompProfile={"type": "Unconfined"}), securityContext={"seccompProfile": {"type": "Unconfined"}}), {},
     'seccompProfile (pod and container "c" must not set securityContext.seccompProfile.type to "Unconfined")'),
    (spec(c(procMount="Unmasked")), {},
     'procMount (container "c" must not set securityContext.procMount to "Unmasked")'),
    (spec(securityContext={"sysctls": [{"name": "kernel.msgmax", "value": "1"},
                                       {"name": "net.ipv4.tcp_syncookies", "value": "1"}]}), {},
     "forbidden sysctls (kernel.msgmax)"),
    (spec(c(seLinuxOptions={"type": "spc_t", "user": "root"})), {},
     'seLinuxOptions (container "c" set forbidden securityContext.seLinuxOptions: type "spc_t"; user may not be set)'),
    (spec(c(appArmorProfile={"type": "Unconfined"})), {},
     'forbidden AppArmor profile (container "c" must not set AppArmor profile type to "Unconfined")'),
    (spec(), {"annotations": {"container.apparmor.security.beta.kubernetes.io/c": "unconfined"}},
     'forbidden AppArmor profile (annotation must not set AppArmor profile type to '
     '"container.apparmor.security.beta.kubernetes.io/c="unconfined"")'),
    (spec(c(windowsOptions={"hostProcess": True})), {},
     'hostProcess (container "c" must not set securityContext.windowsOptions.hostProcess=true)'),
    (spec({"name": "c", "livenessProbe": {"httpGet": {"host": "10.0.0.1", "port": 80}}}), {},
     'probe or lifecycle host (container "c" uses probe or lifecycle host "10.0.0.1")'),
])
def test_baseline_checks(pod_spec: dict[str, Any], meta: dict[str, Any], expected: str) -> None:
    assert forbidden_detail(evaluate("baseline", meta, pod_spec)) == expected
    assert evaluate("privileged", meta, pod_spec) == []


@pytest.mark.parametrize(("pod_spec", "expected"), [
    (spec(c(**RESTRICTED_OK), securityContext=POD_OK), ""),
    (spec(c(**RESTRICTED_OK, runAsUser=0), securityContext={**POD_OK, "runAsUser": 0}),
     'runAsUser=0 (pod and container "c" must not set runAsUser=0)'),
    (spec(c(**RESTRICTED_OK, runAsNonRoot=False), securityContext=POD_OK),
     'runAsNonRoot != true (container "c" must not set securityContext.runAsNonRoot=false)'),
    (spec(c(allowPrivilegeEscalation=False, capabilities={"drop": ["ALL"], "add": ["NET_BIND_SERVICE", "CHOWN"]}),
          securityContext=POD_OK),
     'unrestricted capabilities (container "c" must not include "CHOWN" in securityContext.capabilities.add)'),
    (spec(c(**RESTRICTED_OK), securityContext=POD_OK, volumes=[
        {"name": "ok", "emptyDir": {}}, {"name": "nfs", "nfs": {"server": "s", "path": "/"}},
        {"name": "host", "hostPath": {"path": "/"}}]),
     'restricted volume types (volumes ["host" "nfs"] have restricted types)'),
])
def test_restricted_checks(pod_spec: dict[str, Any], expected: str) -> None:
    assert forbidden_detail(evaluate("restricted", {}, pod_spec)) == expected


def test_restricted_supersedes_the_baseline_checks_it_overlaps() -> None:
    # hostPath is said once, as a restricted volume type; capabilities and seccomp likewise.
    adding = c(allowPrivilegeEscalation=False, capabilities={"drop": ["ALL"], "add": ["SYS_ADMIN"]})
    found = evaluate("restricted", {}, spec(adding, securityContext=POD_OK,
                                            volumes=[{"name": "h", "hostPath": {"path": "/"}}]))
    assert [reason for reason, _ in found] == ["unrestricted capabilities", "restricted volume types"]


def test_policy_from_labels_falls_back_to_the_default_and_fails_closed_for_enforce() -> None:
    default = Policy.default("baseline")
    assert policy_for(None, default) == default
    chosen = policy_for({P + "enforce": "restricted", P + "enforce-version": "v1.29", P + "warn": "restricted"},
                        default)
    assert (str(chosen.enforce), str(chosen.warn), str(chosen.audit)) == (
        "restricted:v1.29", "restricted:latest", "privileged:latest")
    broken = policy_for({P + "enforce": "bogus", P + "warn": "bogus"}, default)
    assert broken.enforce == LevelVersion("restricted") and broken.warn == LevelVersion("privileged")
    assert [(e.path, e.detail) for e in label_errors({P + "audit": "nope", P + "audit-version": "v2.0",
                                                      P + "warn-version": "latest", "other": "x"})] == [
        (f"metadata.labels[{P}audit]", "must be one of privileged, baseline, restricted"),
        (f"metadata.labels[{P}audit-version]", 'must be "latest" or "v1.x"')]


def _paths(api_version: str, kind: str, obj: dict[str, Any]) -> list[tuple[str, list[str]]]:
    info = kinds.for_object(api_version, kind)
    assert info.pod_templates is not None
    return [(t.path, [c["name"] for c in t.spec["containers"]]) for t in info.pod_templates(obj)]


def test_every_workload_kind_yields_its_pod_templates_with_their_paths() -> None:
    template = {"spec": {"containers": [{"name": "main"}]}}
    job = {"apiVersion": "batch/v1", "kind": "Job", "spec": {"template": template}}
    assert _paths("batch/v1", "Job", job) == [("spec.template", ["main"])]
    mpi = {"spec": {"mpiReplicaSpecs": {"Launcher": {"template": template}, "Worker": {"template": template}}}}
    assert _paths("kubeflow.org/v2beta1", "MPIJob", mpi) == [
        ("spec.mpiReplicaSpecs.Launcher.template", ["main"]), ("spec.mpiReplicaSpecs.Worker.template", ["main"])]
    tfjob = {"apiVersion": "kubeflow.org/v1", "kind": "TFJob",
             "spec": {"tfReplicaSpecs": {"PS": {"template": template}}}}
    experiment = {"spec": {"trialTemplate": {"trialSpec": tfjob}}}
    assert _paths("kubeflow.org/v1beta1", "Experiment", experiment) == [
        ("spec.trialTemplate.trialSpec.spec.tfReplicaSpecs.PS.template", ["main"])]
    assert _paths("kubeflow.org/v1beta1", "Trial", {"spec": {"runSpec": job}}) == [
        ("spec.runSpec.spec.template", ["main"])]
    isvc = {"spec": {"predictor": {"model": {"modelFormat": {"name": "sklearn"}}, "hostNetwork": True},
                     "transformer": {"containers": [{"name": "pre"}]}}}
    assert _paths("serving.kserve.io/v1beta1", "InferenceService", isvc) == [
        ("spec.predictor", ["kserve-container"]), ("spec.transformer", ["pre"])]
    assert kinds.for_object("v1", "ConfigMap").pod_templates is None
