"""The scale subresource's selector, as kube-apiserver gives it in a Scale's ``status.selector``."""

from __future__ import annotations

from trimaran.api import kinds


def _scale(kind: str) -> kinds.Scale:
    scale = kinds.lookup(kind).scale
    assert scale is not None
    return scale


def test_a_label_selector_an_rc_map_and_a_crd_string() -> None:
    sts = {"spec": {"selector": {"matchLabels": {"app": "web", "tier": "a"},
                                 "matchExpressions": [{"key": "env", "operator": "In", "values": ["x", "y"]}]}}}
    assert _scale("StatefulSet").selector(sts) == "app=web,tier=a,env in (x,y)"
    assert _scale("ReplicationController").selector({"spec": {"selector": {"b": "2", "a": "1"}}}) == "a=1,b=2"
    job = {"status": {"replicaStatuses": {"Worker": {"selector": "training.kubeflow.org/job-name=j"}}}}
    assert _scale("PyTorchJob").selector(job) == "training.kubeflow.org/job-name=j"
    assert _scale("StatefulSet").selector({"spec": {}}) is None
    assert kinds.Scale(".spec.replicas", ".status.replicas").selector(sts) is None
