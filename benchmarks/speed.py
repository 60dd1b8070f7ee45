"""Simulation speed and memory, inside the simulation and as the user waits for the whole command.

Two tables:

1. **Inside the simulation** (``simulate()`` only): each scenario runs in a fresh subprocess pinned
   to one core, twice; "wall s" is the second run (a process that has run the engine before, as
   every sweep point after a worker's first), "cold s" the first (which also loads the compiled
   step). Per scenario: simulated time and its ratio to wall time, steps and request-steps (requests
   scheduled, summed over steps) per second, peak resident memory. The collapse case runs with each
   scheduler feature the issue "One engine" names: default, swap preemption, priority scheduling,
   shared prefixes, multi-turn sessions.
2. **Whole process**: ``servesim run`` from start to exit with its default outputs (summary, both
   CSV files, both plots), the compiled step already built, as the user runs it: on the default
   scenario and on the 10,000-request Poisson benchmark. Runs alternate between the commands and
   the median of ``--repeat`` is reported, on all cores (the plots are drawn by a child process on
   the second core) and pinned to one core. ``--peer NAME=COMMAND`` times another simulator's
   command the same way, interleaved with ours (e.g. BLIS on the same workload).

Run: python benchmarks/speed.py [--quick] [--only NAME] [--repeat N] [--whole-only | --inside-only]
     [--peer NAME=COMMAND] [--profile]
"""

from __future__ import annotations

import argparse
import json
import os
import platform
import resource
import shlex
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
TRACE_1M = ROOT / "benchmarks" / ".cache" / "trace_1m.csv"
COLLAPSE = str(ROOT / "scenarios" / "collapse_c1200.yaml")
POISSON = str(ROOT / "benchmarks" / "scenarios" / "poisson_10k_llama2_7b.yaml")
CLUSTER = str(ROOT / "benchmarks" / "scenarios" / "cluster_8x1200.yaml")
SCENARIOS = {
    "collapse_c1200_600s": (COLLAPSE, []),
    "collapse_c1200_600s swap": (COLLAPSE, ["engine.preemption_mode=swap"]),
    "collapse_c1200_600s priority": (COLLAPSE, ["engine.scheduling_policy=priority"]),
    "collapse_c1200_600s shared prefixes": (COLLAPSE, ["workload.shared_prefix={num_groups: 4, tokens: 512}"]),
    "collapse_c1200_600s sessions": (COLLAPSE, ["workload.session={turns: {dist: uniform, min: 2, max: 6}}"]),
    "poisson_10k_llama2_7b": (POISSON, []),
    "trace_1m_requests": (str(ROOT / "benchmarks" / "scenarios" / "trace_1m.yaml"), []),
    "cluster_8x1200": (CLUSTER, []),
}
QUICK = {"trace_1m_requests": ["run.num_requests=100000"]}
WHOLE = {
    "servesim run, 10 requests (the fixed cost of a process)": [
        "--set",
        "run.num_requests=10",
        "--set",
        "run.duration_s=null",
        "--set",
        "run.warmup_s=0",
    ],
    "servesim run (default scenario: collapse c1200, 600 s)": [],
    "servesim run poisson_10k_llama2_7b.yaml": [POISSON],
    "servesim run cluster_8x1200.yaml (8 replicas x 1,200 in flight, 600 s)": [CLUSTER],
}


# What no `servesim run` that draws its PNGs can go below: the interpreter, numpy and the part of
# matplotlib the plots use (its Figure and Agg canvas), imported and nothing else.
FLOOR = {
    "floor: python, numpy and matplotlib's Figure and Agg canvas, imported only": [
        sys.executable,
        "-c",
        "import numpy; from matplotlib.figure import Figure; from matplotlib.backends.backend_agg import FigureCanvasAgg",
    ],
    "python and numpy, imported only": [sys.executable, "-c", "import numpy"],
}


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
import json, os, resource, sys, time
if hasattr(os, "sched_setaffinity"):
    os.sched_setaffinity(0, {min(os.sched_getaffinity(0))})  # one core
from simulator.scenario.config import load_scenario
from simulator.run import simulate
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
from simulator.scenario.config import load_scenario
from simulator.run import simulate
sc, _ = load_scenario(sys.argv[1], sys.argv[2:])
simulate(sc)  # the compiled step loaded
pr = cProfile.Profile()
pr.runcall(simulate, sc)
st = pstats.Stats(pr)
total = sum(v[2] for v in st.stats.values())
rows = sorted(st.stats.items(), key=lambda kv: -kv[1][3])
print("| function | calls | own % | with callees % |")
print("|---|---|---|---|")
shown = 0
for (file, line, fn), (cc, nc, tt, ct, _) in rows:
    if "/simulator/" in file or "/workloads/" in file or "simpy" in file or file == "~":
        where = fn if file == "~" else file.split("/")[-2] + "/" + file.split("/")[-1] + ":" + fn
        print(f"| {where} | {nc:,} | {100 * tt / total:.1f} | {100 * ct / total:.1f} |")
        shown += 1
    if shown == 25:
        break
"""


def _env() -> dict:
    return {**os.environ, "PYTHONHASHSEED": "0", "OMP_NUM_THREADS": "1", "OPENBLAS_NUM_THREADS": "1"}


def _child(script: str, name: str, path: str, overrides: list[str], *first: str) -> str:
    """Run ``script`` on one scenario in a fresh process; its standard output."""
    out = subprocess.run(
        [sys.executable, "-c", script, *first, path, *overrides], capture_output=True, text=True, cwd=ROOT, env=_env()
    )
    if out.returncode != 0:
        raise SystemExit(f"{name} failed:\n{out.stderr}")
    return out.stdout


def inside(name: str, path: str, overrides: list[str]) -> dict:
    twice = "0" if name == "trace_1m_requests" else "1"
    r = json.loads(_child(CHILD, name, path, overrides, twice).strip().splitlines()[-1])
    r["name"] = name
    r["speedup"] = r["simulated_s"] / r["wall_s"]
    r["steps_per_s"] = r["steps"] / r["wall_s"]
    r["request_steps_per_s"] = r["request_steps"] / r["wall_s"]
    return r


def whole(commands: dict[str, list[str]], repeat: int, one_core: bool) -> dict[str, list[tuple[float, float]]]:
    """Wall and CPU seconds (user + system, the command's own and its children's) of each command,
    start to exit, alternating between them ``repeat`` times."""
    times: dict[str, list[tuple[float, float]]] = {k: [] for k in commands}
    pin = ["taskset", "-c", "0"] if one_core else []
    with tempfile.TemporaryDirectory() as tmp:
        for i in range(repeat):
            for name, cmd in commands.items():
                argv = pin + cmd + (["--out", f"{tmp}/run{i}"] if cmd[:2] == [sys.executable, "-m"] else [])
                r0 = resource.getrusage(resource.RUSAGE_CHILDREN)
                t0 = time.perf_counter()
                out = subprocess.run(argv, capture_output=True, text=True, cwd=ROOT, env=_env())
                dt = time.perf_counter() - t0
                r1 = resource.getrusage(resource.RUSAGE_CHILDREN)
                if out.returncode != 0:
                    raise SystemExit(f"{name} failed:\n{out.stderr}")
                times[name].append((dt, r1.ru_utime - r0.ru_utime + r1.ru_stime - r0.ru_stime))
    return times


def machine() -> str:
    try:
        with open("/proc/cpuinfo") as f:
            cpu = next(line.split(":", 1)[1].strip() for line in f if line.startswith("model name"))
    except (OSError, StopIteration):
        cpu = platform.processor() or "unknown CPU"
    cores = len(os.sched_getaffinity(0)) if hasattr(os, "sched_getaffinity") else os.cpu_count()
    return f"{cpu}, {cores} cores; Python {platform.python_version()}; {platform.system()} {platform.release()}"


def _selected(args: argparse.Namespace, skip_trace: bool = False):
    """(name, scenario path, overrides) of each scenario to run, writing the 1M trace if it is one."""
    for name, (path, over) in SCENARIOS.items():
        if (args.only and name not in args.only) or (skip_trace and name == "trace_1m_requests"):
            continue
        if name == "trace_1m_requests":
            write_trace_1m(TRACE_1M)
        yield name, path, over + (QUICK.get(name, []) if args.quick else [])


def main() -> int:
    ap = argparse.ArgumentParser()
    ap.add_argument("--quick", action="store_true", help="the first 100k of the 1M-request trace")
    ap.add_argument("--only", action="append", default=[], help="an inside-the-simulation scenario (repeatable)")
    ap.add_argument(
        "--repeat",
        type=int,
        default=3,
        help="inside: runs per scenario, the fastest is reported; "
        "whole process: runs per command, the median is reported",
    )
    ap.add_argument("--whole-only", action="store_true")
    ap.add_argument("--inside-only", action="store_true")
    ap.add_argument(
        "--peer",
        action="append",
        default=[],
        metavar="NAME=COMMAND",
        help="time another command beside servesim's whole-process runs",
    )
    ap.add_argument("--profile", action="store_true", help="where the time goes (cProfile), instead of timings")
    args = ap.parse_args()
    # Build the compiled step once, outside every timing.
    subprocess.run(
        [sys.executable, "-c", "from simulator.engine import compiled; compiled.load()"], cwd=ROOT, check=True
    )
    if args.profile:
        # Without --only, profiling skips the 1M-request trace (minutes even unprofiled).
        for name, path, over in _selected(args, skip_trace=not args.only):
            print(f"\n### {name}\n\n{_child(PROFILE_CHILD, name, path, over)}", flush=True)
        return 0
    print(f"machine: {machine()}\n")
    if not args.whole_only:
        print("Inside the simulation, one core (fastest of", args.repeat, "fresh processes):\n")
        print(
            "| scenario | wall s | cold s | simulated s | x real time | steps/s | request-steps/s | requests | peak RSS MB |"
        )
        print("|---|---|---|---|---|---|---|---|---|")
        for name, path, over in _selected(args):
            reps = 1 if name == "trace_1m_requests" else max(args.repeat, 1)
            r = min((inside(name, path, over) for _ in range(reps)), key=lambda x: x["wall_s"])
            print(
                f"| {name}{' (quick)' if args.quick and name in QUICK else ''} | {r['wall_s']:.2f} | "
                f"{r['cold_s']:.2f} | {r['simulated_s']:.0f} | {r['speedup']:,.0f} | {r['steps_per_s']:,.0f} | "
                f"{r['request_steps_per_s']:,.0f} | {r['requests']:,} | {r['peak_rss_mb']:.0f} |",
                flush=True,
            )
    if not args.inside_only:
        commands = {name: [sys.executable, "-m", "simulator", "run", *extra] for name, extra in WHOLE.items()}
        commands.update(FLOOR)
        for peer in args.peer:
            name, _, cmd = peer.partition("=")
            commands[name] = shlex.split(cmd)
        print(f"\nWhole process, start to exit (median of {args.repeat} alternating runs; min-max):\n")
        print("| command | all cores: wall s | CPU s | one core: wall s | CPU s |")
        print("|---|---|---|---|---|")
        every = whole(commands, args.repeat, one_core=False)
        one = whole(commands, args.repeat, one_core=True)

        def cell(runs: list[float]) -> str:
            return f"{statistics.median(runs):.2f} ({min(runs):.2f}-{max(runs):.2f})"

        for name in commands:
            a, b = every[name], one[name]
            print(
                f"| {name} | {cell([w for w, _ in a])} | {cell([c for _, c in a])} | "
                f"{cell([w for w, _ in b])} | {cell([c for _, c in b])} |",
                flush=True,
            )
    return 0


if __name__ == "__main__":
    sys.exit(main())
