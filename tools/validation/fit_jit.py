"""The pauses of the recorded gpt-oss servers, step by step, against the rule that prices them
(``simulator.engine.cost.first_compile``): a step run without CUDA graphs waits while the engine core
compiles the kernels it is the first to run, those of its compile key (``shape_key``) and the expert
matmuls' variants (``matmul_variant``).

For every recorded gpt-oss lane (one server, its runs in order, data/e2e/*gptoss*/LANE/), replays the
server's step token counts through the rule, from what its start-up compiled (the profile step of the
whole token budget, the CUDA-graph captures) on, and prints per lane: the steps that compile, how many
of them paused (a gap of more than 0.8 s between step log lines, at the step or the one before it: with
async scheduling a step's log line comes after the next step is launched), the pauses the rule does
not explain, the new keys and variants, and the paused seconds over the host's CPU factor
(hosts.yaml) against the rule's price. Then fits the three costs on the calibration lanes, every
compiling step's pause over the host's factor = ``JIT_SHAPE_S + JIT_SHAPE_PER_EXPERT_S x experts``
for a new key (experts rounded up to 32, the routing kernels' width) + ``JIT_VARIANT_S`` per new
variant, and reports the held-out lanes against it.

    python tools/validation/fit_jit.py [--write-index]

``--write-index`` gives every recorded gpt-oss run in simulator/data/validation/e2e.yaml the step
sizes its server ran in the lane's earlier runs that compiled anything (``engine.jit_cache``), so that
its replay starts from the kernels that server had compiled, not from a fresh one.
"""

from __future__ import annotations

import csv
import json
import re
import statistics
import sys
from pathlib import Path

import numpy as np

ROOT = Path(__file__).resolve().parents[2]
sys.path.insert(0, str(ROOT))

from simulator.engine.cost import (  # noqa: E402
    JIT_SHAPE_PER_EXPERT_S,
    JIT_SHAPE_S,
    JIT_VARIANT_S,
    SHAPE_BUCKET,
    first_compile,
    new_shapes,
)
from simulator.engine.params import P  # noqa: E402
from simulator.engine.rules import SchedulerConfig  # noqa: E402
from simulator.run import build  # noqa: E402
from simulator.scenario.config import scenario_from_dict  # noqa: E402
from simulator.scenario.models import load_model  # noqa: E402
from simulator.validation.validate import recorded_scale  # noqa: E402

E2E = ROOT / "data" / "e2e"
PAUSE_S = 0.8
# The lanes the costs are fitted on; every other gpt-oss lane is held out.
CALIBRATE = ("h200_gptoss_2026-11-29/gptoss120b", "h200_gptoss_2026-11-29/gptoss20b")
KEY = 1000.0  # a new key's price in the replay, so that a step's seconds tell keys and variants apart


def lane_steps(lane: Path) -> tuple[list[dict], dict]:
    """The server's logged steps over all its runs, in order, and its lane record."""
    d = json.loads((lane / "lane.json").read_text())
    steps = []
    for r in d["runs"]:
        p = lane / r["name"] / "steps.csv"
        if not p.exists():
            continue
        with p.open() as f:
            for i, s in enumerate(csv.DictReader(f)):
                steps.append(
                    {
                        "run": r["name"],
                        "t": r["start_epoch"] + float(s["t"]),
                        "it": int(s["iteration"]),
                        "n": int(s["ctx_tokens"]) + int(s["gen_tokens"]),
                        "first": i == 0,
                    }
                )
    steps.sort(key=lambda s: s["it"])
    return steps, d


def server_setting(lane: Path, pattern: str, default: int) -> int:
    m = re.search(pattern, (lane / "server.log").read_text(errors="replace"))
    return int(m.group(1)) if m else default


def replay(lane: Path) -> tuple[list[dict], dict]:
    """The lane's steps, each with the compile keys and matmul variants it ran first (``keys``,
    ``variants``: ``first_compile`` on an engine of the server's settings, priced so as to count them)
    and its gap after the step before (``gap``)."""
    steps, d = lane_steps(lane)
    cap = server_setting(lane, r"max_cudagraph_capture_size': (\d+)", 512)
    budget = server_setting(lane, r"max_num_batched_tokens=(\d+)", 8192)
    seqs = server_setting(lane, r"max_num_seqs=(\d+)", 1024)
    engine = {"max_num_seqs": seqs, "max_num_batched_tokens": budget, "max_cudagraph_capture_size": cap}
    sc = scenario_from_dict(
        {
            "name": lane.name,
            "model": str(d["lane"]["model"]),
            "hardware": {"gpu": "h200"},
            "engine": engine,
            "run": {"num_requests": 1},
        }
    )
    cp = build(sc)[1].cost.params.copy()  # the engine servesim would run for that server
    cp[P.JIT_SHAPE_S], cp[P.JIT_VARIANT_S] = KEY, 1.0
    shapes = new_shapes(cp, SchedulerConfig(max_num_seqs=seqs, max_num_batched_tokens=budget))
    for i, s in enumerate(steps):
        s["gap"] = s["t"] - steps[i - 1]["t"] if i else 0.0
        paid = first_compile(cp, shapes, s["n"], s["n"])
        s["keys"], s["variants"] = int(paid // KEY), int(round(paid % KEY))
    return steps, d


def analyse(lane: Path) -> dict:
    steps, d = replay(lane)
    usual = statistics.median(s["gap"] for s in steps if not s["first"]) if steps else 0.0
    events: list[dict] = []  # a compiling step: its keys, variants and pause (None: none seen)
    explained: set[int] = set()
    for i, s in enumerate(steps):
        if not (s["keys"] or s["variants"]):
            continue
        near = [j for j in (i - 1, i) if j > 0 and not steps[j]["first"]]
        if not near:
            continue  # the first step of a run: its pause is in the idle time before it
        j = max(near, key=lambda j: steps[j]["gap"])
        explained.add(j)
        gap = steps[j]["gap"]
        events.append({"keys": s["keys"], "variants": s["variants"], "pause": gap - usual if gap > PAUSE_S else None})
    unexplained = [s for j, s in enumerate(steps) if s["gap"] > PAUSE_S and not s["first"] and j not in explained]
    model = str(d["lane"]["model"])
    scale = recorded_scale({"recording": lane.parent.name, "host": d.get("host_probe", {}).get("before", {})})
    return {
        "lane": f"{lane.parent.name}/{lane.name}",
        "model": model,
        "events": events,
        "unexplained": len(unexplained),
        "scale": scale,
    }


def width(model: str) -> int:
    """The routing kernels' width: the experts rounded up to 32 (``cost.jit_shape_s``)."""
    return -(-load_model(model).num_experts // SHAPE_BUCKET) * SHAPE_BUCKET


def priced(r: dict, e: dict, costs: tuple[float, float, float]) -> float:
    """The seconds the rule prices one compiling step of lane ``r`` at, on the lane's host."""
    fixed, per_expert, variant = costs
    return (e["keys"] * (fixed + per_expert * width(r["model"])) + e["variants"] * variant) * r["scale"]


def seen_before(lane: Path) -> dict[str, list[int]]:
    """Per run of a lane, the step token counts its server ran in the earlier runs that compiled
    anything (a new key or matmul variant), in the order first run: told to a new engine
    (``jit_seen_tokens``), they mark compiled what that server had compiled."""
    steps, d = replay(lane)
    out: dict[str, list[int]] = {}
    seen: list[int] = []
    by_run: dict[str, list[dict]] = {}
    for s in steps:
        by_run.setdefault(s["run"], []).append(s)
    for r in d["runs"]:
        out[r["name"]] = list(seen)
        seen.extend(s["n"] for s in by_run.get(r["name"], []) if s["keys"] or s["variants"])
    return out


def write_index() -> None:
    sys.path.insert(0, str(ROOT / "tools" / "e2e"))
    import yaml
    from ingest import write_index as write  # type: ignore[import-not-found]  # the index's one writer

    path = ROOT / "simulator" / "data" / "validation" / "e2e.yaml"
    index = yaml.safe_load(path.read_text())
    lanes: dict[tuple[str, str], dict[str, list[int]]] = {}
    n = 0
    for entry in index["runs"]:
        if "gpt-oss" not in entry["model"] or "lane" not in entry or entry.get("framework") == "sglang":
            continue
        lane = E2E / entry["recording"] / entry["lane"]
        if not (lane / "lane.json").is_file():
            continue
        key = (entry["recording"], entry["lane"])
        if key not in lanes:
            lanes[key] = seen_before(lane)
        before = lanes[key].get(entry["run"], [])
        engine = entry.setdefault("engine", {})
        engine.pop("jit_cache", None)
        if before:
            engine["jit_cache"] = before
            n += 1
    write(path, index)
    print(f"{n} recorded gpt-oss runs given the step sizes their server ran before them (engine.jit_cache)")


def main() -> None:
    if "--write-index" in sys.argv[1:]:
        write_index()
        return
    rows = [analyse(p.parent) for p in sorted(E2E.glob("*gptoss*/*/lane.json"))]
    now = (JIT_SHAPE_S, JIT_SHAPE_PER_EXPERT_S, JIT_VARIANT_S)
    print(
        "| lane | model | compiling steps | paused | other pauses | new keys | new variants "
        "| paused s | priced s | host factor |"
    )
    print("|---|---|---|---|---|---|---|---|---|---|")
    for r in rows:
        paused = [e for e in r["events"] if e["pause"] is not None]
        print(
            f"| {r['lane']} | {r['model']} | {len(r['events'])} | {len(paused)} | {r['unexplained']} "
            f"| {sum(e['keys'] for e in r['events'])} | {sum(e['variants'] for e in r['events'])} "
            f"| {sum(e['pause'] for e in paused):.1f} | {sum(priced(r, e, now) for e in paused):.1f} | {r['scale']:.3f} |"
        )
    x, y = [], []
    for r in rows:
        if r["lane"] in CALIBRATE:
            for e in r["events"]:
                if e["pause"] is not None:
                    x.append([e["keys"], e["keys"] * width(r["model"]), e["variants"]])
                    y.append(e["pause"] / r["scale"])
    fit = np.linalg.lstsq(np.array(x, float), np.array(y), rcond=None)[0]
    print(
        f"\nfit on {', '.join(CALIBRATE)} ({len(y)} paused steps): JIT_SHAPE_S = {fit[0]:.3f}, "
        f"JIT_SHAPE_PER_EXPERT_S = {fit[1]:.5f}, JIT_VARIANT_S = {fit[2]:.3f}"
    )
    print(f"(in simulator/engine/cost.py now: {JIT_SHAPE_S}, {JIT_SHAPE_PER_EXPERT_S}, {JIT_VARIANT_S})")
    errs, firsts = [], []
    for r in rows:
        paused = [e for e in r["events"] if e["pause"] is not None]
        if r["lane"] in CALIBRATE or not paused:
            continue
        total, cost = sum(e["pause"] for e in paused), sum(priced(r, e, now) for e in paused)
        errs.append(cost / total - 1.0)
        firsts.append(priced(r, paused[0], now) / paused[0]["pause"] - 1.0)
        print(f"held out {r['lane']}: {len(paused)} paused steps, {total:.1f} s; priced {cost:.1f} s")
    print(f"held out: priced / measured - 1, median {statistics.median(errs):+.1%} over {len(errs)} lanes")
    print(f"held out, each lane's first paused step: median {statistics.median(firsts):+.1%}")


if __name__ == "__main__":
    main()
