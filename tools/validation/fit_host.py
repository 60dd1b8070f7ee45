"""Fit a set of host costs (simulator/scenario/versions.py HostCosts) on the calibration half of its runs.

    python tools/validation/fit_host.py [--source public|recorded|sglang] [--jobs 2] [--rounds 4] [--only NAME ...]

``public``: every ``split: calibrate`` run of simulator/data/validation/runs.yaml (runs marked
``confounded`` are left out), the host costs of release lines 0.10-0.19; ``recorded``: every
calibration run of simulator/data/validation/e2e.yaml (the servers recorded with tools/e2e), those
of 0.26 and 0.32; ``sglang``: every calibration run of simulator/data/validation/sglang_runs.yaml that fits the
host (``fits: host``; the cookbook's ``fits: gpu`` runs fit a GPU's kernels instead),
SGLang's (output throughput, p50 TPOT, p50 TTFT and mean TPOT), with every calibration run of the SGLang
servers recorded with tools/e2e (simulator/data/validation/e2e_sglang.yaml, replayed as the recorded
vLLM servers are). Searches the host costs (the API server's per-request and per-token work for each
endpoint, a fixed latency, the engine's CPU work per step and per sequence, the work per request
that ends) for the least sum of |log(simulated / measured)| over the source's metrics (output
throughput, mean TTFT and mean TPOT; for recorded runs also the medians, TTFT left out where the
server's prefix cache was warm): coordinate search in log space, each constant multiplied by
1/4 .. 4 in turn, from the set's current values (the first-pass shares, fractions, up to 1; a
constant at 0, ``SEEDS``, from fixed values), kept only for a loss ``MIN_GAIN`` smaller. Not
fitted: the tokenizer's rate (``prompt_token_s``) and the per-step output cost (``step_s``).
A recorded run is replayed on its host's factor (its probe reading, as `servesim validate` replays
it), the candidate costs being the reference host's. The held-out runs are never simulated here.
Writes the set into simulator/data/host_costs.yaml.
``--only``: search these constants alone (the others stay as the set has them; the set keeps its
``fitted_on`` line and gains a ``refitted_on`` line: what moved, on which runs, the loss before and
after). ``--start NAME=VALUE``:
start the search from these values instead of the set's.

    python tools/validation/fit_host.py --source sglang --scheduler

``--scheduler`` fits SGLang's scheduler instead, on what its own log measured: the mean decode step
its calibration recordings logged every 40 steps (each lane's decode_batches.csv, ingest.py), at the
steady state of each closed-loop run (as many requests running as its clients, none queued, a CUDA
graph replayed), against servesim's step for that batch and context, the longer of the GPU's time
and the scheduler's CPU work (``engine_step_s`` per step and ``engine_per_seq_s_019`` per request,
scaled by the lane's host factor), on a grid for the least sum over the running counts of the
median |log error|. Where the GPU's time alone explains a logged step, any smaller CPU cost fits as
well: of the costs within 0.1% of the least error it takes the largest (the most the log allows, as
the 0.26 line's engine step was read off Qwen3-0.6B's short steps). Writes them into the set with its
end-to-end loss, the API server's constants as they were, and a line saying so (kept by later
fits). The SGLang set was fitted so: ``--scheduler``, then the plain command with ``--start
token_s=4.9e-05 --start stream_doubling=550``, the streaming cost the calibration recording's own log
implies (docs/sglang.md, "How close to real SGLang servers"); ``--scheduler`` again on 2026-12-01,
with Qwen3-0.6B's short steps among its lanes (h200_sgfloor_2026-12-01).

    python tools/validation/fit_host.py --source recorded --sync

``--sync`` reads vLLM's engine core without async scheduling off the iteration logs of the
calibration runs marked ``fits: sync`` (the gap from one steady decode step to the next, less the
log's own time of the step), a line over the batch's requests (``fit_sync``), and writes it into
the recorded set as ``engine_step_sync_s`` and ``engine_per_seq_sync_s`` with a line saying so
(kept by later fits); the rest of the set as it was.
"""

from __future__ import annotations

import argparse
import datetime as dt
import json
import math
import statistics
import sys
from dataclasses import asdict, replace
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parents[2]))

from simulator.scenario import hosts
from simulator.validation import validate

ROOT = Path(__file__).resolve().parents[2]

# The API server's costs, per endpoint, and its fixed latency.
API_SERVER = ("latency_s", "request_s", "token_s", "finish_s", "chat_request_s", "chat_token_s", "chat_finish_s")
FITTED = {
    "public": (
        *API_SERVER,
        "harmony_latency_s",  # gpt-oss's chat at a few in flight fixes it apart
        "engine_step_s",
        "engine_per_seq_s",
        "engine_per_seq_s_019",
        "first_pass",
        "chat_first_pass",
    ),
    # The recorded servers are vLLM 0.26 behind /v1/completions: the chat costs and the 0.10/0.11 per
    # sequence cost are not theirs.
    "recorded": (
        "latency_s",
        "request_s",
        "token_s",
        "finish_s",
        "engine_step_s",
        "engine_per_seq_s_019",
        "first_pass",
    ),
    # The public SGLang runs and the recorded SGLang servers: the API server's costs (both endpoints),
    # the completions intake's first pass, and how a streamed token's cost grows with the streams a
    # batch serves. Not the scheduler's: on the public bursts of a thousand requests its per-step cost
    # went to 11 ms, which would floor every small batch's step there; with the recorded servers too,
    # whose streaming binds from 256 clients, its per-request cost went to 0.3 us for a 0.03% smaller
    # loss. They are fitted apart, on what SGLang's own log measured (``--scheduler``).
    "sglang": (*API_SERVER, "chat_first_pass", "first_pass", "stream_doubling"),
}
# A constant at 0 is off (stream_doubling: no growth): the search, which multiplies, starts it at these.
SEEDS = {"stream_doubling": (250.0, 500.0, 1000.0, 2000.0, 4000.0)}
SHARES = ("first_pass", "chat_first_pass")  # fractions: searched up to 1
STEPS = (0.25, 0.5, 0.71, 1.41, 2.0, 4.0)
# A constant moves only for a loss at least this share smaller: less is the replay's noise (SGLang's
# finish cost went from 87 to 0.06 us for 0.1% in all), and a move for it leaves a value nothing
# measured.
MIN_GAIN = 0.002


def loss(results, metrics=validate.METRICS) -> float:
    total = 0.0
    for r in results:
        if r.error:
            return math.inf
        if r.confounded:
            continue
        for m in metrics:
            e = r.rel_error(m)
            if not math.isnan(e):
                total += abs(math.log1p(e))
    return total


def with_constant(host: hosts.HostCosts, name: str, value: float, source: str) -> hosts.HostCosts:
    """``host`` with constant ``name`` at ``value``; a set that does not fit gpt-oss's Harmony chat
    apart (the recorded and SGLang sets) keeps one fixed delay, its ``harmony_latency_s`` the
    ``latency_s``."""
    change: dict[str, Any] = {name: value}  # a float; the set's flags are not fitted
    out = replace(host, **change)
    if name == "latency_s" and "harmony_latency_s" not in FITTED[source]:
        out = replace(out, harmony_latency_s=value)
    return out


def stamp(best: float) -> list[str]:
    """The date and loss lines every file these fits write starts its results with."""
    return [
        f"date: '{dt.date.today().isoformat()}'",
        f"loss: {best:.4f}  # sum over runs and metrics of |log(simulated / measured)|",
    ]


def section(name: str, values: dict) -> list[str]:
    """A YAML mapping of fitted values, one per line, written as Python reprs (floats exact)."""
    return [f"{name}:", *(f"  {k}: {v!r}" for k, v in values.items() if v is not None)]


# --scheduler: the grids of SGLang's scheduler costs on the reference host (seconds)
SCHED_STEP_S = tuple(round(x * 1e-4, 7) for x in range(5, 61))  # 0.5 .. 6.0 ms
SCHED_TIE = 1e-3  # costs whose error is within this share of the least are alike: the largest is taken
SCHED_PER_SEQ_S = tuple(round(x * 1e-6, 8) for x in range(81))  # 0 .. 80 us


def scheduler_rows(run: dict, clients: set[int]) -> list[tuple[int, int, float]]:
    """(running, mean context, measured step ms) in ``run``'s lane's SGLang scheduler log
    (data/e2e/RECORDING/LANE/decode_batches.csv) at the steady state of its closed-loop runs of
    ``clients`` clients."""
    import csv

    path = ROOT / "data" / "e2e" / run["recording"] / run["lane"] / "decode_batches.csv"
    out = []
    for row in csv.DictReader(path.open()):
        b = int(row["running"])
        if b in clients and int(row["queued"]) == 0 and row["cuda_graph"] == "True":
            out.append((b, round(int(row["tokens"]) / b), float(row["step_ms"])))
    return out


def scheduler_model(cm, scale: float, step_s: float, per_seq_s: float):
    """``cm`` with SGLang's scheduler CPU work (reference-host costs times ``scale``) met with the GPU's
    time, overlapped: one model per pair of costs, to price many steps."""
    from simulator.engine.host import EngineCpu, HostModel

    return cm.with_execution(cm.execution, HostModel(EngineCpu(step_s * scale, per_seq_s * scale), None, True))


def scheduler_step_ms(cm, scale: float, step_s: float, per_seq_s: float, running: int, context: int) -> float:
    """servesim's decode step of ``running`` requests at ``context`` tokens each, in ms: ``cm``'s GPU
    time and SGLang's scheduler CPU work (reference-host costs times ``scale``) as they meet, overlapped."""
    from simulator.engine.cost import decode_work

    return scheduler_model(cm, scale, step_s, per_seq_s).step_time(decode_work(running, context)) * 1e3


def fit_scheduler(host: hosts.HostCosts, runs: list[dict]) -> tuple[hosts.HostCosts, list[str]]:
    """SGLang's scheduler costs fitted on its recorded lanes' own decode steps (``--scheduler``)."""
    from simulator.engine.cost import decode_work
    from simulator.resolve import cost_model, engine_defaults, load_arch
    from simulator.scenario.hardware import load_gpu

    lanes: dict[tuple[str, str], list[dict]] = {}  # the calibration runs of each recorded lane
    for r in runs:
        if "recording" in r:
            lanes.setdefault((r["recording"], r["lane"]), []).append(r)
    cases, used = [], []  # (cost model, host factor, rows); the lanes they come from
    for lane_runs in lanes.values():
        run = lane_runs[0]
        sc = validate.e2e_scenario(run)
        model, gpu = load_arch(sc), load_gpu(sc.hardware.gpu)
        cm = cost_model(sc, model, gpu, *engine_defaults(gpu, sc))
        clients = {int(r["arrival"]["max_concurrency"]) for r in lane_runs if r["arrival"].get("max_concurrency")}
        if rows := scheduler_rows(run, clients):
            cases.append((cm, validate.recorded_scale(run), rows))
            used.append(f"{run['recording']}/{run['lane']}")

    # each distinct logged step's work (running, mean context), built once: the grid prices every one
    # of them at each pair of costs, once however many logged steps share it
    works = [{(b, ctx): decode_work(b, ctx) for b, ctx, _ in rows} for _, _, rows in cases]

    def err(step_s: float, per_seq_s: float) -> float:
        total = 0.0
        for (cm, scale, rows), work in zip(cases, works):
            model = scheduler_model(cm, scale, step_s, per_seq_s)
            ms_of = {key: model.step_time(w) * 1e3 for key, w in work.items()}
            by: dict[int, list[float]] = {}
            for b, ctx, ms in rows:
                by.setdefault(b, []).append(abs(math.log(ms_of[b, ctx] / ms)))
            total += sum(statistics.median(v) for v in by.values())
        return total

    was = err(host.engine_step_s, host.engine_per_seq_s_019)
    grid = {(a, b): err(a, b) for a in SCHED_STEP_S for b in SCHED_PER_SEQ_S}
    least = min(grid.values())
    (step_s, per_seq_s), best = max(
        ((k, v) for k, v in grid.items() if v <= least * (1 + SCHED_TIE)), key=lambda kv: kv[0]
    )
    levels = sorted({b for _, _, rows in cases for b, _, _ in rows})
    print(
        f"scheduler, on the steady decode steps of {', '.join(used)} at {', '.join(map(str, levels))} running: "
        f"engine_step_s {step_s * 1e3:.2f} ms, engine_per_seq_s_019 {per_seq_s * 1e6:.1f} us (sum of median "
        f"|log error| {was:.3f} with the set's {host.engine_step_s * 1e3:.2f} ms and "
        f"{host.engine_per_seq_s_019 * 1e6:.1f} us, {best:.3f} fitted)"
    )
    note = "scheduler_fitted_on: " + json.dumps(  # a YAML string
        f"engine_step_s and engine_per_seq_s_019 on the steady decode steps of {', '.join(used)} at "
        f"{', '.join(map(str, levels))} running (fit_host.py --source sglang --scheduler; sum of median |log error| "
        f"{was:.3f} to {best:.3f})"
    )
    return replace(host, engine_step_s=step_s, engine_per_seq_s_019=per_seq_s), [note]


# --sync: a logged step's gap after the GPU's time longer than this is a stall, not the engine core's work
SYNC_STALL_MS = 100.0


def steady_decode_steps(run: dict) -> tuple[int, float, float]:
    """A recorded run's steady state from its iteration log (data/e2e/RECORDING/LANE/RUN/steps.csv):
    the most requests running, and the means of the log's own time of a step (``elapsed_ms``) and
    of the time to the next step's (ms), over the steps that decode that many requests between two
    such steps (a gap over ``SYNC_STALL_MS`` is a stall, left out)."""
    import csv
    import itertools

    with (ROOT / "data" / "e2e" / run["recording"] / run["lane"] / run["run"] / "steps.csv").open() as f:
        rows = list(csv.DictReader(f))
    full = max(int(r["gen_requests"]) for r in rows)
    elapsed, gaps = [], []
    for r, nxt in itertools.pairwise(rows):
        if r["ctx_requests"] == nxt["ctx_requests"] == "0" and int(r["gen_requests"]) == full:
            gap = (float(nxt["t"]) - float(r["t"])) * 1e3
            if gap < SYNC_STALL_MS:
                elapsed.append(float(r["elapsed_ms"]))
                gaps.append(gap)
    return full, statistics.fmean(elapsed), statistics.fmean(gaps)


def fit_sync(host: hosts.HostCosts, runs: list[dict]) -> tuple[hosts.HostCosts, list[str]]:
    """The engine core's CPU work without async scheduling (``--sync``), read off the iteration logs of
    the calibration runs recorded so (``fits: sync``): at each run's steady decode batch, the time
    from one step to the next less the log's own time of the step (the GPU's, within 4% of
    servesim's GPU step on h200_sync_2026-12-02) is the engine core's work; divided by the run's host
    factor, a least-squares line over the batch's requests gives its cost a step and a request on
    the reference host (a request and KV-cache group, where the set's costs are per group:
    ``HostCosts.per_kv_group``)."""
    from simulator.scenario.models import load_model

    rows, used = [], []  # (running x groups, CPU ms on the reference host); the runs they come from
    for r in runs:
        if r.get("fits") == "sync":
            running, elapsed, gap = steady_decode_steps(r)
            groups = load_model(r["model"]).kv_cache_groups if host.per_kv_group else 1
            rows.append((running * groups, (gap - elapsed) / validate.recorded_scale(r)))
            used.append(f"{r['recording']}/{r['lane']}/{r['run']}")
    if len(rows) < 2 or len({n for n, _ in rows}) < 2:
        raise SystemExit("--sync: needs calibration runs marked fits: sync at two batch sizes or more")
    n = [float(x) for x, _ in rows]
    ms = [y for _, y in rows]
    slope, intercept = statistics.linear_regression(n, ms)
    step_s, per_seq_s = max(intercept, 0.0) * 1e-3, max(slope, 0.0) * 1e-3
    worst = max(abs((step_s + per_seq_s * x) * 1e3 / y - 1) for x, y in rows)
    print(
        f"engine core without async scheduling, on {len(rows)} runs ({', '.join(used)}) at "
        f"{', '.join(str(x) for x, _ in rows)} running: {step_s * 1e3:.2f} ms a step, {per_seq_s * 1e6:.1f} us a "
        f"request (reference host; the line within {worst:.0%} of every run)"
    )
    note = "sync_fitted_on: " + json.dumps(
        f"engine_step_sync_s and engine_per_seq_sync_s on the steady decode steps of {', '.join(used)} "
        f"(fit_host.py --source recorded --sync; the line within {worst:.0%} of each)"
    )
    return replace(host, engine_step_sync_s=round(step_s, 7), engine_per_seq_sync_s=round(per_seq_s, 8)), [note]


def main() -> int:
    ap = argparse.ArgumentParser()
    ap.add_argument("--source", choices=hosts.HOST_SETS, default="public")
    ap.add_argument("--jobs", type=int, default=2)
    ap.add_argument("--rounds", type=int, default=4)
    ap.add_argument("--only", action="append", default=[], help="search this constant alone (repeat for more)")
    ap.add_argument("--scheduler", action="store_true", help="SGLang's scheduler costs, on its own logged decode steps")
    ap.add_argument(
        "--sync", action="store_true", help="vLLM's engine core without async scheduling, on its own logged steps"
    )
    ap.add_argument("--start", action="append", default=[], metavar="NAME=VALUE", help="start a constant here")
    args = ap.parse_args()
    if args.scheduler and args.source != "sglang":
        ap.error("--scheduler fits SGLang's scheduler: use it with --source sglang")
    if args.sync and args.source != "recorded":
        ap.error("--sync fits the recorded vLLM servers' engine core: use it with --source recorded")
    names = args.only or FITTED[args.source]
    if unknown := set(names) - set(FITTED[args.source]):
        ap.error(f"--only: {', '.join(sorted(unknown))} not among the {args.source} set's fitted constants")
    # The source's public runs (replayed as public runs are) and its recorded servers (each on its host's
    # factor, validate.recorded_host: the candidate costs are the reference host's, scaled as the
    # built-in ones are).
    public_file = {"public": validate.RUNS_FILE, "sglang": validate.SGLANG_FILE}.get(args.source)
    recorded_file = {"recorded": validate.E2E_FILE, "sglang": validate.E2E_SGLANG_FILE}.get(args.source)

    def calibration(p) -> list[dict]:
        # (runs that fit a GPU's kernels, ``fits: gpu``, or the launch times, ``fits: eager``, are not
        # the host's calibration)
        return [
            r
            for r in (validate.load(p)["runs"] if p else [])
            if validate.host_calibration(r) and not r.get("confounded")
        ]

    runs = calibration(public_file) + calibration(recorded_file)
    metrics = validate.SGLANG_METRICS if args.source == "sglang" else validate.METRICS
    host = hosts.load_host_costs(args.source)
    groups: dict[tuple[float, bool], list[dict]] = {}  # (host factor, recorded) -> runs
    for r in runs:
        rec = "recording" in r
        groups.setdefault((validate.recorded_scale(r) if rec else 1.0, rec), []).append(r)

    def evaluate(h) -> float:
        total = 0.0
        for (s, rec), group in groups.items():
            results = validate.run_all(group, jobs=args.jobs, host=h.scaled(s), recorded=rec)
            total += loss(results, validate.E2E_METRICS if rec else metrics)
        return total

    notes = ("scheduler_fitted_on:", "sync_fitted_on:")  # the log-read fits' lines, kept by later fits
    kept = [t for t in set_head(args.source) if t.startswith(notes)]
    for item in args.start:
        name, _, value = item.partition("=")
        if name not in FITTED[args.source]:
            ap.error(f"--start: {name} is not among the {args.source} set's fitted constants")
        given: dict[str, Any] = {name: float(value)}
        host = replace(host, **given)
    if args.scheduler:
        host, kept = fit_scheduler(host, runs)
        args.rounds = 0  # the API server's constants stay as they are
    if args.sync:  # the set as written, with the sync costs and their line: nothing else is refitted
        host, note = fit_sync(host, [r for r in validate.load(validate.E2E_FILE)["runs"] if r["split"] == "calibrate"])
        head = [t for t in set_head(args.source) if not t.startswith("sync_fitted_on:")]
        write_set(args.source, [*head[:1], *note, *head[1:], *section("host_costs", asdict(host))])
        print(f"wrote the {args.source} set's sync costs to {hosts.HOST_COSTS_FILE}")
        return 0
    best = start = evaluate(host)
    print(f"{len(runs)} calibration runs; start: loss {best:.3f}", flush=True)
    for rnd in range(args.rounds):
        improved = False
        for name in names:
            now = getattr(host, name)
            for value in [now * f for f in STEPS] if now else SEEDS.get(name, ()):
                if value <= 0 or (name in SHARES and value > 1.0):
                    continue
                cand = with_constant(host, name, value, args.source)
                got = evaluate(cand)
                if got < best * (1 - MIN_GAIN):
                    best, host, improved = got, cand, True
                    print(f"round {rnd}: {name} -> {value:.3g} (loss {best:.3f})", flush=True)
        if not improved:
            break
    sources = sorted({r["recording"] if "recording" in r else r["source"].split(" (")[0] for r in runs})
    fitted_on = f"{len(runs)} runs ({', '.join(sources)})"
    if args.only:  # the set's own line stands for the rest; this one says what was refitted alone
        head = [t for t in set_head(args.source) if t.startswith("fitted_on:")]
        when = dt.date.today().isoformat()
        moved = ", ".join(args.only)
        kept = [
            *head,
            *kept,
            "refitted_on: " + json.dumps(f"{moved} alone on {when}, on {fitted_on}: loss {start:.3f} to {best:.3f}"),
        ]
    else:
        kept = ["fitted_on: " + json.dumps(fitted_on), *kept]  # a YAML string: a source's title may hold ": "
    write_set(args.source, [*kept, *stamp(best), *section("host_costs", asdict(host))])
    print(f"wrote the {args.source} set to {hosts.HOST_COSTS_FILE}")
    return 0


def read_sets() -> tuple[list[str], dict[str, list[str]]]:
    """simulator/data/host_costs.yaml as written: its comment lines, and each set's lines by name."""
    out = hosts.HOST_COSTS_FILE
    text = out.read_text().splitlines() if out.is_file() else []
    sets: dict[str, list[str]] = {}
    current = None
    for t in text:
        if t and not t.startswith((" ", "#")):
            current = t.rstrip(":")
            sets[current] = []
        elif current is not None and t.startswith(" "):
            sets[current].append(t)
    return [t for t in text if t.startswith("#")], sets


def set_lines(name: str) -> list[str]:
    """The lines of set ``name`` as written (none if it has none)."""
    return read_sets()[1].get(name, [])


def set_head(name: str) -> list[str]:
    """The lines of set ``name`` before its constants (what it was fitted on, the log-read fits' and
    the partial refits' lines, the date, the loss), stripped."""
    lines = [t.strip() for t in set_lines(name)]
    return lines[: lines.index("host_costs:")] if "host_costs:" in lines else lines


def write_set(name: str, lines: list[str]) -> None:
    """Replace set ``name`` of simulator/data/host_costs.yaml (the other sets stay as they are)."""
    out = hosts.HOST_COSTS_FILE
    head, sets = read_sets()
    sets[name] = ["  " + t for t in lines]
    body = [f"{k}:\n" + "\n".join(v) for k, v in sorted(sets.items(), key=lambda kv: hosts.HOST_SETS.index(kv[0]))]
    out.write_text("\n".join(head) + "\n" + "\n".join(body) + "\n")


if __name__ == "__main__":
    raise SystemExit(main())
