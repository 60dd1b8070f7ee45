"""A recorded server's decode steps beside servesim's, binned by how full the KV cache was: where
servesim's step of a given batch is longer or shorter than the server's, and whether it grows with
the context the same way.

    servesim bench data/e2e/NAME/LANE/RUN/bench.json --set ... --out /tmp/replay
    python tools/e2e/step_spacing.py data/e2e/NAME/LANE/RUN /tmp/replay [--min-decodes 500]

The server's side is its iteration log (the run's ``steps.csv``): each step's time stamp, the
requests it decoded and prefilled, the cache's usage, and the engine's own ``elapsed``. Its step is
the spacing of consecutive time stamps, the period of the engine in steady state, which is at least
its GPU's time. servesim's side is the replay's ``steps.csv``: each step's start and duration. Only
steps of ``--min-decodes`` decodes or more and no prefill count on either side; each bin of usage
gives the steps' medians.
"""

from __future__ import annotations

import argparse
import csv
import itertools
import statistics
from pathlib import Path

BINS = (0.0, 0.2, 0.4, 0.6, 0.8, 0.95, 1.01)  # KV-cache usage, shares of the pool


def _bin(usage: float) -> int | None:
    for i in range(len(BINS) - 1):
        if BINS[i] < usage <= BINS[i + 1]:
            return i
    return None


def _each_step(path: Path, counted, row) -> list[tuple[float, float, float]]:
    """``row(step, next step)`` of each step of the CSV at ``path`` that ``counted(step)`` keeps."""
    with path.open(newline="") as fh:
        rows = list(csv.DictReader(fh))
    return [row(r, nxt) for r, nxt in itertools.pairwise(rows) if counted(r)]


def server_steps(run: Path, min_decodes: int) -> list[tuple[float, float, float]]:
    """(usage, spacing ms, elapsed ms) of the server's decode-only steps of ``min_decodes`` or more."""
    return _each_step(
        run / "steps.csv",
        lambda r: int(r["gen_requests"]) >= min_decodes and int(r["ctx_requests"]) == 0,
        lambda r, nxt: (
            float(r["kv_usage_pct"]) / 100,
            (float(nxt["t"]) - float(r["t"])) * 1e3,
            float(r["elapsed_ms"]),
        ),
    )


def servesim_steps(replay: Path, min_decodes: int) -> list[tuple[float, float, float]]:
    """(usage, duration ms, spacing ms) of servesim's decode-only steps of ``min_decodes`` or more."""
    return _each_step(
        replay / "steps.csv",
        lambda r: float(r["decode_tokens"]) >= min_decodes and float(r["prefill_tokens"]) == 0,
        lambda r, nxt: (
            float(r["kv_usage"]),
            float(r["duration"]) * 1e3,
            (float(nxt["start"]) - float(r["start"])) * 1e3,
        ),
    )


def table(server: list[tuple[float, float, float]], sim: list[tuple[float, float, float]]) -> list[str]:
    """The markdown rows: per bin of usage, the steps counted and their medians on both sides."""
    lines = [
        "| KV cache used | server steps | server spacing ms | server elapsed ms | servesim steps | servesim step ms"
        " | servesim spacing ms | step / spacing |",
        "|---|---|---|---|---|---|---|---|",
    ]
    for i in range(len(BINS) - 1):
        a = [s for s in server if _bin(s[0]) == i]
        b = [s for s in sim if _bin(s[0]) == i]
        if not a and not b:
            continue

        def med(xs: list[tuple[float, float, float]], k: int) -> float:
            return statistics.median(x[k] for x in xs) if xs else float("nan")

        ratio = med(b, 1) / med(a, 1) - 1 if a and b else float("nan")
        lines.append(
            f"| {BINS[i]:.0%}-{min(BINS[i + 1], 1.0):.0%} | {len(a)} | {med(a, 1):.1f} | {med(a, 2):.1f} | {len(b)}"
            f" | {med(b, 1):.1f} | {med(b, 2):.1f} | {ratio:+.1%} |"
        )
    return lines


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("run", type=Path, help="a recorded run's folder (its steps.csv: the iteration log)")
    ap.add_argument("replay", type=Path, help="servesim's output folder of the same run (its steps.csv)")
    ap.add_argument("--min-decodes", type=int, default=500, help="decodes a step must have to count")
    a = ap.parse_args()
    server, sim = server_steps(a.run, a.min_decodes), servesim_steps(a.replay, a.min_decodes)
    if not server:
        print(f"{a.run}: no decode-only step of {a.min_decodes} or more in its iteration log")
        return 1
    print("\n".join(table(server, sim)))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
