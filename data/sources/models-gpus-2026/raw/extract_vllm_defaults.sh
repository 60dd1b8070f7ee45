#!/usr/bin/env bash
# How vllm_releases.md section 2 was produced (run 2026-11-28).
# 1. Release dates: curl -s https://pypi.org/pypi/vllm/json  -> releases[v][*].upload_time_iso_8601 (min per version)
# 2. For each version with an sdist (0.10.0 ... 0.33.0 except 0.15.x), download vllm-<v>.tar.gz from PyPI and extract only:
#    */vllm/config/* */vllm/config.py */vllm/engine/arg_utils.py */vllm/envs.py */vllm/v1/core/sched/scheduler.py
# 3. Inspect with grep, e.g.:
#    grep -n "device_memory >= \| \* GiB_bytes" vllm-$v/vllm/engine/arg_utils.py          # batch-default tiers
#    grep -n "async_scheduling: " vllm-$v/vllm/config/scheduler.py                         # async default
#    grep -n "FULL_AND_PIECEWISE\|cudagraph_mode is None" vllm-$v/vllm/config/*.py          # cudagraph default
#    grep -n "VLLM_USE_V2_MODEL_RUNNER" vllm-$v/vllm/envs.py; awk '/def use_v2_model_runner/' vllm-$v/vllm/config/vllm.py
#    python AST diff of SchedulerConfig annotated fields between consecutive versions
set -e
mkdir -p /tmp/vsrc && cd /tmp/vsrc
curl -s -o vllm_pypi.json https://pypi.org/pypi/vllm/json
python3 - <<'PY'
import json
d=json.load(open('vllm_pypi.json'))
from packaging.version import Version
for v in sorted(d['releases'], key=Version):
    if Version(v) >= Version('0.10.0') and d['releases'][v]:
        print(v, min(x['upload_time_iso_8601'] for x in d['releases'][v]),
              [f['filename'] for f in d['releases'][v] if f['packagetype']=='sdist'])
PY
