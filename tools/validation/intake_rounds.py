"""Measure the API server's intake rounds (``HostCosts.intake_rounds``, simulator/engine/host.py) from
the calibration half of the recorded servers, and write them into the recorded host-cost set.

    python tools/validation/intake_rounds.py [--dry-run]

A recorded vLLM 0.26 server stamps a request's arrival when it starts rendering the prompt and its
TTFT when its output handler takes the batch with the first token; the benchmark client's TTFT
spans more: its own loop, and the API server's work on the request before the stamp (reading the
body, validating) and after it (streaming the chunk). Per calibration run (closed loop of 256
clients or more, the counted ones):

    gap    = client's mean TTFT - server's mean TTFT (its /metrics histogram over the run)
             - the benchmark client's own share at that many open streams per client process
               (measured alone against a stand-in server: data/e2e/client_loop_2026-11-27,
               tools/e2e/client_loop.py)
    rounds = gap / (clients per API server x the API server's time per streamed token)

and the set's value is their median. A measurement, not a fit: nothing here simulates anything, and
the held-out runs are only printed beside, never used.
"""

from __future__ import annotations

import argparse
import csv
import itertools
import json
import lzma
import statistics
import sys
from dataclasses import asdict, replace
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[2]))

from simulator.scenario import hosts
from simulator.validation import validate
from tools.validation.fit_host import section, write_set

ROOT = Path(__file__).resolve().parents[2]
E2E = ROOT / "data" / "e2e"
CLIENT_LOOP = E2E / "client_loop_2026-11-27" / "client_loop.csv.xz"
MIN_CLIENTS = 256  # below this the gap is a few ms of fixed latency, not rounds


def client_share() -> list[tuple[float, float]]:
    """(open streams per client process, mean seconds the client's own loop adds to a TTFT) at each
    measured point with one client process, after the first wave."""
    with lzma.open(CLIENT_LOOP, "rt") as f:
        rows = list(csv.DictReader(f))
    points: dict[int, list[dict]] = {}
    for r in rows:
        if r["clients"] == "1":
            points.setdefault(int(r["concurrency"]), []).append(r)
    out = []
    for n, rs in sorted(points.items()):
        t0 = min(float(r["start"]) for r in rs)
        steady = [r for r in rs if float(r["start"]) - t0 > 2.0] or rs
        out.append((float(n), statistics.fmean(float(r["inbound"]) + float(r["outbound"]) for r in steady)))
    return out


def interp(x: float, pts: list[tuple[float, float]]) -> float:
    if x <= pts[0][0]:
        return pts[0][1]
    for (x0, y0), (x1, y1) in itertools.pairwise(pts):
        if x <= x1:
            return y0 + (y1 - y0) * (x - x0) / (x1 - x0)
    (x0, y0), (x1, y1) = pts[-2], pts[-1]
    return y1 + (y1 - y0) * (x - x1) / (x1 - x0)  # past the last point: along the last segment


def run_rounds(run: dict, token_s: float, share: list[tuple[float, float]]) -> float | None:
    n = (run.get("arrival") or {}).get("max_concurrency")
    if not n or n < MIN_CLIENTS:
        return None
    folder = E2E / run["recording"] / run["lane"] / run["run"]
    with open(folder / "metrics.csv") as f:
        rows = list(csv.DictReader(f))

    def num(r: dict, k: str) -> float:
        return float(r[k]) if r.get(k) else 0.0

    first, last = rows[0], rows[-1]
    count = num(last, "vllm:time_to_first_token_seconds_count") - num(first, "vllm:time_to_first_token_seconds_count")
    total = num(last, "vllm:time_to_first_token_seconds_sum") - num(first, "vllm:time_to_first_token_seconds_sum")
    benches = json.loads((folder / "bench.json").read_text())
    done = sum(b["completed"] for b in benches)
    client_ttft = sum(b["mean_ttft_ms"] * b["completed"] for b in benches) / done / 1e3
    per_client = n / len(benches)
    gap = client_ttft - total / count - interp(per_client, share)
    servers = int((run.get("frontend") or {}).get("api_server_count", 1))
    return gap / (n / servers * token_s)


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--dry-run", action="store_true", help="print, write nothing")
    args = ap.parse_args()
    host = hosts.load_host_costs("recorded")
    share = client_share()
    got: dict[str, list[float]] = {"calibrate": [], "heldout": []}
    for run in validate.load(validate.E2E_FILE)["runs"]:
        if run.get("confounded"):
            continue
        r = run_rounds(run, host.token_s, share)
        if r is None:
            continue
        got[run["split"]].append(r)
        print(f"{run['split']:9s} {run['id']:60s} rounds {r:5.2f}")
    cal = statistics.median(got["calibrate"])
    print(
        f"median rounds: calibration {cal:.2f} ({len(got['calibrate'])} runs); "
        f"held out {statistics.median(got['heldout']):.2f} ({len(got['heldout'])} runs, not used)"
    )
    if args.dry_run:
        return 0
    host = replace(host, intake_rounds=round(cal, 2))
    text = hosts.HOST_COSTS_FILE.read_text().splitlines()
    start = text.index("recorded:")
    head = []
    for t in text[start + 1 :]:
        if not t.startswith("  ") or t.startswith("  host_costs:"):
            break
        head.append(t[2:])
    write_set("recorded", [*head, *section("host_costs", asdict(host))])
    print(f"wrote intake_rounds: {host.intake_rounds} into the recorded set of {hosts.HOST_COSTS_FILE}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
