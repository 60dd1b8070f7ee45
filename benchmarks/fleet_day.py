"""A fleet over a day: three policies for scenarios/fleet_day_autoscale.yaml, and how long a day takes.

The day: chat traffic at a diurnal Poisson rate of 20 requests/s on average (8 to 32), about 1.7
million requests, on Llama-3.1-8B replicas of one L40S each behind a least-requests router.

- static at peak: the autoscaler off, as many replicas as the autoscaled fleet needed at its peak;
- autoscaled, short cold start: HPA on vllm:num_requests_running (target 32 a replica), cold start
  from the engine's measured start plus the weights (61 s);
- autoscaled, long cold start: the same with 600 s (a node to provision, an image to pull).

Each is one whole ``servesim run`` process, timed as the user sees it (wall and CPU seconds of the
child, drawing its plots included). Results: benchmarks/results/fleet_day.json; with --plot, the
replicas of the three over the day in one figure.

Run: python benchmarks/fleet_day.py [--plot docs/img/fleet_day.png]
"""

from __future__ import annotations

import argparse
import json
import resource
import subprocess
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))
SCENARIO = ROOT / "scenarios" / "fleet_day_autoscale.yaml"
TARGET_S = 180.0  # the target for a day of ~1.7 million requests, whole process


def run(name: str, sets: list[str], out: Path) -> dict:
    before = resource.getrusage(resource.RUSAGE_CHILDREN)
    t0 = time.perf_counter()
    cmd = [sys.executable, "-m", "simulator", "run", str(SCENARIO), "--out", str(out / name)]
    for s in sets:
        cmd += ["--set", s]
    subprocess.run(cmd, check=True, cwd=ROOT, stdout=subprocess.DEVNULL)
    wall = time.perf_counter() - t0
    after = resource.getrusage(resource.RUSAGE_CHILDREN)
    cpu = (after.ru_utime - before.ru_utime) + (after.ru_stime - before.ru_stime)
    s = json.loads((out / name / "summary.json").read_text())
    a = s.get("autoscaler") or {}
    return {
        "policy": name,
        "set": sets,
        "requests": s["num_submitted"],
        "gpu_hours": round(s["gpu_hours"], 1),
        "cost_usd": round(s["cost_usd"], 2),
        "slo_attainment": s["slo_attainment"],
        "p99_ttft_ms": round(s["p99_ttft_ms"], 1),
        "replicas_serving_max": a.get("serving_max", s["num_replicas"]),
        "scale_ups": a.get("scale_ups", 0),
        "cold_start_s": a.get("cold_start_s"),
        "wall_s": round(wall, 1),
        "cpu_s": round(cpu, 1),
        "peak_rss_mib": round(after.ru_maxrss / 1024),
    }


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--plot", help="write the three fleets' replicas over the day here (PNG)")
    ap.add_argument("--results", default=str(ROOT / "benchmarks" / "results" / "fleet_day.json"))
    args = ap.parse_args()
    with tempfile.TemporaryDirectory() as tmp:
        out = Path(tmp)
        rows = [run("autoscaled, cold start 61 s", [], out)]
        peak = rows[0]["replicas_serving_max"]
        rows.append(run("autoscaled, cold start 600 s", ["cluster.autoscaler.cold_start_s=600"], out))
        rows.append(
            run(f"static at peak ({peak} replicas)", ["cluster.autoscaler=null", f"cluster.replicas={peak}"], out)
        )
        print(f"{'policy':32} {'GPU-h':>7} {'cost $':>8} {'in SLO':>8} {'p99 TTFT':>9} {'wall s':>7} {'CPU s':>6}")
        for r in rows:
            print(
                f"{r['policy']:32} {r['gpu_hours']:7.1f} {r['cost_usd']:8.2f} {r['slo_attainment']:8.3%} "
                f"{r['p99_ttft_ms']:9.0f} {r['wall_s']:7.1f} {r['cpu_s']:6.1f}"
            )
        worst = max(r["wall_s"] for r in rows)
        print(f"slowest day: {worst:.0f} s whole process (target {TARGET_S:.0f} s)")
        res = Path(args.results)
        res.parent.mkdir(parents=True, exist_ok=True)
        res.write_text(json.dumps({"target_s": TARGET_S, "runs": rows}, indent=1) + "\n")
        if args.plot:
            plot(out, rows, Path(args.plot))


def plot(out: Path, rows: list[dict], path: Path) -> None:
    """The figure `servesim plan --day` draws (simulator.outputs.plots.plot_policies), for the three runs."""
    from simulator.outputs.plots import plot_policies

    shown = [{**r, "replicas": str(r["replicas_serving_max"])} for r in rows]
    fleets = {r["policy"]: out / r["policy"] / "fleet.csv" for r in rows}
    plot_policies(shown, fleets, path, "a day of chat traffic on Llama-3.1-8B / L40S replicas")
    print(f"wrote {path}")


if __name__ == "__main__":
    main()
