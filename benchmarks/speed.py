"""Simulation speed and memory on representative scenarios.

Each scenario runs in a fresh subprocess (so peak resident memory is its own) on one core.
Prints, per scenario: wall time, simulated time and their ratio, engine steps per wall second,
request-steps (requests scheduled, summed over steps) per wall second, peak resident memory.

Run: python benchmarks/speed.py [--quick] [--only NAME] [--repeat N] [--profile] [--kernel python]

"wall s" is the simulation in a process that has run the compiled engine before (as every point of a
sweep but the first on a worker does); "cold s" is the same run as the first of a fresh process,
which also loads the compiled kernel from numba's on-disk cache (the numba import itself, about
0.4 s, happens at import, outside both). The 1M-request trace runs cold only.

With --repeat N each scenario runs N times (each in a fresh process) and the fastest run is
reported: on a shared machine the fastest is the one least disturbed by other work. --profile
runs each scenario once under cProfile instead and prints where the time goes, function by function
(profiling slows the run down about 1.5x; the shares are what matter).
"""

from __future__ import annotations

import argparse
import json
import platform
import subprocess
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
TRACE_1M = ROOT / "benchmarks" / ".cache" / "trace_1m.csv"
SCENARIOS = {
    "collapse_c1200_600s": (str(ROOT / "scenarios" / "collapse_c1200.yaml"), []),
    "poisson_10k_llama2_7b": (str(ROOT / "benchmarks" / "scenarios" / "poisson_10k_llama2_7b.yaml"), []),
    "trace_1m_requests": (str(ROOT / "benchmarks" / "scenarios" / "trace_1m.yaml"), []),
}
QUICK = {"trace_1m_requests": ["run.num_requests=100000"]}


def write_trace_1m(path: Path, n: int = 1_000_000, rate: float = 30.0, seed: int = 0) -> None:
    """The 1M-request trace: Poisson arrivals at ``rate``/s, prompts uniform 32-256 tokens, outputs
    uniform 8-64 (written once, then reused; the same seed always gives the same file)."""
    import numpy as np

    if path.is_file():
        return
    rng = np.random.default_rng(seed)
    t = np.cumsum(rng.exponential(1.0 / rate, n))
    prompt = rng.integers(32, 257, n)
    out = rng.integers(8, 65, n)
    path.parent.mkdir(parents=True, exist_ok=True)
    tmp = path.with_suffix(".tmp")
    with tmp.open("w") as fh:
        fh.write("arrival_time_s,prompt_tokens,output_tokens\n")
        fh.writelines(f"{a:.6f},{p},{o}\n" for a, p, o in zip(t.tolist(), prompt.tolist(), out.tolist()))
    tmp.replace(path)

CHILD = r"""
import json, resource, sys, time
import numpy as np
from simulator.config import load_scenario
from simulator.run import simulate
try:
    import simulator.fast_engine  # noqa: F401  (numba's import, as importing the package would)
except ImportError:
    pass
twice = sys.argv[1] == "1"
sc, _ = load_scenario(sys.argv[2], sys.argv[3:])
t0 = time.perf_counter()
res = simulate(sc)
cold = wall = time.perf_counter() - t0
if twice:
    del res
    t0 = time.perf_counter()
    res = simulate(sc)
    wall = time.perf_counter() - t0
log = res.engine.log.columns()
print(json.dumps({
    "engine": type(res.engine).__name__,
    "cold_s": cold,
    "wall_s": wall,
    "simulated_s": res.end_time,
    "steps": res.engine.num_steps,
    "request_steps": int(log["num_seqs"].sum()),
    "requests": int(res.reqs.n),
    "peak_rss_mb": resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024,
}))
"""


PROFILE_CHILD = r"""
import cProfile, pstats, sys
from simulator.config import load_scenario
from simulator.run import simulate
sc, _ = load_scenario(sys.argv[1], sys.argv[2:])
pr = cProfile.Profile()
pr.runcall(simulate, sc)
st = pstats.Stats(pr)
total = sum(v[2] for v in st.stats.values())
rows = sorted(st.stats.items(), key=lambda kv: -kv[1][3])
print("| function | calls | own % | with callees % |")
print("|---|---|---|---|")
shown = 0
for (file, line, fn), (cc, nc, tt, ct, _) in rows:
    if "/simulator/" in file or "/workloads/" in file or "simpy" in file:
        where = file.split("/")[-2] + "/" + file.split("/")[-1]
        print(f"| {where}:{fn} | {nc:,} | {100 * tt / total:.1f} | {100 * ct / total:.1f} |")
        shown += 1
    if shown == 25:
        break
"""


def _child(script: str, name: str, path: str, overrides: list[str], *first: str) -> str:
    """Run ``script`` on one scenario in a fresh process (one BLAS thread); its standard output."""
    out = subprocess.run([sys.executable, "-c", script, *first, path, *overrides], capture_output=True, text=True,
                         cwd=ROOT, env={"PYTHONHASHSEED": "0", **_env()})
    if out.returncode != 0:
        raise SystemExit(f"{name} failed:\n{out.stderr}")
    return out.stdout


def profile(name: str, path: str, overrides: list[str]) -> None:
    print(f"\n### {name}\n\n{_child(PROFILE_CHILD, name, path, overrides)}", flush=True)


def run(name: str, path: str, overrides: list[str]) -> dict:
    twice = "0" if name == "trace_1m_requests" else "1"
    r = json.loads(_child(CHILD, name, path, overrides, twice).strip().splitlines()[-1])
    r["name"] = name
    r["speedup"] = r["simulated_s"] / r["wall_s"]
    r["steps_per_s"] = r["steps"] / r["wall_s"]
    r["request_steps_per_s"] = r["request_steps"] / r["wall_s"]
    return r


def _env() -> dict:
    import os

    env = dict(os.environ)
    env["OMP_NUM_THREADS"] = "1"
    env["OPENBLAS_NUM_THREADS"] = "1"
    return env


def machine() -> str:
    try:
        with open("/proc/cpuinfo") as f:
            cpu = next(line.split(":", 1)[1].strip() for line in f if line.startswith("model name"))
    except (OSError, StopIteration):
        cpu = platform.processor() or "unknown CPU"
    return f"{cpu}; Python {platform.python_version()}; {platform.system()} {platform.release()}"


def _selected(args: argparse.Namespace, skip_trace: bool = False):
    """(name, scenario path, overrides) of each scenario to run, writing the 1M trace if it is one."""
    for name, (path, over) in SCENARIOS.items():
        if (args.only and name not in args.only) or (skip_trace and name == "trace_1m_requests"):
            continue
        if name == "trace_1m_requests":
            write_trace_1m(TRACE_1M)
        yield name, path, over + (QUICK.get(name, []) if args.quick else []) + [f"run.kernel={args.kernel}"]


def main() -> int:
    ap = argparse.ArgumentParser()
    ap.add_argument("--quick", action="store_true", help="the first 100k of the 1M-request trace")
    ap.add_argument("--only", action="append", default=[])
    ap.add_argument("--repeat", type=int, default=1, help="runs per scenario; the fastest is reported")
    ap.add_argument("--profile", action="store_true", help="where the time goes (cProfile), instead of timings")
    ap.add_argument("--kernel", choices=["auto", "compiled", "python"], default="auto", help="run.kernel for every scenario")
    args = ap.parse_args()
    if args.profile:
        # Without --only, profiling skips the 1M-request trace (some ten minutes even unprofiled).
        for name, path, over in _selected(args, skip_trace=not args.only):
            profile(name, path, over)
        return 0
    print(f"machine: {machine()}\n")
    print("| scenario | engine | wall s | cold s | simulated s | x real time | steps/s | request-steps/s | requests | peak RSS MB |")
    print("|---|---|---|---|---|---|---|---|---|---|")
    for name, path, over in _selected(args):
        r = min((run(name, path, over) for _ in range(max(args.repeat, 1))), key=lambda x: x["wall_s"])
        print(f"| {name}{' (quick)' if args.quick and name in QUICK else ''} | {r['engine']} | {r['wall_s']:.2f} | "
              f"{r['cold_s']:.2f} | {r['simulated_s']:.0f} | "
              f"{r['speedup']:.0f} | {r['steps_per_s']:,.0f} | {r['request_steps_per_s']:,.0f} | {r['requests']:,} | "
              f"{r['peak_rss_mb']:.0f} |", flush=True)
    return 0


if __name__ == "__main__":
    sys.exit(main())
