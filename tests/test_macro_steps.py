"""Macro-steps (runs of uneventful decode steps priced and applied at once) change nothing.

Each scenario runs twice in a fresh process, with the engine's private ``macro_steps`` switch on
and off, and requests.csv and steps.csv (as written by ``servesim run``) must be byte-identical,
as must the ITL statistics.
"""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]

CHILD = r"""
import hashlib, json, sys
import simulator.engine as E
from simulator.config import load_scenario
from simulator.metrics import request_frame, step_frame
from simulator.run import simulate

init = E.Engine.__init__
def patched(self, *a, **k):
    init(self, *a, **k)
    self.macro_steps = sys.argv[1] == "1"
    E.USED = self.macro_steps
E.Engine.__init__ = patched
sc, _ = load_scenario(sys.argv[2], sys.argv[3:] + ["run.kernel=python"])  # the macro-steps are the Python engine's
res = simulate(sc)
log = res.engine.log
csv = lambda df: df.to_csv(index=False, float_format="%.9g", lineterminator="\n").encode()
print(json.dumps({
    "requests": hashlib.sha256(csv(request_frame(res))).hexdigest(),
    "steps": hashlib.sha256(csv(step_frame(res))).hexdigest(),
    "itl": [log.itl_quantile(0.5), log.itl_quantile(0.99), log.itl_count, log.itl_hist.tolist()],
    "num_steps": res.engine.num_steps,
}))
"""

CASES = {
    "closed_loop_preemption": ("scenarios/collapse_c1200.yaml", ["run.duration_s=80", "run.warmup_s=0"]),
    "poisson": ("benchmarks/scenarios/poisson_10k_llama2_7b.yaml", ["run.num_requests=600"]),
    "poisson_short": ("benchmarks/scenarios/poisson_short.yaml", []),
    "prefix_sessions": ("scenarios/workload_chat_sessions.yaml", ["run.duration_s=60"]),
    "priority_prefix": ("scenarios/workload_mixed_classes.yaml", ["run.duration_s=60", "engine.num_gpu_blocks_override=3000",
                                                                  "workload.arrival.rate=20"]),
    "swap": ("scenarios/collapse_c512.yaml", ["run.duration_s=30", "run.warmup_s=0", "engine.preemption_mode=swap",
                                              "engine.swap_space_gb=0.05", "engine.num_gpu_blocks_override=6000"]),
    "swap_abort_threshold": ("scenarios/collapse_c512.yaml", [
        "run.duration_s=30", "run.warmup_s=0", "engine.preemption_mode=swap", "engine.swap_space_gb=0.05",
        "engine.num_gpu_blocks_override=6000", "engine.on_swap_full=abort", "engine.long_prefill_token_threshold=64"]),
}


def _run(macro: bool, path: str, over: list[str]) -> dict:
    out = subprocess.run([sys.executable, "-c", CHILD, "1" if macro else "0", str(ROOT / path), *over],
                         capture_output=True, text=True, cwd=ROOT, check=True)
    return json.loads(out.stdout.strip().splitlines()[-1])


@pytest.mark.parametrize("case", list(CASES))
def test_macro_steps_are_byte_identical(case):
    path, over = CASES[case]
    on, off = _run(True, path, over), _run(False, path, over)
    assert on == off
    assert on["num_steps"] > 100
