"""Whole-process time of `servesim run` here against another checkout (an earlier commit), alternating.

    python benchmarks/versus.py --base /path/to/other/checkout [--repeat 7]

Each round runs every command once, in turn, so a machine that slows down or speeds up during the
sitting slows both alike; the median of the rounds is reported with its range. Wall seconds from start
to exit, and CPU seconds (user + system of the command and every process it started). Both checkouts
run under this interpreter, each from its own folder (so `python -m simulator` is that checkout's
package), each with its compiled step already built (run each once first). Commands: the default
scenario and the 10,000-request Poisson benchmark, each also without the host band's two runs
(`run.host_band=false`, a field of this checkout).
"""

from __future__ import annotations

import argparse
import resource
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
POISSON = "benchmarks/scenarios/poisson_10k_llama2_7b.yaml"


def commands(base: Path) -> dict[str, tuple[Path, list[str]]]:
    """name -> (folder to run in, servesim run's arguments)."""
    return {
        "default scenario: here": (ROOT, []),
        "default scenario: here, run.host_band=false": (ROOT, ["--set", "run.host_band=false"]),
        "default scenario: base": (base, []),
        "poisson 10k: here": (ROOT, [POISSON]),
        "poisson 10k: here, run.host_band=false": (ROOT, [POISSON, "--set", "run.host_band=false"]),
        "poisson 10k: base": (base, [POISSON]),
    }


def time_once(folder: Path, args: list[str], out: str) -> tuple[float, float]:
    r0 = resource.getrusage(resource.RUSAGE_CHILDREN)
    t0 = time.perf_counter()
    p = subprocess.run(
        [sys.executable, "-m", "simulator", "run", *args, "--out", out], cwd=folder, capture_output=True, text=True
    )
    wall = time.perf_counter() - t0
    r1 = resource.getrusage(resource.RUSAGE_CHILDREN)
    if p.returncode != 0:
        raise SystemExit(f"{folder}: servesim run {' '.join(args)} failed:\n{p.stderr}")
    return wall, r1.ru_utime - r0.ru_utime + r1.ru_stime - r0.ru_stime


def main() -> int:
    ap = argparse.ArgumentParser()
    ap.add_argument("--base", type=Path, required=True, help="the other checkout")
    ap.add_argument("--repeat", type=int, default=7)
    a = ap.parse_args()
    cmds = commands(a.base.resolve())
    times: dict[str, list[tuple[float, float]]] = {k: [] for k in cmds}
    with tempfile.TemporaryDirectory() as tmp:
        for i in range(a.repeat):
            for name, (folder, args) in cmds.items():
                times[name].append(time_once(folder, args, f"{tmp}/{i}_{len(times[name])}_{folder.name}"))
            print(f"round {i + 1} of {a.repeat} done", file=sys.stderr, flush=True)

    def cell(xs: list[float]) -> str:
        return f"{statistics.median(xs):.2f} ({min(xs):.2f}-{max(xs):.2f})"

    print(f"median of {a.repeat} alternating rounds (min-max)\n")
    print("| command | wall s | CPU s |")
    print("|---|---|---|")
    for name, ts in times.items():
        print(f"| {name} | {cell([w for w, _ in ts])} | {cell([c for _, c in ts])} |")
    med = {k: (statistics.median(w for w, _ in v), statistics.median(c for _, c in v)) for k, v in times.items()}
    print()
    for what in ("default scenario", "poisson 10k"):
        here, base = med[f"{what}: here"], med[f"{what}: base"]
        print(f"{what}: here / base = {here[0] / base[0]:.2f}x wall, {here[1] / base[1]:.2f}x CPU")
    for what in ("default scenario", "poisson 10k"):
        here, base = med[f"{what}: here, run.host_band=false"], med[f"{what}: base"]
        print(f"{what} without the band: here / base = {here[0] / base[0]:.2f}x wall, {here[1] / base[1]:.2f}x CPU")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
