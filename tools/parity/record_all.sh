#!/usr/bin/env bash
# Re-record every scheduler-parity fixture in simulator/data/parity/.
# Usage: tools/parity/record_all.sh [--only NAME ...] [--skip-existing]
# Set up the environment first with tools/parity/setup.sh (VLLM_VERSION=... to
# move to another vLLM release).
set -euo pipefail
HERE="$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)"
PY="${HERE}/.venv/bin/python"
if [ ! -x "${PY}" ]; then
  echo "no virtual environment; run ${HERE}/setup.sh first" >&2
  exit 1
fi
export VLLM_ENABLE_V1_MULTIPROCESSING=0
export OMP_NUM_THREADS=1
mkdir -p "${HERE}/work"
exec "${PY}" "${HERE}/record.py" "$@"
