"""Simulation work in CPU instructions (valgrind's callgrind): a deterministic speed measure.

Wall time on a shared cloud machine swings by a third from one minute to the next, which hides
changes of 10-20%. Instruction counts repeat (to 0.1%, both sides checked out alike): this
script runs a scenario twice under callgrind, at two sizes, and reports the difference, so
start-up and imports cancel out and what is left is the simulation of the extra requests (or
seconds). The working tree (tracked files, uncommitted changes included) is measured from a
temporary checkout; with --rev a git revision is measured the same way, for a before/after
comparison.

It measures what ``servesim run`` runs: the compiled step (its extension module is built for each
checkout before anything is counted, outside callgrind, for a generic x86-64 CPU: valgrind cannot
run the AVX-512 code a build for this machine may contain) and everything around it in Python.

Run: python benchmarks/instructions.py [--rev REV] [--only NAME]   (needs valgrind on PATH)
"""

from __future__ import annotations

import argparse
import os
import shutil
import subprocess
import sys
import tempfile
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
# name -> (scenario, override key, small, large, fixed overrides)
CASES = {
    "collapse_c1200": ("scenarios/collapse_c1200.yaml", "run.duration_s", 30, 90, ["run.warmup_s=5"]),
    "poisson_llama2_7b": ("benchmarks/scenarios/poisson_10k_llama2_7b.yaml", "run.num_requests", 300, 900, []),
}
CHILD = (
    "import sys, simulator.validation.calibrate\n"  # imported before: not part of what is compared
    "from simulator.engine import compiled\n"
    "from simulator.scenario.config import load_scenario\n"
    "from simulator.run import simulate\n"
    "compiled.load()\n"
    "simulate(load_scenario(sys.argv[1], sys.argv[2:])[0])\n"
)


GENERIC = {"SERVESIM_TARGET_CPU": "generic"}


def build(code_dir: Path) -> None:
    """Build the checkout's compiled step (cached by its sources' hash), outside callgrind."""
    subprocess.run(
        [sys.executable, "-c", "from simulator.engine import compiled; compiled.load()"],
        cwd=code_dir,
        check=True,
        env={**os.environ, "PYTHONPATH": str(code_dir), **GENERIC},
    )
    # Byte-compile the checkout too: otherwise the first counted run pays for it and the second does not.
    subprocess.run([sys.executable, "-m", "compileall", "-q", "simulator", "workloads"], cwd=code_dir, check=True)


def instructions(code_dir: Path, scenario: str, overrides: list[str]) -> int:
    cmd = [
        "valgrind",
        "--tool=callgrind",
        "--callgrind-out-file=/dev/null",
        sys.executable,
        "-c",
        CHILD,
        scenario,
        *overrides,
    ]
    env = {
        "PYTHONPATH": str(code_dir),
        "OMP_NUM_THREADS": "1",
        "OPENBLAS_NUM_THREADS": "1",
        "MKL_NUM_THREADS": "1",
        "PYTHONHASHSEED": "0",
        "PATH": "/usr/bin:/bin",
        "HOME": os.environ.get("HOME", "/root"),
        **{k: v for k, v in os.environ.items() if k.startswith("SERVESIM_")},
        **GENERIC,
    }
    out = subprocess.run(cmd, capture_output=True, text=True, cwd=code_dir, env=env)
    for line in out.stderr.splitlines():
        if "Collected :" in line:
            return int(line.split()[-1])
    raise SystemExit(f"callgrind gave no count for {scenario}:\n{out.stderr[-2000:]}")


def measure(code_dir: Path, only: list[str]) -> dict[str, int]:
    build(code_dir)
    res = {}
    for name, (scenario, key, small, large, fixed) in CASES.items():
        if only and name not in only:
            continue
        a = instructions(code_dir, scenario, fixed + [f"{key}={small}"])
        b = instructions(code_dir, scenario, fixed + [f"{key}={large}"])
        res[name] = b - a
    return res


def main() -> int:
    ap = argparse.ArgumentParser()
    ap.add_argument("--rev", help="also measure this git revision (e.g. HEAD~3) for comparison")
    ap.add_argument("--only", action="append", default=[])
    args = ap.parse_args()
    if shutil.which("valgrind") is None:
        raise SystemExit("error: valgrind not found on PATH (install it, e.g. apt-get install valgrind)")
    # Both sides run from fresh checkouts at paths of the same length: counts depend a little on
    # where the code lives (paths, bytecode caches), so the comparison must not.
    tree = subprocess.run(
        ["git", "stash", "create"], cwd=ROOT, capture_output=True, text=True, check=True
    ).stdout.strip()
    revs = {"working tree": tree or "HEAD"}
    if args.rev:
        revs[args.rev] = args.rev
    rows = {}
    with tempfile.TemporaryDirectory() as tmp:
        for i, (label, rev) in enumerate(revs.items()):
            wt = Path(tmp) / f"code{i}"
            subprocess.run(["git", "worktree", "add", "--detach", "-q", str(wt), rev], cwd=ROOT, check=True)
            try:
                rows[label] = measure(wt, args.only)
            finally:
                subprocess.run(["git", "worktree", "remove", "--force", str(wt)], cwd=ROOT, check=False)
    names = list(next(iter(rows.values())))
    print(
        "| code | "
        + " | ".join(f"{n} ({CASES[n][1]} {CASES[n][2]}->{CASES[n][3]}), M instructions" for n in names)
        + " |"
    )
    print("|---|" + "---|" * len(names))
    for code, r in rows.items():
        print(f"| {code} | " + " | ".join(f"{r[n] / 1e6:,.0f}" for n in names) + " |")
    return 0


if __name__ == "__main__":
    sys.exit(main())
