"""Step-domain mode: replay a recorded vLLM scenario through servesim's scheduler, compare step by step.

Fixtures (``tests/parity/fixtures/NAME.json`` + ``NAME.csv``) are recorded from the real engine by
``tools/parity/record.py``. Here time is the step number: no cost model, no SimPy. The trace this
module emits has exactly the fixture's columns, so a comparison is a row-by-row diff.

Every recorded fixture matches exactly (``tests/test_parity.py``). Engine features servesim does
not model, should a future fixture need them: KV connectors / P/D transfer, speculative decoding,
async scheduling, sliding-window / Mamba groups and prefix replay, partial-block (sub-block hash)
prefix hits, multimodal encoder budgets, LoRA limits, and the watermark / adaptive long-prefill /
prefill-interval knobs at non-default values. A fixture that fails because of one of these should
be marked ``xfail(strict=True)`` in ``tests/test_parity.py`` with the feature named, and listed here.
"""

from __future__ import annotations

import csv
import json
from dataclasses import dataclass
from pathlib import Path

from simulator.errors import ConfigError
from simulator.reference.block_pool import BlockPool
from simulator.reference.kv_cache import KVCacheManager
from simulator.reference.scheduler import Scheduler
from simulator.requests import RequestTable
from simulator.rules import SchedulerConfig

COLUMNS = [
    "step", "num_scheduled_tokens", "scheduled", "new", "resumed", "preempted", "finished",
    "prefix_hits", "num_running", "num_waiting", "num_free_blocks", "kv_usage", "num_generated",
]


def _ids(xs) -> str:
    return " ".join(str(int(x)) for x in xs)


def _pairs(pairs) -> str:
    return " ".join(f"{int(a)}:{int(b)}" for a, b in pairs)


def load_fixture(path: Path) -> tuple[dict, list[dict]]:
    path = Path(path)
    spec_path = path.with_suffix(".json")
    if not spec_path.is_file():
        raise ConfigError(f"parity: scenario file not found beside the trace: {spec_path}")
    spec = json.loads(spec_path.read_text())
    with open(path.with_suffix(".csv"), newline="") as f:
        rows = list(csv.DictReader(f))
    return spec, rows


def replay(spec: dict, max_steps: int = 100_000) -> list[dict]:
    """Run the scenario through the scheduler; one trace row per step that scheduled something."""
    e = spec["engine"]
    cfg = SchedulerConfig(
        max_num_seqs=int(e["max_num_seqs"]),
        max_num_batched_tokens=int(e["max_num_batched_tokens"]),
        block_size=int(e["block_size"]),
        enable_prefix_caching=bool(e["enable_prefix_caching"]),
        long_prefill_token_threshold=int(e.get("long_prefill_token_threshold", 0) or 0),
        admission="full_prompt" if e.get("full_prompt_admission") else "first_chunk",
    )
    reqs = RequestTable()
    kv = KVCacheManager(BlockPool(int(e["num_gpu_blocks"])), cfg.block_size, cfg.enable_prefix_caching)
    sched = Scheduler(cfg, reqs, kv)
    todo = list(spec["requests"])
    groups: dict = {}

    def add_next() -> None:
        r = todo.pop(0)
        g = r.get("prefix_group")
        gid = groups.setdefault(g, len(groups)) if g is not None else -1
        rid = reqs.add(0.0, int(r["prompt_len"]), int(r["output_len"]), group=gid, group_len=int(r.get("prefix_len") or 0))
        assert rid == int(r["id"]), "fixture ids must count from 0 in list order"
        sched.add_request(rid)

    w = spec["workload"]
    first = len(todo) if w["mode"] == "batch" else int(w["concurrency"])
    for _ in range(min(first, len(todo))):
        add_next()
    rows = []
    step = 0
    while sched.has_work() and step < max_steps:
        plan = sched.schedule(float(step))
        out = sched.update(plan, float(step + 1))
        if len(plan.rids):
            rows.append(
                {
                    "step": str(len(rows)),
                    "num_scheduled_tokens": str(sum(plan.num_new)),
                    "scheduled": _pairs(zip(plan.rids, plan.num_new)),
                    "new": _ids(plan.new),
                    "resumed": _ids(plan.resumed),
                    "preempted": _ids(plan.preempted),
                    "finished": _ids(out.finished),
                    "prefix_hits": _pairs(plan.prefix_hits),
                    "num_running": str(plan.num_running),
                    "num_waiting": str(plan.num_waiting),
                    "num_free_blocks": str(plan.num_free_blocks),
                    "kv_usage": repr(plan.kv_usage),
                    "num_generated": str(out.num_generated),
                }
            )
        if w["mode"] == "closed_loop":
            for _ in range(min(len(out.finished), len(todo))):
                add_next()
        step += 1
    return rows


@dataclass(frozen=True)
class ParityReport:
    name: str
    steps_expected: int
    steps_got: int
    matching_steps: int  # leading steps identical in every column
    first_divergence: int | None
    detail: str
    totals: dict

    @property
    def exact(self) -> bool:
        return self.first_divergence is None


def _totals(rows: list[dict]) -> dict:
    return {
        "steps": len(rows),
        "scheduled_tokens": sum(int(r["num_scheduled_tokens"]) for r in rows),
        "preemptions": sum(len(r["preempted"].split()) for r in rows),
        "generated_tokens": sum(int(r["num_generated"]) for r in rows),
    }


def _same(col: str, a: str, b: str) -> bool:
    if col == "kv_usage":
        return abs(float(a) - float(b)) < 1e-12
    return a == b


def compare(name: str, expected: list[dict], got: list[dict]) -> ParityReport:
    first = None
    detail = ""
    for i in range(max(len(expected), len(got))):
        if i >= len(expected) or i >= len(got):
            first = i
            detail = f"step {i}: trace lengths differ (vLLM {len(expected)} steps, servesim {len(got)})"
            break
        diffs = [c for c in COLUMNS[1:] if not _same(c, expected[i][c], got[i][c])]
        if diffs:
            first = i
            lines = [f"step {i}: first divergent step ({', '.join(diffs)})", f"  {'column':<22}{'vLLM':<40}servesim"]
            for c in COLUMNS[1:]:
                mark = "*" if c in diffs else " "
                lines.append(f"{mark} {c:<21}{expected[i][c]!s:<40}{got[i][c]}")
            detail = "\n".join(lines)
            break
    matching = first if first is not None else len(expected)
    return ParityReport(
        name, len(expected), len(got), matching, first, detail,
        {"vllm": _totals(expected), "servesim": _totals(got)},
    )


def check(trace: Path) -> ParityReport:
    spec, expected = load_fixture(trace)
    return compare(spec.get("name", Path(trace).stem), expected, replay(spec))


def _trace_paths(paths: list[str]) -> list[Path]:
    out: list[Path] = []
    for p in map(Path, paths):
        if p.is_dir():
            out.extend(sorted(p.glob("*.csv")))
        else:
            out.append(p.with_suffix(".csv"))
    return out


def main_parity(paths: list[str]) -> int:
    """Check each fixture (``.csv``/``.json`` path, or a folder of them); print one line per fixture,
    the first divergent step of each mismatch, and the overall match rate. Returns 0 if all match."""
    traces = _trace_paths(paths)
    if not traces:
        print("parity: no fixtures given")
        return 2
    reports = []
    for t in traces:
        r = check(t)
        reports.append(r)
        state = "exact" if r.exact else f"diverges at step {r.first_divergence}"
        print(f"{r.name:<44} {state:<24} {r.matching_steps}/{r.steps_expected} steps match")
    for r in reports:
        if not r.exact:
            print(f"\n{r.name}:\n{r.detail}")
    n_exact = sum(r.exact for r in reports)
    steps = sum(r.matching_steps for r in reports)
    total = sum(r.steps_expected for r in reports)
    print(
        f"\nparity: {n_exact}/{len(reports)} fixtures exact ({100.0 * n_exact / len(reports):.1f}%), "
        f"{steps}/{total} leading steps match ({100.0 * steps / max(total, 1):.1f}%)"
    )
    return 0 if n_exact == len(reports) else 1


def write_trace(rows: list[dict], path: Path) -> None:
    with open(path, "w", newline="") as f:
        wr = csv.DictWriter(f, fieldnames=COLUMNS, lineterminator="\n")
        wr.writeheader()
        wr.writerows(rows)
