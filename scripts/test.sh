#!/usr/bin/env bash
# The test suite, as CI runs it: installs what it needs, then runs pytest.
# pytest's exit code 5 (no tests collected) counts as a failure.
set -uo pipefail
cd "$(dirname "$0")/.."
bash scripts/bootstrap.sh || exit 1
# kubectl for tests/server/test_kubectl.py: the one on PATH, else Debian's.
if ! command -v kubectl >/dev/null 2>&1; then
  if [ "$(id -u)" = 0 ]; then SUDO=""; else SUDO="sudo"; fi
  $SUDO apt-get update -qq && DEBIAN_FRONTEND=noninteractive $SUDO apt-get install -y -qq kubernetes-client >/dev/null \
    || exit 1
fi
.venv/bin/ruff check trimaran tests bench examples || exit 1
.venv/bin/python examples/make_configmap.py --check || exit 1
# KServe's own Python clients, for tests/serving/test_kserve_client.py (data plane) and
# tests/server/test_kserve_sdk.py (KServeClient). kserve pins protobuf 6 and brings FastAPI, pandas and
# the Kubernetes client, so it gets an environment of its own. KServeClient hands its classic generated
# models to CustomObjectsApi, which kubernetes 37 (pydantic) refuses ("Input should be a valid
# dictionary"): kubernetes<37. The marker holds what was installed, so a changed pin rebuilds it.
kserve_spec='kserve==0.21.0 kubernetes<37'
if [ "$(cat .venv-kserve/.installed 2>/dev/null)" != "$kserve_spec" ]; then
  rm -rf .venv-kserve
  "${PYTHON:-python3}" -m venv .venv-kserve || exit 1
  .venv-kserve/bin/python -m pip install -q $kserve_spec || exit 1
  printf '%s' "$kserve_spec" > .venv-kserve/.installed
fi
export TRIMARAN_KSERVE_PYTHON="$PWD/.venv-kserve/bin/python"
# Katib's own SDK, for tests/server/test_katib_dbmanager.py (report_metrics and get_trial_metrics over
# gRPC) and tests/server/test_katib_client.py (KatibClient). It pins protobuf 4 and grpcio, so it gets an
# environment of its own, ignored by git from inside. KatibClient builds and reads objects with the
# kubernetes client's classic generated models, which kubernetes >= 36 no longer has: kubernetes<36.
# The marker holds what was installed, so a changed pin rebuilds it.
katib_spec='kubeflow-katib==0.19.0 kubernetes<36'
if [ "$(cat .venv-katib/.installed 2>/dev/null)" != "$katib_spec" ]; then
  rm -rf .venv-katib
  "${PYTHON:-python3}" -m venv .venv-katib || exit 1
  printf '*\n' > .venv-katib/.gitignore
  .venv-katib/bin/python -m pip install -q $katib_spec || exit 1
  printf '%s' "$katib_spec" > .venv-katib/.installed
fi
export TRIMARAN_KATIB_PYTHON="$PWD/.venv-katib/bin/python"
# The Training Operator's v1 SDK, for tests/server/test_training_client.py. kubeflow-training 1.9 builds
# and reads objects with the kubernetes client's classic generated models, which kubernetes >= 36 no
# longer has (36 writes types as `dict[str, str]`, 37 is pydantic), while .venv has 37: an environment of its
# own. The marker holds what was installed, so a changed pin rebuilds it.
training_spec='kubeflow-training==1.9.3 kubernetes<36'
if [ "$(cat .venv-training/.installed 2>/dev/null)" != "$training_spec" ]; then
  rm -rf .venv-training
  "${PYTHON:-python3}" -m venv .venv-training || exit 1
  printf '*\n' > .venv-training/.gitignore
  .venv-training/bin/python -m pip install -q $training_spec || exit 1
  printf '%s' "$training_spec" > .venv-training/.installed
fi
export TRIMARAN_TRAINING_PYTHON="$PWD/.venv-training/bin/python"
export TRIMARAN_RESTART_BACKOFF=${TRIMARAN_RESTART_BACKOFF:-0.2}
.venv/bin/python -m pytest -q -p no:cacheprovider "$@"
rc=$?
if [ "$rc" -eq 5 ]; then echo "pytest collected no tests: failing"; exit 1; fi
exit "$rc"
