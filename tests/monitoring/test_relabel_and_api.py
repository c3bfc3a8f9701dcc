"""Monitor manifests at apply (seed 002's ServiceMonitor as written) and Prometheus' relabeling rules,
without a control plane."""

from __future__ import annotations

import pytest

from trimaran.api import load_and_validate
from trimaran.api.errors import ManifestError
from trimaran.server.monitoring import relabel

# Seed 002, verbatim.
SEED_SERVICE_MONITOR = """
apiVersion: monitoring.coreos.com/v1
kind: ServiceMonitor
metadata:
  name: training-metrics
  namespace: kubeflow
spec:
  selector:
    matchLabels:
      app: training
  endpoints:
    - port: metrics
      interval: 30s
      path: /metrics
"""


def test_seed_service_monitor_is_accepted_as_written() -> None:
    [manifest] = load_and_validate("servicemonitor.yaml", SEED_SERVICE_MONITOR)
    assert manifest.object["spec"]["endpoints"] == [{"port": "metrics", "interval": "30s", "path": "/metrics"}]
    assert manifest.warnings == []


def test_relabeling_action_and_regex_are_checked_with_the_field_path() -> None:
    bad = SEED_SERVICE_MONITOR + "      relabelings:\n        - action: rename\n        - regex: '('\n"
    with pytest.raises(ManifestError) as caught:
        load_and_validate("servicemonitor.yaml", bad)
    text = str(caught.value)
    assert "spec.endpoints[0].relabelings[0].action" in text and "spec.endpoints[0].relabelings[1].regex" in text


LABELS = {"__meta_kubernetes_pod_label_app": "exporter", "__meta_kubernetes_pod_name": "exporter-0",
          "job": "default/exporters", "pod": "exporter-0", "__address__": "127.0.0.1:9100"}


def test_replace_fills_groups_and_an_empty_value_removes_the_label() -> None:
    out = relabel(LABELS, [
        {"sourceLabels": ["__meta_kubernetes_pod_label_app", "pod"], "regex": "(export)er;(.*)",
         "targetLabel": "${1}_of", "replacement": "$2/$1"},
        {"targetLabel": "job", "replacement": ""},
    ])
    assert out is not None and out["export_of"] == "exporter-0/export" and "job" not in out


def test_keep_drop_and_label_actions() -> None:
    assert relabel(LABELS, [{"sourceLabels": ["pod"], "regex": "other.*", "action": "keep"}]) is None
    assert relabel(LABELS, [{"sourceLabels": ["pod"], "regex": "exporter-.*", "action": "drop"}]) is None
    mapped = relabel(LABELS, [{"regex": "__meta_kubernetes_pod_label_(.+)", "action": "labelmap"},
                              {"regex": "__meta_.*", "action": "labeldrop"},
                              {"sourceLabels": ["app"], "targetLabel": "APP", "action": "uppercase"}])
    assert mapped == {"app": "exporter", "APP": "EXPORTER", "job": "default/exporters", "pod": "exporter-0",
                      "__address__": "127.0.0.1:9100"}
    shard = relabel(LABELS, [{"sourceLabels": ["__address__"], "targetLabel": "__tmp_shard", "modulus": 4,
                              "action": "hashmod"}])
    assert shard is not None and shard["__tmp_shard"] in {"0", "1", "2", "3"}
