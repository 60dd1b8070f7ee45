"""``servesim run``: one scenario or several (in parallel, with a comparison), each checked before
any simulation (its fields, its size against memory, its outputs), written into a folder that this
process alone writes while it runs and that holds nothing of an earlier run afterwards."""

from __future__ import annotations

import argparse
import sys
from pathlib import Path
from typing import Any

from simulator.commands.args import SCENARIOS_HELP, number, out_option, set_option
from simulator.errors import ConfigError
from simulator.outputs.figures import share
from simulator.progress import compile_step, labelled

KEY_METRICS: list[tuple[str, str, Any]] = [
    ("output_throughput", "out tok/s", "{:,.0f}"),
    ("kv_cache_usage_mean", "KV mean", "{:.1%}"),
    ("kv_cache_usage_max", "KV max", "{:.1%}"),
    ("num_preemptions", "preempt", "{:,}"),
    ("recomputed_tokens", "recomputed", "{:,}"),
    ("num_completed", "finished", "{:,}"),
    ("median_ttft_ms", "TTFT p50 ms", "{:,.0f}"),
    ("median_tpot_ms", "TPOT p50 ms", "{:,.1f}"),
    ("wall_time_s", "wall s", "{:.1f}"),
]


def _fmt(fmt, v) -> str:
    return "-" if v is None else fmt(v) if callable(fmt) else fmt.format(v)


# With an SLO: the share of the measured requests within it, and the goodput (after TPOT p50).
SLO_METRICS: list[tuple[str, str, Any]] = [("slo_attainment", "in SLO", share), ("goodput", "goodput req/s", "{:,.2f}")]


def format_table(summaries: list[dict]) -> str:
    metrics = KEY_METRICS
    if any(s.get("slo_attainment") is not None for s in summaries):
        at = [k for k, _, _ in KEY_METRICS].index("median_tpot_ms") + 1
        metrics = KEY_METRICS[:at] + SLO_METRICS + KEY_METRICS[at:]
    head = ["run"] + [h for _, h, _ in metrics]
    rows = [[s["scenario"]] + [_fmt(f, s.get(k)) for k, _, f in metrics] for s in summaries]
    widths = [max(len(r[i]) for r in [head] + rows) for i in range(len(head))]
    line = lambda r: "  ".join(c.rjust(w) if i else c.ljust(w) for i, (c, w) in enumerate(zip(r, widths)))  # noqa: E731
    return "\n".join([line(head)] + [line(r) for r in rows])


def band_lines(summaries: list[dict]) -> list[str]:
    """Under the table, each run's band: across hosts (a run that names no host), or on its host
    with servesim's own error given the host (a run that names one)."""
    from simulator.run import band_basis, band_quantile, band_text

    out = []
    for s in summaries:
        b = s.get("host_band")
        if not b:
            continue
        tail = (
            f" (its miss on recorded servers given their host was smaller in {band_quantile():.0%} of runs; a "
            "server whose one API server sets the pace drifts wider, docs/hosts.md)"
            if b.get("named")
            else "; set hardware.host (a catalog host, or {probe_us: X} from `servesim probe-host`) to narrow it"
        )
        out.append(f"{s['scenario']}: {band_basis(b)}: {band_text(b)}{tail}")
    return out


RUN_FILES = ("summary.json", "requests.csv", "steps.csv", "scenario.yaml", "kv_cache_usage.png", "throughput.png")
FLEET_FILES = ("fleet.csv", "fleet.png")  # an autoscaled fleet's, besides


def autoscaled(sc) -> bool:
    return sc.cluster is not None and sc.cluster.autoscaler is not None


COMPARISON_FILES = ("kv_cache_usage.png", "throughput.png", "comparison.csv")


def run_files(exports: dict, out: Path, fleet: bool = False) -> list[str]:
    """What a run writes in its folder ``out``, with the exports asked for (``fleet``: an
    autoscaled fleet's files too)."""
    names = list(RUN_FILES) + (list(FLEET_FILES) if fleet else [])
    if exports.get("metrics"):
        names.append("metrics.openmetrics")
    trace = exports.get("trace")
    if trace and Path(trace).parent == out:
        names.append(Path(trace).name)
    return names


def run_one(
    path: str | None, overrides: list[str], out: Path, plots=None, exports: dict | None = None, line: int = 0
) -> dict:
    """Run one scenario and write its results folder ``out`` and the exports asked for
    (``exports``: metrics, metrics_interval, metrics_start, trace); what an earlier run left there
    and this one did not write goes; ``line``: where its progress bar goes, beside others'. Returns
    its summary (or an error)."""
    from simulator.outputs.notes import run_notes
    from simulator.outputs.outdir import Outputs
    from simulator.outputs.results import write_run
    from simulator.run import HostBand, simulate
    from simulator.scenario.config import in_file, load_scenario

    exports = exports or {}
    band = None
    try:
        sc, raw = load_scenario(path, overrides)
        names = run_files(exports, out, autoscaled(sc))
        outputs = Outputs(out, names, "--out")
        replaced = (out / "summary.json").is_file()
        band = HostBand(sc)  # the same scenario on the slowest and fastest catalog host, beside this run
        with labelled(sc.name, line):  # (runs side by side: a bar each, on its own line)
            result = simulate(sc, trace=1 if exports.get("trace") else 0, progress=True)
        if exports.get("metrics"):  # a run that lasts until its requests are done: its length is known now
            from simulator.outputs.export import check_metrics_size

            check_metrics_size(result.end_time, exports["metrics_interval"], _engines(result))
        summary = write_run(result, raw, out, plots, band)
        notes = run_notes(summary, result) + ([f"{sc.name}: replaced the earlier run in {out}/"] if replaced else [])
        files = []
        if exports.get("metrics") == "openmetrics":
            from simulator.outputs.export import write_openmetrics

            files.append(
                write_openmetrics(
                    result, out / "metrics.openmetrics", exports["metrics_interval"], exports["metrics_start"]
                )
            )
        if exports.get("trace"):
            from simulator.outputs.export import write_perfetto

            trace = Path(exports["trace"])
            trace.parent.mkdir(parents=True, exist_ok=True)
            files.append(write_perfetto(result, trace))
        removed = outputs.done([out / f for f in RUN_FILES + (FLEET_FILES if autoscaled(sc) else ())] + files)
        if removed:
            notes.append(
                f"{sc.name}: removed what the earlier run in {out}/ wrote and this one did not: {', '.join(removed)}"
            )
        return {
            **summary,
            "wall_time_s": result.wall_s,
            "_notes": notes,
            "_out": str(out),
            "_files": [str(f) for f in files],
        }
    except ConfigError as e:
        return {"error": str(in_file(path, e)), "scenario": path or "default"}
    except RuntimeError as e:  # SimulationStalled and other broken-invariant reports: one line, no traceback
        where = f"{path}: " if path else ""
        return {"error": f"{where}{type(e).__name__}: {e}", "scenario": path or "default"}
    except OSError as e:  # the disk filled, a folder vanished: one line, the earlier files kept
        return {"error": f"cannot write {e.filename or out}: {e.strerror}", "scenario": path or "default"}
    finally:
        if band is not None:
            band.close()


def _engines(result) -> int:
    return len(result.engine.replicas) if hasattr(result.engine, "replicas") else 1


def _run_folders(paths: list[str]) -> list[str]:
    """A results folder per scenario file of a multi-file run: its name, numbered where two files
    share one (a/x.yaml and b/x.yaml)."""
    from simulator.outputs.outdir import folder_name

    names = [folder_name(Path(p).stem) for p in paths]
    return [n if names.count(n) == 1 else f"{n}_{i + 1}" for i, n in enumerate(names)]


def _preflight(path: str | None, overrides: list[str], exports: dict):
    """Load ``path`` and check what can be checked before any simulation: the fields, the run's
    size against memory, the metrics' size. Returns the scenario."""
    from simulator.scenario.config import in_file, load_scenario, run_duration
    from simulator.size import check_size, run_size

    sc, _ = load_scenario(path, overrides)
    try:
        size = run_size(sc)
        check_size(sc, size)
        until = run_duration(sc)
        if exports.get("metrics") and until is not None:
            from simulator.outputs.export import check_metrics_size

            check_metrics_size(until, exports["metrics_interval"], size.replicas)
    except ConfigError as e:
        raise in_file(path, e) from None
    return sc


def add_parser(sub) -> None:
    r = sub.add_parser("run", help="run one or more scenarios (default: the built-in collapse case)")
    r.add_argument("scenarios", nargs="*", help=SCENARIOS_HELP)
    out_option(
        r,
        "--out",
        default=None,
        help="results folder (default: results/<scenario name>; with "
        "several scenarios, results/runs/<file name> each and the comparison in results/runs)",
    )
    set_option(r)
    r.add_argument(
        "--jobs",
        type=number("--jobs", int, least=0),
        default=0,
        help="parallel processes for several scenarios (0: one per core)",
    )
    r.add_argument(
        "--metrics",
        choices=["openmetrics"],
        help="also write the run's time series under vLLM's metric "
        "names (metrics.openmetrics: load with `promtool tsdb create-blocks-from openmetrics`)",
    )
    r.add_argument(
        "--metrics-interval",
        type=number("--metrics-interval", above=0, unit="s"),
        default=None,
        metavar="S",
        help="with --metrics: simulated seconds between samples (default 1)",
    )
    r.add_argument(
        "--metrics-start",
        default=None,
        metavar="TIME",
        help="with --metrics: wall-clock time of the run's start in the metrics (ISO 8601 or 'now'; default "
        "2026-01-01T00:00:00Z, so the file is the same every run)",
    )
    out_option(
        r,
        "--trace",
        default=None,
        meta="FILE",
        help="also write a Chrome/Perfetto trace (open in ui.perfetto.dev): "
        "engine steps, each request's queued/prefill/decode/preempted spans, KV usage; a bare file name "
        "goes in the results folder",
    )
    r.set_defaults(fn=main)


def main(args: argparse.Namespace) -> int:
    from simulator.outputs.background import BackgroundPlots

    paths = args.scenarios or [None]
    # One run: its plots are drawn by a child forked now, before this process imports anything
    # heavy, so that the child's import of matplotlib overlaps all of this process's work.
    with BackgroundPlots(fork=len(paths) == 1) as plots:
        return _main(args, paths, plots)


def _main(args: argparse.Namespace, paths: list, plots) -> int:
    from simulator.outputs.outdir import RESULTS, Outputs, Writing, check_file, check_folder, folder_name, named_output
    from simulator.scenario.config import apply_overrides

    _once_each(paths)
    if args.trace and len(paths) > 1:
        raise ConfigError("--trace: give one scenario (one trace file per run)")
    exports = _exports(args)
    apply_overrides({}, args.set)  # a malformed or repeated --set: said once, not once per file
    loaded, failed = [], []
    for p in paths:  # every file checked before any simulation
        try:
            loaded.append((p, _preflight(p, args.set, exports)))
        except ConfigError as e:
            if len(paths) == 1:
                raise
            failed.append({"error": str(e), "scenario": p})
    if len(paths) == 1:
        out = Path(args.out) if args.out else RESULTS / folder_name(loaded[0][1].name)
        target = {paths[0]: out}
    else:
        out = Path(args.out) if args.out else RESULTS / "runs"
        target = {p: out / n for p, n in zip(paths, _run_folders(paths))}
    if args.trace:
        exports["trace"] = str(named_output(args.trace, out))
        check_file(Path(exports["trace"]), "--trace")
    check_folder(out, "--out")
    for p, sc in loaded:
        Outputs(target[p], run_files(exports, target[p], autoscaled(sc)), "--out")
    top = None
    if len(paths) > 1:
        top = Outputs(out, [t.name for t in target.values()] + list(COMPARISON_FILES), "--out", "runs")
    jobs = [(p, target[p]) for p, _ in loaded]
    with Writing(out, "--out"):
        results = failed + _run_jobs(jobs, args, exports, plots)
        from simulator.outputs.results import write_comparison

        ok = [(r, Path(r.pop("_out"))) for r in results if "error" not in r]
        for r in results:
            if "error" in r:
                print(f"error: {r['error']}", file=sys.stderr)
        notes = [n for r, _ in ok for n in r.pop("_notes")]
        exported = [f for r, _ in ok for f in r.pop("_files")]
        files = write_comparison([t for _, t in ok], out) if len(ok) > 1 else []
        if top is not None:  # a scenario that failed this time keeps its earlier results
            removed = top.done([t for _, t in ok] + [t for p, t in target.items() if t.is_dir()] + files)
            if removed:
                notes.append(f"removed what the earlier run in {out}/ wrote and this one did not: {', '.join(removed)}")
    if ok:
        print(format_table([r for r, _ in ok]))
        for b in band_lines([r for r, _ in ok]):
            print(b)
        for n in notes:
            print(f"note: {n}")
        for f in exported:
            print(f"wrote {f}")
        if files:
            print("\n" + "\n".join(f"wrote {f}" for f in files))
        elif len(paths) == 1:
            shown = [f for f in RUN_FILES + FLEET_FILES if f != "scenario.yaml" and (ok[0][1] / f).is_file()]
            print(f"\nresults in {ok[0][1]}/ ({', '.join(shown)})")
    failed_n = len(results) - len(ok)
    return 2 if failed_n and not ok else (1 if failed_n else 0)


def _once_each(paths: list) -> None:
    """A scenario file given twice (by one name or two) is refused: it would give the same run twice,
    one of them written over the other."""
    import os

    seen: dict[str, str] = {}
    for p in paths:
        if p is None:
            continue
        key = os.path.realpath(p)
        if key in seen:
            same = f"{p}" if seen[key] == p else f"{p} and {seen[key]}"
            raise ConfigError(
                f"scenario {same}: given twice; each file runs once (the same file gives the same run), so "
                "give it once, or copy it under another name to run a variant"
            )
        seen[key] = p


def _run_jobs(jobs: list[tuple[str | None, Path]], args: argparse.Namespace, exports: dict, plots) -> list[dict]:
    """Run each (scenario file, results folder): in parallel processes when there are several
    (``plots``: where a single run's plots are drawn)."""
    compile_step()
    if len(jobs) > 1 and args.jobs != 1:
        from concurrent.futures import ProcessPoolExecutor

        with ProcessPoolExecutor(max_workers=args.jobs or None) as ex:
            return list(
                ex.map(
                    run_one,
                    [p for p, _ in jobs],
                    [args.set] * len(jobs),
                    [t for _, t in jobs],
                    [None] * len(jobs),
                    [exports] * len(jobs),
                    range(len(jobs)),
                )
            )
    return [run_one(p, args.set, t, plots, exports) for p, t in jobs]


DEFAULT_METRICS_START = "2026-01-01T00:00:00Z"


def _exports(args: argparse.Namespace) -> dict:
    """The exports ``servesim run`` was asked for, their options checked (an option of an export
    not asked for is an error, not silently ignored)."""
    start = _epoch(args.metrics_start or DEFAULT_METRICS_START)
    if not args.metrics:
        for flag, given in (("--metrics-interval", args.metrics_interval), ("--metrics-start", args.metrics_start)):
            if given is not None:
                raise ConfigError(f"{flag}: only with --metrics openmetrics (got {given})")
    return {
        "metrics": args.metrics,
        "metrics_interval": args.metrics_interval or 1.0,
        "metrics_start": start,
        "trace": None,
    }


def _epoch(text: str) -> float:
    """``--metrics-start``: an ISO 8601 time (UTC unless it says otherwise), or ``now``."""
    import datetime as dt
    import time

    if text == "now":
        return time.time()
    try:
        t = dt.datetime.fromisoformat(text.replace("Z", "+00:00"))
    except ValueError:
        raise ConfigError(
            f"--metrics-start must be an ISO 8601 time such as 2026-01-01T00:00:00Z, or now (got {text!r})"
        ) from None
    return (t if t.tzinfo else t.replace(tzinfo=dt.timezone.utc)).timestamp()
