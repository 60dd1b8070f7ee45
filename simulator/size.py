"""How much memory a run will need, estimated from the scenario before anything of it is built,
and the guard that refuses a run that would not fit."""

from __future__ import annotations

import os
from collections.abc import Callable
from dataclasses import dataclass
from typing import cast

import numpy as np

from simulator.engine.cost import CostModel, StepWork, decode_work
from simulator.errors import ConfigError
from simulator.resolve import check_vllm_rules, cost_model, engine_defaults, load_arch, memory_plan
from simulator.scenario.config import ClusterConfig, Scenario, check_model, run_duration
from simulator.scenario.hardware import load_gpu
from workloads.config import parse_schedule

# What a run holds in memory, measured on the collapse and Poisson workloads: a closed-loop client's
# objects, a submitted request's record and workload state, a step-log row (or time bin); and what
# each replica's engine holds before any request arrives (queues, step state, front-end), plus its
# block tables, measured on fleets of 200 replicas (Llama-3.1-8B and -70B, Qwen3-0.6B; A100 to B200).
CLIENT_BYTES, REQUEST_BYTES, STEP_ROW_BYTES = 1500, 600, 64
ENGINE_BYTES, ENGINE_BLOCK_BYTES = 700_000, 36


@dataclass(frozen=True)
class RunSize:
    """Upper estimates of what a run will hold: clients, requests, step-log rows, replicas' engines
    and bytes."""

    clients: int
    requests: int
    step_rows: int
    closed_share: float = 0.0  # of the requests, the share closed-loop clients submit
    replicas: int = 1
    engine_bytes: int = 0  # the replicas' engines, empty

    @property
    def bytes(self) -> int:
        return (
            self.clients * CLIENT_BYTES
            + self.requests * REQUEST_BYTES
            + self.step_rows * STEP_ROW_BYTES
            + self.engine_bytes
        )


def _replica_engines(sc: Scenario) -> tuple[list[tuple[Scenario, int, CostModel, int]], int]:
    """Each distinct replica group of ``sc`` (one for a single engine) as (scenario, count, step
    cost, max_num_seqs), and the bytes its engines hold empty; from the scenario alone, nothing built."""
    from simulator.fleet import engine_groups

    out, engine_bytes = [], 0
    for rsc, count, where in engine_groups(sc):
        try:
            model, gpu = load_arch(rsc), load_gpu(rsc.hardware.gpu)
            seqs, tokens = engine_defaults(gpu, rsc)
            check_vllm_rules(model, rsc.hardware.tensor_parallel_size, seqs, tokens, rsc.engine.framework == "sglang")
            check_model(rsc, model)
            blocks = memory_plan(rsc, model, gpu, seqs, tokens).num_gpu_blocks
            cost = cost_model(rsc, model, gpu, seqs, tokens)
        except ConfigError as e:  # a group's own hardware or engine: say which group
            raise ConfigError(f"{where}: {e}" if where.endswith("]") else str(e)) from None
        out.append((rsc, count, cost, seqs))
        engine_bytes += count * (ENGINE_BYTES + ENGINE_BLOCK_BYTES * blocks)
    return out, engine_bytes


def run_size(sc: Scenario) -> RunSize:
    """Estimate ``sc``'s size before anything of it is built: closed-loop clients (their most);
    requests (the open-loop rate, or the peak of a time-varying one, times the run's length; for
    closed loops, the clients times the run's length over a request's time, from the mean output
    length and the step cost of a full batch on one replica; the request limit; a trace's rows);
    step-log rows (the run's length over the shortest possible step, or over the bin width, for
    every replica); the replicas' engines."""
    from workloads.factory import class_specs
    from workloads.lengths import LengthSampler

    engines, engine_bytes = _replica_engines(sc)
    replicas = sum(count for _, count, _, _ in engines)
    _, _, cost, max_num_seqs = engines[0]
    until = run_duration(sc)
    w = sc.workload
    clients, rate, closed_rate, rows = 0, 0.0, 0.0, 0
    specs = class_specs(w)
    arrivals = [(w.arrival, specs)] if w.trace is None else []
    arrivals += [(c.arrival, [c]) for c in specs if c.arrival is not None]
    for a, sources in arrivals:
        if a.type == "closed_loop":
            steps = parse_schedule(a.schedule, "schedule", integer=True) if a.schedule is not None else []
            n = cast(int, max([a.concurrency] + [c for _, c in steps]))  # (the schedule's counts are integers)
            clients += n
            if (
                until is not None
            ):  # each client: a request's time (its output at a full batch's step time), then its think time
                out = max(LengthSampler(c.output, np.random.default_rng(0)).mean() for c in sources)
                batch = min(-(-n // replicas), max_num_seqs)
                step = cost.step_time(decode_work(batch, int(out)))
                closed_rate += n / (out * step + a.think_time_s)
        elif a.type == "time_varying":
            rate += max(r for _, r in parse_schedule(a.schedule, "schedule", integer=False))
        elif a.type == "diurnal":
            rate += a.rate * 2 / (1 + 1 / a.peak_to_trough)  # its peak (2 x rate x p/(p+1), finite for any p)
        else:
            rate += a.rate
    if w.trace is not None:
        from workloads.trace import read_trace

        rows = read_trace(w.trace).n
    rate = float(rate + closed_rate)  # (a Python float: an extreme product is inf, not a numpy warning)
    requests = rows + (_count(rate * until) if until is not None else 0)
    if sc.run.num_requests is not None:
        requests = min(requests, sc.run.num_requests) if requests else sc.run.num_requests
    requests = max(requests, clients)
    bin_s = sc.run.step_log_bin_s
    if until is None:  # until the requests are done: at most a step per token of theirs
        step_rows = requests * 64
        if bin_s is not None and rate > 0:  # time bins: as many as the arrivals take
            step_rows = min(step_rows, _count(requests / rate / bin_s) + 1)
    else:
        step_rows = _count(until / max(float(cost.step_time(StepWork())), 1e-6))
        if bin_s is not None:
            step_rows = min(step_rows, _count(until / bin_s) + 1)
    return RunSize(
        clients, requests, step_rows * replicas, closed_rate / rate if rate > 0 else 0.0, replicas, engine_bytes
    )


# Beyond any machine: what a count estimated from extreme settings (a rate of 1e308 requests/s, a
# peak-to-trough ratio whose peak is inf/inf) is taken as, so the guard names the field instead.
HUGE = 2**62


def _count(x: float) -> int:
    """An estimated count as an integer, however large or ill-defined the float it comes from."""
    return HUGE if not x < HUGE else max(int(x), 0)


def _n(count: int) -> str:
    """A count as a reader takes it in: with thousands separators, or past a trillion as 4.6e+18."""
    return f"{count:,}" if count < 10**12 else f"{count:.2g}"


def _physical_memory() -> int:
    try:
        return os.sysconf("SC_PAGE_SIZE") * os.sysconf("SC_PHYS_PAGES")
    except (ValueError, OSError, AttributeError):
        return 16 << 30


def check_size(sc: Scenario, size: RunSize) -> None:
    """Refuse a run that would need more than half of this machine's memory, naming the field that
    drives it: the replicas, the closed-loop clients, or the run's length (its duration, its request
    limit, or its trace)."""
    limit = _physical_memory() // 2
    if size.bytes <= limit:
        return
    cap = f"about {size.bytes / 2**30:,.1f} GB, more than half of this machine's {2 * limit / 2**30:,.0f} GB"
    parts = {
        "replicas": size.engine_bytes,
        "clients": size.clients * CLIENT_BYTES,
        "requests": size.requests * REQUEST_BYTES,
        "steps": size.step_rows * STEP_ROW_BYTES,
    }
    worst = max(parts, key=cast(Callable[[str], int], parts.get))
    if worst == "replicas" and size.replicas == 1:  # one engine's block tables: a pool of extreme size
        e = sc.engine
        if e.num_gpu_blocks_override is not None:
            raise ConfigError(
                f"engine.num_gpu_blocks_override: the KV pool's block tables need {cap} (got {e.num_gpu_blocks_override})"
            )
        raise ConfigError(f"hardware.gpu: the KV pool this GPU's memory gives needs {cap} (got {sc.hardware.gpu!r})")
    if worst == "replicas":
        if sc.disaggregation is not None:
            d = sc.disaggregation
            raise ConfigError(
                f"disaggregation.prefill, .decode: {size.replicas:,} replicas need {cap} (their engines "
                f"alone) (got prefill {d.prefill!r}, decode {d.decode!r})"
            )
        raise ConfigError(
            f"cluster.replicas: {size.replicas:,} replicas need {cap} (their engines alone) "
            f"(got {cast(ClusterConfig, sc.cluster).replicas!r})"
        )
    if worst == "clients" or parts["clients"] > limit:  # too many clients, however short the run
        raise ConfigError(
            f"workload.arrival.concurrency: {_n(size.clients)} closed-loop clients, submitting about "
            f"{_n(size.requests)} requests in the run, need {cap} (got {size.clients})"
        )
    until = run_duration(sc)
    steps = f"a per-step log of up to {_n(size.step_rows)} steps"
    if size.replicas > 1:
        steps += f" ({_n(size.step_rows // size.replicas)} for each of {size.replicas:,} replicas)"
    if until is not None:  # the run's length decides how much it holds
        length = f"{sc.run.duration_s!r}" if sc.run.duration_s is not None else f"none: {until:g} s by default"
        if worst == "requests":
            raise ConfigError(
                f"run.duration_s: up to {_n(size.requests)} requests in {until:g} s need {cap}; shorten "
                f"the run, lower the rate or concurrency, or set run.num_requests (got {length})"
            )
        raise ConfigError(
            f"run.duration_s: {steps} needs {cap}; set run.step_log_bin_s (a row per time bin) or "
            f"shorten the run (got {length})"
        )
    if sc.run.num_requests is None:  # a trace replayed to its end
        raise ConfigError(
            f"workload.trace: its {_n(size.requests)} requests ({steps} to finish them) need {cap}; set "
            f"run.num_requests or run.duration_s to replay part of it (got {sc.workload.trace!r})"
        )
    if worst == "requests":
        raise ConfigError(f"run.num_requests: {_n(size.requests)} requests need {cap} (got {sc.run.num_requests})")
    raise ConfigError(
        f"run.num_requests: finishing {_n(size.requests)} requests may take {steps}, which needs {cap}; "
        f"set run.step_log_bin_s (a row per time bin), run.duration_s or fewer requests "
        f"(got {sc.run.num_requests})"
    )
