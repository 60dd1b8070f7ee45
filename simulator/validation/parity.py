"""Step-domain mode: replay a recorded vLLM scenario through servesim's engine steps, compare step by step.

Fixtures (``simulator/data/parity/NAME.json`` + ``NAME.csv``, shipped with the package) are recorded from the real engine by
``tools/parity/record.py``. Here every step costs one time unit (``ConstantCost``) and a
closed-loop client's next request reaches the next step, as vLLM's recorder submits it between
steps. The rows this module builds from the run's request events (``simulator.engine.events``) have
exactly the fixture's columns, so a comparison is a row-by-row diff. Each fixture is replayed
through both the readable reference and the compiled production step, and run as `servesim run`
runs a scenario (``fixture_scenario``: the requests as a trace, closed-loop clients, the engine's
settings, no front-end): the product path reproduces the real engine too.

The fixtures cover FCFS and priority scheduling and multi-LoRA's adapter limit (a request's adapter
has no trace column, so those fixtures skip the ``run`` path), speculative decoding with a draft
model, and async scheduling (``async_*``: vLLM's ``AsyncScheduler`` stepped as the engine core's
batch queue steps it, tools/parity/record.py; batch workloads only). Every fixture matches exactly
through every path (``tests/test_parity.py``); one that does not, for a rule servesim does not follow
yet, is listed in ``KNOWN_DIVERGENT`` with that rule (none is at present), and `servesim parity`
reports it apart and the tests expect it to diverge. Engine features servesim does not model, should a future fixture need
them: KV connectors / P/D transfer (vLLM's CPU offloading connector does not run on the CPU build the
fixtures are recorded with), sliding-window / Mamba groups and prefix replay,
partial-block (sub-block hash) prefix hits, multimodal encoder budgets, and the watermark / adaptive
long-prefill / prefill-interval knobs at non-default values. vLLM V1 has no swap preemption, so no
fixture records it.
"""

from __future__ import annotations

import csv
import json
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING

from simulator.engine.cost import ConstantCost
from simulator.engine.events import step_records
from simulator.engine.requests import RequestTable
from simulator.engine.submission import Submission
from simulator.errors import ConfigError

if TYPE_CHECKING:
    from simulator.engine.core import Engine

COLUMNS = [
    "step",
    "num_scheduled_tokens",
    "scheduled",
    "new",
    "resumed",
    "preempted",
    "finished",
    "prefix_hits",
    "num_running",
    "num_waiting",
    "num_free_blocks",
    "kv_usage",
    "num_generated",
]
ENGINES = ("reference", "compiled", "run")  # step mode through each engine step, and `servesim run`

# Fixtures servesim does not match, each for a reason known to the step (name -> the reason): `servesim
# parity` reports them apart, and tests/test_parity.py expects each to diverge (a strict xfail), so the
# change that makes one match shows. The reason names the rule; the engine keeps its own.
KNOWN_DIVERGENT: dict[str, str] = {}  # none at present: every recorded fixture matches on every path
FIXTURES = Path(__file__).resolve().parents[1] / "data" / "parity"


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


def replay(spec: dict, engine: str = "reference", max_steps: int = 100_000) -> list[dict]:
    """Run the scenario through an engine step, one time unit a step, requests submitted between
    steps as vLLM's recorder does; one trace row per step that scheduled something."""
    import simpy

    from simulator.resolve import scheduler_config
    from simulator.scenario.config import blank_scenario

    e = spec["engine"]
    sc = blank_scenario(engine_overrides(spec, engine))
    # engine_overrides sets both
    assert sc.engine.max_num_seqs is not None and sc.engine.max_num_batched_tokens is not None
    cfg = scheduler_config(sc, sc.engine.max_num_seqs, sc.engine.max_num_batched_tokens, 1.0)
    Eng: type[Engine]
    if engine == "reference":
        from simulator.engine.reference.engine import ReferenceEngine as Eng
    else:
        from simulator.engine.compiled.engine import CompiledEngine as Eng
    env = simpy.Environment()
    eng = Eng(
        env,
        cfg,
        int(e["num_gpu_blocks"]),
        ConstantCost(1.0),
        RequestTable(),
        max_model_len=10**9,
        max_steps=max_steps,
        trace=2,
    )
    todo = list(spec["requests"])
    groups: dict = {}

    def submit_next(_=None) -> None:
        if not todo:
            return
        r = todo.pop(0)
        g = r.get("prefix_group")
        gid = groups.setdefault(g, len(groups)) if g is not None else -1
        ev = eng.submit(
            Submission(
                int(r["prompt_len"]),
                int(r["output_len"]),
                group=gid,
                group_len=int(r.get("prefix_len") or 0),
                priority=int(r.get("priority", 0)),
                lora=int(r["lora"]) - 1 if r.get("lora") else -1,  # vLLM's lora_int_id counts from 1
            ),
            want_event=True,
        )
        assert eng.reqs.n - 1 == int(r["id"]), "fixture ids must count from 0 in list order"
        if w["mode"] == "closed_loop":
            assert ev is not None  # (want_event)
            ev.callbacks.append(submit_next)

    w = spec["workload"]
    for _ in range(len(todo) if w["mode"] == "batch" else int(w["concurrency"])):
        submit_next()
    env.run()
    eng.finish_run()
    return trace_rows(eng)


def trace_rows(eng) -> list[dict]:
    """The fixture's rows from a finished run's request events (the run recorded them at level 2)."""
    rows: list[dict] = []
    for s in step_records(eng.trace_events(), eng.log.columns()):
        if not s.scheduled:
            continue
        rows.append(
            {
                "step": str(len(rows)),
                "num_scheduled_tokens": str(sum(s.scheduled.values())),
                "scheduled": _pairs(s.scheduled.items()),
                "new": _ids(s.new),
                "resumed": _ids(s.resumed),
                "preempted": _ids(s.preempted),
                "finished": _ids(s.finished),
                "prefix_hits": _pairs(s.prefix_hits),
                "num_running": str(s.num_running),
                "num_waiting": str(s.num_waiting),
                "num_free_blocks": str(s.num_free_blocks),
                "kv_usage": repr(s.kv_usage),
                "num_generated": str(s.num_generated),
            }
        )
    return rows


def fixture_scenario(spec: dict, folder: Path, engine: str = "compiled"):
    """The fixture as a scenario that `servesim run` runs: its requests as a trace file in
    ``folder``, sent all at once (batch) or in order by closed-loop clients; its engine settings;
    no front-end (the recorder submits straight to the engine) and clients that react at once."""
    from simulator.scenario.config import blank_scenario
    from workloads.trace import write_trace

    groups: dict = {}
    rows = []
    for r in spec["requests"]:
        g = r.get("prefix_group")
        row = {"arrival_time_s": 0.0, "prompt_tokens": int(r["prompt_len"]), "output_tokens": int(r["output_len"])}
        if g is not None:
            row.update(prefix_group=groups.setdefault(g, len(groups)), prefix_tokens=int(r["prefix_len"]))
        if "priority" in r:
            row["priority"] = int(r["priority"])
        rows.append(row)
    path = Path(folder) / f"{spec.get('name', 'fixture')}.csv"
    write_trace(rows, path)
    w = spec["workload"]
    closed = w["mode"] == "closed_loop"
    workload = f"workload={{trace: '{path}', trace_arrivals: {'closed_loop' if closed else 'recorded'}"
    workload += f", arrival: {{type: closed_loop, concurrency: {int(w['concurrency'])}}}}}" if closed else "}"
    return blank_scenario([workload, *engine_overrides(spec, engine)])


def engine_overrides(spec: dict, engine: str = "compiled") -> list[str]:
    """A fixture's engine settings as scenario overrides (the one mapping from a recorded vLLM
    configuration to servesim's fields): the pool, the budget, prefix caching, the long-prefill cap,
    the admission gate, the scheduling policy; no front-end (the recorder submits straight to the engine)."""
    e = spec["engine"]
    return [
        f"name={spec.get('name', 'fixture')}",
        "frontend.enabled=false",
        f"engine.num_gpu_blocks_override={int(e['num_gpu_blocks'])}",
        f"engine.block_size={int(e['block_size'])}",
        f"engine.max_num_batched_tokens={int(e['max_num_batched_tokens'])}",
        f"engine.max_num_seqs={int(e['max_num_seqs'])}",
        f"engine.enable_prefix_caching={str(bool(e['enable_prefix_caching'])).lower()}",
        f"engine.long_prefill_token_threshold={int(e.get('long_prefill_token_threshold', 0) or 0)}",
        f"engine.admission={'full_prompt' if e.get('full_prompt_admission') else 'first_chunk'}",
        f"engine.max_model_len={int(e.get('max_model_len') or 10**6)}",
        f"engine.scheduling_policy={e.get('scheduling_policy', 'fcfs')}",
        # the recorder's scheduler: synchronous unless the fixture says it scheduled a step ahead
        f"engine.async_scheduling={str(bool(e.get('async_scheduling', False))).lower()}",
        *(
            [
                "engine.enable_lora=true",
                f"engine.max_loras={int(e['max_loras'])}",
                f"engine.max_lora_rank={int(e['max_lora_rank'])}",
            ]
            if e.get("enable_lora")
            else []
        ),
        *_speculative_overrides(e.get("speculative_config")),
        f"run.kernel={engine}",
    ]


def _speculative_overrides(spec: dict | None) -> list[str]:
    """A recorded speculative configuration. The recorder's draft model is the target itself, so under
    greedy sampling every draft is accepted (acceptance 1); the draft's cost does not enter a step
    of one time unit, so any built-in model stands for it."""
    if not spec:
        return []
    assert spec["method"] == "draft_model", spec
    return [
        "engine.speculative_config.method=draft_model",
        "engine.speculative_config.draft_model=qwen3-0.6b",
        f"engine.speculative_config.num_speculative_tokens={int(spec['num_speculative_tokens'])}",
        "engine.speculative_config.acceptance_rate=1.0",
    ]


def engines_for(spec: dict) -> tuple[str, ...]:
    """The paths a fixture is replayed through: every one, but not `servesim run` where a request asks
    for a LoRA adapter of its own (a trace file has no column for it)."""
    if any(r.get("lora") for r in spec["requests"]):
        return ENGINES[:2]
    return ENGINES


def run_replay(spec: dict, folder: Path, engine: str = "compiled") -> list[dict]:
    """The fixture run as `servesim run` runs a scenario (``fixture_scenario``), as trace rows."""
    from simulator.run import simulate

    res = simulate(fixture_scenario(spec, folder, engine), trace=2)
    return trace_rows(res.engine)


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
        name,
        len(expected),
        len(got),
        matching,
        first,
        detail,
        {"vllm": _totals(expected), "servesim": _totals(got)},
    )


def check(trace: Path, engine: str = "reference") -> ParityReport:
    """One fixture through one path: an engine step in step mode (``reference``, ``compiled``), or
    ``run``: the whole product path of `servesim run` (scenario, workload, compiled engine)."""
    spec, expected = load_fixture(trace)
    if engine == "run":
        import tempfile

        with tempfile.TemporaryDirectory() as tmp:
            got = run_replay(spec, Path(tmp))
    else:
        got = replay(spec, engine)
    return compare(spec.get("name", Path(trace).stem), expected, got)


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
    the first divergent step of each mismatch, the known divergences apart (``KNOWN_DIVERGENT``), and
    the match rate of the others. Returns 0 if all of those match."""
    traces = _trace_paths(paths)
    if not traces:
        print("parity: no fixtures given")
        return 2
    reports: list[tuple[ParityReport, str]] = []
    known: list[tuple[ParityReport, str]] = []
    for t in traces:
        line = []
        for engine in engines_for(load_fixture(t)[0]):
            r = check(t, engine)
            (known if r.name in KNOWN_DIVERGENT else reports).append((r, engine))
            state = "exact" if r.exact else f"diverges at step {r.first_divergence}"
            line.append(f"{engine} {state} ({r.matching_steps}/{r.steps_expected} steps)")
        print(f"{r.name:<44} " + ", ".join(line))
    for r, engine in reports:
        if not r.exact:
            print(f"\n{r.name} ({engine}):\n{r.detail}")
    if known:
        print("\nknown divergences, not counted below (simulator.validation.parity.KNOWN_DIVERGENT):")
        for name in dict.fromkeys(r.name for r, _ in known):
            first = min((r.matching_steps for r, _ in known if r.name == name and not r.exact), default=None)
            print(
                f"  {name}: "
                + (f"diverges at step {first}; {KNOWN_DIVERGENT[name]}" if first is not None else "now exact")
            )
    n_exact = sum(r.exact for r, _ in reports)
    steps = sum(r.matching_steps for r, _ in reports)
    total = sum(r.steps_expected for r, _ in reports)
    fixtures = len({r.name for r, _ in reports})
    print(
        f"\nparity: {n_exact}/{len(reports)} replays exact ({100.0 * n_exact / max(len(reports), 1):.1f}%; {fixtures} fixtures, "
        f"each in step mode through both engine steps and, but for LoRA, as servesim run runs it), "
        f"{steps}/{total} leading steps match ({100.0 * steps / max(total, 1):.1f}%)"
    )
    return 0 if n_exact == len(reports) else 1


def write_trace(rows: list[dict], path: Path) -> None:
    with open(path, "w", newline="") as f:
        wr = csv.DictWriter(f, fieldnames=COLUMNS, lineterminator="\n")
        wr.writeheader()
        wr.writerows(rows)
