"""Train, tune and serve digits as one Kubeflow pipeline whose steps drive the other Kubeflow kinds.

    python pipeline.py                       # compiles pipeline.yaml beside this file
    python pipeline.py --run [--trials 4]    # ... and runs it through kfp.Client (KUBECONFIG or ~/.trimaran)

Each step is a lightweight component that works through the Kubernetes API from inside its pod
(the in-cluster configuration every pod gets), waits for what it made and passes results on:

1. ``prepare``: a PVC for the models and a ConfigMap with the training script;
2. ``train``: the baseline, a PyTorchJob whose master fits a logistic regression on sklearn's
   digits (``C = 1``) into the PVC and prints ``accuracy=...``; the step returns that accuracy,
   read from the pod's log;
3. ``tune``, beside it: a Katib Experiment (random search over the regularisation ``C``, batch-Job
   trials running the same script, each saving its model under its trial's name, metrics from
   stdout); the step returns the best trial's name;
4. ``serve``: an InferenceService (sklearn) on the best trial's model, ``pvc://CLAIM/TRIAL``, once
   Ready; returns its URL;
5. ``query``: sends held-out digits to it and returns the served model's accuracy.

The same YAML runs on a Kubeflow cluster with the training operator, Katib and KServe installed.
"""

# No `from __future__ import annotations`: kfp reads the components' annotations as types.
import argparse
from pathlib import Path

from kfp import compiler, dsl

# The components create objects through the Kubernetes Python client; on a cluster KFP installs it
# in the step's image, here the pods' interpreter already has it.
K8S = ["kubernetes"]

TRAIN_SCRIPT = '''\
import argparse, os
import joblib
from sklearn.datasets import load_digits
from sklearn.linear_model import LogisticRegression
from sklearn.model_selection import train_test_split

parser = argparse.ArgumentParser()
parser.add_argument("--c", type=float, default=1.0)
parser.add_argument("--out")
args = parser.parse_args()
x, y = load_digits(return_X_y=True)
x_train, x_test, y_train, y_test = train_test_split(x / 16.0, y, test_size=0.3, random_state=0)
model = LogisticRegression(C=args.c, max_iter=500).fit(x_train, y_train)
print(f"accuracy={model.score(x_test, y_test):.4f}", flush=True)
if args.out:
    os.makedirs(args.out, exist_ok=True)
    joblib.dump(model, os.path.join(args.out, ".model.joblib.tmp"))
    os.replace(os.path.join(args.out, ".model.joblib.tmp"), os.path.join(args.out, "model.joblib"))
'''


@dsl.component(packages_to_install=K8S)
def prepare(claim: str, code_map: str, script: str):
    """The models' PVC and the training script's ConfigMap (replaced when it exists)."""
    from kubernetes import client, config
    from kubernetes.client.rest import ApiException

    config.load_incluster_config()
    core = client.CoreV1Api()
    namespace = open("/var/run/secrets/kubernetes.io/serviceaccount/namespace").read().strip()
    claim_body = {"apiVersion": "v1", "kind": "PersistentVolumeClaim", "metadata": {"name": claim},
                  "spec": {"accessModes": ["ReadWriteOnce"], "resources": {"requests": {"storage": "1Gi"}}}}
    try:
        core.create_namespaced_persistent_volume_claim(namespace, claim_body)
    except ApiException as exc:
        if exc.status != 409:
            raise
    code = {"apiVersion": "v1", "kind": "ConfigMap", "metadata": {"name": code_map},
            "data": {"train.py": script}}
    try:
        core.create_namespaced_config_map(namespace, code)
    except ApiException as exc:
        if exc.status != 409:
            raise
        core.replace_namespaced_config_map(code_map, namespace, code)


@dsl.component(packages_to_install=K8S)
def train(prefix: str, role: str, c: float, claim: str, code_map: str) -> float:
    """A PyTorchJob that trains with ``C = c`` and saves the model to the PVC at PREFIX-ROLE; its
    test accuracy, from the master's log."""
    import time

    from kubernetes import client, config
    from kubernetes.client.rest import ApiException

    config.load_incluster_config()
    custom, core = client.CustomObjectsApi(), client.CoreV1Api()
    namespace = open("/var/run/secrets/kubernetes.io/serviceaccount/namespace").read().strip()
    name = f"{prefix}-{role}"
    container = {"name": "pytorch", "image": "python:3.11",
                 "command": ["python", "/app/train.py", "--c", str(c), "--out", f"/models/{name}"],
                 "volumeMounts": [{"name": "code", "mountPath": "/app"}, {"name": "models", "mountPath": "/models"}]}
    job = {"apiVersion": "kubeflow.org/v1", "kind": "PyTorchJob", "metadata": {"name": name},
           "spec": {"pytorchReplicaSpecs": {"Master": {"replicas": 1, "restartPolicy": "Never", "template": {"spec": {
               "containers": [container],
               "volumes": [{"name": "code", "configMap": {"name": code_map}},
                           {"name": "models", "persistentVolumeClaim": {"claimName": claim}}]}}}}}}
    try:  # a retried step finds the job its first attempt made
        custom.create_namespaced_custom_object("kubeflow.org", "v1", namespace, "pytorchjobs", job)
    except ApiException as exc:
        if exc.status != 409:
            raise
    deadline = time.monotonic() + 600
    while True:
        status = custom.get_namespaced_custom_object("kubeflow.org", "v1", namespace, "pytorchjobs", name)
        conditions = {c["type"]: c for c in (status.get("status") or {}).get("conditions") or []
                      if c.get("status") == "True"}
        if "Succeeded" in conditions:
            break
        if "Failed" in conditions:
            raise RuntimeError(f"PyTorchJob {name} failed: {conditions['Failed'].get('message')}")
        if time.monotonic() > deadline:
            raise TimeoutError(f"PyTorchJob {name} did not finish in 10 minutes")
        time.sleep(1)
    log = core.read_namespaced_pod_log(f"{name}-master-0", namespace)
    accuracy = float(next(line.split("=", 1)[1] for line in log.splitlines() if line.startswith("accuracy=")))
    print(f"{name}: C={c} accuracy={accuracy}")
    return accuracy


@dsl.component(packages_to_install=K8S)
def tune(prefix: str, claim: str, code_map: str, trials: int) -> str:
    """A Katib Experiment searching ``C``, each trial saving its model under its name; the best
    trial's name."""
    import time

    from kubernetes import client, config
    from kubernetes.client.rest import ApiException

    config.load_incluster_config()
    custom = client.CustomObjectsApi()
    namespace = open("/var/run/secrets/kubernetes.io/serviceaccount/namespace").read().strip()
    name = f"{prefix}-tune"
    trial_job = {"apiVersion": "batch/v1", "kind": "Job", "spec": {"backoffLimit": 0, "template": {"spec": {
        "restartPolicy": "Never",
        "containers": [{"name": "training", "image": "python:3.11",
                        "command": ["python", "/app/train.py", "--c", "${trialParameters.c}",
                                    "--out", "/models/${trialParameters.trial}"],
                        "volumeMounts": [{"name": "code", "mountPath": "/app"},
                                         {"name": "models", "mountPath": "/models"}]}],
        "volumes": [{"name": "code", "configMap": {"name": code_map}},
                    {"name": "models", "persistentVolumeClaim": {"claimName": claim}}]}}}}
    experiment = {
        "apiVersion": "kubeflow.org/v1beta1", "kind": "Experiment", "metadata": {"name": name},
        "spec": {"objective": {"type": "maximize", "objectiveMetricName": "accuracy"},
                 "algorithm": {"algorithmName": "random", "algorithmSettings": [{"name": "random_state",
                                                                                 "value": "7"}]},
                 "maxTrialCount": trials, "parallelTrialCount": 2, "maxFailedTrialCount": 1,
                 "parameters": [{"name": "c", "parameterType": "double",
                                 "feasibleSpace": {"min": "0.01", "max": "10"}}],
                 "trialTemplate": {"primaryContainerName": "training",
                                   "trialParameters": [{"name": "c", "reference": "c"},
                                                       {"name": "trial", "reference": "${trialSpec.Name}"}],
                                   "trialSpec": trial_job}}}
    try:
        custom.create_namespaced_custom_object("kubeflow.org", "v1beta1", namespace, "experiments", experiment)
    except ApiException as exc:
        if exc.status != 409:
            raise
    deadline = time.monotonic() + 900
    while True:
        status = custom.get_namespaced_custom_object("kubeflow.org", "v1beta1", namespace, "experiments",
                                                     name).get("status") or {}
        true = {c["type"] for c in status.get("conditions") or [] if c.get("status") == "True"}
        if "Succeeded" in true:
            break
        if "Failed" in true:
            raise RuntimeError(f"Experiment {name} failed: {status.get('conditions')}")
        if time.monotonic() > deadline:
            raise TimeoutError(f"Experiment {name} did not finish in 15 minutes")
        time.sleep(1)
    best = status["currentOptimalTrial"]
    print(f"best trial {best['bestTrialName']}: {best['parameterAssignments']} {best.get('observation')}")
    return best["bestTrialName"]


@dsl.component(packages_to_install=K8S)
def serve(prefix: str, claim: str, model_dir: str) -> str:
    """An InferenceService on the model in the PVC's MODEL_DIR, once Ready: its URL."""
    import time

    from kubernetes import client, config
    from kubernetes.client.rest import ApiException

    config.load_incluster_config()
    custom = client.CustomObjectsApi()
    namespace = open("/var/run/secrets/kubernetes.io/serviceaccount/namespace").read().strip()
    service = {"apiVersion": "serving.kserve.io/v1beta1", "kind": "InferenceService", "metadata": {"name": prefix},
               "spec": {"predictor": {"model": {"modelFormat": {"name": "sklearn"},
                                                "storageUri": f"pvc://{claim}/{model_dir}"}}}}
    try:
        custom.create_namespaced_custom_object("serving.kserve.io", "v1beta1", namespace, "inferenceservices",
                                               service)
    except ApiException as exc:
        if exc.status != 409:
            raise
    deadline = time.monotonic() + 300
    while True:
        status = custom.get_namespaced_custom_object("serving.kserve.io", "v1beta1", namespace, "inferenceservices",
                                                     prefix).get("status") or {}
        if any(c["type"] == "Ready" and c.get("status") == "True" for c in status.get("conditions") or []):
            return status["url"]
        if time.monotonic() > deadline:
            raise TimeoutError(f"InferenceService {prefix} was not Ready in 5 minutes: {status.get('conditions')}")
        time.sleep(1)


@dsl.component
def query(url: str, model: str) -> float:
    """Held-out digits sent to the served model (KServe's V1 protocol); its accuracy on them."""
    import json
    import urllib.request

    from sklearn.datasets import load_digits
    from sklearn.model_selection import train_test_split

    x, y = load_digits(return_X_y=True)
    _, x_test, _, y_test = train_test_split(x / 16.0, y, test_size=0.3, random_state=0)
    request = urllib.request.Request(f"{url}/v1/models/{model}:predict", method="POST",
                                     data=json.dumps({"instances": x_test[:50].tolist()}).encode(),
                                     headers={"Content-Type": "application/json"})
    with urllib.request.urlopen(request, timeout=60) as response:
        predictions = json.load(response)["predictions"]
    accuracy = sum(int(p) == int(t) for p, t in zip(predictions, y_test[:50], strict=True)) / len(predictions)
    print(f"served {model}: accuracy on 50 held-out digits = {accuracy:.2f}")
    return accuracy


@dsl.pipeline(name="train-tune-serve", description="digits: a PyTorchJob baseline and a Katib search, the "
              "best trial's model served by KServe, then queried")
def train_tune_serve(prefix: str = "digits-tts", claim: str = "digits-pipeline", trials: int = 4) -> float:
    code_map = "digits-pipeline-code"
    # The steps that make objects never come from the cache: a cache hit would skip making them.
    prepared = prepare(claim=claim, code_map=code_map, script=TRAIN_SCRIPT).set_caching_options(False)
    train(prefix=prefix, role="baseline", c=1.0, claim=claim, code_map=code_map).after(prepared) \
        .set_caching_options(False)
    tuned = tune(prefix=prefix, claim=claim, code_map=code_map, trials=trials).after(prepared) \
        .set_caching_options(False)
    served = serve(prefix=prefix, claim=claim, model_dir=tuned.output).set_caching_options(False)
    return query(url=served.output, model=prefix).set_caching_options(False).output


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--run", action="store_true", help="run it through kfp.Client and wait")
    parser.add_argument("--trials", type=int, default=4, help="Katib trials")
    parser.add_argument("--prefix", default="digits-tts", help="names of the jobs, experiment and service")
    args = parser.parse_args()
    package = Path(__file__).with_name("pipeline.yaml")
    compiler.Compiler().compile(train_tune_serve, str(package))
    print(f"compiled {package}")
    if not args.run:
        return
    import base64
    import os

    import kfp
    import yaml

    kubeconfig = os.environ.get("KUBECONFIG") or os.path.expanduser(
        os.path.join(os.environ.get("TRIMARAN_HOME", "~/.trimaran"), "kubeconfig"))
    config = yaml.safe_load(open(kubeconfig))
    cluster, user = config["clusters"][0]["cluster"], config["users"][0]["user"]
    ca = Path(kubeconfig).with_name("ca-for-kfp.crt")
    ca.write_bytes(base64.b64decode(cluster["certificate-authority-data"]))
    client = kfp.Client(host=cluster["server"], existing_token=user["token"], ssl_ca_cert=str(ca))
    run = client.create_run_from_pipeline_package(str(package), arguments={"trials": args.trials,
                                                                           "prefix": args.prefix})
    finished = client.wait_for_run_completion(run.run_id, timeout=1800, sleep_duration=2)
    print(f"run {run.run_id}: {finished.state}")
    for task in finished.run_details.task_details:
        print(f"  {task.display_name:<12} {task.state}")


if __name__ == "__main__":
    main()
