#!/usr/bin/env bash
# The test suite, as CI runs it: installs what it needs, then runs pytest.
# pytest's exit code 5 (no tests collected) counts as a failure.
set -uo pipefail
cd "$(dirname "$0")/.."
bash scripts/bootstrap.sh || exit 1
.venv/bin/ruff check trimaran tests bench examples || exit 1
.venv/bin/python examples/make_configmap.py --check || exit 1
export TRIMARAN_RESTART_BACKOFF=${TRIMARAN_RESTART_BACKOFF:-0.2}
.venv/bin/python -m pytest -q -p no:cacheprovider "$@"
rc=$?
if [ "$rc" -eq 5 ]; then echo "pytest collected no tests: failing"; exit 1; fi
exit "$rc"
