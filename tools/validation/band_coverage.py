"""Do the recorded servers' figures lie inside the band a scenario without a host reports?

    python tools/validation/band_coverage.py [--jobs 2] [--split heldout] [--named]
    python tools/validation/band_coverage.py --fit [--write]

The band (``simulator.run.HostBand``) is the spread across the catalog's hosts (the scenario run on
the median, the slowest and the fastest catalog host) widened by servesim's own error given the host
(``simulator/data/band_margin.yaml``). ``--fit`` measures that error: the calibration runs (data/e2e/,
confounded ones left out), each replayed on its own machine's catalog host (where the catalog has
it; otherwise on its probe reading or the median host, as ``servesim validate`` replays it); the
margin of a metric is the 80th percentile of |ln(servesim / server)| over them, and ``--write``
stores it. Without ``--fit`` it replays the held-out runs (``--split``) as a user who names no host
would get them and counts, for output throughput, p50 TPOT and p50 TTFT, the runs whose measured
figure lies inside the band, and per recording (one cloud machine) how many; a figure outside is
named with the side it falls on. With ``--named``, the band a scenario that names its host reports
instead: each run of a machine that was probed replayed on its reading (as ``servesim validate``
does), its own figure widened by the margin alone. docs/hosts.md quotes all three.
"""

from __future__ import annotations

import argparse
import math
import sys
from pathlib import Path

import numpy as np

sys.path.insert(0, str(Path(__file__).resolve().parents[2]))

from simulator.run import MARGIN_FILE, MARGIN_QUANTILE, band_margin, widen
from simulator.scenario.hosts import band_hosts, catalog
from simulator.validation import validate

METRICS = ("output_throughput", "median_tpot_ms", "median_ttft_ms")


def main() -> int:
    ap = argparse.ArgumentParser()
    ap.add_argument("--jobs", type=int, default=2)
    ap.add_argument("--split", default="heldout", choices=("heldout", "calibrate", "all"))
    ap.add_argument("--fit", action="store_true", help="measure the margins on the calibration runs")
    ap.add_argument("--write", action="store_true", help="with --fit: write them to " + MARGIN_FILE.name)
    ap.add_argument("--named", action="store_true", help="the band of a scenario that names its host (its reading)")
    a = ap.parse_args()
    if a.fit:
        return fit(a.jobs, a.write)
    runs = [r for r in validate.load(validate.E2E_FILE)["runs"] if a.split in ("all", r["split"])]
    slow, fast = band_hosts()
    if a.named:  # each machine on its own reading: only the machines that were probed
        runs = [r for r in runs if validate.recorded_probe(r)]
        hosts: tuple[str, ...] = ("its reading",)
        replays = {hosts[0]: validate.run_all(runs, [], jobs=a.jobs, recorded=True)}
    else:
        hosts = (catalog().median().name, slow.name, fast.name)
        replays = {h: validate.run_all(runs, [f"hardware.host={h}"], jobs=a.jobs, recorded=True) for h in hosts}
    inside = {m: 0 for m in METRICS}
    counted = {m: 0 for m in METRICS}
    per: dict[str, list[int]] = {}
    outside: list[str] = []
    for i, run in enumerate(runs):
        results = [replays[h][i] for h in hosts]
        if any(r.error or r.confounded for r in results):
            continue
        rec = per.setdefault(run["recording"], [0, 0])
        rec[1] += 1
        all_in = True
        got = {m: [float(v) for r in results if (v := r.simulated.get(m)) is not None] for m in METRICS}
        band = widen({m: [min(v), max(v)] for m, v in got.items() if len(v) == len(results)})
        for m in METRICS:
            measured = run["measured"].get(m)
            if measured is None or m not in band:
                continue
            lo, hi = band[m]
            counted[m] += 1
            if lo <= measured <= hi:
                inside[m] += 1
            else:
                all_in = False
                side = "below" if measured < lo else "above"
                outside.append(f"  {run['id']}: {m} {measured:,.1f} {side} the band {lo:,.1f}-{hi:,.1f}")
        rec[0] += all_in
    widened = f"widened by |ln| {', '.join(f'{m} {v:.3f}' for m, v in band_margin().items())}"
    if a.named:
        print(f"band: each run on its machine's probe reading, {widened}")
    else:
        print(
            f"band: the median host {hosts[0]}, the slowest {slow.name} (x{slow.scale:.2f}), the fastest "
            f"{fast.name} (x{fast.scale:.2f}), {widened}"
        )
    print(f"{a.split} recorded runs inside the band:")
    for m in METRICS:
        print(f"  {m}: {inside[m]} of {counted[m]}")
    print("per recording (runs with every figure inside / runs):")
    for name, (n_in, n) in sorted(per.items()):
        print(f"  {name}: {n_in} of {n}")
    print(f"outside the band ({len(outside)}):")
    print("\n".join(outside))
    return 0


def fit_margins(jobs: int = 2, say=print) -> tuple[dict[str, float], int]:
    """Per metric, the ``MARGIN_QUANTILE`` quantile of |ln(servesim / server)| over the counted
    calibration runs, each on its own machine's catalog host (rounded as the file keeps it); and how
    many runs (``validate.host_calibration``: a run that fits a GPU's kernels is not the host's)."""
    runs = [r for r in validate.load(validate.E2E_FILE)["runs"] if validate.host_calibration(r)]
    hosts = catalog().hosts
    groups: dict[str | None, list[dict]] = {}
    for r in runs:
        # its machine's catalog host: named after its recording, as `servesim validate` finds it
        groups.setdefault(r["recording"] if r["recording"] in hosts else None, []).append(r)
    errors: dict[str, list[float]] = {m: [] for m in METRICS}  # the p99s are not in the recorded check
    for host, group in sorted(groups.items(), key=lambda kv: kv[0] or ""):
        extra = [f"hardware.host={host}"] if host else []
        say(f"{len(group)} calibration runs on {host or 'their probe reading, or the median host'}")
        for r in validate.run_all(group, extra, jobs=jobs, recorded=True):
            if r.error or r.confounded:
                continue
            for m in METRICS:
                got, measured = r.simulated.get(m), r.measured.get(m)
                if got and measured:
                    errors[m].append(abs(math.log(float(got) / float(measured))))
    margin = {m: round(float(np.quantile(e, MARGIN_QUANTILE)), 4) for m, e in errors.items() if e}
    return margin, min(len(e) for e in errors.values())


def fit(jobs: int, write: bool) -> int:
    margin, n = fit_margins(jobs)
    for m, v in margin.items():
        print(f"  {m}: {v:.4f} (x{math.exp(v):.3f}) over {n} runs")
    if write:
        lines = [
            f"# servesim's own error given the host: per metric, the {MARGIN_QUANTILE:.0%} quantile of |ln(servesim / server)|",
            "# over the recorded calibration runs, each replayed on its own machine's catalog host (or its",
            "# probe reading). A scenario without a host widens its band across hosts by it (simulator.run).",
            "# Written by tools/validation/band_coverage.py --fit --write.",
            f"quantile: {MARGIN_QUANTILE}",
            f"runs: {n}",
            "margin:",
            *(f"  {m}: {v}" for m, v in margin.items()),
        ]
        MARGIN_FILE.write_text("\n".join(lines) + "\n")
        print(f"wrote {MARGIN_FILE}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
