"""``servesim validate``'s verdict: each check against its stated target, met or not, judged on the
held-out runs (those no constant was fitted on), the largest errors named.

The checks and their targets are written once, here (``CHECKS``); the README's validation table is
generated from the same (tools/docs/regenerate.py). A target is either a median absolute error
(``median``: the held-out runs' median within it) or a share of runs (``every``: each held-out run
within the tolerance). Confounded runs and runs that could not be simulated are shown elsewhere and
not counted.
"""

from __future__ import annotations

import math
from dataclasses import dataclass


@dataclass(frozen=True)
class Check:
    name: str  # what is compared
    source: str  # "recorded", "public", "kv", "kv_recorded", "preemptions"
    metric: str  # the RunResult metric (or "" for the KV pool and preemptions)
    rule: str  # "median": the median absolute error within ``tolerance``; "every": each run within it
    tolerance: float  # a relative error (0.10: 10%); for "preemptions", a factor (2: within 2x)

    @property
    def target(self) -> str:
        if self.source == "preemptions":
            return f"each within {self.tolerance:g}x"
        return f"median within {self.tolerance:.0%}" if self.rule == "median" else f"each within {self.tolerance:.0%}"


CHECKS = (
    Check("recorded servers: output throughput", "recorded", "output_throughput", "every", 0.10),
    Check("recorded servers: p50 TPOT", "recorded", "median_tpot_ms", "every", 0.10),
    Check("recorded servers: p50 TTFT", "recorded", "median_ttft_ms", "median", 0.25),
    Check("recorded servers: preemptions where the server preempted", "preemptions", "", "every", 2.0),
    Check("recorded servers: KV pool", "kv_recorded", "", "every", 0.02),
    Check("public runs: output throughput", "public", "output_throughput", "median", 0.10),
    Check("public runs: mean TTFT", "public", "mean_ttft_ms", "median", 0.15),
    Check("public runs: mean TPOT", "public", "mean_tpot_ms", "median", 0.10),
    Check("public start-up logs: KV pool", "kv", "", "every", 0.02),
)
SHOWN = 3  # the largest errors named per check


@dataclass(frozen=True)
class Outcome:
    check: Check
    met: bool
    runs: int  # held-out runs counted
    within: int  # of them, within the tolerance
    median: float  # their median absolute error (nan for preemptions)
    worst: tuple[tuple[str, float], ...]  # the largest errors: (run, signed error or factor)

    def line(self) -> str:
        c = self.check
        if not self.runs:  # a selection (--only) without a held-out run this check could judge
            return f"no run   {c.name}: none of the held-out runs selected could be judged (target: {c.target})"
        if c.source == "preemptions":
            got = f"{self.within} of {self.runs} runs within {c.tolerance:g}x"
        elif c.rule == "median":
            got = f"median error {self.median:.1%} over {self.runs} runs ({self.within} within {c.tolerance:.0%})"
        else:
            got = f"{self.within} of {self.runs} within {c.tolerance:.0%}, median error {self.median:.1%}"
        return f"{'met    ' if self.met else 'NOT MET'}  {c.name}: {got} (target: {c.target})"

    def worst_line(self) -> str:
        c = self.check
        if c.source == "preemptions":
            shown = [
                f"{run} x{f:.2f}" + (" !" if not 1 / c.tolerance <= f <= c.tolerance else "") for run, f in self.worst
            ]
        else:
            shown = [f"{run} {e:+.1%}" + (" !" if abs(e) > c.tolerance else "") for run, e in self.worst]
        return "           largest: " + "; ".join(shown) if shown else ""


def judge(check: Check, errors: list[tuple[str, float]]) -> Outcome:
    """``check`` on the held-out ``errors`` (run, signed relative error; for preemptions, run and the
    simulated over the measured count)."""
    if check.source == "preemptions":

        def off(f: float) -> float:
            return max(f, 1 / f) if f > 0 else math.inf

        within = sum(off(f) <= check.tolerance for _, f in errors)
        worst = tuple(sorted(errors, key=lambda e: -off(e[1]))[:SHOWN])
        return Outcome(check, within == len(errors) and bool(errors), len(errors), within, math.nan, worst)
    errs = sorted(abs(e) for _, e in errors)
    med = _median(errs)
    within = sum(e <= check.tolerance for e in errs)
    met = bool(errs) and (med <= check.tolerance if check.rule == "median" else within == len(errs))
    worst = tuple(sorted(errors, key=lambda e: -abs(e[1]))[:SHOWN])
    return Outcome(check, met, len(errs), within, med, worst)


def _median(xs: list[float]) -> float:
    if not xs:
        return math.nan
    k = len(xs) // 2
    return xs[k] if len(xs) % 2 else 0.5 * (xs[k - 1] + xs[k])


def counted(results, split: str = "heldout") -> list:
    """The runs of ``split`` that count: simulated, not confounded."""
    return [r for r in results if r.split == split and not r.confounded and not r.error]


def outcomes(
    public=None,
    recorded=None,
    kv: list[dict] | None = None,
    kv_recorded: list[dict] | None = None,
    split: str = "heldout",
) -> list[Outcome]:
    """The checks that the given results allow (``public``, ``recorded``: RunResults; ``kv``,
    ``kv_recorded``: KV-pool rows), each judged on the runs of ``split`` (the held-out ones; the
    calibration ones show how well the fit itself went)."""
    out = []
    for c in CHECKS:
        if c.source in ("recorded", "public"):
            results = recorded if c.source == "recorded" else public
            if results is None:
                continue
            errors = [(r.id, r.rel_error(c.metric)) for r in counted(results, split)]
            errors = [(i, e) for i, e in errors if not math.isnan(e)]
        elif c.source == "preemptions":
            if recorded is None:
                continue
            errors = [
                (r.id, r.detail["num_preemptions"] / r.detail["server_preemptions"])
                for r in counted(recorded, split)
                if r.detail and r.detail.get("server_preemptions")
            ]
        else:
            rows = kv_recorded if c.source == "kv_recorded" else kv
            if rows is None:
                continue
            errors = [(f"{r['id']}", float(r["error"])) for r in rows if r["split"] == split]
        out.append(judge(c, errors))
    return out


def report(found: list[Outcome], features: list[float] | None = None, counted: str = "") -> list[str]:
    """The short report: a headline, what was replayed (``counted``), a line per check (met / NOT
    MET) with its largest errors, and the feature checks (their median errors), which have no stated
    target."""
    if not found and not features:
        return []
    met = sum(o.met for o in found)
    judged = [o for o in found if o.runs]
    lines = [
        f"Verdict on the held-out runs: {met} of {len(judged)} checks meet their targets"
        + (f" ({len(found) - len(judged)} with no run to judge)" if len(judged) < len(found) else "")
    ]
    if counted:
        lines.append(f"  {counted}.")
    for o in found:
        lines.append("  " + o.line())
        if o.worst_line():
            lines.append(o.worst_line())
    if features:
        lines.append(
            f"  (no target)  vLLM features against public measurements: median errors {min(features):.1%} to "
            f"{max(features):.1%} over {len(features)} comparisons (report.txt lists them)"
        )
    lines.append("  (an error is servesim's figure over the measured one, less 1; '!': beyond the check's tolerance)")
    return lines
