"""CPU time of the readable reference step (`run.kernel: reference`) here against another checkout,
alternating: the step the differential tests run beside the compiled one, most of the test suite's
time.

    python benchmarks/reference_step.py --base /path/to/other/checkout [--repeat 4]

Each round simulates, in a fresh process of each checkout (under this interpreter, from its own
folder), the differential tests' largest cases on the reference step: the collapse case (1,200
clients, the cache full, preemptions every step) and SGLang's, 25 simulated seconds each. A process
reports the CPU seconds of `simulate()` alone (not the imports); the least of the rounds is
reported, with the range.
"""

from __future__ import annotations

import argparse
import json
import subprocess
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
CASES = {
    "collapse_c1200": "scenarios/collapse_c1200.yaml",
    "sglang_collapse": "scenarios/sglang_collapse.yaml",
}
ONE = """
import json, sys, time
from simulator.run import simulate
from simulator.scenario.config import load_scenario
sc = load_scenario(sys.argv[1], ["run.duration_s=25", "run.warmup_s=5", "run.kernel=reference"])[0]
t = time.process_time()
simulate(sc)
print(json.dumps(time.process_time() - t))
"""


def cpu_seconds(folder: Path, scenario: str) -> float:
    p = subprocess.run([sys.executable, "-c", ONE, scenario], cwd=folder, capture_output=True, text=True)
    if p.returncode != 0:
        raise SystemExit(f"{folder}: {scenario} failed:\n{p.stderr}")
    return float(json.loads(p.stdout.strip().splitlines()[-1]))


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--base", type=Path, required=True, help="the other checkout")
    ap.add_argument("--repeat", type=int, default=4)
    a = ap.parse_args()
    folders = {"here": ROOT, "base": a.base.resolve()}
    times: dict[tuple[str, str], list[float]] = {(c, f): [] for c in CASES for f in folders}
    for _ in range(a.repeat):
        for case, scenario in CASES.items():
            for name, folder in folders.items():
                times[case, name].append(cpu_seconds(folder, scenario))
    for case in CASES:
        here, base = times[case, "here"], times[case, "base"]
        print(
            f"{case}: here {min(here):.2f} s CPU ({min(here):.2f}-{max(here):.2f}), "
            f"base {min(base):.2f} s ({min(base):.2f}-{max(base):.2f}): x{min(base) / min(here):.2f}"
        )
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
