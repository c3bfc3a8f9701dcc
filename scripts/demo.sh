#!/usr/bin/env bash
# The main demo: real distributed training from unchanged Kubeflow YAML, on this machine.
#   1. a PyTorchJob (1 Master + 2 Workers, DDP over gloo) trains on scikit-learn's digits and
#      writes checkpoints to a persistentVolumeClaim; a batch Job then reads them back;
#   2. a TFJob with 2 Workers trains with MultiWorkerMirroredStrategy;
#   3. an Indexed batch Job sweeps a hyperparameter grid, 2 pods at a time;
#   4. a Katib Experiment tunes five hyperparameters with Bayesian optimisation.
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
trimaran delete -f examples/pytorch-ddp/evaluate-job.yaml >/dev/null 2>&1 || true
trimaran apply -f examples/pytorch-ddp/evaluate-job.yaml
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

step "done: the control plane keeps running (trimaran server stop to end it)"
trimaran server status
