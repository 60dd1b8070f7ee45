"""Per-client-class latency against each class's SLO (``workload.classes.NAME.slo``)."""

from __future__ import annotations

import numpy as np

from simulator.rules import FINISHED
from workloads.factory import class_specs


def class_report(result) -> list[dict]:
    """One row per class: completed requests in the measured window, p99 TTFT/TPOT (ms), targets, and whether met.

    Window and definitions as in the README's metrics: requests that arrived at or after ``run.warmup_s``
    and finished; TTFT = first token - arrival; TPOT = (finish - first token) / (output tokens - 1).
    """
    sc = result.scenario
    c = result.reqs.columns()
    ok = (c["status"] == FINISHED) & (c["arrival"] >= sc.run.warmup_s)
    rows = []
    for s in class_specs(sc.workload):
        sel = ok & (c["client_class"] == s.index)
        ttft = (c["first_token"][sel] - c["arrival"][sel]) * 1e3
        multi = sel & (c["num_out"] > 1)
        tpot = (c["finish"][multi] - c["first_token"][multi]) / (c["num_out"][multi] - 1) * 1e3
        p99_ttft = float(np.percentile(ttft, 99)) if len(ttft) else float("nan")
        p99_tpot = float(np.percentile(tpot, 99)) if len(tpot) else float("nan")
        slo = s.slo
        row = {"class": s.name or "all", "client_class": s.index, "num_completed": int(sel.sum()),
               "p99_ttft_ms": p99_ttft, "p99_tpot_ms": p99_tpot,
               "slo_p99_ttft_ms": slo.p99_ttft_ms if slo else None, "slo_p99_tpot_ms": slo.p99_tpot_ms if slo else None}
        met = []
        if slo and slo.p99_ttft_ms is not None:
            met.append(p99_ttft <= slo.p99_ttft_ms)
        if slo and slo.p99_tpot_ms is not None:
            met.append(p99_tpot <= slo.p99_tpot_ms)
        row["slo_met"] = all(met) if met else None
        rows.append(row)
    return rows
