#!/usr/bin/env bash
# The main demo: real distributed training from unchanged Kubeflow YAML, on this machine.
#   1. a PyTorchJob (1 Master + 2 Workers, DDP over gloo) trains on scikit-learn's digits and
#      writes checkpoints to a persistentVolumeClaim; a batch Job then reads them back;
#   2. a TFJob with 2 Workers trains with MultiWorkerMirroredStrategy;
#   3. an Indexed batch Job sweeps a hyperparameter grid, 2 pods at a time;
#   4. a Katib Experiment tunes five hyperparameters with Bayesian optimisation;
#   5. a batch Job trains two models into a volume; a KServe InferenceService serves one, a canary
#      sends 20 % of the traffic to the other, and the canary is promoted.
set -euo pipefail
cd "$(dirname "$0")/.."
bash scripts/bootstrap.sh
export PATH="$PWD/.venv/bin:$PATH"
export TRIMARAN_HOME=${TRIMARAN_HOME:-$PWD/.trimaran-demo}
step() { printf '\n\033[1m== %s\033[0m\n' "$*"; }

step "PyTorchJob: DDP over gloo, 1 Master + 2 Workers"
trimaran delete -f examples/pytorch-ddp/pytorchjob.yaml >/dev/null 2>&1 || true
trimaran apply -f examples/pytorch-ddp/pvc.yaml -f examples/pytorch-ddp/code-configmap.yaml \
  -f examples/pytorch-ddp/pytorchjob.yaml
trimaran wait pytorchjob/digits-ddp --for=condition=Succeeded --timeout=5m
trimaran get pytorchjobs -o wide
trimaran logs digits-ddp --replica-type master | tail -n 4

step "batch Job: a second job reads the checkpoint from the same volume"
trimaran delete -f examples/pytorch-ddp/evaluate/ >/dev/null 2>&1 || true
trimaran apply -f examples/pytorch-ddp/evaluate/
trimaran wait job/digits-ddp-evaluate --for=condition=Complete --timeout=5m
trimaran logs job/digits-ddp-evaluate | tail -n 2

step "TFJob: MultiWorkerMirroredStrategy, 2 Workers"
trimaran delete -f examples/tf-multiworker/tfjob.yaml >/dev/null 2>&1 || true
trimaran apply -f examples/tf-multiworker/
trimaran wait tfjob/digits-mwms --for=condition=Succeeded --timeout=5m
trimaran get tfjobs

step "Indexed Job: a hyperparameter grid, 2 pods at a time"
trimaran delete -f examples/indexed-sweep/sweep-job.yaml >/dev/null 2>&1 || true
trimaran apply -f examples/indexed-sweep/pvc.yaml -f examples/indexed-sweep/code-configmap.yaml \
  -f examples/indexed-sweep/sweep-job.yaml
trimaran wait job/digits-sweep --for=condition=Complete --timeout=5m
trimaran get jobs
.venv/bin/python examples/indexed-sweep/analyze.py --results-dir "$TRIMARAN_HOME/volumes/default/digits-sweep-results"

step "Katib Experiment: the seed's Bayesian-optimisation sweep, 2 trials at a time"
trimaran delete experiment cnn-hyperparameter-tuning -n kubeflow >/dev/null 2>&1 || true
trimaran apply -n kubeflow -f examples/katib-digits/code-configmap.yaml -f examples/katib-digits/experiment.yaml
trimaran wait experiment/cnn-hyperparameter-tuning -n kubeflow --for=condition=Succeeded --timeout=10m
trimaran get experiments -n kubeflow
trimaran trials cnn-hyperparameter-tuning -n kubeflow

step "InferenceService: serve the model a Job wrote, canary 20 %, promote"
trimaran delete isvc digits >/dev/null 2>&1 || true
trimaran delete -f examples/serving/train-job.yaml >/dev/null 2>&1 || true
trimaran apply -f examples/serving/pvc.yaml -f examples/serving/code-configmap.yaml -f examples/serving/train-job.yaml
trimaran wait job/digits-train --for=condition=Complete --timeout=5m
trimaran apply -f examples/serving/digits.yaml
trimaran wait isvc/digits --for=condition=Ready --timeout=3m
trimaran get isvc
trimaran predict digits -f examples/serving/input.json
trimaran predict digits -f examples/serving/input-v2.json
url=$(trimaran get isvc digits -o json | python -c 'import json,sys; print(json.load(sys.stdin)["status"]["url"])')
curl -sS -X POST -H 'Content-Type: application/json' -d @examples/serving/input.json "$url/v1/models/digits:predict"; echo
trimaran apply -f examples/serving/digits-canary.yaml
# The canary takes its 20 % once its replica is ready.
revisions_ready() {
  trimaran get isvc digits -o json | python -c '
import json, sys
p = json.load(sys.stdin)["status"].get("components", {}).get("predictor", {})
sys.exit(0 if p.get("latestReadyRevision") and p.get("latestReadyRevision") == p.get("latestCreatedRevision") else 1)'
}
for _ in $(seq 120); do revisions_ready && break; sleep 1; done
trimaran describe isvc digits
trimaran apply -f examples/serving/digits-promote.yaml
trimaran wait isvc/digits --for=condition=Ready --timeout=3m
trimaran get isvc

# The demo's state is in its own TRIMARAN_HOME: the command that ends it names that home and this
# checkout's trimaran, so it works as printed in any shell.
stop_cmd="TRIMARAN_HOME=$(printf '%q' "$TRIMARAN_HOME") $(printf '%q' "$PWD/.venv/bin/trimaran") server stop --pods"
step "done: the control plane and the served model keep running"
trimaran server status
printf 'to stop both:  %s\n' "$stop_cmd"
