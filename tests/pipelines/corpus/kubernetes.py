"""kfp-kubernetes: a PVC mount, a Secret as env, a Secret as a volume, a ConfigMap as a volume and as
env, a node selector, a toleration, a pod label and annotation (the platforms: kubernetes
document). The Secret, ConfigMap and PVC are made by the test."""
from kfp import dsl, kubernetes


@dsl.component
def inspect(path: str) -> str:
    import os
    with open(os.path.join("/data", "probe.txt"), "w") as f:
        f.write("written to the claim")
    return "|".join([os.environ.get("PASSWORD", "<unset>"), os.environ.get("MODE", "<unset>"),
                     open(os.path.join("/etc/config", path)).read().strip(),
                     open("/etc/secret/password").read().strip()])


@dsl.pipeline(name="kubernetes")
def pipeline(path: str = "mode") -> str:
    task = inspect(path=path)
    kubernetes.mount_pvc(task, pvc_name="pipeline-data", mount_path="/data")
    kubernetes.use_secret_as_env(task, secret_name="pipeline-secret", secret_key_to_env={"password": "PASSWORD"})
    kubernetes.use_secret_as_volume(task, secret_name="pipeline-secret", mount_path="/etc/secret")
    kubernetes.use_config_map_as_volume(task, config_map_name="pipeline-config", mount_path="/etc/config")
    kubernetes.use_config_map_as_env(task, config_map_name="pipeline-config", config_map_key_to_env={"mode": "MODE"})
    kubernetes.add_node_selector(task, label_key="kubernetes.io/os", label_value="linux")
    kubernetes.add_toleration(task, key="dedicated", operator="Equal", value="pipelines", effect="NoSchedule")
    kubernetes.add_pod_label(task, label_key="team", label_value="ml")
    kubernetes.add_pod_annotation(task, annotation_key="note", annotation_value="from kfp-kubernetes")
    return task.output


ARGUMENTS: dict = {}
LOCAL = False  # kfp.local ignores the platforms document
