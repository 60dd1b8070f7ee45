"""The pauses of the recorded gpt-oss servers, step by step, against the rule that prices them
(``simulator.engine.cost.shape_key``): a step run without CUDA graphs whose compile key the server has
not run before waits while the engine core compiles its kernels.

For every recorded gpt-oss lane (one server, its runs in order, data/e2e/*gptoss*/LANE/), replays the
server's step token counts through the rule, from the start-up's profile run (a step of the whole
token budget) on, and prints per lane: the steps with a new key, how many of them paused (a gap of
more than 0.8 s between step log lines, at the step or the one before it: with async scheduling a
step's log line comes after the next step is launched), the pauses no new key explains, the first
new key's pause (the first step past the graphs compiles more than its bucket's kernels: not priced),
and the later ones' median, in seconds and over the host's CPU factor (hosts.yaml). Then fits the
per-key cost on the calibration lanes, ``JIT_SHAPE_S + JIT_SHAPE_PER_EXPERT_S x experts``
(experts rounded up to 32, the routing kernels' width), and reports the held-out lanes against it.

    python tools/validation/fit_jit.py [--write-index]

``--write-index`` gives every recorded gpt-oss run in simulator/data/validation/e2e.yaml the step
sizes its server ran in the lane's earlier runs (``engine.jit_cache``: one token count per compile
key, those above the graphs' largest size), so that its replay starts from the kernels that server
had compiled, not from a fresh one.
"""

from __future__ import annotations

import csv
import json
import re
import statistics
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
sys.path.insert(0, str(ROOT))

from simulator.engine.cost import JIT_SHAPE_PER_EXPERT_S, JIT_SHAPE_S, token_key  # noqa: E402
from simulator.validation.validate import recorded_scale  # noqa: E402

E2E = ROOT / "data" / "e2e"
PAUSE_S = 0.8
# The lanes the per-key cost is fitted on; every other gpt-oss lane is held out.
CALIBRATE = ("h200_gptoss_2026-11-29/gptoss120b", "h200_gptoss_2026-11-29/gptoss20b")
EXPERTS = {"gpt-oss-120b": 128, "gpt-oss-20b": 32}


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


def analyse(lane: Path) -> dict:
    steps, d = lane_steps(lane)
    cap = server_setting(lane, r"max_cudagraph_capture_size': (\d+)", 512)
    budget = server_setting(lane, r"max_num_batched_tokens=(\d+)", 8192)
    seen = {token_key(budget)}
    for i, s in enumerate(steps):
        s["gap"] = s["t"] - steps[i - 1]["t"] if i else 0.0
        s["new"] = s["n"] > cap and token_key(s["n"]) not in seen
        if s["new"]:
            seen.add(token_key(s["n"]))
    usual = statistics.median(s["gap"] for s in steps if not s["first"]) if steps else 0.0
    pauses: list[float] = []
    missed: list[float] = []
    explained: set[int] = set()
    for i, s in enumerate(steps):
        if not s["new"]:
            continue
        near = [j for j in (i - 1, i) if j > 0 and not steps[j]["first"]]
        if not near:
            continue
        j = max(near, key=lambda j: steps[j]["gap"])
        explained.add(j)
        (pauses if steps[j]["gap"] > PAUSE_S else missed).append(steps[j]["gap"] - usual)
    unexplained = [s for j, s in enumerate(steps) if s["gap"] > PAUSE_S and not s["first"] and j not in explained]
    model = str(d["lane"]["model"])
    scale = recorded_scale({"recording": lane.parent.name, "host": d.get("host_probe", {}).get("before", {})})
    later = pauses[1:]
    return {
        "lane": f"{lane.parent.name}/{lane.name}",
        "model": model,
        "keys": len(pauses) + len(missed),
        "paused": len(pauses),
        "unexplained": len(unexplained),
        "first_s": pauses[0] if pauses else float("nan"),
        "later": later,
        "scale": scale,
    }


def seen_before(lane: Path) -> dict[str, list[int]]:
    """Per run of a lane, the step token counts its server ran in the earlier runs (one per compile
    key, steps above the graphs' largest size: the others replay graphs), in the order first run."""
    steps, d = lane_steps(lane)
    cap = server_setting(lane, r"max_cudagraph_capture_size': (\d+)", 512)
    out: dict[str, list[int]] = {}
    seen: list[int] = []
    keys: set[int] = set()
    by_run: dict[str, list[dict]] = {}
    for s in steps:
        by_run.setdefault(s["run"], []).append(s)
    for r in d["runs"]:
        out[r["name"]] = list(seen)
        for s in by_run.get(r["name"], []):
            if s["n"] > cap and token_key(s["n"]) not in keys:
                keys.add(token_key(s["n"]))
                seen.append(s["n"])
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
    print(
        "| lane | model | new keys | paused | other pauses | first s | later median s | host factor | per reference host s |"
    )
    print("|---|---|---|---|---|---|---|---|---|")
    for r in rows:
        med = statistics.median(r["later"]) if r["later"] else float("nan")
        print(
            f"| {r['lane']} | {r['model']} | {r['keys']} | {r['paused']} | {r['unexplained']} | {r['first_s']:.2f} "
            f"| {med:.2f} | {r['scale']:.3f} | {med / r['scale']:.2f} |"
        )
    by_experts: dict[int, list[float]] = {}
    for r in rows:
        if r["lane"] in CALIBRATE:
            by_experts.setdefault(EXPERTS[r["model"]], []).extend(x / r["scale"] for x in r["later"])
    (e0, c0), (e1, c1) = sorted((e, statistics.median(xs)) for e, xs in by_experts.items())
    b = (c1 - c0) / (e1 - e0)
    print(f"\nfit on {', '.join(CALIBRATE)}: JIT_SHAPE_S = {c0 - b * e0:.3f}, JIT_SHAPE_PER_EXPERT_S = {b:.5f}")
    print(f"(in simulator/engine/cost.py now: {JIT_SHAPE_S}, {JIT_SHAPE_PER_EXPERT_S})")
    errs = []
    for r in rows:
        if r["lane"] in CALIBRATE or not r["later"]:
            continue
        priced = (JIT_SHAPE_S + JIT_SHAPE_PER_EXPERT_S * EXPERTS[r["model"]]) * r["scale"]
        total = sum(r["later"])
        errs.append(len(r["later"]) * priced / total - 1.0)
        print(
            f"held out {r['lane']}: {len(r['later'])} later pauses, {total:.1f} s; priced {len(r['later']) * priced:.1f} s"
        )
    print(f"held out: priced / measured - 1, median {statistics.median(errs):+.1%} over {len(errs)} lanes")


if __name__ == "__main__":
    main()
