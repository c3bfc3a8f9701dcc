"""The kind registry: every name kubectl accepts, and kubectl's messages for the rest."""

from __future__ import annotations

from collections.abc import Iterator

import pytest

from trimaran.api import (
    ConfigMap,
    Job,
    KindInfo,
    Namespace,
    Pod,
    PyTorchJob,
    Resource,
    Secret,
    TFJob,
    UnknownKindError,
    all_kinds,
    for_object,
    lookup,
    register,
    validate,
)
from trimaran.api.kinds import _by_name, _by_object


@pytest.mark.parametrize(
    ("name", "model"),
    [
        ("tfjob", TFJob),
        ("tfjobs", TFJob),
        ("TFJob", TFJob),
        ("tfjobs.kubeflow.org", TFJob),
        ("tfjob.v1.kubeflow.org", TFJob),
        ("pytorchjob", PyTorchJob),
        ("PyTorchJobs", PyTorchJob),
        ("pytorchjobs.kubeflow.org", PyTorchJob),
        ("job", Job),
        ("jobs", Job),
        ("Job", Job),
        ("jobs.batch", Job),
        ("jobs.v1.batch", Job),
        ("cm", ConfigMap),
        ("configmap", ConfigMap),
        ("configmaps", ConfigMap),
        ("ConfigMap", ConfigMap),
        ("secret", Secret),
        ("secrets", Secret),
        ("pod", Pod),
        ("pods", Pod),
        ("po", Pod),
        ("Pod", Pod),
        ("ns", Namespace),
        ("namespace", Namespace),
        ("namespaces", Namespace),
    ],
)
def test_lookup(name: str, model: type) -> None:
    assert lookup(name).model is model


def test_lookup_unknown() -> None:
    with pytest.raises(UnknownKindError, match='the server doesn\'t have a resource type "widgets"'):
        lookup("widgets")


def test_kind_info() -> None:
    info = lookup("tfjobs")
    assert (info.kind, info.api_version, info.group, info.version, info.plural) == (
        "TFJob",
        "kubeflow.org/v1",
        "kubeflow.org",
        "v1",
        "tfjobs",
    )
    assert info.namespaced and info.singular == "tfjob"
    assert lookup("ns").namespaced is False
    assert lookup("job").api_version == "batch/v1"
    assert lookup("po").group == "" and lookup("po").short_names == ("po",)
    assert {i.kind for i in all_kinds()} >= {"Pod", "ConfigMap", "Secret", "Namespace", "Job", "TFJob", "PyTorchJob"}


def test_for_object() -> None:
    assert for_object("kubeflow.org/v1", "PyTorchJob").model is PyTorchJob
    assert for_object("v1", "Pod").model is Pod
    with pytest.raises(UnknownKindError, match=r'^no matches for kind "Widget" in version "example.com/v1"\. '
                                               r'Trimaran runs these kinds: v1: Pod, .*kubeflow.org/v1: TFJob, '):
        for_object("example.com/v1", "Widget")
    with pytest.raises(UnknownKindError, match=r'^no matches for kind "PytorchJob" .*; did you mean "PyTorchJob"\?'):
        for_object("kubeflow.org/v1", "PytorchJob")
    with pytest.raises(
        UnknownKindError, match='no matches for kind "Job" in version "v1" \\(known versions: batch/v1\\)'
    ):
        for_object("v1", "Job")


class Widget(Resource):
    """A kind from a later module."""

    size: int = 1

    def set_defaults(self) -> None:
        self.size = max(self.size, 1)


def _unregister(info: KindInfo) -> None:
    """Undo a test's registration, so the registry is as other tests expect it."""
    del _by_object[(info.api_version, info.kind)]
    for name in info.names():
        _by_name[name].remove(info)
        if not _by_name[name]:
            del _by_name[name]


@pytest.fixture
def widget_kind() -> Iterator[KindInfo]:
    info = KindInfo("Widget", "example.com/v1alpha1", "example.com", "v1alpha1", "widgets", ("wd",), True, Widget)
    register(info)
    yield info
    _unregister(info)


def test_register_extends_lookup_and_validation(widget_kind: KindInfo) -> None:
    assert lookup("wd") is widget_kind
    assert lookup("widgets.example.com") is widget_kind
    out = validate({"apiVersion": "example.com/v1alpha1", "kind": "Widget", "metadata": {"name": "w"}, "size": 0})
    assert out.object == {
        "apiVersion": "example.com/v1alpha1",
        "kind": "Widget",
        "metadata": {"name": "w", "namespace": "default"},
        "size": 1,
    }
    assert register(widget_kind) is widget_kind  # idempotent


def test_register_conflict(widget_kind: KindInfo) -> None:
    with pytest.raises(ValueError, match="already registered"):
        register(KindInfo("Widget", "example.com/v1alpha1", "example.com", "v1alpha1", "widgets", (), False, Widget))


def test_first_registered_version_wins_plain_names(widget_kind: KindInfo) -> None:
    v2 = KindInfo("Widget", "example.com/v2", "example.com", "v2", "widgets", ("wd",), True, Widget)
    register(v2)
    try:
        assert lookup("widgets") is widget_kind
        assert lookup("widgets.v2.example.com") is v2
        assert for_object("example.com/v2", "Widget") is v2
    finally:
        _unregister(v2)


def test_the_trial_kinds_of_the_training_operator_are_the_registrys() -> None:
    from trimaran.api import kinds, tuning

    assert set(tuning._KUBEFLOW_JOB_KINDS) == set(kinds.kubeflow_job_kinds())
    for kind, versions in tuning.TRIAL_KINDS.items():
        for version in versions:
            assert kinds.for_object(version, kind).kind == kind  # each one a served kind
