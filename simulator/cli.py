"""Command line: ``servesim run``, ``servesim step-time``, ``servesim fields``."""

from __future__ import annotations

import argparse
import json
import os
import sys
from pathlib import Path

from simulator.errors import ConfigError

STEP_ROWS_HINT = 1_000_000  # more engine steps than this: suggest a binned step log

KEY_METRICS = [
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


def _fmt(fmt: str, v) -> str:
    return "-" if v is None else fmt.format(v)


def format_table(summaries: list[dict]) -> str:
    head = ["run"] + [h for _, h, _ in KEY_METRICS]
    rows = [[s["scenario"]] + [_fmt(f, s.get(k)) for k, _, f in KEY_METRICS] for s in summaries]
    widths = [max(len(r[i]) for r in [head] + rows) for i in range(len(head))]
    line = lambda r: "  ".join(c.rjust(w) if i else c.ljust(w) for i, (c, w) in enumerate(zip(r, widths)))  # noqa: E731
    return "\n".join([line(head)] + [line(r) for r in rows])


def run_notes(summary: dict, result) -> list[str]:
    """What a reader of the table should not miss: requests rejected, cut or aborted, a run that
    ended before its requests did, an overloaded open-loop run, a huge per-step log."""
    sc, name = result.scenario, summary["scenario"]
    notes = []
    n_sub = summary["num_submitted"]
    if summary["num_rejected"]:
        first = next(iter(result.engine.reject_reasons.values()), "")
        notes.append(f"{name}: {summary['num_rejected']:,} of {n_sub:,} requests rejected (the first: {first})")
    if summary["num_truncated"]:
        notes.append(f"{name}: {summary['num_truncated']:,} requests cut to fit max_model_len "
                     "(workload.over_max_model_len: truncate; 'resample' draws them again, 'reject' submits them as drawn)")
    if summary["num_aborted"]:
        notes.append(f"{name}: {summary['num_aborted']:,} requests aborted: swap space full (engine.on_swap_full: abort)")
    want = sc.run.num_requests
    if want is not None and summary["stopped_by"] == "duration" and n_sub < want:
        notes.append(f"{name}: stopped at run.duration_s ({summary['simulated_time_s']:g} s) after submitting {n_sub:,} of "
                     f"run.num_requests {want:,} (without run.duration_s the run goes on until all are done)")
    open_loop = sc.workload.trace is not None or sc.workload.arrival.type != "closed_loop"
    waiting = summary["num_waiting_at_end"]
    if open_loop and summary["stopped_by"] == "duration" and waiting > max(10, 0.1 * n_sub):
        notes.append(f"{name}: overloaded: {waiting:,} requests still waiting at the end ({waiting / n_sub:.0%} of those "
                     "submitted): arrivals outpace the server, so latencies grow with the run's length")
    if summary["num_completed"] == 0 and summary["output_throughput"] > 0:
        notes.append(f"{name}: no request that arrived after the warm-up finished before the run ended "
                     f"({summary['num_in_flight_at_end']:,} in flight): latencies are empty; run longer")
    if sc.run.step_log_bin_s is None and summary["num_steps"] > STEP_ROWS_HINT:
        notes.append(f"{name}: steps.csv has {summary['num_steps']:,} rows, one per engine step; "
                     "--set run.step_log_bin_s=1 keeps one row per simulated second instead")
    return notes


def run_one(path: str | None, overrides: list[str], out: Path | None, plots=None, exports: dict | None = None) -> dict:
    """Run one scenario and write its results directory (default: results/<scenario name>), and the
    exports asked for (``exports``: metrics, metrics_interval, metrics_start, trace).
    Returns its summary (or an error)."""
    from simulator.config import load_scenario
    from simulator.output import write_run
    from simulator.run import simulate

    exports = exports or {}
    try:
        sc, raw = load_scenario(path, overrides)
        out = out or Path("results") / sc.name
        replaced = (out / "summary.json").is_file()
        result = simulate(sc, trace=1 if exports.get("trace") else 0, progress=True)
        summary = write_run(result, raw, out, plots)
        notes = run_notes(summary, result) + ([f"{sc.name}: replaced the earlier run in {out}/"] if replaced else [])
        files = []
        if exports.get("metrics") == "openmetrics":
            from simulator.export import write_openmetrics

            files.append(write_openmetrics(result, out / "metrics.openmetrics", exports["metrics_interval"],
                                           exports["metrics_start"]))
        if exports.get("trace"):
            from simulator.export import write_perfetto

            files.append(write_perfetto(result, Path(exports["trace"])))
        return {**summary, "wall_time_s": result.wall_s, "_notes": notes, "_out": str(out),
                "_files": [str(f) for f in files]}
    except ConfigError as e:
        return {"error": str(e), "scenario": path or "default"}
    except RuntimeError as e:  # SimulationStalled and other broken-invariant reports: one line, no traceback
        return {"error": f"{type(e).__name__}: {e}", "scenario": path or "default"}


def compile_note() -> None:
    """Say so before a run that must first compile the engine step (the first after installing)."""
    from simulator.kernel import first_compile_note

    note = first_compile_note()
    if note:
        print(note, file=sys.stderr, flush=True)


def cmd_run(args: argparse.Namespace) -> int:
    from simulator.background import BackgroundPlots

    paths = args.scenarios or [None]
    if len(paths) == 1:
        out = Path(args.out) if args.out else None
        targets = [out]
    else:
        out = Path(args.out or "results/runs")
        targets = [out / Path(p).stem for p in paths]
    jobs = list(zip(paths, targets))
    if args.trace and len(jobs) > 1:
        raise ConfigError("--trace: give one scenario (one trace file per run)")
    exports = {"metrics": args.metrics, "metrics_interval": args.metrics_interval,
               "metrics_start": _epoch(args.metrics_start), "trace": args.trace}
    # One run: its plots are drawn by a child forked now, before anything heavy is imported.
    with BackgroundPlots(fork=len(jobs) == 1) as plots:
        compile_note()
        if len(jobs) > 1 and args.jobs != 1:
            from concurrent.futures import ProcessPoolExecutor

            with ProcessPoolExecutor(max_workers=args.jobs or None) as ex:
                results = list(ex.map(run_one, [p for p, _ in jobs], [args.set] * len(jobs), [t for _, t in jobs],
                                      [None] * len(jobs), [exports] * len(jobs)))
        else:
            results = [run_one(p, args.set, t, plots, exports) for p, t in jobs]
    from simulator.output import write_comparison

    ok = [(r, Path(r.pop("_out"))) for r in results if "error" not in r]
    failed = [r for r in results if "error" in r]
    for r in failed:
        print(f"error: {r['error']}", file=sys.stderr)
    notes = [n for r, _ in ok for n in r.pop("_notes")]
    exported = [f for r, _ in ok for f in r.pop("_files")]
    if ok:
        print(format_table([r for r, _ in ok]))
        for n in notes:
            print(f"note: {n}")
        for f in exported:
            print(f"wrote {f}")
        if len(ok) > 1:
            files = write_comparison([t for _, t in ok], out)
            print("\n" + "\n".join(f"wrote {f}" for f in files))
        else:
            print(f"\nresults in {ok[0][1]}/ (summary.json, requests.csv, steps.csv, kv_cache_usage.png, throughput.png)")
    return 2 if failed and not ok else (1 if failed else 0)


def _epoch(text: str) -> float:
    """``--metrics-start``: an ISO 8601 time (UTC unless it says otherwise), or ``now``."""
    import datetime as dt
    import time

    if text == "now":
        return time.time()
    try:
        t = dt.datetime.fromisoformat(text.replace("Z", "+00:00"))
    except ValueError:
        raise ConfigError(f"--metrics-start must be an ISO 8601 time such as 2026-01-01T00:00:00Z, or now (got {text!r})") from None
    return (t if t.tzinfo else t.replace(tzinfo=dt.timezone.utc)).timestamp()


def cmd_check(args: argparse.Namespace) -> int:
    """Validate scenarios and print what they resolve to, without simulating."""
    from simulator.config import load_scenario
    from simulator.run import build

    status = 0
    for path in args.scenarios or [None]:
        try:
            sc, _ = load_scenario(path, args.set)
            _, _engine, parts = build(sc)
        except ConfigError as e:
            print(f"error: {e}", file=sys.stderr)
            status = 2
            continue
        mem, cfg, size = parts["memory"], parts["sched_cfg"], parts["size"]
        tokens = mem.num_usable_blocks * cfg.block_size
        print(f"{path or 'default'}: ok; {parts['model'].name} on {parts['gpu'].key} x{sc.hardware.tensor_parallel_size}: "
              f"{mem.describe()}; {tokens:,} KV tokens; max_num_seqs={cfg.max_num_seqs}, "
              f"max_num_batched_tokens={cfg.max_num_batched_tokens}; about {size.requests:,} requests, "
              f"{size.step_rows:,} steps at most, {size.bytes / 2**20:,.0f} MB")
    return status


def cmd_fields(args: argparse.Namespace) -> int:
    from simulator.config import field_reference

    rows = field_reference()
    if not args.markdown:
        print("Every field of a scenario file, with the default a file that leaves it out gets. (With no file at "
              "all, `servesim run` runs the built-in collapse case, simulator/data/default_scenario.yaml.)\n")
    if args.markdown:
        print("| field | type | default | unit | vLLM knob | meaning |")
        print("|---|---|---|---|---|---|")
        for r in rows:
            print("| " + " | ".join(c.replace("|", "\\|") for c in (f"`{r[0]}`",) + r[1:]) + " |")
    else:
        for path, tp, default, unit, vllm, doc in rows:
            extra = f" [{unit}]" if unit else ""
            knob = f" (vLLM: {vllm})" if vllm else ""
            print(f"{path}: {tp} = {default}{extra}{knob}\n    {doc}")
    return 0


def cmd_step_time(args: argparse.Namespace) -> int:
    from simulator.config import load_scenario
    from simulator.cost import Execution, decode_work
    from simulator.hardware import load_gpu
    from simulator.run import cost_model, engine_defaults, load_arch

    sc, _ = load_scenario(None, [f"model={args.model}", f"hardware.gpu={args.gpu}",
                                 f"hardware.tensor_parallel_size={args.tp}", f"cost.calibration={args.calibration}",
                                 f"engine.vllm_version={args.vllm_version}", *args.set])
    model, gpu = load_arch(sc), load_gpu(sc.hardware.gpu)
    cm = cost_model(sc, model, gpu, *engine_defaults(gpu, sc))
    if args.gpu_only:  # the GPU's time alone, as the profiles measure it
        cm = cm.with_execution(Execution())
    work = decode_work(args.batch, args.context, args.new_tokens)
    if args.json:
        print(json.dumps(cm.breakdown(work), indent=2))
    else:
        print(f"{cm.step_time(work) * 1e3:.3f} ms")
    return 0


def cmd_sweep(args: argparse.Namespace) -> int:
    from simulator.sweep import run_sweep

    compile_note()
    return run_sweep(args.scenario, args.param, args.set, Path(args.out), args.jobs, args.executor, args.address)


def cmd_compare(args: argparse.Namespace) -> int:
    from simulator.output import load_run, run_labels, write_comparison

    dirs = [Path(d) for d in args.dirs]
    for d in dirs:
        if not (d / "summary.json").is_file():
            raise ConfigError(f"compare: {d} holds no finished run (no summary.json)")
    summaries = [load_run(d)[0] for d in dirs]
    labels = run_labels(dirs, [s["scenario"] for s in summaries])
    print(format_table([{**s, "scenario": lab} for s, lab in zip(summaries, labels)]))
    files = write_comparison(dirs, Path(args.out))
    print("\n" + "\n".join(f"wrote {f}" for f in files))
    return 0


def cmd_plot(args: argparse.Namespace) -> int:
    from simulator.output import redraw

    for f in redraw(Path(args.dir)):
        print(f"wrote {f}")
    return 0


def cmd_calibrate(args: argparse.Namespace) -> int:
    from simulator.calibrate import main_calibrate

    return main_calibrate(args.profiles, args.output, args.gpu, args.tp)


def cmd_trace(args: argparse.Namespace) -> int:
    from simulator.tracegen import main_trace

    return main_trace(args.rest)


def cmd_validate(args: argparse.Namespace) -> int:
    from simulator.validate import main_validate

    every = not (args.kv or args.runs or args.recorded)
    compile_note()
    return main_validate(args.kv or every, args.runs or every, Path(args.out), args.jobs, args.only,
                         args.recorded or every)


def cmd_parity(args: argparse.Namespace) -> int:
    from simulator.parity import main_parity

    paths = args.traces
    if not paths:
        from simulator.parity import FIXTURES

        paths = sorted(str(p) for p in FIXTURES.glob("*.csv"))
        if not paths:
            raise ConfigError(f"parity: no traces given and none found in {FIXTURES}")
    for p in paths:
        if not Path(p).is_file():
            raise ConfigError(f"parity: trace file not found: {p}")
    return main_parity(paths)


def _positive_int(name: str):
    def parse(text: str) -> int:
        try:
            v = int(text)
        except ValueError:
            raise argparse.ArgumentTypeError(f"{name} must be an integer (got {text!r})") from None
        if v < 0:
            raise argparse.ArgumentTypeError(f"{name} must be >= 0 (got {v})")
        return v

    return parse


def cmd_plan(args: argparse.Namespace) -> int:
    from simulator.plan import run_plan

    return run_plan(args.scenario, args.rate, args.slo, args.search, args.set, Path(args.out), args.jobs,
                    args.executor, args.address, args.strategy, args.trials, args.price, args.probe_s,
                    args.tolerance, args.check_s, not args.no_check, args.search_seed)


def _executor_args(p: argparse.ArgumentParser) -> None:
    p.add_argument("--executor", choices=["local", "ray"], default="local",
                   help="where the points run: local processes (default) or a Ray cluster (pip install -e \".[ray]\")")
    p.add_argument("--address", default=None, metavar="ADDR",
                   help="with --executor ray: the cluster to join ('auto', or ray://HEAD:10001); none: a local one")


def main(argv: list[str] | None = None) -> int:
    # The simulator does no large linear algebra: one BLAS thread (set before numpy loads) saves
    # the start-up of a thread pool per process, and sweep workers do not oversubscribe the cores.
    for var in ("OPENBLAS_NUM_THREADS", "OMP_NUM_THREADS", "MKL_NUM_THREADS"):
        os.environ.setdefault(var, "1")
    p = argparse.ArgumentParser(prog="servesim", description="Discrete-event simulator of LLM inference serving (vLLM V1 scheduling).")
    sub = p.add_subparsers(dest="cmd", required=True)

    r = sub.add_parser("run", help="run one or more scenarios (default: the built-in collapse case)")
    r.add_argument("scenarios", nargs="*", help="scenario YAML files (none: the built-in collapse case, "
                   "simulator/data/default_scenario.yaml; a file starts from the defaults `servesim fields` lists)")
    r.add_argument("--out", default=None, help="results directory (default: results/<scenario name>; with several "
                   "scenarios, results/runs/<file name> each and the comparison in results/runs)")
    r.add_argument("--set", action="append", default=[], metavar="KEY=VALUE", help="override a field, e.g. engine.max_num_seqs=512")
    r.add_argument("--jobs", type=_positive_int("--jobs"), default=0, help="parallel processes for several scenarios (0: all cores)")
    r.add_argument("--metrics", choices=["openmetrics"], help="also write the run's time series under vLLM's metric "
                   "names (metrics.openmetrics: load with `promtool tsdb create-blocks-from openmetrics`)")
    r.add_argument("--metrics-interval", type=float, default=1.0, metavar="S", help="simulated seconds between samples (default 1)")
    r.add_argument("--metrics-start", default="2026-01-01T00:00:00Z", metavar="TIME",
                   help="wall-clock time of the run's start in the metrics (ISO 8601 or 'now'; default a fixed date, "
                        "so the file is the same every run)")
    r.add_argument("--trace", metavar="FILE", help="also write a Chrome/Perfetto trace (open in ui.perfetto.dev): "
                   "engine steps, each request's queued/prefill/decode/preempted spans, KV usage")
    r.set_defaults(fn=cmd_run)

    ck = sub.add_parser("check", help="validate scenarios and show the KV pool they get, without simulating")
    ck.add_argument("scenarios", nargs="*", help="scenario YAML files (none: the built-in default)")
    ck.add_argument("--set", action="append", default=[], metavar="KEY=VALUE")
    ck.set_defaults(fn=cmd_check)

    f = sub.add_parser("fields", help="print every scenario field with its default, unit and vLLM knob")
    f.add_argument("--markdown", action="store_true")
    f.set_defaults(fn=cmd_fields)

    s = sub.add_parser("step-time", help="predicted latency of one engine step")
    s.add_argument("--model", default="llama-3.1-8b")
    s.add_argument("--gpu", default="h100-sxm")
    s.add_argument("--tp", type=_positive_int("--tp"), default=1)
    s.add_argument("--batch", type=_positive_int("--batch"), default=1)
    s.add_argument("--new-tokens", type=_positive_int("--new-tokens"), default=1)
    s.add_argument("--context", type=_positive_int("--context"), default=0)
    s.add_argument("--calibration", default="auto", help="'auto' (built-in for the GPU), 'none', or a calibration file")
    s.add_argument("--vllm-version", default="0.32", help="the vLLM release line whose execution to follow (CUDA graphs, async scheduling)")
    s.add_argument("--gpu-only", action="store_true", help="the GPU's time alone: no engine CPU work, no graph padding or launch floors")
    s.add_argument("--set", action="append", default=[], metavar="KEY=VALUE", help="any other scenario field, e.g. engine.enforce_eager=true")
    s.add_argument("--json", action="store_true", help="per-op breakdown and bound")
    s.set_defaults(fn=cmd_step_time)

    w = sub.add_parser("sweep", help="run a grid of settings in parallel and recommend one")
    w.add_argument("scenario", nargs="?", help="scenario YAML (none: the built-in default)")
    w.add_argument("--param", action="append", default=[], metavar="KEY=V1,V2,...", help="a swept field, e.g. engine.max_num_seqs=256,512,1024 (repeat for a grid)")
    w.add_argument("--set", action="append", default=[], metavar="KEY=VALUE", help="override a field in every point")
    w.add_argument("--out", default="results/sweep", help="results directory (default: results/sweep)")
    _executor_args(w)
    pn = sub.add_parser("plan", help="the cheapest fleet that serves a target rate within latency targets")
    pn.add_argument("scenario", nargs="?", help="scenario YAML (its model, hardware, engine and traffic shape; none: the built-in default)")
    pn.add_argument("--rate", type=float, required=True, help="target arrival rate for the whole fleet (requests/s)")
    pn.add_argument("--slo", default=None, metavar="p99_ttft_ms=MS,p99_tpot_ms=MS",
                    help="latency targets (default: the scenario's slo block)")
    pn.add_argument("--search", action="append", default=[], metavar="FIELD=V1,V2,...",
                    help="a field to choose, e.g. hardware.gpu=h100-sxm,a100-80gb (repeat: every combination is a candidate)")
    pn.add_argument("--set", action="append", default=[], metavar="KEY=VALUE", help="override a field in every candidate")
    pn.add_argument("--out", default="results/plan", help="results directory (default: results/plan)")
    pn.add_argument("--jobs", type=_positive_int("--jobs"), default=0, help="parallel processes (0: all cores)")
    _executor_args(pn)
    pn.add_argument("--strategy", choices=["grid", "optuna"], default="grid",
                    help="every candidate (grid), or --trials of them chosen by Optuna's TPE sampler (pip install -e \".[search]\")")
    pn.add_argument("--trials", type=_positive_int("--trials"), default=40, help="with --strategy optuna: candidates to evaluate")
    pn.add_argument("--search-seed", type=int, default=0, help="with --strategy optuna: the sampler's seed")
    pn.add_argument("--price", action="append", default=[], metavar="GPU=USD", help="a GPU's price per hour, overriding the catalogue's")
    pn.add_argument("--probe-s", type=float, default=120.0, help="simulated seconds of each capacity probe (default 120)")
    pn.add_argument("--tolerance", type=float, default=0.05, help="bisection stops when the bracket is this narrow, relative (default 0.05)")
    pn.add_argument("--check-s", type=float, default=300.0, help="simulated seconds of the check run of the recommended fleet")
    pn.add_argument("--no-check", action="store_true", help="skip the check run")
    pn.set_defaults(fn=cmd_plan)
    w.add_argument("--jobs", type=_positive_int("--jobs"), default=0, help="parallel processes (0: all cores)")
    w.set_defaults(fn=cmd_sweep)

    c = sub.add_parser("compare", help="table and overlaid plots for finished runs")
    c.add_argument("dirs", nargs="+", help="results directories")
    c.add_argument("--out", default="results/compare", help="where to write the plots (default: results/compare)")
    c.set_defaults(fn=cmd_compare)

    pl = sub.add_parser("plot", help="redraw the plots of a finished run, folder of runs or sweep from its CSV files")
    pl.add_argument("dir", help="results directory (of a run, of several runs, or of a sweep)")
    pl.set_defaults(fn=cmd_plot)

    k = sub.add_parser("calibrate", help="fit the cost model to measured step latencies (profile CSVs)")
    k.add_argument("profiles", nargs="+", help="profile CSVs (gpu,model,batch,new_tokens,context,ms)")
    k.add_argument("-o", "--output", default="calibration.yaml", help="calibration file to write")
    k.add_argument("--gpu", default=None, help="GPU key in the catalogue (default: the profiles' gpu column)")
    k.add_argument("--tp", type=_positive_int("--tp"), default=1)
    k.set_defaults(fn=cmd_calibrate)

    tr = sub.add_parser("trace", help="request traces: `servesim trace generate SCENARIO.yaml -o trace.csv`")
    tr.add_argument("rest", nargs=argparse.REMAINDER, help="generate SCENARIO.yaml -o FILE [--set k=v]")
    tr.set_defaults(fn=cmd_trace)

    v = sub.add_parser("validate", help="compare with measured vLLM servers: KV-pool log lines, public vllm bench serve runs, recorded servers")
    v.add_argument("--kv", action="store_true", help="the KV-pool check against vLLM's start-up log lines (public and recorded)")
    v.add_argument("--runs", action="store_true", help="the public end-to-end runs against their vllm bench serve results")
    v.add_argument("--recorded", action="store_true", help="the servers recorded with tools/e2e, replayed request for request")
    v.add_argument("--only", action="append", metavar="TEXT", help="only runs whose id contains TEXT (repeat for more)")
    v.add_argument("--out", default="results/validation", help="folder for the tables, the plot and report.txt")
    v.add_argument("--jobs", type=int, default=os.cpu_count() or 1, help="parallel processes for the runs")
    v.set_defaults(fn=cmd_validate)

    q = sub.add_parser("parity", help="replay recorded vLLM scheduler traces and report the first divergent step")
    q.add_argument("traces", nargs="*", help="trace CSV files (each with its NAME.json beside it); default: the recorded fixtures shipped with servesim")
    q.set_defaults(fn=cmd_parity)

    args = p.parse_args(argv)
    try:
        return args.fn(args)
    except ConfigError as e:
        print(f"error: {e}", file=sys.stderr)
        return 2
    except KeyboardInterrupt:
        print("interrupted", file=sys.stderr)
        return 130
    except BrokenPipeError:  # output piped into `head` and the like
        sys.stderr = open(os.devnull, "w")  # noqa: SIM115 - silence the flush at exit
        return 0
