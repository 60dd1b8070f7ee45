"""``servesim report RESULTS_DIR``: one self-contained HTML page of a run, a fleet, a sweep or a plan.

The page needs nothing but itself to open (no network, no script): the folder's plots are embedded
as PNG data, a run's latency distributions are drawn here as inline SVG (matplotlib's SVG canvas),
and its tables come from summary.json, sweep.csv, plan.csv and recommendation.json.
"""

from __future__ import annotations

import base64
import html
import io
import json
from pathlib import Path
from typing import Any

import numpy as np

from simulator.errors import ConfigError
from simulator.outputs.figures import share
from simulator.outputs.writers import atomic_write_text

STYLE = """
body{font-family:system-ui,-apple-system,"Segoe UI",sans-serif;margin:2rem auto;max-width:980px;color:#222;padding:0 1rem}
h1{font-size:1.5rem;margin-bottom:.2rem} h2{font-size:1.15rem;margin-top:2rem;border-bottom:1px solid #ddd}
.sub{color:#666;margin-top:0} table{border-collapse:collapse;font-size:.9rem;margin:.5rem 0}
td,th{padding:.25rem .6rem;border-bottom:1px solid #eee;text-align:right} th{background:#f6f6f6}
td:first-child,th:first-child{text-align:left} figure{margin:1rem 0} figure img,figure svg{max-width:100%;height:auto}
.rec{background:#eef6ee;border-left:4px solid #2ca02c;padding:.6rem 1rem} .rec p{margin:.3rem 0}
.wide{overflow-x:auto;max-width:100%} td.text{text-align:left;white-space:normal;min-width:16rem}
"""

# Summary figures shown first, as (key, label, format).
HEADLINE = [
    ("output_throughput", "output throughput (tokens/s)", "{:,.0f}"),
    ("request_throughput", "requests/s finished", "{:,.2f}"),
    ("median_ttft_ms", "TTFT p50 (ms)", "{:,.0f}"),
    ("p99_ttft_ms", "TTFT p99 (ms)", "{:,.0f}"),
    ("median_tpot_ms", "TPOT p50 (ms)", "{:,.1f}"),
    ("p99_tpot_ms", "TPOT p99 (ms)", "{:,.1f}"),
    ("kv_cache_usage_mean", "KV-cache usage, mean", "{:.1%}"),
    ("kv_cache_usage_max", "KV-cache usage, peak", "{:.1%}"),
    ("num_preemptions", "preemptions", "{:,}"),
    ("num_completed", "requests finished", "{:,}"),
    ("slo_attainment", "requests within the SLO", share),
    ("gpu_hours", "GPU-hours", "{:,.1f}"),
    ("cost_usd", "cost (US dollars)", "${:,.2f}"),
    ("simulated_time_s", "simulated time (s)", "{:,.0f}"),
]


def _fmt(fmt, v) -> str:
    """``v`` written by ``fmt``: a format string, or a function (``figures.share``)."""
    if v is None or (isinstance(v, float) and not np.isfinite(v)):
        return "-"
    try:
        return fmt(v) if callable(fmt) else fmt.format(v)
    except (TypeError, ValueError):
        return html.escape(str(v))


def _table(head: list[str], rows: list[list[str]], text_cols: tuple[int, ...] = ()) -> str:
    """A table (cells already escaped) that scrolls sideways inside the page when it is wider;
    ``text_cols``: columns of prose (an error), wrapped and left-aligned."""
    th = "".join(f"<th>{html.escape(h)}</th>" for h in head)
    body = "".join(
        "<tr>"
        + "".join(f'<td class="text">{c}</td>' if i in text_cols else f"<td>{c}</td>" for i, c in enumerate(r))
        + "</tr>"
        for r in rows
    )
    return f'<div class="wide"><table><thead><tr>{th}</tr></thead><tbody>{body}</tbody></table></div>'


def _png(path: Path, alt: str) -> str:
    data = base64.b64encode(path.read_bytes()).decode("ascii")
    return f'<figure><img alt="{html.escape(alt)}" src="data:image/png;base64,{data}"></figure>'


def _svg(fig) -> str:
    buf = io.StringIO()
    fig.savefig(buf, format="svg", bbox_inches="tight", metadata={"Date": None})
    text = buf.getvalue()
    return "<figure>" + text[text.index("<svg") :] + "</figure>"


def latency_svg(requests, warmup_s: float = 0.0) -> str:
    """TTFT and TPOT distributions (empirical CDFs; a log axis where they span more than 20x), as
    SVG, of the requests the summary measures: those that arrived after the warm-up (``warmup_s``)
    and finished; their count and percentiles are the table's, written as the table writes them."""
    from matplotlib.backends.backend_svg import FigureCanvasSVG
    from matplotlib.figure import Figure
    from matplotlib.ticker import FuncFormatter, NullFormatter

    from simulator.metrics import tpot_s, ttft_s

    done = (np.asarray(requests["status"]) == "finished") & (np.asarray(requests["arrival_s"], np.float64) >= warmup_s)
    c = {
        "arrival": np.asarray(requests["arrival_s"], np.float64),
        "first_token": np.asarray(requests["first_token_s"], np.float64),
        "finish": np.asarray(requests["finish_s"], np.float64),
        "num_out": np.asarray(requests["output_tokens"], np.int64),
    }
    fig = Figure(figsize=(9, 3.6))
    FigureCanvasSVG(fig)
    axes = fig.subplots(1, 2)
    plain = FuncFormatter(lambda x, _p: f"{x:,g}")
    for ax, values, name, fmt in zip(axes, (ttft_s(c), tpot_s(c)), ("TTFT", "TPOT"), ("{:,.0f}", "{:,.1f}")):
        v = np.sort(values[done] * 1e3)
        v = v[np.isfinite(v)]
        if len(v):
            step = max(len(v) // 2000, 1)  # at most ~2,000 points: the page stays small
            ax.plot(v[::step], np.arange(1, len(v) + 1)[::step] / len(v) * 100, color="#1f77b4", lw=1.4)
            if v[0] > 0 and v[-1] / v[0] > 20:
                ax.set_xscale("log")
                ax.xaxis.set_major_formatter(plain)
                ax.xaxis.set_minor_formatter(NullFormatter())
            for q, ls in ((50, "--"), (99, ":")):
                at = float(np.median(v)) if q == 50 else float(np.percentile(v, q))  # as the summary computes them
                ax.axvline(at, color="grey", lw=0.8, ls=ls, label=f"p{q} {fmt.format(at)} ms")
            ax.legend(loc="lower right", fontsize=8)
        else:
            ax.text(0.5, 0.5, "no finished request", transform=ax.transAxes, ha="center", color="#555")
        ax.set_xlabel(f"{name} (ms)")
        ax.set_ylabel("requests (%)")
        ax.set_ylim(0, 100)
        ax.grid(alpha=0.3)
        ax.set_title(f"{name} distribution", fontsize=10)
    fig.suptitle(f"The {int(done.sum()):,} requests measured (arrived after the warm-up, finished)", fontsize=10)
    fig.tight_layout()
    return _svg(fig)


def _json(path: Path) -> dict:
    try:
        data = json.loads(path.read_text())
    except json.JSONDecodeError as e:
        raise ConfigError(f"report: {path} is not valid JSON ({e.msg}, line {e.lineno}); run it again") from None
    if not isinstance(data, dict):
        raise ConfigError(f"report: {path} must hold a JSON object (got {type(data).__name__})")
    return data


def _csv(path: Path, usecols: list[str] | None = None):
    import pandas as pd

    try:
        return pd.read_csv(path, usecols=usecols)
    except (ValueError, pd.errors.ParserError) as e:  # a missing column, a damaged row
        raise ConfigError(f"report: {path} cannot be read ({str(e).splitlines()[0]}); run it again") from None


def _run_section(d: Path) -> tuple[str, str]:
    s = _json(d / "summary.json")
    parts = [_table(["figure", "value"], [[label, _fmt(f, s.get(k))] for k, label, f in HEADLINE if k in s])]
    if (d / "bench_compare.csv").is_file():  # a `servesim bench` replay: the benchmark's figures beside
        parts.append("<h2>Against vllm bench serve</h2>" + _bench_table(d / "bench_compare.csv"))
    a = s.get("autoscaler")
    if a is not None:
        parts.append("<h2>Replicas over time</h2>")
        parts.append(
            _table(
                ["cold start (s)", "scale-ups", "scale-downs", "replicas serving (min / mean / max)"],
                [
                    [
                        f"{a['cold_start_s']:.0f}",
                        str(a["scale_ups"]),
                        str(a["scale_downs"]),
                        f"{a['serving_min']} / {a['serving_mean']:.1f} / {a['serving_max']}",
                    ]
                ],
            )
        )
    for name, title in (
        ("fleet.png", "Replicas and load"),
        ("kv_cache_usage.png", "KV-cache usage over time"),
        ("throughput.png", "Output throughput over time"),
    ):
        if (d / name).is_file():
            parts.append(f"<h2>{title}</h2>" + _png(d / name, title))
    if (d / "requests.csv").is_file():
        req = _csv(d / "requests.csv", ["status", "arrival_s", "first_token_s", "finish_s", "output_tokens"])
        # (the window's start: the run's end less its length, rounded back to the warm-up it was)
        warm = round(float(s.get("simulated_time_s", 0.0)) - float(s.get("duration_s", 0.0)), 6)
        parts.append("<h2>Latency distributions</h2>" + latency_svg(req, warm))
    reps = s.get("replicas")
    if reps:
        parts.append("<h2>Replicas</h2>")
        keys = [("output_throughput", "{:,.0f}"), ("median_ttft_ms", "{:,.0f}"), ("kv_cache_usage_mean", "{:.1%}")]
        rows = [[html.escape(r["label"])] + [_fmt(f, r.get(k)) for k, f in keys] for r in reps[:64]]
        parts.append(_table(["replica", "out tok/s", "TTFT p50 ms", "KV mean"], rows))
        if len(reps) > 64:
            parts.append(f"<p>... and {len(reps) - 64} more (summary.json has them all)</p>")
    kind = "fleet" if reps else "run"
    return f"{kind} {s.get('scenario', d.name)}: {s.get('model', '?')} on {s.get('gpu', '?')}", "".join(parts)


def _bench_table(path: Path) -> str:
    """A ``servesim bench`` replay's comparison (bench_compare.csv): each figure measured, servesim's,
    and servesim's error."""
    from simulator.outputs.bench_table import ROWS, error

    labels = dict(ROWS)
    rows = []
    for r in _csv(path).itertuples(index=False):
        m, sim = _plain(r.vllm_bench), _plain(r.servesim)
        err = error(m, sim)
        rows.append(
            [
                html.escape(labels.get(r.metric, r.metric)),
                _fmt("{:,.2f}", m),
                _fmt("{:,.2f}", sim),
                _fmt("{:+.1%}", err),
            ]
        )
    return _table(["figure", "vllm bench", "servesim", "error"], rows, (0,))


def _recommendation(d: Path) -> str:
    """The folder's recommendation as a banner of sentences: each line of its texts (the choice,
    the runner-up, with the SLO, its band across hosts, the cheapest) a paragraph starting with a
    capital and ending with a full stop."""
    f = d / "recommendation.json"
    if not f.is_file():
        return ""
    rec = _json(f)
    texts = [rec.get(k) for k in ("text", "text_goodput", "text_hosts", "text_cost")]
    band = "band: " if (rec.get("host_band") or {}).get("named") else "across hosts: "
    heads = [f"{rec.get('label', 'recommended')}: ", "with the SLO: ", band, "cheapest within the SLO: "]
    lines = [
        (h if i == 0 and _names_a_field(line) else "") + line
        for h, t in zip(heads, texts)
        if isinstance(t, str)
        for i, line in enumerate(t.splitlines())
        if line.strip()
    ]
    if not lines:
        lines = [json.dumps(rec, indent=1)[:600]]
    paras = "".join(f"<p>{html.escape(_sentence(line))}</p>" for line in lines)
    return f'<div class="rec"><b>Recommendation</b>{paras}</div>'


def _names_a_field(line: str) -> bool:
    """Whether ``line`` starts with a setting (``engine.max_num_seqs=512: ...``), not a word of its own."""
    first = line.split(":", 1)[0]
    return "=" in first or "." in first.split(" ", 1)[0]


def _sentence(text: str) -> str:
    """``text`` as a sentence: a capital first (``recommended:`` is a word; a field's name is not
    capitalised, so every line that names one first gets its label), a full stop last."""
    text = text.strip()
    text = text[:1].upper() + text[1:]
    return text if text.endswith((".", "!", "?")) else text + "."


# The columns a page shows of each table, as (column, heading, format), where the folder has them.
_KEY_COLUMNS: list[tuple[str, str, Any]] = [
    ("status", "status", "{}"),
    ("output_throughput", "output tok/s", "{:,.0f}"),
    ("kv_cache_usage_mean", "KV mean", "{:.1%}"),
    ("num_preemptions", "preemptions", "{:,.0f}"),
    ("median_ttft_ms", "TTFT p50 ms", "{:,.0f}"),
    ("p99_ttft_ms", "TTFT p99 ms", "{:,.0f}"),
    ("median_tpot_ms", "TPOT p50 ms", "{:,.1f}"),
    ("p99_tpot_ms", "TPOT p99 ms", "{:,.1f}"),
    ("slo_attainment", "in SLO", share),
    ("goodput", "goodput req/s", "{:,.2f}"),
    ("gpu_hours", "GPU-hours", "{:,.1f}"),
    ("cost_usd", "cost $", "{:,.2f}"),
]
COLUMNS: dict[str, list[tuple[str, str, Any]]] = {
    "sweep.csv": [
        *_KEY_COLUMNS[:2],
        # ``servesim sweep --band``: each point's range across the catalog's hosts
        ("band.output_throughput.lo", "band tok/s low", "{:,.0f}"),
        ("band.output_throughput.hi", "band tok/s high", "{:,.0f}"),
        *_KEY_COLUMNS[2:8],
        ("band.p99_tpot_ms.lo", "band TPOT p99 low", "{:,.1f}"),
        ("band.p99_tpot_ms.hi", "band TPOT p99 high", "{:,.1f}"),
        *_KEY_COLUMNS[8:],
        ("error", "error", "{}"),
    ],
    "comparison.csv": [("scenario", "run", "{}"), *_KEY_COLUMNS[1:]],
    "plan.csv": [
        ("status", "status", "{}"),
        ("capacity_rps", "req/s per unit", "{:,.2f}"),
        ("units", "units", "{:,.0f}"),
        ("gpus", "GPUs", "{:,.0f}"),
        ("gpu", "GPU", "{}"),
        ("usd_per_hour", "$ per hour", "{:,.2f}"),
        ("usd_per_million_output_tokens", "$ per M output tokens", "{:,.3f}"),
        ("p99_ttft_ms", "TTFT p99 ms", "{:,.0f}"),
        ("p99_tpot_ms", "TPOT p99 ms", "{:,.1f}"),
        ("error", "error", "{}"),
    ],
    "plan_day.csv": [
        ("policy", "policy", "{}"),
        ("replicas", "replicas", "{}"),
        ("gpu_hours", "GPU-hours", "{:,.1f}"),
        ("cost_usd", "cost $", "{:,.2f}"),
        ("slo_attainment", "in SLO", lambda v: share(v, 2)),
        ("p99_ttft_ms", "TTFT p99 ms", "{:,.0f}"),
        ("p99_tpot_ms", "TPOT p99 ms", "{:,.1f}"),
        ("output_throughput", "output tok/s", "{:,.0f}"),
        ("num_completed", "finished", "{:,.0f}"),
    ],
}


def _csv_section(d: Path, name: str, limit: int = 40) -> str:
    """The table's rows with the columns a reader wants (``COLUMNS``: the swept or searched fields
    first, headed by their last name; columns empty throughout left out), formatted."""
    df = _csv(d / name)
    params: list[tuple[str, str, Any]] = [
        (c, c[len("param:") :].split(".")[-1], "{}") for c in df.columns if c.startswith("param:")
    ]
    cols = [(c, h, f) for c, h, f in params + COLUMNS[name] if c in df.columns and df[c].notna().any()]
    text = tuple(i for i, (c, _, _) in enumerate(cols) if c == "error")
    rows = [
        [html.escape(_fmt(f, _plain(v))) for (_, _, f), v in zip(cols, r)]
        for r in df[[c for c, _, _ in cols]].head(limit).itertuples(index=False)
    ]
    more = f"<p>{len(df) - limit} more rows in {name}</p>" if len(df) > limit else ""
    return _table([h for _, h, _ in cols], rows, text) + more


def _plain(v):
    """A cell as read from CSV: an empty one as None (shown '-'), a number as a number."""
    if isinstance(v, float) and not np.isfinite(v):
        return None
    return v.item() if hasattr(v, "item") else v


def _pngs(d: Path, names: tuple[str, ...]) -> str:
    return "".join(_png(d / n, n) for n in names if (d / n).is_file())


def build_report(d: Path) -> tuple[str, str]:
    """(title, body) of the page for results folder ``d``."""
    if (d / "summary.json").is_file():
        return _run_section(d)
    if (d / "sweep.csv").is_file():
        body = _recommendation(d) + "<h2>Sweep points</h2>" + _csv_section(d, "sweep.csv")
        body += "<h2>Plots</h2>" + _pngs(
            d,
            (
                "metrics_vs_knob.png",
                "spec_decode_speedup.png",
                "kv_offload.png",
                "kv_cache_usage.png",
                "throughput.png",
            ),
        )
        return f"sweep {d.name}", body
    if (d / "plan.csv").is_file():
        body = _recommendation(d) + "<h2>Candidates</h2>" + _csv_section(d, "plan.csv")
        body += "<h2>Plots</h2>" + _pngs(d, ("plan_cost.png", "latency_vs_rate.png"))
        return f"plan {d.name}", body
    if (d / "plan_day.csv").is_file():
        body = _recommendation(d) + "<h2>Policies</h2>" + _csv_section(d, "plan_day.csv")
        body += "<h2>Replicas over the day</h2>" + _pngs(d, ("day.png",))
        return f"day plan {d.name}", body
    runs = sorted(p for p in d.iterdir() if (p / "summary.json").is_file()) if d.is_dir() else []
    if runs and _folder_of_runs(d):
        body = _pngs(d, ("kv_cache_usage.png", "throughput.png"))
        if (d / "comparison.csv").is_file():
            body = "<h2>Comparison</h2>" + _csv_section(d, "comparison.csv") + body
        for r in runs:
            title, section = _run_section(r)
            body += f"<h2>{html.escape(title)}</h2>{section}"
        return f"runs in {d.name}", body
    inside = [p.name for p in sorted(d.iterdir()) if p.is_dir() and _holds_results(p)]
    if inside:  # a folder above results (results/ itself): which to give
        shown = ", ".join(inside[:6]) + (f" and {len(inside) - 6} more" if len(inside) > 6 else "")
        raise ConfigError(
            f"report: {d} holds no run, fleet, sweep or plan of its own, only results folders inside it "
            f"({shown}); give one of them (nothing was written)"
        )
    raise ConfigError(
        f"report: {d} holds no run, fleet, sweep or plan (no summary.json, sweep.csv, plan.csv or "
        "plan_day.csv, no sub-folders with one); nothing was written"
    )


def _folder_of_runs(d: Path) -> bool:
    """Whether ``d`` is the folder of one ``servesim run a.yaml b.yaml`` (or a comparison): its
    record or its comparison.csv says so, not merely run folders found in it."""
    from simulator.outputs.outdir import MANIFEST

    if (d / "comparison.csv").is_file():
        return True
    try:
        return json.loads((d / MANIFEST).read_text()).get("kind") == "runs"
    except (OSError, ValueError, AttributeError):
        return False


def _holds_results(p: Path) -> bool:
    return any((p / f).is_file() for f in ("summary.json", "sweep.csv", "plan.csv", "plan_day.csv")) or (
        _folder_of_runs(p)
    )


def write_report(d: Path, out: Path | None = None) -> Path:
    d = Path(d)
    if not d.is_dir():
        raise ConfigError(f"report: RESULTS_DIR must be a results folder (got {str(d)!r}: not a folder)")
    try:
        title, body = build_report(d)
    except (KeyError, TypeError) as e:  # a summary without a figure the page shows
        raise ConfigError(
            f"report: {d} lacks a figure the page needs ({type(e).__name__}: {e}); run it again"
        ) from None
    out = Path(out) if out is not None else d / "report.html"
    page = (
        '<!DOCTYPE html>\n<html lang="en"><head><meta charset="utf-8">'
        f"<title>servesim: {html.escape(title)}</title><style>{STYLE}</style></head><body>"
        f'<h1>servesim: {html.escape(title)}</h1><p class="sub">{html.escape(str(d))}</p>{body}</body></html>\n'
    )
    atomic_write_text(out, page)
    return out
