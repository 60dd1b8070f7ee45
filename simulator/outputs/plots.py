"""Plots of one run or several overlaid: KV-cache usage and output throughput over time.

Drawn with matplotlib's object API on its Agg canvas (no pyplot: no GUI back-end to find, and a
much cheaper import). A run's series is steps.csv's columns: a mapping of arrays or a DataFrame.

Text is set in DejaVu Sans, which matplotlib ships (Latin, Greek, Cyrillic and many symbols),
followed by wider fonts where the machine has them (``FALLBACK_FONTS``), whatever a user's
matplotlibrc says; a character none of them has is written as its code point ([U+4E2D]) rather than
drawn as an empty box, and a name with dollar signs is text, not mathematics.
"""

from __future__ import annotations

import functools
import os
import tempfile
import textwrap
from pathlib import Path

import matplotlib
import numpy as np
from matplotlib import font_manager
from matplotlib.backends.backend_agg import FigureCanvasAgg
from matplotlib.figure import Figure
from matplotlib.ft2font import FT2Font
from matplotlib.text import Text

from simulator.metrics import default_window, throughput_series
from simulator.outputs.figures import share
from simulator.outputs.writers import publish

COLORS = ["#8c564b", "#2ca02c", "#1f77b4", "#d62728", "#9467bd", "#ff7f0e", "#17becf", "#7f7f7f", "#bcbd22", "#e377c2"]


FALLBACK_FONTS = ("Noto Sans", "Noto Sans CJK SC", "Noto Sans CJK JP", "Noto Sans Symbols 2", "Arial Unicode MS")
_INSTALLED = {f.name for f in font_manager.fontManager.ttflist}
FONTS = ["DejaVu Sans", *(f for f in FALLBACK_FONTS if f in _INSTALLED)]
matplotlib.rcParams["font.family"] = FONTS


@functools.cache
def _faces() -> list:
    return [
        FT2Font(font_manager.findfont(font_manager.FontProperties(family=f), fallback_to_default=False)) for f in FONTS
    ]


@functools.cache
def _drawable(ch: str) -> bool:
    return ch in "\n\t" or any(face.get_char_index(ord(ch)) for face in _faces())


def _readable(fig) -> None:
    """Every text of ``fig`` as the module docstring says: no mathematics, no empty boxes."""
    for t in fig.findobj(Text):
        t.set_parse_math(False)
        s = t.get_text()
        if s and not all(_drawable(ch) for ch in s):
            t.set_text("".join(ch if _drawable(ch) else f"[U+{ord(ch):04X}]" for ch in s))


def gpu_colors(gpus) -> dict[str, str]:
    """A colour per GPU, the same in every plot of one plan (by the GPUs' sorted names)."""
    return {g: COLORS[i % len(COLORS)] for i, g in enumerate(sorted(set(gpus)))}


def _figure(figsize: tuple[float, float], rows: int = 1, cols: int = 1):
    fig = Figure(figsize=figsize)
    FigureCanvasAgg(fig)
    axes = fig.subplots(rows, cols)
    return fig, axes


def _save(fig, path: Path) -> None:
    """Write the PNG via a temporary file, cropped to what is drawn: no label, tick or title is cut
    off, however wide the numbers or long the title."""
    path = Path(path)
    _readable(fig)
    fd, tmp = tempfile.mkstemp(dir=path.parent, prefix=f".{path.stem}.", suffix=".png")
    os.close(fd)
    try:
        fig.savefig(tmp, dpi=110, bbox_inches="tight", metadata={"Software": None}, pil_kwargs={"compress_level": 3})
        publish(tmp, path)
    finally:
        if os.path.exists(tmp):
            os.unlink(tmp)


def _wrap(title: str, width: int) -> str:
    """``title`` in lines of at most ``width`` characters: a long one (a fleet's, a recommendation)
    would otherwise run past the figure's edges."""
    return "\n".join(textwrap.fill(line, width) for line in title.split("\n"))


def _usage_series(steps, points: int = 2000) -> tuple[np.ndarray, np.ndarray]:
    """Usage (%) over time, thinned to at most ``points`` samples (the max per bucket keeps the peaks).
    A binned step log's rows are means over their bins, so they are placed at the bins' centres."""
    t = np.asarray(steps["start"], np.float64)
    if "bin" in steps:
        t = t + 0.5 * np.asarray(steps["duration"], np.float64)
    u = np.asarray(steps["kv_usage"], np.float64) * 100
    if len(t) <= points:
        return t, u
    b = (t / (t[-1] + 1e-9) * points).astype(np.int64)
    first = np.flatnonzero(np.diff(b, prepend=-1))  # rows are in time order: each bucket is one run
    counts = np.diff(np.append(first, len(b)))
    return np.add.reduceat(t, first) / counts, np.maximum.reduceat(u, first)


def plot_kv_usage(
    runs: list[tuple[str, object]], path: Path, title: str, warmup_s: float = 0.0, end_s: float = 0.0
) -> None:
    fig, ax = _figure((9, 4.2))
    for i, (label, steps) in enumerate(runs):
        t, u = _usage_series(steps)
        ax.plot(t, u, color=COLORS[i % len(COLORS)], lw=1.3, label=label)
    ax.set_ylim(0, 105)
    ax.axhline(100, color="grey", lw=0.8, ls=":")
    _decorate(ax, title, "KV-cache usage (%)", warmup_s, runs, end_s)
    _save(fig, path)


def _end(steps) -> float:
    start, dur = np.asarray(steps["start"], np.float64), np.asarray(steps["duration"], np.float64)
    return float((start + dur).max()) if len(start) else 0.0


def plot_throughput(
    runs: list[tuple[str, object]],
    path: Path,
    title: str,
    warmup_s: float = 0.0,
    end_s: float = 0.0,
    window_s: float | None = None,
    total: bool = False,
) -> None:
    """Throughput over time, a line per run; ``total``: the runs are one fleet's replicas, and their
    sum is drawn too."""
    end = max([_end(s) for _, s in runs] + [end_s, 1e-9])
    w = window_s or default_window(end)
    fig, ax = _figure((9, 4.2))
    top = 0.0
    fleet = None
    for i, (label, steps) in enumerate(runs):
        ts = throughput_series(steps, w, end)
        ax.plot(
            ts["time_s"],
            ts["output_tokens_per_s"],
            color=COLORS[i % len(COLORS)],
            lw=1.0 if total else 1.3,
            label=label,
        )
        top = max(top, float(ts["output_tokens_per_s"].max()))
        fleet = ts["output_tokens_per_s"] if fleet is None else fleet + ts["output_tokens_per_s"]
    if total and fleet is not None:
        ax.plot(ts["time_s"], fleet, color="black", lw=1.8, label="all replicas")
        top = max(top, float(fleet.max()))
        runs = [*runs, ("all replicas", None)]
    ax.set_ylim(0, top * 1.1 + 1)
    _decorate(ax, f"{title} ({w:g} s windows)", "output throughput (tokens/s)", warmup_s, runs, end_s)
    _save(fig, path)


def _decorate(ax, title: str, ylabel: str, warmup_s: float, runs, end_s: float = 0.0) -> None:
    ax.set_title(_wrap(title, 95), fontsize=11)
    ax.set_xlabel("simulated time (s)")
    ax.set_ylabel(ylabel)
    ax.grid(alpha=0.3)
    if not any(
        s is not None and len(s["start"]) for _, s in runs
    ):  # nothing ran: say so on an axis of the run's length
        ax.set_xlim(0, max(end_s, warmup_s, 1.0))
        ax.text(
            0.5,
            0.5,
            "no engine step ran (nothing was admitted)",
            transform=ax.transAxes,
            ha="center",
            va="center",
            color="#555555",
        )
    if warmup_s > 0:
        ax.axvspan(0, warmup_s, color="grey", alpha=0.12, lw=0, label="warm-up (not measured)")
    if len(runs) > 3:  # many series: keep the legend off the lines
        ax.legend(loc="center left", bbox_to_anchor=(1.01, 0.5), fontsize=9, frameon=False)
    elif len(runs) > 1 or warmup_s > 0:
        ax.legend(loc="best", fontsize=9, framealpha=0.9)


def _shade_band(ax, sub, x: str, col: str, color: str, labelled: bool, named: bool = False) -> bool:
    """``servesim sweep --band``: each point's range of ``col`` across the catalog's hosts shaded, or,
    on a named host (``named``), servesim's own error given the host (labelled once over the panels:
    ``labelled``); whether there was one to shade."""
    lo, hi = f"band.{col}.lo", f"band.{col}.hi"
    if lo not in sub or not sub[lo].notna().any() or (sub[lo] == sub[hi]).all():
        return False
    if named:
        label = None if labelled else "servesim's own error given the host"
    else:
        label = None if labelled else "across the catalog's hosts (throughput: and servesim's own error)"
    ax.fill_between(sub[x], sub[lo], sub[hi], color=color, alpha=0.15, lw=0, label=label)
    return True


def plot_sweep_metrics(df, knobs: list[str], path: Path, title: str, rec: dict) -> None:
    """Throughput, p99 TTFT, p99 TPOT and preemptions against the first swept knob (a line per value
    of the second), the swept values on the axis; the recommended point starred (one per situation
    where the recommendation depends on it), or, for a sweep of the workload alone, the load with the
    most throughput and no preemption marked."""
    from matplotlib.ticker import FuncFormatter, MaxNLocator, NullLocator

    x = f"param:{knobs[0]}"
    group = f"param:{knobs[1]}" if len(knobs) > 1 else None
    ticks = None
    values = list(df[x])
    position = {}
    if not all(isinstance(v, (int, float)) and not isinstance(v, bool) for v in values):
        # Values that are not numbers (mappings, names): one position each, in the order swept.
        names = list(dict.fromkeys(_flow(v) for v in values))
        position = {n: i for i, n in enumerate(names)}
        df = df.assign(**{x: [position[_flow(v)] for v in values]})
        ticks = ["\n".join(textwrap.wrap(n, 28)) for n in names]

    def at(v):
        return position[_flow(v)] if position else v

    def row_of(pick: dict):
        """The rows of a recommended point (its first knob's value, and its second's where it names one)."""
        return df[(df[x] == at(pick[x])) & ((df[group] == pick[group]) if group in pick else True)]

    picks = [rec["best_no_preemption"]] if x in rec.get("best_no_preemption", {}) else []
    picks += rec.get("best_per_situation", [])
    # With an SLO: the point with the most goodput marked apart, and the targets drawn on their panels.
    slo_pick = rec["best_goodput"] if x in rec.get("best_goodput", {}) else None
    # ... and, where it misses the targets on the slowest host, the point that holds them on every host.
    host_pick = rec["best_every_host"] if x in rec.get("best_every_host", {}) else None
    targets = rec.get("slo_targets", {})
    load = rec.get("highest_without_preemption", {})
    # Points that hold different numbers of GPUs were ranked per GPU (simulator.planning.sweep): so is the panel.
    per_gpu = "ranked_by" in rec and "output_throughput_per_gpu" in df
    panels = [
        ("output_throughput_per_gpu", "output throughput per GPU (tokens/s)")
        if per_gpu
        else ("output_throughput", "output throughput (tokens/s)"),
        ("p99_ttft_ms", "p99 TTFT (ms)"),
        ("p99_tpot_ms", "p99 TPOT (ms)"),
        ("num_preemptions", "preemptions in the window"),
    ]
    fig, axes = _figure((11, 7), 2, 2)
    groups = [(None, df)] if group is None else list(df.groupby(group))
    thousands = FuncFormatter(lambda v, _p: f"{v:,.0f}")
    banded = False
    named = bool((rec.get("host_band") or {}).get("named"))  # a named host's band, not the hosts' spread
    for ax, (col, label) in zip(axes.ravel(), panels):
        for i, (g, sub) in enumerate(groups):
            sub = sub.sort_values(x)
            lab = None if g is None else f"{knobs[1].split('.')[-1]}={g}"
            color = COLORS[(i + 1) % len(COLORS)]
            ax.plot(sub[x], sub[col], "o-", color=color, lw=1.5, ms=5, label=lab)
            banded = _shade_band(ax, sub, x, col, color, banded, named) or banded
        for j, pick in enumerate(picks):
            row = row_of(pick)
            if len(row):
                ax.plot(
                    row[x].iloc[:1],
                    row[col].iloc[:1],
                    "*",
                    ms=15,
                    color="gold",
                    mec="black",
                    zorder=5,
                    label="recommended" if j == 0 else None,
                )
        for pick, marker, ms, colour, what in (
            (slo_pick, "D", 9, "#1f77b4", "most goodput within the SLO"),
            (host_pick, "s", 13, "#9467bd", "within the SLO on every host"),
        ):
            row = row_of(pick) if pick is not None else None
            if row is not None and len(row):
                ax.plot(
                    row[x].iloc[:1], row[col].iloc[:1], ls="none", marker=marker, ms=ms, mfc="none", mec=colour,
                    mew=2, zorder=6, label=what,
                )  # fmt: skip
        if col in targets:
            ax.axhline(targets[col], color="#d62728", ls=":", lw=1.4, label="SLO target")
        if x in load:
            ax.axvline(at(load[x]), color="#2ca02c", ls="--", lw=1.2, label="most throughput, no preemption")
        ax.set_xlabel(knobs[0])
        if ticks is not None:
            ax.set_xticks(range(len(ticks)), ticks, fontsize=7)
        else:
            xs = sorted(df[x].unique())
            if xs[0] > 0 and xs[-1] / xs[0] > 16:  # values a power of two or more apart: a log axis
                ax.set_xscale("log", base=2)
            if len(xs) <= 12:  # the swept values themselves
                ax.set_xticks(xs, [f"{v:g}" for v in xs], fontsize=8, rotation=45 if len(xs) > 6 else 0)
                ax.xaxis.set_minor_locator(NullLocator())
        ax.set_ylabel(label)
        ax.grid(alpha=0.3)
        if col == "num_preemptions":
            ax.yaxis.set_major_locator(MaxNLocator(integer=True))
            ax.set_ylim(0, max(float(df[col].max()) * 1.1, 1))
        elif col.endswith("_ms"):
            ax.set_ylim(bottom=0)
        if col in ("output_throughput", "output_throughput_per_gpu", "p99_ttft_ms"):
            ax.yaxis.set_major_formatter(thousands)
        if col in ("output_throughput", "output_throughput_per_gpu"):
            top = df[f"band.{col}.hi"].max() if f"band.{col}.hi" in df else np.nan
            ax.set_ylim(0, max(float(np.nanmax([df[col].max(), top])) * 1.1, 1))
    head = rec.get("label", "recommended")
    text = f"Sweep over {', '.join(knobs)}: {title}\n{head}: {rec.get('text', '')}"
    if slo_pick is not None and rec.get("text_goodput"):
        text += f"\nwith the SLO: {rec['text_goodput']}"
    if host_pick is not None and rec.get("text_every_host"):
        text += f"\nwithin the SLO on every host: {rec['text_every_host']}"
    fig.suptitle(_wrap(text, 130), fontsize=10)
    fig.tight_layout()
    _legend_below(fig, axes)
    _save(fig, path)


def _legend_below(fig, axes) -> None:
    """One legend for the panels, below them (it covers no line and no label): every panel's labels
    once (the SLO's line is on the latency panels only), in one row while it fits the figure's
    width, else in rows of three."""
    seen: dict[str, object] = {}
    for a in axes.ravel():
        for h, lab in zip(*a.get_legend_handles_labels()):
            seen.setdefault(lab, h)
    handles, labels = list(seen.values()), list(seen)
    if handles:
        ncol = min(len(handles), 5) if sum(len(lab) for lab in labels) < 110 else 3
        fig.legend(handles, labels, loc="upper center", bbox_to_anchor=(0.5, 0.0), ncol=ncol, fontsize=9)


SPEC_METHOD = "engine.speculative_config.method"
OFFLOAD_SIZE = "engine.kv_offloading_size"


def feature_plots(knobs: list[str], df) -> list[str]:
    """The feature plots a sweep's grid makes sense of: the speculative-decoding speed-up (methods,
    ``none`` among them, against a second swept field) and KV offloading's hit rates by tier (its
    size the only swept field)."""
    names = []
    if SPEC_METHOD in knobs and len(knobs) == 2 and "none" in set(df[f"param:{SPEC_METHOD}"]):
        names.append("spec_decode_speedup.png")
    if knobs == [OFFLOAD_SIZE]:
        names.append("kv_offload.png")
    return names


def plot_spec_speedup(df, knobs: list[str], path: Path, title: str) -> None:
    """Output throughput with each drafting method over that without (``none``) at each value of the
    other swept field (the batch: the workload's concurrency, say)."""
    m = f"param:{SPEC_METHOD}"
    other = next(k for k in knobs if k != SPEC_METHOD)
    x = f"param:{other}"
    ok = df[df["status"] == "ok"]
    base = {v: t for v, t in zip(ok[ok[m] == "none"][x], ok[ok[m] == "none"]["output_throughput"])}
    fig, ax = _figure((8, 4.4))
    methods = [v for v in dict.fromkeys(ok[m]) if v != "none"]
    for i, method in enumerate(methods):
        sub = ok[(ok[m] == method) & ok[x].isin(list(base))].sort_values(x)
        ratio = [t / base[v] for v, t in zip(sub[x], sub["output_throughput"])]
        ax.plot(sub[x], ratio, "o-", color=COLORS[(i + 2) % len(COLORS)], lw=1.5, label=f"{method} over none")
    ax.axhline(1.0, color="grey", lw=0.8)
    xs = sorted(base)
    if xs and all(isinstance(v, (int, float)) for v in xs):
        if xs[0] > 0 and xs[-1] / xs[0] > 16:
            ax.set_xscale("log", base=2)
        ax.set_xticks(xs, [f"{v:g}" for v in xs])
    ax.set_xlabel(other)
    ax.set_ylabel("output throughput, with drafts / none")
    ax.set_title(_wrap(f"Speculative decoding speed-up against {other.split('.')[-1]}: {title}", 90), fontsize=10)
    ax.grid(alpha=0.3)
    ax.legend(fontsize=9, loc="best", framealpha=0.9)
    _save(fig, path)


def plot_kv_offload(df, path: Path, title: str) -> None:
    """Left: the prompt tokens found cached, on the GPU and in the host tier, against the tier's size
    in GiB. Right: mean and p99 TTFT and the output throughput against it."""
    col = f"param:{OFFLOAD_SIZE}"
    ok = df[df["status"] == "ok"].sort_values(col)
    x = ok[col].astype(float).to_numpy()
    host = ok["kv_offload.host_hit_rate"].fillna(0.0).to_numpy() if "kv_offload.host_hit_rate" in ok else 0 * x
    fig, (a, b) = _figure((12, 4.4), 1, 2)
    a.stackplot(
        x,
        100 * ok["prefix_cache_hit_rate"].to_numpy(),
        100 * host,
        labels=["GPU prefix cache", "host tier (loaded over the host link)"],
        colors=["#1f77b4", "#ff7f0e"],
        alpha=0.85,
    )
    a.set(xlabel=f"{OFFLOAD_SIZE} (GiB of host memory)", ylabel="prompt tokens found cached (%)", ylim=(0, 100))
    a.set_title("Prefix-cache hits by tier", fontsize=10)
    a.legend(loc="upper left", fontsize=8, framealpha=0.9)
    b.plot(x, ok["mean_ttft_ms"], "o-", color="#d62728", label="mean TTFT")
    b.plot(x, ok["p99_ttft_ms"], "s--", color="#9467bd", label="p99 TTFT")
    b.set(xlabel=f"{OFFLOAD_SIZE} (GiB of host memory)", ylabel="TTFT (ms)")
    b.set_ylim(bottom=0)
    b.set_title("Time to first token and throughput", fontsize=10)
    c = b.twinx()
    c.plot(x, ok["output_throughput"], "^-", color="#2ca02c", label="output tok/s")
    c.set_ylabel("output tokens/s", color="#2ca02c")
    c.set_ylim(bottom=0)
    lines, more = b.get_legend_handles_labels(), c.get_legend_handles_labels()
    b.legend(
        lines[0] + more[0], lines[1] + more[1], loc="upper center", bbox_to_anchor=(0.5, -0.16), ncol=3, fontsize=8
    )
    for ax in (a, b):
        ax.grid(alpha=0.3)
        if len(x) <= 12:
            ax.set_xticks(x, [f"{v:g}" for v in x])
    fig.suptitle(_wrap(f"KV offloading: {title}", 120), fontsize=11)
    fig.tight_layout()
    _save(fig, path)


def _flow(v) -> str:
    """A swept value as one line of YAML flow style ({replicas: 6} rather than a Python repr)."""
    import yaml

    return yaml.safe_dump(v, default_flow_style=True, width=10**6).strip().removesuffix("...").strip()


# ---- capacity plans (servesim plan) ----------------------------------------------------------------
def _usd(x: float) -> str:
    return f"${x:,.0f}" if x >= 100 else f"${x:,.2f}"


def _cheapest(rows: list[dict], most: int):
    """Feasible candidates cheapest first, and those to show: the ``most`` cheapest, or with several
    values of the first searched field (models, say) the cheapest of each."""
    ok = sorted(
        (r for r in rows if r["status"] == "ok"), key=lambda r: (r["usd_per_hour"], -r["capacity_rps"] / r["unit_gpus"])
    )
    first = next((k for k in (ok[0] if ok else {}) if k.startswith("param:")), None)
    values = list(dict.fromkeys(str(r[first]) for r in ok)) if first else []
    if len(values) > 1:
        each = max(2, most // len(values))
        return ok, [r for v in values for r in [x for x in ok if str(x[first]) == v][:each]], first, values
    return ok, ok[:most], first, values


def plot_plan_cost(rows: list[dict], rec: dict, spec, path: Path, label) -> None:
    """Left: the cheapest feasible fleets for the target rate, cheapest first, the recommendation
    marked. Right: every feasible candidate's capacity per unit against its price per unit, with the
    Pareto front (no other candidate serves more for less)."""
    ok, shown, first, values = _cheapest(rows, 20)
    best = rec.get("best") or {}
    fig, (a, b) = _figure((13.5, max(4.2, 0.3 * len(shown) + 1.6)), 1, 2)
    gpus = sorted({r["gpu"] for r in ok})
    color = gpu_colors(gpus)
    y = np.arange(len(shown))[::-1]
    is_best = [all(r.get(k) == v for k, v in best.items() if k.startswith("param:")) for r in shown]
    a.barh(
        y,
        [r["usd_per_hour"] for r in shown],
        color=[color[r["gpu"]] for r in shown],
        edgecolor=["black" if m else "none" for m in is_best],
        linewidth=1.6,
    )
    for yi, r, m in zip(y, shown, is_best):
        a.text(
            r["usd_per_hour"],
            yi,
            f"  {_usd(r['usd_per_hour'])}/h, {r['gpus']} GPU{'s' * (r['gpus'] > 1)}"
            + ("  <- recommended" if m else ""),
            va="center",
            fontsize=8,
            fontweight="bold" if m else "normal",
        )
    a.set_yticks(y, [label(r) for r in shown], fontsize=8)
    a.set_xlim(0, 1.45 * max(r["usd_per_hour"] for r in shown))
    a.set_xlabel("fleet cost for the target rate (US$ per hour)")
    infeasible = sum(r["status"] == "infeasible" for r in rows)
    notes = [f"{infeasible} {'candidate cannot' if infeasible == 1 else 'candidates cannot'} meet the targets"] * (
        infeasible > 0
    )
    if len(ok) > len(shown):
        notes.append(f"{len(ok) - len(shown)} more feasible not shown")
    if len(values) > 1:
        notes.append(f"the cheapest of each {first[6:].split('.')[-1]}")
    sub = f"\n({'; '.join(notes)})" if notes else ""
    a.set_title(_wrap(f"Cheapest fleets for {spec.rate:g} req/s{sub}", 80), fontsize=10)
    a.grid(True, axis="x", alpha=0.3)
    from matplotlib.patches import Patch

    # Below the axes, clear of the bars' labels.
    a.legend(
        handles=[Patch(color=color[g], label=g) for g in gpus],
        fontsize=8,
        loc="upper center",
        bbox_to_anchor=(0.5, -0.12 if len(shown) > 8 else -0.16),
        ncol=min(len(gpus), 6),
        frameon=False,
    )
    for g in gpus:
        sel = [r for r in ok if r["gpu"] == g]
        b.scatter(
            [r["unit_usd_per_hour"] for r in sel], [r["capacity_rps"] for r in sel], color=color[g], label=g, s=28
        )
    pts = sorted(((r["unit_usd_per_hour"], r["capacity_rps"]) for r in ok), key=lambda p: (p[0], -p[1]))
    front, top = [], -1.0
    for x, c in pts:
        if c > top:
            front.append((x, c))
            top = c
    b.plot(*zip(*front), color="black", lw=1, ls="--", label="Pareto front")
    if best:
        b.scatter(
            [best["unit_usd_per_hour"]],
            [best["capacity_rps"]],
            marker="*",
            s=260,
            color="gold",
            edgecolor="black",
            zorder=5,
            label="recommended",
        )
    b.set_xlabel("one unit's price (US$ per hour)")
    b.set_ylabel("requests/s one unit sustains within the targets")
    b.set_title("Capacity per unit against price", fontsize=10)
    b.grid(True, alpha=0.3)
    b.legend(fontsize=8, loc="upper left", bbox_to_anchor=(1.01, 1.0), frameon=False)  # beside: clear of every point
    _save(fig, path)


def plot_plan_latency(rows: list[dict], rec: dict, spec, path: Path, label, most: int = 8) -> None:
    """p99 TTFT and p99 TPOT against the probed rate for the cheapest candidates, with the targets."""
    ok = _cheapest(rows, most)[1]
    color = gpu_colors(r["gpu"] for r in rows if r["status"] == "ok")  # as plot_plan_cost colours them
    fig, axes = _figure((13.5, 4.6), 1, 2)
    for ax, key, target, name in (
        (axes[0], "p99_ttft_ms", spec.p99_ttft_ms, "p99 TTFT (ms)"),
        (axes[1], "p99_tpot_ms", spec.p99_tpot_ms, "p99 TPOT (ms)"),
    ):
        nth: dict[str, int] = {}
        for r in ok:
            ps = sorted((q for q in r["_probes"] if q.get(key) is not None), key=lambda q: q["rate"])
            if not ps:
                continue
            # A colour per GPU; the candidates of one GPU told apart by line and marker, so two that
            # measure the same (the same GPU at two max_num_seqs, say) stay visible one over the other.
            k = nth[r["gpu"]] = nth.get(r["gpu"], -1) + 1
            ax.plot(
                [q["rate"] for q in ps],
                [q[key] for q in ps],
                marker="os^Dv"[k % 5],
                ms=3,
                lw=1.2,
                ls=("-", "--", "-.", ":")[k % 4],
                color=color[r["gpu"]],
                label=f"{label(r)} ({r['gpu']})" if r["gpu"] not in label(r) else label(r),
            )
            ax.axvline(r["capacity_rps"], color=color[r["gpu"]], lw=0.6, ls=":")
        if target is not None:
            ax.axhline(target, color="black", lw=1, ls="--", label="target")
        ax.set_xscale("log", base=2)
        ax.set_yscale("log")
        from matplotlib.ticker import FuncFormatter, LogLocator, NullFormatter

        plain = FuncFormatter(lambda v, _p: f"{v:,g}")
        ax.xaxis.set_major_formatter(plain)
        ax.yaxis.set_major_locator(LogLocator(base=10, subs=(1.0, 2.0, 5.0)))  # labels within a decade too
        ax.yaxis.set_major_formatter(plain)
        ax.yaxis.set_minor_formatter(NullFormatter())
        ax.set_xlabel("arrival rate of one unit (requests/s, probed)")
        ax.set_ylabel(name)
        ax.grid(True, which="both", alpha=0.3)
    axes[0].set_title(
        _wrap(f"Latency against load, the {len(ok)} cheapest candidates (dotted: each one's capacity)", 80), fontsize=10
    )
    axes[1].legend(fontsize=7, loc="upper left", bbox_to_anchor=(1.01, 1.0))
    _save(fig, path)


def _arrival_means(fleet, points: int) -> tuple[np.ndarray, np.ndarray, int]:
    """fleet.csv's arrival rate as at most ~``points`` means of ``k`` consecutive readings (a day of
    15-s readings is noise otherwise): (times in s, rates, k). The first row is the start, before
    any reading, and is left out."""
    t = np.asarray(fleet["time"], np.float64)[1:]
    r = np.asarray(fleet["arrivals_per_s"], np.float64)[1:]
    k = max(len(r) // points, 1)
    m = len(r) // k * k
    return t[:m].reshape(-1, k).mean(axis=1), r[:m].reshape(-1, k).mean(axis=1), k


def plot_fleet(fleet, path: Path, title: str, summary: dict) -> None:
    """An autoscaled fleet over time (fleet.csv): replicas serving, starting and draining, with the
    arrival rate; below, the share of requests within the SLO (or, without one, the metric the
    autoscaler reads)."""
    t = np.asarray(fleet["time"], np.float64)
    hours = t[-1] > 3 * 3600 if len(t) else False
    x = t / 3600 if hours else t
    has_slo = "slo_attainment" in fleet
    fig, (top, low) = _figure((9, 6.2), rows=2)
    serving = np.asarray(fleet["serving"], np.float64)
    starting = np.asarray(fleet["starting"], np.float64)
    draining = np.asarray(fleet["draining"], np.float64)
    top.stackplot(
        x,
        serving,
        starting,
        draining,
        step="post",
        colors=["#1f77b4", "#ff7f0e", "#bbbbbb"],
        labels=["serving", "starting (cold)", "draining"],
        alpha=0.85,
    )
    top.set_ylabel("replicas")
    top.set_ylim(0, max(float((serving + starting + draining).max()) if len(t) else 1.0, 1.0) * 1.4)
    rate = top.twinx()
    t_rate, arrivals, k = _arrival_means(fleet, 200)
    label = "arrivals" + (f" ({k} readings' mean)" if k > 1 else "")
    rate.plot(t_rate / 3600 if hours else t_rate, arrivals, color="black", lw=1.0, label=label)
    rate.set_ylabel("arrivals (requests/s)")
    rate.set_ylim(0, max(float(arrivals.max()) if len(arrivals) else 1.0, 1e-9) * 1.4)
    handles = top.get_legend_handles_labels()
    more = rate.get_legend_handles_labels()
    top.legend(handles[0] + more[0], handles[1] + more[1], loc="upper left", fontsize=8, ncol=4, framealpha=0.9)
    a = summary.get("autoscaler", {})
    cost = summary.get("cost_usd")
    top.set_title(
        _wrap(
            f"{title}\n{summary.get('gpu_hours', 0):,.1f} GPU-hours"
            + (f", ${cost:,.0f}" if cost is not None else "")
            + f"; {a.get('scale_ups', 0)} scale-ups, {a.get('scale_downs', 0)} scale-downs, "
            f"cold start {a.get('cold_start_s', 0):.0f} s",
            95,
        ),
        fontsize=11,
    )
    top.grid(alpha=0.3)
    if has_slo:
        within = np.asarray(fleet["slo_attainment"], np.float64) * 100
        low.plot(x, within, color="#2ca02c", lw=1.2, drawstyle="steps-pre")
        low.set_ylim(0, 105)
        low.set_ylabel("requests within SLO (%)")
        overall = summary.get("slo_attainment")
        if overall is not None:
            low.axhline(overall * 100, color="grey", lw=0.8, ls=":", label=f"whole run: {share(overall)}")
            low.legend(loc="lower left", fontsize=8)
    else:
        low.plot(x, np.asarray(fleet["metric"], np.float64), color="#9467bd", lw=1.2, drawstyle="steps-pre")
        low.set_ylabel("metric per serving replica")
        low.set_ylim(bottom=0)
    low.set_xlabel("simulated time (h)" if hours else "simulated time (s)")
    low.grid(alpha=0.3)
    fig.align_ylabels([top, low])
    _save(fig, path)


def plot_policies(rows: list[dict], fleets: dict, path: Path, title: str) -> None:
    """Fleet policies over the same day (``servesim plan --day``, benchmarks/fleet_day.py): each
    one's replicas (serving + starting) over time from its fleet.csv, a static fleet as a dashed
    line, the arrival rate behind them; the legend gives each one's GPU-hours, cost and SLO share."""
    import pandas as pd

    fig, ax = _figure((9, 4.4))
    rate = None
    top = 1.0
    for i, r in enumerate(rows):
        color = COLORS[(i + 2) % len(COLORS)]
        cost = "" if r.get("cost_usd") is None else f", ${r['cost_usd']:,.2f}"  # (as the plan's table writes them)
        slo = "" if r.get("slo_attainment") is None else f", {share(r['slo_attainment'], 2)} in SLO"
        label = f"{r['policy']}: {r['gpu_hours']:,.1f} GPU-h{cost}{slo}"
        f = fleets.get(r["policy"])
        if f is not None and Path(f).is_file():
            df = pd.read_csv(f)
            held = (df["serving"] + df["starting"]).to_numpy()
            ax.step(df["time"] / 3600, held, where="post", color=color, lw=1.4, label=label)
            top = max(top, float(held.max()))
            if rate is None and len(df) > 1:
                t_rate, arrivals, _ = _arrival_means(df, 300)
                rate = (t_rate / 3600, arrivals)
        else:
            n = float(str(r["replicas"]).split("-")[-1])
            ax.axhline(n, color=color, lw=1.4, ls="--", label=label)
            top = max(top, n)
    ax.set_xlabel("simulated time (h)")
    ax.set_ylabel("replicas (serving + starting)")
    ax.set_ylim(0, top * 1.6)
    ax.grid(alpha=0.3)
    if rate is not None:
        twin = ax.twinx()
        twin.plot(*rate, color="black", lw=0.9, alpha=0.6, label="arrivals")
        twin.set_ylabel("arrivals (requests/s)")
        twin.set_ylim(0, max(float(rate[1].max()), 1e-9) * 1.6)
        twin.legend(loc="upper right", fontsize=8)
    ax.legend(loc="upper left", fontsize=8)
    ax.set_title(_wrap(f"Fleet policies over the run: {title}", 95), fontsize=11)
    _save(fig, path)
