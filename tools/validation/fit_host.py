"""Fit the host costs (simulator/versions.py HostCosts) on the calibration half of the public runs.

    python tools/validation/fit_host.py [--jobs 2] [--rounds 4]

Simulates every ``split: calibrate`` run of simulator/data/validation/runs.yaml (runs marked
``confounded`` are left out) and searches the host costs (the API server's per-request and
per-token work for each endpoint, a fixed latency, the engine's CPU work per step and per
sequence, the work per request that ends) for the least sum of |log(simulated / measured)| over output throughput, mean TTFT and
mean TPOT: coordinate search in log space, each constant multiplied by 1/4 .. 4 in turn, from
the published values simulator/versions.py HostCosts cites (the first-pass shares, fractions,
up to 1). Not fitted: the tokenizer's rate
(``prompt_token_s``) and the per-step output cost (``step_s``).
The held-out runs are never simulated here. Writes simulator/data/host_costs.yaml.
"""

from __future__ import annotations

import argparse
import datetime as dt
import math
import sys
from dataclasses import asdict, replace
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[2]))

from simulator import validate, versions

FITTED = ("latency_s", "request_s", "token_s", "finish_s", "chat_request_s", "chat_token_s", "chat_finish_s",
          "engine_step_s", "engine_per_seq_s", "engine_per_seq_s_019", "first_pass", "chat_first_pass")
SHARES = ("first_pass", "chat_first_pass")  # fractions: searched up to 1
STEPS = (0.25, 0.5, 0.71, 1.41, 2.0, 4.0)


def loss(results) -> float:
    total = 0.0
    for r in results:
        if r.error:
            return math.inf
        for m in validate.METRICS:
            e = r.rel_error(m)
            if not math.isnan(e):
                total += abs(math.log1p(e))
    return total


def stamp(best: float) -> list[str]:
    """The date and loss lines every file these fits write starts its results with."""
    return [f"date: '{dt.date.today().isoformat()}'",
            f"loss: {best:.4f}  # sum over runs and metrics of |log(simulated / measured)|"]


def section(name: str, values: dict) -> list[str]:
    """A YAML mapping of fitted values, one per line, written as Python reprs (floats exact)."""
    return [f"{name}:", *(f"  {k}: {v!r}" for k, v in values.items())]


def main() -> int:
    ap = argparse.ArgumentParser()
    ap.add_argument("--jobs", type=int, default=2)
    ap.add_argument("--rounds", type=int, default=4)
    args = ap.parse_args()
    runs = [r for r in validate.load(validate.RUNS_FILE)["runs"] if r["split"] == "calibrate" and not r.get("confounded")]
    host = versions.load_host_costs()
    best = loss(validate.run_all(runs, jobs=args.jobs, host=host))
    print(f"{len(runs)} calibration runs; start: loss {best:.3f}", flush=True)
    for rnd in range(args.rounds):
        improved = False
        for name in FITTED:
            for f in STEPS:
                value = getattr(host, name) * f
                if value <= 0 or (name in SHARES and value > 1.0):
                    continue
                cand = replace(host, **{name: value})
                got = loss(validate.run_all(runs, jobs=args.jobs, host=cand))
                if got < best - 1e-9:
                    best, host, improved = got, cand, True
                    print(f"round {rnd}: {name} -> {value:.3g} (loss {best:.3f})", flush=True)
        if not improved:
            break
    out = versions.HOST_COSTS_FILE
    lines = [
        "# Written by tools/validation/fit_host.py: host costs fitted on the calibration runs of",
        "# simulator/data/validation/runs.yaml (not the held-out ones). Seconds.",
        f"fitted_on: {len(runs)} runs ({', '.join(sorted({r['source'].split(' (')[0] for r in runs}))})",
        *stamp(best),
        *section("host_costs", asdict(host)),
    ]
    out.write_text("\n".join(lines) + "\n")
    print(f"wrote {out}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
