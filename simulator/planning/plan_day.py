"""``servesim plan SCENARIO --day``: a scenario's autoscaling policy over its whole run against a
static fleet, the way a capacity planner weighs them: GPU-hours, cost, and the share of requests
within the SLO.

The scenario must set ``cluster.autoscaler`` (the policy). The static fleet serves the same
arrivals with the autoscaler off and ``--static N`` replicas, by default as many as the autoscaled
fleet had serving at its peak (so it runs after the autoscaled one; with ``--static`` both run at
once). Each is a results folder under ``OUT/policies/`` (cached by the scenario's key, as sweep
points are: an interrupted plan resumes), and the plan writes ``plan_day.csv``,
``recommendation.json`` (the cheaper of the two within half a point of the better SLO attainment,
``sweep.SLO_SLACK``) and ``day.png`` (replicas over the day, arrivals behind them).
"""

from __future__ import annotations

import json
import sys
from pathlib import Path

from simulator.errors import ConfigError
from simulator.outputs.figures import share
from simulator.outputs.outdir import Outputs, Writing, check_folder
from simulator.outputs.writers import atomic_write_text, write_csv
from simulator.planning.executor import check_executor, run_tasks
from simulator.progress import compile_step
from simulator.scenario.config import load_scenario_data, scenario_from_dict

DAY_FILES = ("plan_day.csv", "recommendation.json", "day.png")
COLUMNS = (
    "policy",
    "replicas",
    "gpu_hours",
    "cost_usd",
    "slo_attainment",
    "p99_ttft_ms",
    "p99_tpot_ms",
    "output_throughput",
    "num_completed",
)


def static_of(data: dict, replicas: int) -> dict:
    """The scenario ``data`` as a static fleet of ``replicas``: the same everything, no autoscaler."""
    cluster = {k: v for k, v in data["cluster"].items() if k != "autoscaler"}
    return {**data, "cluster": {**cluster, "replicas": replicas}}


def _row(policy: str, s: dict) -> dict:
    a = s.get("autoscaler")
    replicas = f"{a['serving_min']}-{a['serving_max']}" if a else str(s.get("num_replicas"))
    return {"policy": policy, "replicas": replicas, **{c: s.get(c) for c in COLUMNS[2:]}}


def run_day_plan(
    path: str | None,
    overrides: list[str],
    out: Path,
    static: int | None = None,
    jobs: int = 0,
    executor: str = "local",
    address: str | None = None,
) -> int:
    from simulator.planning.sweep import _cheapest_within_slo, run_point

    check_executor(executor)
    data = load_scenario_data(path, overrides)
    sc = scenario_from_dict(data)
    if sc.cluster is None or sc.cluster.autoscaler is None:
        raise ConfigError("plan --day: the scenario needs cluster.autoscaler, the policy to weigh (got none)")
    check_folder(out, "--out")
    outputs = Outputs(out, [*DAY_FILES, "policies"], "--out", "plan")
    with Writing(out, "--out"):
        compile_step()
        points: list[tuple[str, dict | None]] = [("autoscaled", data)]
        if static is not None:
            points.append((f"static ({static} replicas)", static_of(data, static)))
        summaries = _run(points, out, jobs, executor, address, run_point)
        if static is None and "error" not in summaries[0]:
            peak = int(summaries[0]["autoscaler"]["serving_max"])
            name = f"static at the peak ({peak} replicas)"
            summaries += _run([(name, static_of(data, peak))], out, jobs, executor, address, run_point)
            points.append((name, None))
        failed = [f"{p}: {s['error']}" for (p, _), s in zip(points, summaries) if "error" in s]
        for f in failed:
            print(f"FAILED {f}", file=sys.stderr)
        rows = [_row(p, s) for (p, _), s in zip(points, summaries) if "error" not in s]
        if not rows:
            return 2
        import pandas as pd

        df = pd.DataFrame(rows)
        write_csv({c: df[c].to_numpy() for c in COLUMNS}, out / "plan_day.csv")
        rec: dict = {"text": "no SLO in the scenario: compare the costs"}
        if sc.slo is not None and df["cost_usd"].notna().all():
            df["param:policy"] = df["policy"]
            rec = _cheapest_within_slo(df)
            rec["text"] = rec.pop("text_cost")
        atomic_write_text(out / "recommendation.json", json.dumps(rec, indent=2) + "\n")
        from simulator.outputs.plots import plot_policies

        fleets = {p: out / "policies" / _slug(p) / "fleet.csv" for p in df["policy"]}
        plot_policies(rows, fleets, out / "day.png", f"{sc.name} ({sc.model} on {sc.hardware.gpu})")
        print(_table(rows))
        print(f"\nrecommended: {rec['text']}")
        print(f"\nwrote {out}/ (plan_day.csv, recommendation.json, day.png; each policy's run in policies/)")
        outputs.done([out / f for f in DAY_FILES] + [out / "policies"])
    return 1 if failed else 0


def _slug(policy: str) -> str:
    return "autoscaled" if policy == "autoscaled" else "static"


def _run(points, out: Path, jobs, executor, address, run_point) -> list[dict]:
    """Each (policy, scenario data) run (or its cached result), a progress bar of simulated hours each."""
    items = [(data, str(out / "policies" / _slug(p)), (p, i)) for i, (p, data) in enumerate(points)]
    found: dict[int, dict] = {}
    for i, r in run_tasks(run_point, items, jobs, executor, address):
        found[i] = r
        print(f"[{points[i][0]}] {'FAILED: ' + r['error'] if 'error' in r else 'done'}", file=sys.stderr, flush=True)
    return [found[i] for i in range(len(items))]


def _table(rows: list[dict]) -> str:
    head = f"{'policy':34} {'replicas':>8} {'GPU-h':>8} {'cost $':>9} {'in SLO':>8} {'p99 TTFT ms':>12}"
    lines = [head]
    for r in rows:
        slo = share(r["slo_attainment"], 2)
        cost = "-" if r["cost_usd"] is None else f"{r['cost_usd']:,.2f}"
        lines.append(
            f"{r['policy']:34} {r['replicas']:>8} {r['gpu_hours']:8.1f} {cost:>9} {slo:>8} {r['p99_ttft_ms']:12,.0f}"
        )
    return "\n".join(lines)
