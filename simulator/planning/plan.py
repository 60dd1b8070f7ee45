"""Capacity planning: the cheapest fleet that serves a target rate within latency targets.

For each candidate configuration (a combination of ``--search`` values applied to the scenario):

1. **Capacity of one unit** (one replica; with ``disaggregation``, one set of its prefill and decode
   replicas): the highest Poisson arrival rate at which a ``probe_s``-second run (after
   ``warmup_s``) meets the SLOs: p99 TTFT and p99 TPOT of the requests that arrived after the
   warm-up within their targets, and the unit keeping up (it finished at least 90% as many requests
   per second as arrived). Search: from 1 request/s, double until a rate fails, then bisect between
   the last rate that met the targets and the first that did not until they are within
   ``tolerance`` of each other (relative); the capacity is the last rate that met them. If 1
   request/s already fails, halve down to 1/64 before calling the candidate infeasible. This
   assumes that meeting the targets is monotone in the rate (true of a queue within sampling noise;
   the probes are kept in plan.csv to check).
2. **Units needed**: ceil(target rate / capacity); a fleet behind a load-balancing router does at
   least as well as independent units at rate/N each.
3. **Cost**: units x the unit's GPUs x each GPU's price per hour (the catalogue's, with its source,
   or ``hardware.price_per_hour`` / ``--price GPU=USD``); per million output tokens at the target
   rate (output tokens per request as measured at capacity).

The cheapest candidate that meets the SLOs is recommended, with the runner-up and why it lost, and
checked by simulating the recommended fleet as a cluster at the target rate (one more unit if that
run misses a target). Candidates run in parallel (``simulator.planning.executor``: local processes or a Ray
cluster), each cached under ``OUT/candidates/`` by the same key as a sweep point, so an interrupted
plan resumes and a failing candidate is reported, not fatal. With ``strategy="optuna"`` only
``trials`` candidates are evaluated, chosen by Optuna's TPE sampler (seeded) to minimise the cost.
"""

from __future__ import annotations

import json
import math
import sys
import time
from dataclasses import dataclass, field
from pathlib import Path

import numpy as np

from simulator.errors import ConfigError, missing_extra
from simulator.metrics import finite
from simulator.outputs.figures import share
from simulator.outputs.outdir import Outputs, Writing, check_folder
from simulator.outputs.writers import atomic_write_text, write_csv, write_json
from simulator.planning.executor import Progress, check_executor, run_tasks
from simulator.planning.sweep import check_fields, grid, parse_grid, point_key, slug
from simulator.progress import compile_step
from simulator.scenario.config import apply_overrides, load_scenario_data, scenario_error, scenario_from_dict

KEEP_UP = 0.9  # a unit keeps up when it finishes at least this share of the request rate offered
LOWEST = 1.0 / 64  # the lowest rate probed before a candidate is called infeasible (requests/s)


@dataclass(frozen=True)
class PlanSpec:
    rate: float  # target arrival rate for the whole fleet (requests/s)
    p99_ttft_ms: float | None = None
    p99_tpot_ms: float | None = None
    probe_s: float = 120.0
    warmup_s: float = 20.0
    tolerance: float = 0.05
    check_s: float = 300.0
    prices: dict = field(default_factory=dict)  # GPU key -> US dollars per GPU-hour

    def __post_init__(self) -> None:
        for name, v, low in (
            ("--rate", self.rate, 0.0),
            ("--probe-s", self.probe_s, self.warmup_s),
            ("--tolerance", self.tolerance, 0.0),
            ("--check-s", self.check_s, self.warmup_s),
        ):
            if not (isinstance(v, (int, float)) and math.isfinite(v) and v > low):
                raise ConfigError(f"plan: {name} must be a number > {low:g} (got {v!r})")
        if self.tolerance >= 1:
            raise ConfigError(f"plan: --tolerance must be < 1 (a relative width) (got {self.tolerance!r})")


def parse_slo(text: str | None) -> dict:
    """``p99_ttft_ms=500,p99_tpot_ms=50`` -> the two targets."""
    out: dict = {}
    for part in filter(None, (text or "").split(",")):
        key, _, value = part.partition("=")
        key = key.strip()
        if key not in ("p99_ttft_ms", "p99_tpot_ms"):
            raise ConfigError(f"--slo: {key!r} is not a target; use p99_ttft_ms=...,p99_tpot_ms=...")
        if key in out:
            raise ConfigError(f"--slo {key} given twice; give it once (got {text!r})")
        try:
            out[key] = float(value)
        except ValueError:
            raise ConfigError(f"--slo {key} must be a number of milliseconds (got {value!r})") from None
        if not out[key] > 0:
            raise ConfigError(f"--slo {key} must be > 0 ms (got {value!r})")
    return out


def parse_prices(items: list[str]) -> dict:
    out = {}
    for text in items:
        gpu, _, value = text.partition("=")
        if gpu.strip() in out:
            raise ConfigError(f"--price {gpu.strip()} given twice; give it once (got {text!r})")
        try:
            out[gpu.strip()] = float(value)
        except ValueError:
            raise ConfigError(f"--price must look like GPU=USD_PER_HOUR, e.g. h100-sxm=2.49 (got {text!r})") from None
        if not out[gpu.strip()] > 0:
            raise ConfigError(f"--price {gpu}: must be > 0 US dollars per GPU-hour (got {value!r})")
    return out


# ---- one candidate -------------------------------------------------------------------------------
def probe(data: dict, rate: float, spec: PlanSpec) -> dict:
    """One run of the candidate ``data`` at Poisson ``rate``: its latencies and whether it met the targets."""
    from simulator.metrics import summarize
    from simulator.run import simulate

    d = apply_overrides(
        data,
        [
            f"workload.arrival={{type: poisson, rate: {rate!r}}}",
            f"run.duration_s={spec.probe_s!r}",
            f"run.warmup_s={spec.warmup_s!r}",
            "run.num_requests=null",
        ],
    )
    d.pop("slo", None)
    res = simulate(scenario_from_dict(d))
    s = summarize(res)
    c = res.reqs.columns()
    offered = float(np.count_nonzero(c["arrival"] >= spec.warmup_s)) / max(res.end_time - spec.warmup_s, 1e-9)
    keeps_up = s["num_completed"] > 0 and s["request_throughput"] >= KEEP_UP * offered
    ttft, tpot = s["p99_ttft_ms"], s["p99_tpot_ms"]
    ok = (
        keeps_up
        and (spec.p99_ttft_ms is None or (ttft is not None and ttft <= spec.p99_ttft_ms))
        and (spec.p99_tpot_ms is None or tpot is None or tpot <= spec.p99_tpot_ms)
    )
    per_req = s["output_throughput"] / s["request_throughput"] if s["request_throughput"] else float("nan")
    return {
        "rate": rate,
        "ok": bool(ok),
        "keeps_up": bool(keeps_up),
        "p99_ttft_ms": ttft,
        "p99_tpot_ms": tpot,
        "request_throughput": s["request_throughput"],
        "output_tokens_per_request": per_req,
    }


def capacity(data: dict, spec: PlanSpec) -> tuple[float, list[dict]]:
    """The highest rate one unit sustains within the targets (the module docstring's search), and the probes."""
    probes: list[dict] = []

    def meets(rate: float) -> bool:
        probes.append(probe(data, rate, spec))
        return probes[-1]["ok"]

    lo, hi, r = 0.0, None, 1.0
    while hi is None:
        if meets(r):
            lo, r = r, 2 * r
            if r > 1e6:
                raise ConfigError("plan: a unit still meets the targets at 1,000,000 requests/s; are the targets set?")
        else:
            hi = r
    if lo == 0.0:  # even 1 request/s fails: go down
        r = hi / 2
        while r >= LOWEST and not meets(r):
            hi, r = r, r / 2
        if r < LOWEST:
            return 0.0, probes
        lo = r
    while hi - lo > spec.tolerance * hi:
        mid = (lo + hi) / 2
        if meets(mid):
            lo = mid
        else:
            hi = mid
    return lo, probes


def unit_of(data: dict, spec: PlanSpec) -> tuple[int, float, list[str]]:
    """(GPUs in one unit, its price per hour, its GPU keys) from the candidate's scenario."""
    from simulator.fleet.cluster import replica_plan
    from simulator.scenario.hardware import hourly_price, load_gpu

    sc = scenario_from_dict(data)
    if sc.disaggregation is not None:
        members = [rsc for _, rsc, _ in replica_plan(sc)]
    else:
        members = [sc]
    gpus, price, keys = 0, 0.0, []
    for m in members:
        g = load_gpu(m.hardware.gpu)
        tp = m.hardware.tensor_parallel_size
        p = hourly_price(m.hardware.price_per_hour, g, spec.prices)
        if p is None:
            raise ConfigError(
                f"hardware.price_per_hour: no price for GPU '{g.key}' in the catalogue; set "
                f"hardware.price_per_hour or give --price {g.key}=USD_PER_HOUR"
            )
        gpus += tp
        price += tp * p
        keys.append(g.key)
    return gpus, price, keys


def _key(data: dict, spec_d: dict) -> str:
    return point_key({"scenario": data, "plan": {k: v for k, v in spec_d.items() if k != "check_s"}})


def cached_candidate(task: tuple[dict, dict, str]) -> dict | None:
    """A candidate's result as an earlier evaluation left it in its file, if it was of the same key."""
    data, spec_d, path = task
    try:
        cached = json.loads(Path(path).read_text())
        if cached.get("key") == _key(data, spec_d):
            return {**cached["result"], "cached": True}
    except (OSError, ValueError, AttributeError, TypeError):
        pass
    return None


def evaluate(task: tuple[dict, dict, str]) -> dict:
    """One candidate, end to end (in a worker): capacity, units, cost; cached in ``path``. Never
    raises: an invalid or failing candidate comes back with its error."""
    data, spec_d, path = task
    spec = PlanSpec(**spec_d)
    key = _key(data, spec_d)
    p = Path(path)
    found = cached_candidate(task)
    if found is not None:
        return found
    t0 = time.perf_counter()
    try:
        gpus, price, keys = unit_of(data, spec)  # an invalid candidate (a bad value, no price) fails here
    except ConfigError as e:
        return {"status": "failed", "error": str(e)}
    try:
        cap, probes = capacity(data, spec)
    except ConfigError as e:  # it cannot run at all: the model does not fit, TP does not divide the heads, ...
        return {"status": "infeasible", "error": str(e)}
    except Exception as e:  # a broken candidate must not stop the plan; report it in full
        return {"status": "failed", "error": f"{type(e).__name__}: {e}"}
    out: dict = {
        "status": "ok" if cap > 0 else "infeasible",
        "capacity_rps": cap,
        "unit_gpus": gpus,
        "unit_usd_per_hour": price,
        "gpu": "+".join(sorted(set(keys))),
        "probes": probes,
        "wall_s": time.perf_counter() - t0,
    }
    if cap <= 0:
        out["error"] = f"misses the targets even at {LOWEST:g} requests/s"
    else:
        at = max((q for q in probes if q["ok"]), key=lambda q: q["rate"])
        units = math.ceil(spec.rate / cap - 1e-9)
        per_hour = units * price
        tokens = spec.rate * at["output_tokens_per_request"] * 3600
        out.update(
            units=units,
            gpus=units * gpus,
            usd_per_hour=per_hour,
            usd_per_million_output_tokens=per_hour / tokens * 1e6 if tokens > 0 else None,
            p99_ttft_ms=at["p99_ttft_ms"],
            p99_tpot_ms=at["p99_tpot_ms"],
            ttft_margin=None if spec.p99_ttft_ms is None else 1 - at["p99_ttft_ms"] / spec.p99_ttft_ms,
            tpot_margin=None
            if spec.p99_tpot_ms is None or at["p99_tpot_ms"] is None
            else 1 - at["p99_tpot_ms"] / spec.p99_tpot_ms,
        )
    p.parent.mkdir(parents=True, exist_ok=True)
    atomic_write_text(p, json.dumps({"key": key, "result": out}) + "\n")
    return {**out, "cached": False}


# ---- the plan ------------------------------------------------------------------------------------
def _base(path: str | None, overrides: list[str]) -> dict:
    data = load_scenario_data(path, overrides)
    data.pop("sweep", None)
    try:
        sc = scenario_from_dict(data)
    except ConfigError as e:
        raise scenario_error(path, e, overrides) from None
    if any(c.arrival is not None for c in sc.workload.class_list()):
        raise ConfigError(
            "plan: a class with its own arrivals (workload.classes.*.arrival); the plan varies "
            "the scenario's workload.arrival rate, so give the classes no arrival of their own"
        )
    return data


def _candidate(base: dict, point: dict) -> dict:
    data = apply_overrides(base, [f"{k}={json.dumps(v)}" for k, v in point.items()])
    data["name"] = slug(point) or base.get("name", "scenario")
    return data


def run_plan(
    path: str | None,
    rate: float,
    slo: str | None,
    search: list[str],
    overrides: list[str],
    out: Path,
    jobs: int = 0,
    executor: str = "local",
    address: str | None = None,
    strategy: str = "grid",
    trials: int = 40,
    prices: list[str] | None = None,
    probe_s: float = 120.0,
    tolerance: float = 0.05,
    check_s: float = 300.0,
    check: bool = True,
    seed: int = 0,
) -> int:
    check_executor(executor)
    base = _base(path, overrides)
    targets = parse_slo(slo)
    if not targets and base.get("slo"):
        targets = {k: v for k, v in base["slo"].items() if k in ("p99_ttft_ms", "p99_tpot_ms") and v is not None}
    warm = min(20.0, probe_s / 4)
    spec = PlanSpec(
        rate=rate,
        probe_s=probe_s,
        warmup_s=warm,
        tolerance=tolerance,
        check_s=check_s,
        prices=parse_prices(prices or []),
        **targets,
    )
    space = parse_grid(search, overrides, "--search")
    check_fields(base, space, "--search")
    points = grid(space) if space else [{}]
    if strategy not in ("grid", "optuna"):
        raise ConfigError(f"plan: --strategy must be grid or optuna (got {strategy!r})")
    check_folder(out, "--out")
    outputs = Outputs(out, [*PLAN_FILES, "candidates"], "--out", "plan")
    with Writing(out, "--out"):
        return _plan(
            base, points, space, spec, targets, out, outputs, jobs, executor, address, strategy, trials, check, seed
        )


PLAN_FILES = ("plan.csv", "recommendation.json", "probes.csv", "plan_cost.png", "latency_vs_rate.png")


def _plan(
    base: dict,
    points: list[dict],
    space: dict,
    spec: PlanSpec,
    targets: dict,
    out: Path,
    outputs,
    jobs: int,
    executor: str,
    address: str | None,
    strategy: str,
    trials: int,
    check: bool,
    seed: int,
) -> int:
    """Evaluate the candidates, recommend and check, and write the plan's files; ``out`` is locked and checked."""
    rate = spec.rate
    spec_d = {k: v for k, v in spec.__dict__.items()}
    t0 = time.perf_counter()
    where = f"{jobs or 'all'} processes" if executor == "local" else f"Ray ({address or 'a local cluster'})"
    what = ", ".join(f"{k} ({len(v)})" for k, v in space.items()) or "the scenario as it is"
    slo_txt = ", ".join(f"{k}={v:g}" for k, v in targets.items()) or "none (capacity = the highest rate kept up with)"
    print(
        f"plan: {len(points)} candidates over {what} for {rate:g} req/s; SLO {slo_txt}; {strategy} on {where} -> {out}",
        flush=True,
    )

    def task(pt: dict):
        return (_candidate(base, pt), spec_d, str(out / "candidates" / f"{slug(pt) or 'base'}.json"))

    compile_step()  # once, here: the workers then find it compiled
    results: dict[int, dict] = {}
    interrupted = False
    try:
        if strategy == "grid":
            _evaluate_all(points, list(range(len(points))), task, results, jobs, executor, address)
        else:
            _optuna(points, space, task, results, jobs, executor, address, trials, seed)
    except KeyboardInterrupt:
        interrupted = True
        print("interrupted: keeping the finished candidates; run the same command again to resume", file=sys.stderr)
        for i in range(len(points)):  # finished, though not yet reported when the interrupt came
            if i not in results and (found := cached_candidate(task(points[i]))) is not None:
                results[i] = found
    rows = _rows(points, results, space)
    rec = recommend(rows, spec, next(iter(space)) if len(space) > 1 else None)
    n_done = sum(r["status"] != "not run" for r in rows)
    if rec.get("best") is not None and n_done < len(points):  # from part of the candidates: say so
        rec["text"] += (
            f"\n(from the {n_done} of {len(points)} candidates evaluated; the other {len(points) - n_done} were "
            f"{'not run: interrupted' if interrupted else 'not sampled'})"
        )
    if check and rec.get("best") is not None and not interrupted:
        rec["check"] = check_fleet(base, rec["best"], spec, space)
        for bests in rec.get("best_per", {}).values():  # the cheapest per model (say) too
            for r in bests:
                if r is not rec["best"] and _label(r) != _label(rec["best"]):
                    r["check"] = check_fleet(base, r, spec, space)
    files = write_plan(out, rows, rec, spec, space)
    removed = outputs.done([*files, out / "candidates"])
    if removed:
        print(f"removed what the earlier run in {out}/ wrote and this one did not: {', '.join(removed)}")
    print(f"\n{rec['text']}")
    if "check" in rec:
        print(rec["check"]["text"])
        if "text_hosts" in rec["check"]:
            print(f"  {rec['check']['text_hosts']}")
        for bests in rec.get("best_per", {}).values():
            for r in bests:
                if "check" in r:
                    print(f"  and for {_label(r)}: {r['check']['text'][len('check: ') :]}")
    n_ok = sum(r["status"] == "ok" for r in rows)
    n_bad = sum(r["status"] == "failed" for r in rows)
    n_inf = sum(r["status"] == "infeasible" for r in rows)
    n_left = sum(r["status"] == "not run" for r in rows)
    print(
        f"\n{len(results)} of {len(points)} candidates evaluated ({n_ok} feasible, {n_inf} infeasible, {n_bad} failed"
        f"{f', {n_left} not run' if n_left else ''}), {time.perf_counter() - t0:.1f} s; wrote "
        f"{out}/{', '.join(f.name for f in files)}"
    )
    if interrupted:
        return 130
    return 1 if n_bad else 0


def _evaluate_all(points, indices, task, results, jobs, executor, address) -> None:
    bar = Progress(len(indices), "plan")
    tasks = run_tasks(evaluate, [task(points[i]) for i in indices], jobs, executor, address)
    try:
        for n, (j, r) in enumerate(tasks, 1):
            i = indices[j]
            results[i] = r
            bar.line(f"[{n}/{len(indices)}] {slug(points[i]) or 'scenario'}: {_state(r)}")
            bar.done(r["status"] == "failed")
    finally:
        tasks.close()
        bar.close()


def _state(r: dict) -> str:
    if r["status"] != "ok":
        return f"{r['status'].upper()}: {r.get('error', '')}"
    src = "cached" if r.get("cached") else f"{r['wall_s']:.1f} s, {len(r['probes'])} runs"
    return (
        f"{r['capacity_rps']:.2f} req/s per unit -> {r['units']} x {r['unit_gpus']} GPU = "
        f"${r['usd_per_hour']:,.2f}/h ({src})"
    )


def _optuna(points, space, task, results, jobs, executor, address, trials, seed) -> None:
    """Evaluate ``trials`` candidates chosen by TPE to minimise the fleet's cost (a candidate
    sampled twice is evaluated once)."""
    try:
        import optuna
    except ImportError:
        raise missing_extra("--strategy optuna", "Optuna", "search") from None
    optuna.logging.set_verbosity(optuna.logging.WARNING)
    keys = list(space)
    index = {tuple(json.dumps(pt[k]) for k in keys): i for i, pt in enumerate(points)}
    study = optuna.create_study(direction="minimize", sampler=optuna.samplers.TPESampler(seed=seed))
    batch = max(1, jobs or 2)
    penalty = 1e12  # an infeasible candidate: worse than any fleet
    bar = Progress(trials, "plan (optuna)")
    try:
        done = 0
        while done < trials and len(results) < len(points):
            asked = [study.ask() for _ in range(min(batch, trials - done))]
            chosen = []
            for t in asked:
                pt = {k: t.suggest_categorical(k.replace(".", "__"), [json.dumps(v) for v in space[k]]) for k in keys}
                chosen.append(index[tuple(pt[k] for k in keys)])
            new = sorted({i for i in chosen if i not in results})
            for j, r in run_tasks(evaluate, [task(points[i]) for i in new], jobs, executor, address):
                results[new[j]] = r
                bar.line(f"[{len(results)}] {slug(points[new[j]])}: {_state(r)}")
            for t, i in zip(asked, chosen):
                r = results[i]
                study.tell(t, r["usd_per_hour"] if r["status"] == "ok" else penalty)
                done += 1
                bar.done(r["status"] == "failed")
    finally:
        bar.close()


def _rows(points, results, space) -> list[dict]:
    rows = []
    for i, pt in enumerate(points):
        r = results.get(i)
        row = {f"param:{k}": v for k, v in pt.items()}
        if r is None:
            row["status"] = "not run"
        else:
            row.update({k: v for k, v in r.items() if k not in ("probes", "cached", "wall_s")})
            row["probes"] = len(r.get("probes", []))
            row["_probes"] = r.get("probes", [])
        rows.append(row)
    return rows


GENERIC = ("count", "value", "mean", "rate", "tokens")  # names that need their parent to be clear
SHORT = {
    "tensor_parallel_size": "TP",
    "max_num_seqs": "seqs",
    "max_num_batched_tokens": "tokens",
    "gpu_memory_utilization": "mem",
}


def _label(row: dict) -> str:
    """A candidate in a few words: its searched values (model=..., gpu=..., TP=...)."""
    parts = []
    for k, v in row.items():
        if k.startswith("param:"):
            path = k[6:].split(".")
            name = ".".join(path[-2:]) if path[-1] in GENERIC and len(path) > 1 else path[-1]
            parts.append(f"{SHORT.get(name, name)}={v}")
    return ", ".join(parts) or "the scenario"


def recommend(rows: list[dict], spec: PlanSpec, first: str | None = None) -> dict:
    """The cheapest feasible candidate (ties: the most requests/s per GPU); the runner-up (the
    cheapest with a different fleet, else the next) with why it lost; and, when a first searched
    field is named, the cheapest for each of its values (e.g. per model)."""
    ok = [r for r in rows if r["status"] == "ok"]
    if not ok:
        failed = [r for r in rows if r["status"] == "failed"]
        if failed and not any(r["status"] == "infeasible" for r in rows):
            return {
                "best": None,
                "text": f"nothing to recommend: every candidate evaluated failed (the first: "
                f"{_label(failed[0])}: {failed[0].get('error')})",
            }
        return {"best": None, "text": "no candidate meets the targets at any rate: nothing to recommend"}
    ok.sort(key=lambda r: (r["usd_per_hour"], -r["capacity_rps"] / r["unit_gpus"]))
    best = ok[0]

    def public(r: dict) -> dict:
        return {k: v for k, v in r.items() if not k.startswith("_")}

    def fleet(r: dict) -> tuple:
        return r["gpu"], r["units"], r["unit_gpus"]

    text = (
        f"recommended: {_label(best)}: {best['units']} x {best['unit_gpus']} GPU ({_n(best['gpus'], 'GPU')}, {best['gpu']}) "
        f"at ${best['usd_per_hour']:,.2f}/h, ${best['usd_per_million_output_tokens']:.3f} per million output tokens; "
        f"one unit sustains {best['capacity_rps']:.2f} req/s within the targets"
    )
    out: dict = {"best": public(best), "text": text}
    others = [r for r in ok[1:] if fleet(r) != fleet(best)] or ok[1:]
    if others:
        ru = others[0]
        if ru["usd_per_hour"] > best["usd_per_hour"]:
            why = (
                f"costs ${ru['usd_per_hour'] - best['usd_per_hour']:,.2f}/h more "
                f"({ru['units']} x {ru['unit_gpus']} GPU on {ru['gpu']}, {ru['capacity_rps']:.2f} req/s per unit)"
            )
        else:
            why = (
                f"the same cost, less headroom: {ru['capacity_rps']:.2f} req/s per unit against "
                f"{best['capacity_rps']:.2f}"
            )
        out["runner_up"] = {**public(ru), "why_not": why}
        out["text"] += f"\nrunner-up: {_label(ru)}: {why}"
    if first is not None:
        per: dict = {}
        for r in ok:
            per.setdefault(json.dumps(r[f"param:{first}"]), r)
        if len(per) > 1:
            out["best_per"] = {first: [public(r) for r in per.values()]}
            out["text"] += f"\ncheapest per {first.split('.')[-1]}: " + "; ".join(
                f"{r[f'param:{first}']}: {r['units']} x {r['unit_gpus']} GPU on {r['gpu']} ({_label(r)}), "
                f"${r['usd_per_hour']:,.2f}/h"
                for r in per.values()
            )
    return out


def _n(k: int, noun: str) -> str:
    return f"{k} {noun}{'s' * (k != 1)}"


def check_fleet(base: dict, best: dict, spec: PlanSpec, space: dict) -> dict:
    """Simulate the recommended fleet at the target rate as a cluster; one more unit if it misses."""
    from simulator.metrics import summarize
    from simulator.run import simulate

    point = {k[6:]: v for k, v in best.items() if k.startswith("param:")}
    data = _candidate(base, point)
    runs = []
    d: dict = {}
    for units in (best["units"], best["units"] + 1):
        d = apply_overrides(
            data,
            [
                f"workload.arrival={{type: poisson, rate: {spec.rate!r}}}",
                f"run.duration_s={spec.check_s!r}",
                f"run.warmup_s={min(30.0, spec.check_s / 4)!r}",
                "run.num_requests=null",
            ],
        )
        if d.get("disaggregation"):
            for role in ("prefill", "decode"):
                d["disaggregation"][role] = _scaled(d["disaggregation"][role], units)
        else:
            d.setdefault("cluster", {})
            d["cluster"] = {
                "router": "least_requests",
                **d["cluster"],
                "replicas": _scaled(d["cluster"].get("replicas", 1), units),
            }
        d["slo"] = {
            k: v for k, v in (("p99_ttft_ms", spec.p99_ttft_ms), ("p99_tpot_ms", spec.p99_tpot_ms)) if v is not None
        } or None
        s = summarize(simulate(scenario_from_dict(d)))
        met = (spec.p99_ttft_ms is None or (s["p99_ttft_ms"] or math.inf) <= spec.p99_ttft_ms) and (
            spec.p99_tpot_ms is None or (s["p99_tpot_ms"] or 0) <= spec.p99_tpot_ms
        )
        runs.append(
            {
                "units": units,
                "p99_ttft_ms": s["p99_ttft_ms"],
                "p99_tpot_ms": s["p99_tpot_ms"],
                "slo_attainment": s.get("slo_attainment"),
                "request_throughput": s["request_throughput"],
                "num_in_flight_at_end": s["num_in_flight_at_end"],
                "meets_slo": bool(met),
            }
        )
        if met:
            break
    last = runs[-1]
    verdict = "meets the targets" if last["meets_slo"] else "still misses the targets"
    extra = "" if len(runs) == 1 else f" (with {_n(runs[0]['units'], 'unit')} it missed them; {last['units']} needed)"
    att = f", {share(last['slo_attainment'])} of requests within both" if last.get("slo_attainment") is not None else ""
    text = (
        f"check: the fleet of {_n(last['units'], 'unit')} at {spec.rate:g} req/s for {spec.check_s:g} s {verdict}{extra}: "
        f"p99 TTFT {last['p99_ttft_ms']:,.0f} ms, p99 TPOT {last['p99_tpot_ms'] or 0:,.1f} ms{att}"
    )
    out = {"runs": runs, "meets_slo": last["meets_slo"], "units": last["units"], "text": text}
    if (
        (d.get("hardware") or {}).get("host") is None
        and (d.get("run") or {}).get("host_band", True)
        and last["meets_slo"]
    ):
        out.update(_on_slowest_host(d, spec))
    return out


def _on_slowest_host(d: dict, spec: PlanSpec) -> dict:
    """The checked fleet again on the slowest catalog host (a plan that names no host): whether it
    still meets the targets there, or holds only on a faster host."""
    from simulator.metrics import summarize
    from simulator.run import simulate
    from simulator.scenario.hosts import band_hosts

    slow = band_hosts()[0]
    s = summarize(simulate(scenario_from_dict({**d, "hardware": {**(d.get("hardware") or {}), "host": slow.name}})))
    met = (spec.p99_ttft_ms is None or (s["p99_ttft_ms"] or math.inf) <= spec.p99_ttft_ms) and (
        spec.p99_tpot_ms is None or (s["p99_tpot_ms"] or 0) <= spec.p99_tpot_ms
    )
    figures = f"p99 TTFT {s['p99_ttft_ms'] or 0:,.0f} ms, p99 TPOT {s['p99_tpot_ms'] or 0:,.1f} ms"
    verdict = (
        f"on the slowest catalog host ({slow.name}, CPU x{slow.scale:.2f}) it meets them too: {figures}"
        if met
        else f"on the slowest catalog host ({slow.name}, CPU x{slow.scale:.2f}) it misses them ({figures}): "
        "the plan holds only on a faster host; set hardware.host to plan for yours"
    )
    return {
        "slowest_host": {
            "host": slow.name,
            "meets_slo": bool(met),
            **{k: s[k] for k in ("p99_ttft_ms", "p99_tpot_ms")},
        },
        "text_hosts": verdict,
    }


def _scaled(raw, units: int):
    """A replica count or groups, times ``units``."""
    if isinstance(raw, (int, float)):
        return int(raw) * units
    groups = raw if isinstance(raw, list) else [raw]
    return [{**g, "count": int(g.get("count", 1)) * units} for g in groups]


def write_plan(out: Path, rows: list[dict], rec: dict, spec: PlanSpec, space: dict) -> list[Path]:
    cols: dict[str, np.ndarray] = {}
    order = [k for k in rows[0] if k.startswith("param:")] + [
        "status",
        "capacity_rps",
        "units",
        "unit_gpus",
        "gpus",
        "gpu",
        "unit_usd_per_hour",
        "usd_per_hour",
        "usd_per_million_output_tokens",
        "p99_ttft_ms",
        "p99_tpot_ms",
        "ttft_margin",
        "tpot_margin",
        "probes",
        "error",
    ]
    for k in order:
        cols[k] = np.array([r.get(k) for r in rows], dtype=object)
    write_csv(cols, out / "plan.csv")
    write_json(
        finite(
            {"target_rate": spec.rate, "slo": {"p99_ttft_ms": spec.p99_ttft_ms, "p99_tpot_ms": spec.p99_tpot_ms}, **rec}
        ),
        out / "recommendation.json",
    )
    probes = [{"candidate": _label(r), **q} for r in rows for q in r.get("_probes", [])]
    if probes:
        pc = {k: np.array([q.get(k) for q in probes], dtype=object) for k in probes[0]}
        write_csv(pc, out / "probes.csv")
    files = [out / "plan.csv", out / "recommendation.json"] + ([out / "probes.csv"] if probes else [])
    if any(r["status"] == "ok" for r in rows):
        from simulator.outputs.plots import plot_plan_cost, plot_plan_latency

        plot_plan_cost(rows, rec, spec, out / "plan_cost.png", _label)
        plot_plan_latency(rows, rec, spec, out / "latency_vs_rate.png", _label)
        files += [out / "plan_cost.png", out / "latency_vs_rate.png"]
    return files
