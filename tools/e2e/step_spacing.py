"""A recorded server's decode steps beside servesim's, binned by how full the KV cache was: where
servesim's step of a given batch is longer or shorter than the server's, and whether it grows with
the context the same way.

    servesim bench data/e2e/NAME/LANE/RUN/bench.json --set ... --out /tmp/replay
    python tools/e2e/step_spacing.py data/e2e/NAME/LANE/RUN /tmp/replay [--min-decodes 500] [--min-prefill 7500]

The server's side is its iteration log (the run's ``steps.csv``): each step's time stamp, the
requests it decoded and prefilled, the cache's usage, and the engine's own ``elapsed``. Its step is
the spacing of consecutive time stamps, the period of the engine in steady state, which is at least
its GPU's time. servesim's side is the replay's ``steps.csv``: each step's start and duration. Only
steps of ``--min-decodes`` decodes or more count on either side, and no prefill beside them; with
``--min-prefill N``, instead, only steps that prefill N tokens or more beside them (a full chunk: the
steps that price the GPU's GEMMs at their compute rate). Each bin of usage gives the steps' medians.
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


def _kept(decodes: float, prefill: float, min_decodes: int, min_prefill: int) -> bool:
    """Whether a step counts: ``min_decodes`` decodes or more, and no prefill (``min_prefill`` 0) or
    ``min_prefill`` prefill tokens or more."""
    return decodes >= min_decodes and (prefill >= min_prefill if min_prefill else prefill == 0)


def server_steps(run: Path, min_decodes: int, min_prefill: int = 0) -> list[tuple[float, float, float]]:
    """(usage, spacing ms, elapsed ms) of the server's steps that count (``_kept``)."""
    return _each_step(
        run / "steps.csv",
        lambda r: _kept(int(r["gen_requests"]), int(r["ctx_tokens"]), min_decodes, min_prefill),
        lambda r, nxt: (
            float(r["kv_usage_pct"]) / 100,
            (float(nxt["t"]) - float(r["t"])) * 1e3,
            float(r["elapsed_ms"]),
        ),
    )


def servesim_steps(replay: Path, min_decodes: int, min_prefill: int = 0) -> list[tuple[float, float, float]]:
    """(usage, duration ms, spacing ms) of servesim's steps that count (``_kept``)."""
    return _each_step(
        replay / "steps.csv",
        lambda r: _kept(float(r["decode_tokens"]), float(r["prefill_tokens"]), min_decodes, min_prefill),
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
    ap.add_argument(
        "--min-prefill", type=int, default=0, help="count only steps prefilling this many tokens or more (0: none)"
    )
    a = ap.parse_args()
    server = server_steps(a.run, a.min_decodes, a.min_prefill)
    sim = servesim_steps(a.replay, a.min_decodes, a.min_prefill)
    if not server:
        if a.min_prefill:
            print(f"{a.run}: no step of {a.min_prefill} prefill tokens or more beside {a.min_decodes} decodes or more")
        else:
            print(f"{a.run}: no decode-only step of {a.min_decodes} or more in its iteration log")
        return 1
    print("\n".join(table(server, sim)))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
