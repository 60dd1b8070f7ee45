"""How long the first run's compile of the engine step takes: the extension module built from
scratch into a temporary folder (nothing cached), wall and CPU seconds, here and optionally in
another checkout, one after the other.

    python benchmarks/compile_time.py [--base /path/to/other/checkout] [--repeat 1]

Each build runs in a process of its own with that checkout first on the path, under this
interpreter (so the same numba, numpy and Python), as ``servesim run`` builds it on first use
(``simulator.engine.compiled.build.build_extension``). Read ``servesim probe-host`` beside the
figures: a slow machine takes longer. Results: benchmarks/RESULTS.md.
"""

from __future__ import annotations

import argparse
import json
import subprocess
import sys
import tempfile
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
CHILD = """
import json, sys, time
from pathlib import Path
sys.path.insert(0, sys.argv[1])
from simulator.engine.compiled import build
from simulator.engine.compiled.state import example_state
t, c = time.perf_counter(), time.process_time()
build.build_extension(Path(sys.argv[2]) / "servesim_step_bench.so", "servesim_step_bench", example_state())
print(json.dumps({"wall_s": time.perf_counter() - t, "cpu_s": time.process_time() - c}))
"""


def build_once(checkout: Path) -> dict:
    with tempfile.TemporaryDirectory() as tmp:
        out = subprocess.run(
            [sys.executable, "-c", CHILD, str(checkout), tmp], capture_output=True, text=True, check=True, cwd=tmp
        ).stdout
    return json.loads(out.strip().splitlines()[-1])


def main() -> int:
    ap = argparse.ArgumentParser()
    ap.add_argument("--base", type=Path, help="another checkout to time the same way")
    ap.add_argument("--repeat", type=int, default=1)
    a = ap.parse_args()
    sides = {"here": ROOT, **({"base": a.base.resolve()} if a.base else {})}
    for _ in range(a.repeat):
        for name, checkout in sides.items():
            r = build_once(checkout)
            print(f"{name}: {r['wall_s']:.0f} s wall, {r['cpu_s']:.0f} s CPU ({checkout})", flush=True)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
