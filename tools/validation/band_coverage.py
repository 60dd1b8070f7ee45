"""Do the recorded servers' figures lie inside the band a scenario without a host reports?

    python tools/validation/band_coverage.py [--jobs 2] [--split heldout]

Each recorded run (data/e2e/, confounded ones left out) is replayed as a user who names no host
would get it: on the catalog's median host, and on the slowest and the fastest catalog host (the
band, as ``servesim run`` gives it: the lowest and highest of the three). For output throughput,
p50 TPOT and p50 TTFT it counts the runs whose measured figure lies inside the band, and, per
recording (one cloud machine), how many; a figure outside is named with the side it falls on.
docs/hosts.md quotes the result.
"""

from __future__ import annotations

import argparse
import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[2]))

from simulator.scenario.hosts import band_hosts, catalog
from simulator.validation import validate

METRICS = ("output_throughput", "median_tpot_ms", "median_ttft_ms")


def main() -> int:
    ap = argparse.ArgumentParser()
    ap.add_argument("--jobs", type=int, default=2)
    ap.add_argument("--split", default="heldout", choices=("heldout", "calibrate", "all"))
    a = ap.parse_args()
    runs = [r for r in validate.load(validate.E2E_FILE)["runs"] if a.split in ("all", r["split"])]
    slow, fast = band_hosts()
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
        for m in METRICS:
            measured = run["measured"].get(m)
            got = [r.simulated.get(m) for r in results]
            if measured is None or any(v is None for v in got):
                continue
            values = [float(v) for v in got if v is not None]
            lo, hi = min(values), max(values)
            counted[m] += 1
            if lo <= measured <= hi:
                inside[m] += 1
            else:
                all_in = False
                side = "below" if measured < lo else "above"
                outside.append(f"  {run['id']}: {m} {measured:,.1f} {side} the band {lo:,.1f}-{hi:,.1f}")
        rec[0] += all_in
    print(
        f"band: the median host {hosts[0]}, the slowest {slow.name} (x{slow.scale:.2f}), the fastest {fast.name} (x{fast.scale:.2f})"
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


if __name__ == "__main__":
    raise SystemExit(main())
