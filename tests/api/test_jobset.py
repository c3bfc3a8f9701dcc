"""JobSet: the webhook's defaults, and bad input refused with its field path and upstream's wording."""

from __future__ import annotations

from typing import Any

import pytest

from trimaran.api import ManifestError, validate
from trimaran.api.kinds import lookup


def rjob(name: str, **extra: Any) -> dict:
    return {"name": name, **extra, "template": {"spec": {"template": {"spec": {
        "containers": [{"name": "main", "image": "python", "command": ["python", "-c", "pass"]}]}}}}}


def jobset(*rjobs: dict, name: str = "js", **spec: Any) -> dict:
    return {"apiVersion": "jobset.x-k8s.io/v1alpha2", "kind": "JobSet", "metadata": {"name": name},
            "spec": {"replicatedJobs": list(rjobs), **spec}}


def problems(obj: dict) -> list[str]:
    with pytest.raises(ManifestError) as info:
        validate(obj)
    return info.value.problems


def test_defaults_are_the_webhooks() -> None:
    spec = validate(jobset(rjob("a"), failurePolicy={"rules": [{"action": "FailJobSet"}]})).object["spec"]
    assert spec["successPolicy"] == {"operator": "All"}
    assert spec["startupPolicy"] == {"startupPolicyOrder": "AnyOrder"}
    assert spec["network"] == {"enableDNSHostnames": True, "publishNotReadyAddresses": True}
    assert spec["failurePolicy"]["rules"][0]["name"] == "failurePolicyRule0"
    assert spec["failurePolicy"]["restartStrategy"] == "Recreate"
    first = spec["replicatedJobs"][0]
    assert (first["replicas"], first["groupName"]) == (1, "default")
    assert first["template"]["spec"]["completionMode"] == "Indexed"
    assert first["template"]["spec"]["template"]["spec"]["restartPolicy"] == "OnFailure"


def test_depends_on_an_unknown_or_later_replicated_job_is_refused() -> None:
    dep = [{"name": "c", "status": "Ready"}]
    found = problems(jobset(rjob("a"), rjob("b", dependsOn=dep), rjob("c")))
    assert found == ['JobSet "js": spec.replicatedJobs[1].dependsOn[0].name: Invalid value: "c": '
                     "replicatedJob: b cannot depend on replicatedJob: c"]
    found = problems(jobset(rjob("a"), rjob("b", dependsOn=[{"name": "ghost", "status": "Complete"}])))
    assert "replicatedJob: b cannot depend on replicatedJob: ghost" in found[0]


def test_a_cycle_is_refused() -> None:
    found = problems(jobset(rjob("a"), rjob("b", dependsOn=[{"name": "b", "status": "Ready"}])))
    assert found == ['JobSet "js": spec.replicatedJobs[1].dependsOn[0].name: Invalid value: "b": '
                     "replicatedJob: b cannot depend on replicatedJob: b"]
    found = problems(jobset(rjob("a", dependsOn=[{"name": "b", "status": "Ready"}]), rjob("b")))
    assert "spec.replicatedJobs[0].dependsOn" in found[0] and "DependsOn can't be set for the first ReplicatedJob" \
        in found[0]


def test_depends_on_status_is_ready_or_complete() -> None:
    found = problems(jobset(rjob("a"), rjob("b", dependsOn=[{"name": "a", "status": "Running"}])))
    assert len(found) == 1 and "spec.replicatedJobs[1].dependsOn[0].status" in found[0], found


def test_in_order_startup_and_depends_on_are_exclusive() -> None:
    found = problems(jobset(rjob("a"), rjob("b", dependsOn=[{"name": "a", "status": "Ready"}]),
                            startupPolicy={"startupPolicyOrder": "InOrder"}))
    assert found == ['JobSet "js": spec.startupPolicy.startupPolicyOrder: Invalid value: "InOrder": '
                     "StartupPolicy and DependsOn APIs are mutually exclusive"]


def test_duplicate_replicated_job_names_are_refused() -> None:
    assert problems(jobset(rjob("a"), rjob("a"))) == [
        'JobSet "js": spec.replicatedJobs[1].name: Duplicate value: "a"']


def test_names_too_long_for_the_generated_hostnames_are_refused() -> None:
    found = problems(jobset(rjob("w" * 30), name="j" * 30))
    assert found == [f'JobSet "{"j" * 30}": spec.replicatedJobs[0].name: Invalid value: "{"w" * 30}": '
                     "JobSet name is too long, pod names generated for this JobSet will exceed 63 characters"]
    found = problems(jobset(rjob("w" * 40), name="j" * 30))
    assert "job names generated for this JobSet will exceed 63 characters" in found[0]


def test_success_policy_targets_must_exist() -> None:
    found = problems(jobset(rjob("a"), successPolicy={"operator": "Any", "targetReplicatedJobs": ["a", "b"]}))
    assert found == ['JobSet "js": spec.successPolicy.targetReplicatedJobs[1]: Invalid value: "b": '
                     "invalid replicatedJob name 'b' does not appear in .spec.ReplicatedJobs"]
    found = problems(jobset(rjob("a"), successPolicy={"operator": "Most"}))
    assert "spec.successPolicy.operator" in found[0]


def test_failure_policy_rules_are_checked() -> None:
    found = problems(jobset(rjob("a"), failurePolicy={"rules": [
        {"name": "r", "action": "FailJobSet", "targetReplicatedJobs": ["z"]},
        {"name": "r", "action": "RestartJobSet", "onJobFailureReasons": ["OutOfCheese"]}]}))
    assert any("spec.failurePolicy.rules[0].targetReplicatedJobs[0]" in p and "in failure policy does not appear"
               in p for p in found), found
    assert any("spec.failurePolicy.rules[1].onJobFailureReasons[0]" in p and "is not a recognized job failure reason"
               in p for p in found), found
    assert any("rule names are not unique, rules with indices [0, 1] all have the same name 'r'" in p
               for p in found), found
    found = problems(jobset(rjob("a"), failurePolicy={"restartStrategy": "InPlaceRestart"}))
    assert len(found) == 1 and "spec.failurePolicy.restartStrategy" in found[0], found
    found = problems(jobset(rjob("a"), failurePolicy={"rules": [{"action": "RestartJob"}]}))
    assert len(found) == 1 and "spec.failurePolicy.rules[0].action" in found[0], found


def test_the_child_job_template_is_checked_as_a_job() -> None:
    bad = rjob("a")
    bad["template"]["spec"]["template"]["spec"]["restartPolicy"] = "Always"
    assert problems(jobset(bad)) == [
        'JobSet "js": spec.replicatedJobs[0].template.spec.template.spec.restartPolicy: Unsupported value: '
        '"Always": supported values: "OnFailure", "Never"']


def test_subdomain_must_be_a_dns_label() -> None:
    found = problems(jobset(rjob("a"), network={"subdomain": "Not_A_Name"}))
    assert found and all(p.startswith('JobSet "js": spec.network.subdomain: Invalid value: "Not_A_Name"')
                         for p in found)


def test_replicated_jobs_are_immutable_unless_suspended() -> None:
    info = lookup("jobsets")
    old = validate(jobset(rjob("a"))).object
    new = validate(jobset(rjob("a", replicas=2))).object
    assert [str(e) for e in info.model.update_errors(old, new)] == [
        'spec.replicatedJobs: Invalid value: "...": field is immutable']
    resumed = validate(jobset(rjob("a"), suspend=False)).object
    assert info.model.update_errors(old, resumed) == []


def test_kind_is_registered_with_upstreams_names() -> None:
    info = lookup("jobsets.jobset.x-k8s.io")
    assert (info.kind, info.group, info.version, info.namespaced) == ("JobSet", "jobset.x-k8s.io", "v1alpha2", True)
    assert [c.name for c in info.columns()] == ["TerminalState", "Restarts", "Completed", "Suspended", "Age"]
    templates = list(info.pod_templates(validate(jobset(rjob("a"), rjob("b"))).object))
    assert [t.path for t in templates] == ["spec.replicatedJobs[0].template.spec.template",
                                           "spec.replicatedJobs[1].template.spec.template"]


def test_volume_claim_templates_must_be_mounted_and_namespace_free() -> None:
    mounted = rjob("a")
    mounted["template"]["spec"]["template"]["spec"]["containers"][0]["volumeMounts"] = [
        {"name": "shared", "mountPath": "/data"}]
    policies = [{"templates": [{"metadata": {"name": "shared"}}, {"metadata": {"name": "loose", "namespace": "x"}}]}]
    found = problems(jobset(mounted, volumeClaimPolicies=policies))
    assert found == [
        'JobSet "js": spec.volumeClaimPolicies[0].templates[1].metadata.namespace: Invalid value: "x": '
        "namespace cannot be set for VolumeClaimPolicies templates",
        'JobSet "js": spec.volumeClaimPolicies[0].templates[1].metadata.name: Invalid value: "loose": '
        "volume claim template 'loose' must have a matching volumeMount in at least one container or "
        "initContainer of a ReplicatedJob template"]
    one = [{"templates": policies[0]["templates"][:1]}]
    spec = validate(jobset(mounted, volumeClaimPolicies=one)).object["spec"]
    assert spec["volumeClaimPolicies"][0]["retentionPolicy"] == {"whenDeleted": "Delete"}
