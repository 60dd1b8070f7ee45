"""Results as flat records, and every metric defined once from them (README, "Metrics, defined once").

The measured window is [warmup_s, end of run]. Throughputs count what happened inside it; latency
statistics cover the requests that arrived inside it and completed.
"""

from __future__ import annotations

import math

import numpy as np

from simulator.engine.rules import STATUS_NAMES, RequestStatus
from simulator.engine.step_log import SPEC_STEP_COLUMNS, BinnedStepLog

REQUEST_COLUMNS = [
    "id",
    "client",
    "client_class",
    "status",
    "arrival_s",
    "first_scheduled_s",
    "first_token_s",
    "finish_s",
    "prompt_tokens",
    "output_tokens",
    "cached_tokens",
    "preemptions",
    "recomputed_tokens",
    "swapped_bytes",
    "prefix_group",
    "reject_reason",
]


def request_columns(result) -> dict[str, np.ndarray]:
    """requests.csv: one row per request, as columns."""
    c = result.reqs.columns()
    reasons = result.engine.reject_reasons
    n = len(c["arrival"])
    reason = np.full(n, "", dtype=object)
    for i, text in reasons.items():
        reason[i] = text
    return {
        "id": np.arange(n),
        "client": c["client"],
        "client_class": c["client_class"],
        "status": np.array(STATUS_NAMES, dtype=object)[c["status"]],
        "arrival_s": c["arrival"],
        "first_scheduled_s": c["first_scheduled"],
        "first_token_s": c["first_token"],
        "finish_s": c["finish"],
        "prompt_tokens": c["prompt_len"],
        "output_tokens": c["num_out"],
        "cached_tokens": np.maximum(c["cached_tokens"], 0),
        "preemptions": c["preemptions"],
        "recomputed_tokens": c["recomputed"],
        "swapped_bytes": c["swapped_bytes"],
        "prefix_group": c["group"],
        "reject_reason": reason,
        # A fleet: where each request went.
        **{
            k: c[k]
            for k in ("replica", "prefill_replica", "decode_replica", "transfer_start", "transfer_end")
            if k in c
        },
    }


def step_columns(result) -> dict[str, np.ndarray]:
    """steps.csv: one row per engine step, or per time bin when ``run.step_log_bin_s`` is set
    (then ``start``/``duration`` are the bin's and the counts are sums over its steps); the
    speculative-decoding counts only when some replica drafts."""
    from simulator.engine import speculative  # not at the top: the plot-drawing child imports this module

    log = result.engine.log
    cols = log.columns()
    replicas = getattr(result.engine, "replicas", None)
    scenarios = [r.scenario for r in replicas] if replicas else [result.scenario]
    if not any(speculative.enabled(sc.engine.speculative_config) for sc in scenarios):
        cols = {c: v for c, v in cols.items() if c not in SPEC_STEP_COLUMNS}
    binned = isinstance(log, BinnedStepLog) or getattr(log, "bin_s", None)
    first = (
        ("bin", np.rint(cols["start"] / log.bin_s).astype(np.int64))
        if binned
        else ("step", np.arange(len(cols["start"])))
    )
    return {first[0]: first[1], **cols}


def request_frame(result):
    """requests.csv as a pandas DataFrame (for notebooks and analysis)."""
    import pandas as pd

    return pd.DataFrame(request_columns(result), columns=REQUEST_COLUMNS)


def step_frame(result):
    """steps.csv as a pandas DataFrame (for notebooks and analysis)."""
    import pandas as pd

    return pd.DataFrame(step_columns(result))


def _stats(prefix: str, values_s: np.ndarray) -> dict:
    v = values_s[np.isfinite(values_s)] * 1e3
    if len(v) == 0:
        return {f"mean_{prefix}_ms": None, f"median_{prefix}_ms": None, f"p99_{prefix}_ms": None}
    return {
        f"mean_{prefix}_ms": float(v.mean()),
        f"median_{prefix}_ms": float(np.median(v)),
        f"p99_{prefix}_ms": float(np.percentile(v, 99)),
    }


# ---- per-request latencies, defined once (docs/metrics.md); ``c``: the request columns -------------
def ttft_s(c: dict[str, np.ndarray]) -> np.ndarray:
    """Time to first token: arrival to the first output token reaching the client (NaN: none yet)."""
    return c["first_token"] - c["arrival"]


def tpot_s(c: dict[str, np.ndarray]) -> np.ndarray:
    """Time per output token after the first: (finish - first token) / (output tokens - 1); NaN for
    a request with fewer than two output tokens."""
    out = c["num_out"]
    return (c["finish"] - c["first_token"]) / np.where(out > 1, out - 1, np.nan)


def e2el_s(c: dict[str, np.ndarray]) -> np.ndarray:
    """End-to-end latency: arrival to the last token reaching the client."""
    return c["finish"] - c["arrival"]


def mean_itl(c: dict[str, np.ndarray]) -> float:
    """Mean inter-token latency over every gap between consecutive tokens of a request (the gaps the
    step log's histogram counts): a request's gaps add up to its last token's time minus its first's."""
    out = c["num_out"]
    m = out > 1
    n = int((out[m] - 1).sum())
    return float((c["last_token"][m] - c["first_token"][m]).sum()) / n if n else float("nan")


def kv_offload_summary(result, c: dict, measured: np.ndarray) -> dict:
    """KV offloading: the host tier's share of the prompt tokens (the connector's
    ``external_prefix_cache_hits`` over the queried tokens; the GPU's is ``prefix_cache_hit_rate``),
    its size, and the KV moved each way over the run."""
    prompt = max(float(c["prompt_len"][measured].sum()), 1.0)
    loaded, stored = result.engine.host_counts()
    gib = result.memory.block_bytes * result.scenario.hardware.tensor_parallel_size / 2**30
    return {
        "host_blocks": result.sched_cfg.host_blocks,
        "host_hit_rate": float(c["host_cached_tokens"][measured].sum()) / prompt,
        "loaded_gib": loaded * gib,
        "stored_gib": stored * gib,
    }


def meets_slo(c: dict[str, np.ndarray], slo) -> np.ndarray:
    """Per request: finished with its own TTFT and TPOT within ``slo``'s targets (what goodput counts)."""
    ok = c["status"] == RequestStatus.FINISHED
    if slo.p99_ttft_ms is not None:
        ok &= ttft_s(c) * 1e3 <= slo.p99_ttft_ms
    if slo.p99_tpot_ms is not None:
        ok &= (c["num_out"] <= 1) | (np.nan_to_num(tpot_s(c), nan=0.0) * 1e3 <= slo.p99_tpot_ms)
    return ok


def _host(sc) -> dict:
    """The host the run's CPU costs are priced on: its name and factor (``simulator.scenario.hosts``)."""
    from simulator.scenario.hosts import load_host

    h = load_host(sc.hardware.host)
    return {"name": h.name, "cpu_scale": round(h.scale, 4), "given": sc.hardware.host is not None}


def summarize(result) -> dict:
    sc = result.scenario
    t0 = sc.run.warmup_s
    t1 = result.end_time
    window = max(t1 - t0, 1e-12)
    c = result.reqs.columns()
    status = c["status"]
    fin = status == RequestStatus.FINISHED
    in_win = fin & (c["finish"] >= t0)
    measured = fin & (c["arrival"] >= t0)
    win = result.engine.log.window(t0, t1)
    generated = float(win.num_generated)
    tpot = tpot_s(c)
    step_log = result.engine.log
    s = {
        "scenario": sc.name,
        "model": result.model.name,
        "gpu": result.gpu.key,
        "tensor_parallel_size": sc.hardware.tensor_parallel_size,
        "host": _host(sc),
        # SGLang's names for the running-request cap and the prefill chunk (vLLM's runs keep their keys)
        **(
            {
                "framework": "sglang",
                "max_running_requests": result.sched_cfg.max_num_seqs,
                "chunked_prefill_size": result.sched_cfg.max_num_batched_tokens,
            }
            if sc.engine.framework == "sglang"
            else {
                "max_num_seqs": result.sched_cfg.max_num_seqs,
                "max_num_batched_tokens": result.sched_cfg.max_num_batched_tokens,
            }
        ),
        "num_gpu_blocks": result.engine.num_gpu_blocks,
        "kv_cache_tokens": result.engine.kv_cache_tokens,
        "duration_s": window,
        "request_throughput": float(in_win.sum()) / window,
        "output_throughput": generated / window,
        "total_token_throughput": (float(c["prompt_len"][in_win].sum()) + generated) / window,
    }
    s.update(_stats("ttft", ttft_s(c)[measured]))
    s.update(_stats("tpot", tpot[measured]))
    s.update(
        {
            "mean_itl_ms": mean_itl(c) * 1e3,
            "median_itl_ms": step_log.itl_quantile(0.5) * 1e3,
            "p99_itl_ms": step_log.itl_quantile(0.99) * 1e3,
        }
    )
    s.update(_stats("e2el", e2el_s(c)[measured]))
    s.update(
        {
            # vLLM's prefix-cache hit rate: prompt tokens found cached on the GPU over prompt tokens
            # looked up (for the requests measured, at their first scheduling; the host tier's hits
            # are kv_offload's).
            "prefix_cache_hit_rate": float(
                (np.maximum(c["cached_tokens"][measured], 0) - c["host_cached_tokens"][measured]).sum()
            )
            / max(float(c["prompt_len"][measured].sum()), 1.0),
            "num_preemptions": win.num_preemptions,
            "recomputed_tokens": win.recomputed_tokens,
            "kv_cache_usage_mean": win.kv_usage_mean,
            "kv_cache_usage_max": win.kv_usage_max,
            "num_completed": int(measured.sum()),
            "num_rejected": int(np.count_nonzero(status == RequestStatus.REJECTED)),
            "num_aborted": int(np.count_nonzero(status == RequestStatus.ABORTED)),
            "num_submitted": int(len(status)),
            "num_in_flight_at_end": int(np.count_nonzero(status < RequestStatus.FINISHED)),
            "num_waiting_at_end": int(np.count_nonzero(status == RequestStatus.WAITING)),
            "num_truncated": result.workload_counts.truncated,
            "num_resampled": result.workload_counts.resampled,
            "stopped_by": result.stopped_by,
            "simulated_time_s": t1,
            "num_steps": int(result.engine.num_steps),
        }
    )
    if sc.engine.enable_lora:
        loads, disk = result.engine.lora_counts()
        s["lora"] = {"adapter_loads": loads, "adapter_loads_from_storage": disk}
    if sc.engine.kv_offloading_size:
        s["kv_offload"] = kv_offload_summary(result, c, measured)
    jit_n, jit_s = result.engine.jit_counts()
    if jit_n:  # steps that waited for their shape's kernels to be compiled (cost.shape_key), over the run
        s["jit_compiles"] = {"steps": jit_n, "seconds": jit_s}
    from simulator.engine import speculative  # not at the top: the plot-drawing child imports this module

    if speculative.enabled(sc.engine.speculative_config):
        s["spec_decode"] = spec_decode_summary(result.engine.spec_counts())
    if sc.slo is not None:
        ok = meets_slo(c, sc.slo)
        s["goodput"] = float((ok & in_win).sum()) / window
        s["slo_attainment"] = float((ok & measured).sum()) / max(int(measured.sum()), 1)
    from workloads.factory import class_specs  # not at the top: the plot-drawing child imports this module

    if class_specs(sc.workload)[0].index >= 0:
        s["classes"] = [finite(row) for row in class_report(result)]
    if hasattr(result.engine, "replicas"):  # a fleet: the same for each replica
        s["num_replicas"] = len(result.engine.replicas)
        s.update(result.engine.fleet_summary(t1))
        s["replicas"] = [
            {"replica": r.index, "role": r.role, "label": r.label, **summarize(rr)}
            for r, rr in zip(result.engine.replicas, result.replica_results())
        ]
    return finite(s)


def spec_decode_summary(counts: list[int]) -> dict:
    """vLLM's speculative-decoding counters over the whole run (warm-up included, as a server's
    counters run from its start) and what they mean: tokens a verification outputs on average (the
    accepted drafts and one more) and the share of drafts accepted, overall and at each position."""
    n, drafts, accepted, per_pos = counts[0], counts[1], counts[2], counts[3:]
    return {
        "num_drafts": n,
        "num_draft_tokens": drafts,
        "num_accepted_tokens": accepted,
        "mean_acceptance_length": 1.0 + accepted / n if n else float("nan"),
        "draft_acceptance_rate": accepted / drafts if drafts else float("nan"),
        "acceptance_rate_per_position": [a / n if n else float("nan") for a in per_pos],
    }


def class_report(result) -> list[dict]:
    """One row per class: completed requests in the measured window, p99 TTFT/TPOT (ms), targets, and whether met.

    Window and definitions as in docs/metrics.md: requests that arrived at or after ``run.warmup_s``
    and finished; ``ttft_s`` and ``tpot_s``.
    """
    from workloads.factory import class_specs

    sc = result.scenario
    c = result.reqs.columns()
    ok = (c["status"] == RequestStatus.FINISHED) & (c["arrival"] >= sc.run.warmup_s)
    rows = []
    ttft_all, tpot_all = ttft_s(c), tpot_s(c)
    for s in class_specs(sc.workload):
        sel = ok & (c["client_class"] == s.index)
        ttft = ttft_all[sel] * 1e3
        tpot = tpot_all[sel & (c["num_out"] > 1)] * 1e3
        p99_ttft = float(np.percentile(ttft, 99)) if len(ttft) else float("nan")
        p99_tpot = float(np.percentile(tpot, 99)) if len(tpot) else float("nan")
        slo = s.slo
        row = {
            "class": s.name or "all",
            "client_class": s.index,
            "num_completed": int(sel.sum()),
            "p99_ttft_ms": p99_ttft,
            "p99_tpot_ms": p99_tpot,
            "slo_p99_ttft_ms": slo.p99_ttft_ms if slo else None,
            "slo_p99_tpot_ms": slo.p99_tpot_ms if slo else None,
        }
        met = []
        if slo and slo.p99_ttft_ms is not None:
            met.append(p99_ttft <= slo.p99_ttft_ms)
        if slo and slo.p99_tpot_ms is not None:
            met.append(p99_tpot <= slo.p99_tpot_ms)
        row["slo_met"] = all(met) if met else None
        rows.append(row)
    return rows


def finite(x):
    """``x`` with every non-finite float (at any depth of dicts and lists) as None, for JSON."""
    if isinstance(x, dict):
        return {k: finite(v) for k, v in x.items()}
    if isinstance(x, list):
        return [finite(v) for v in x]
    if isinstance(x, float) and not math.isfinite(x):
        return None
    return x


def throughput_series(steps, window_s: float, end: float) -> dict[str, np.ndarray]:
    """Output tokens per second in consecutive windows; each step's tokens are spread over its
    duration. ``steps``: steps.csv's columns (a mapping or a DataFrame)."""
    nb = max(int(math.ceil(end / window_s)), 1)
    edges = np.arange(nb + 1) * window_s
    start = np.asarray(steps["start"], np.float64)
    stop = start + np.asarray(steps["duration"], np.float64)
    gen = np.asarray(steps["num_generated"], np.float64)
    cum = np.cumsum(gen)
    # Cumulative tokens as a piecewise-linear function of time: flat while idle, rising within a step.
    xp = np.column_stack([start, stop]).ravel()
    fp = np.column_stack([cum - gen, cum]).ravel()
    c = np.interp(edges, xp, fp, left=0.0, right=float(cum[-1]) if len(cum) else 0.0) if len(xp) else np.zeros(nb + 1)
    pre = np.bincount(
        np.minimum((stop / window_s).astype(np.int64), nb - 1),
        weights=np.asarray(steps["num_preemptions"], np.float64),
        minlength=nb,
    )
    return {
        "time_s": edges[:-1] + 0.5 * window_s,
        "output_tokens_per_s": np.diff(c) / window_s,
        "preemptions": pre[:nb],
    }


def default_window(end: float) -> float:
    return float(max(1.0, round(end / 120.0, 1)))
