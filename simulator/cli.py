"""Command line: ``servesim run``, ``check``, ``sweep``, ``plan``, ``compare``, ``plot``, ``report``, ``fields``,
``step-time``, ``calibrate``, ``trace``, ``validate``, ``parity``. Bad input ends in one line,
``error: ...``, and exit code 2."""

from __future__ import annotations

import argparse
import json
import math
import os
import re
import sys
from pathlib import Path

from simulator.errors import ConfigError
from simulator.run_command import cmd_run, compile_note, format_table


def cmd_check(args: argparse.Namespace) -> int:
    """Validate scenarios and print what they resolve to, without simulating."""
    from simulator.config import apply_overrides, in_file, load_scenario
    from simulator.notes import scenario_notes
    from simulator.run import build

    apply_overrides({}, args.set)  # a malformed or repeated --set: said once, not once per file
    status = 0
    for path in args.scenarios or [None]:
        try:
            sc, _ = load_scenario(path, args.set)
            _, _engine, parts = build(sc)
        except ConfigError as e:
            print(f"error: {in_file(path, e)}", file=sys.stderr)
            status = 2
            continue
        mem, cfg, size = parts["memory"], parts["sched_cfg"], parts["size"]
        tokens = mem.num_usable_blocks * cfg.block_size
        print(
            f"{path or 'default'}: ok; {parts['model'].name} on {parts['gpu'].key} x{sc.hardware.tensor_parallel_size}: "
            f"{mem.describe()}; {tokens:,} KV tokens; max_num_seqs={cfg.max_num_seqs}, "
            f"max_num_batched_tokens={cfg.max_num_batched_tokens}; about {size.requests:,} requests, "
            f"{size.step_rows:,} steps at most, {size.bytes / 2**20:,.0f} MB"
        )
        for n in scenario_notes(sc):
            print(f"note: {n}")
    return status


def cmd_fields(args: argparse.Namespace) -> int:
    from simulator.config import Scenario, field_reference
    from simulator.fields import json_schema

    if args.json_schema:
        print(json.dumps(json_schema(Scenario, "servesim scenario"), indent=1))
        return 0
    rows = field_reference()
    if not args.markdown:
        print(
            "Every field of a scenario file, with the default a file that leaves it out gets. (With no file at "
            "all, `servesim run` runs the built-in collapse case, simulator/data/default_scenario.yaml.)\n"
        )
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


# step-time's own options, and the scenario fields they set (a --set of one of these would be ignored).
STEP_TIME_FIELDS = {
    "model": "--model",
    "hardware.gpu": "--gpu",
    "hardware.tensor_parallel_size": "--tp",
    "cost.calibration": "--calibration",
    "engine.vllm_version": "--vllm-version",
}


def cmd_step_time(args: argparse.Namespace) -> int:
    from simulator.config import check_model, load_scenario, parse_override
    from simulator.cost import Execution, decode_work
    from simulator.hardware import load_gpu
    from simulator.resolve import check_vllm_rules, cost_model, engine_defaults, load_arch, memory_plan

    for text in args.set:
        key, _ = parse_override(text)
        if key in STEP_TIME_FIELDS:
            raise ConfigError(f"--set {key}: give it as {STEP_TIME_FIELDS[key]} (got {text!r})")
    sc, _ = load_scenario(
        None,
        [
            f"model={args.model}",
            f"hardware.gpu={args.gpu}",
            f"hardware.tensor_parallel_size={args.tp}",
            f"cost.calibration={args.calibration}",
            f"engine.vllm_version={args.vllm_version}",
            *args.set,
        ],
    )
    model, gpu = load_arch(sc), load_gpu(sc.hardware.gpu)
    seqs, tokens = engine_defaults(gpu, sc)
    try:  # what a scenario with these settings is refused for, refused here too
        check_vllm_rules(model, args.tp, seqs, tokens)
        memory_plan(sc, model, gpu, seqs, tokens)
        check_model(sc, model)
    except ConfigError as e:
        raise ConfigError(str(e).replace("hardware.tensor_parallel_size", "--tp", 1)) from None
    cm = cost_model(sc, model, gpu, seqs, tokens)
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
    from simulator.outdir import Outputs, Writing, check_folder
    from simulator.output import load_run, run_labels, write_comparison
    from simulator.run_command import COMPARISON_FILES

    dirs = [Path(d) for d in args.dirs]
    for d in dirs:
        if not (d / "summary.json").is_file():
            raise ConfigError(f"compare: {d} holds no finished run (no summary.json)")
    out = Path(args.out)
    check_folder(out, "--out")
    outputs = Outputs(out, list(COMPARISON_FILES), "--out", "compare")
    summaries = [load_run(d)[0] for d in dirs]
    labels = run_labels(dirs, [s["scenario"] for s in summaries])
    print(format_table([{**s, "scenario": lab} for s, lab in zip(summaries, labels)]))
    with Writing(out, "--out"):
        files = write_comparison(dirs, out)
        outputs.done(files)
    print("\n" + "\n".join(f"wrote {f}" for f in files))
    return 0


def cmd_plot(args: argparse.Namespace) -> int:
    from simulator.outdir import Writing
    from simulator.output import redraw
    from simulator.sweep import is_sweep, redraw_sweep

    d = Path(args.dir)
    if not d.is_dir():
        raise ConfigError(f"plot: {d} is not a folder of results")
    with Writing(d, "plot"):
        files = redraw_sweep(d) if is_sweep(d) else redraw(d)
    for f in files:
        print(f"wrote {f}")
    return 0


def cmd_report(args: argparse.Namespace) -> int:
    from simulator.report import write_report

    print(f"wrote {write_report(Path(args.dir), Path(args.output) if args.output else None)}")
    return 0


def cmd_calibrate(args: argparse.Namespace) -> int:
    from simulator.calibrate import main_calibrate
    from simulator.outdir import RESULTS, check_file, named_output

    out = named_output(args.output, RESULTS)
    check_file(out, "--output")
    out.parent.mkdir(parents=True, exist_ok=True)
    return main_calibrate(args.profiles, str(out), args.gpu, args.tp)


def cmd_trace(args: argparse.Namespace) -> int:
    from simulator.config import apply_overrides
    from simulator.outdir import RESULTS, check_file, named_output
    from simulator.tracegen import generate_trace

    apply_overrides({}, args.set)
    out = named_output(args.out, RESULTS)
    check_file(out, "--out")
    n = generate_trace(args.scenario, out, args.set)
    print(f"wrote {n} requests to {out}")
    return 0


def cmd_validate(args: argparse.Namespace) -> int:
    from simulator.outdir import Writing
    from simulator.validate import main_validate

    every = not (args.kv or args.runs or args.recorded or args.features)
    compile_note()
    with Writing(Path(args.out), "--out"):
        return main_validate(
            args.kv or every,
            args.runs or every,
            Path(args.out),
            args.jobs,
            args.only,
            args.recorded or every,
            args.features or every,
        )


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


def cmd_plan(args: argparse.Namespace) -> int:
    from simulator.plan import run_plan

    if args.day:
        from simulator.plan_day import run_day_plan

        return run_day_plan(
            args.scenario, args.set, Path(args.out), args.static, args.jobs, args.executor, args.address
        )
    if args.static is not None:
        raise ConfigError("plan: --static is for --day (the static fleet a policy is weighed against)")
    if args.rate is None:
        raise ConfigError("plan: --rate is required (the fleet's target rate), or --day to weigh an autoscaling policy")
    return run_plan(
        args.scenario,
        args.rate,
        args.slo,
        args.search,
        args.set,
        Path(args.out),
        args.jobs,
        args.executor,
        args.address,
        args.strategy,
        args.trials,
        args.price,
        args.probe_s,
        args.tolerance,
        args.check_s,
        not args.no_check,
        args.search_seed,
    )


# ---- arguments ------------------------------------------------------------------------------------


def number(name: str, kind: type = float, least: float | None = None, above: float | None = None, unit: str = ""):
    """An argparse type for option ``name``: an integer or a finite number, at least ``least`` or
    more than ``above``, refused in one line naming the option, the rule and the value."""
    u = f" {unit}" if unit else ""

    def parse(text: str):
        what = "an integer" if kind is int else "a finite number"
        try:
            v = kind(text)
        except ValueError:
            raise argparse.ArgumentTypeError(f"{name} must be {what} (got {text!r})") from None
        if not math.isfinite(v):
            raise argparse.ArgumentTypeError(f"{name} must be {what} (got {text!r})")
        if least is not None and v < least:
            raise argparse.ArgumentTypeError(f"{name} must be >= {least:g}{u} (got {text})")
        if above is not None and v <= above:
            raise argparse.ArgumentTypeError(f"{name} must be > {above:g}{u} (got {text})")
        return v

    parse.least, parse.above = least, above  # type: ignore[attr-defined]  # the range, for the tests
    return parse


def path(name: str):
    """An argparse type for an output path option ``name``: not empty (an empty one would mean the
    folder the command runs in)."""

    def parse(text: str) -> str:
        if not text.strip():
            raise argparse.ArgumentTypeError(f"{name} must name a file or folder (got {text!r})")
        return text

    return parse


class Parser(argparse.ArgumentParser):
    """argparse, with its errors as one line: ``error: ...`` and exit code 2."""

    def error(self, message: str):
        m = re.match(r"argument [^:]+: (-.*)$", message)
        if m:  # a message of ours (see ``number``): it names the option already
            self.exit(2, f"error: {m.group(1)}\n")
        self.exit(2, f"error: {self.prog}: {message} (see {self.prog} --help)\n")


def _version() -> str:
    from importlib import metadata

    try:
        return metadata.version("servesim")
    except metadata.PackageNotFoundError:  # run from a checkout that was never installed
        from simulator import __version__

        return __version__


SET_HELP = "override a scenario field, e.g. engine.max_num_seqs=512 (value as YAML; =null for the default; repeatable)"
SCENARIOS_HELP = (
    "scenario YAML files (none: the built-in collapse case, simulator/data/default_scenario.yaml; a file "
    "starts from the defaults `servesim fields` lists)"
)
JOBS_HELP = "parallel processes (0: one per core)"


def _executor_args(p: argparse.ArgumentParser) -> None:
    p.add_argument(
        "--executor",
        choices=["local", "ray"],
        default="local",
        help='where the points run: local processes (default) or a Ray cluster (pip install -e ".[ray]")',
    )
    p.add_argument(
        "--address",
        default=None,
        metavar="ADDR",
        help="with --executor ray: the cluster to join ('auto', or ray://HEAD:10001); none: a local one",
    )
    p.add_argument("--jobs", type=number("--jobs", int, least=0), default=0, help=JOBS_HELP)


# Long (about 310 lines as formatted) on purpose: a flat declaration of every command and option, read top to
# bottom in the order `servesim --help` prints them; split up, it would only scatter one table.
def parser() -> Parser:
    """servesim's argument parser: every command, every option with its help, units and default."""
    p = Parser(prog="servesim", description="Discrete-event simulator of LLM inference serving (vLLM V1 scheduling).")
    p.add_argument("--version", action="version", version=f"servesim {_version()}", help="print the version and exit")
    sub = p.add_subparsers(dest="cmd", required=True, metavar="COMMAND")

    r = sub.add_parser("run", help="run one or more scenarios (default: the built-in collapse case)")
    r.add_argument("scenarios", nargs="*", help=SCENARIOS_HELP)
    r.add_argument(
        "--out",
        type=path("--out"),
        default=None,
        metavar="DIR",
        help="results folder (default: results/<scenario name>; with "
        "several scenarios, results/runs/<file name> each and the comparison in results/runs)",
    )
    r.add_argument("--set", action="append", default=[], metavar="KEY=VALUE", help=SET_HELP)
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
    r.add_argument(
        "--trace",
        type=path("--trace"),
        metavar="FILE",
        help="also write a Chrome/Perfetto trace (open in ui.perfetto.dev): "
        "engine steps, each request's queued/prefill/decode/preempted spans, KV usage; a bare file name "
        "goes in the results folder",
    )
    r.set_defaults(fn=cmd_run)

    ck = sub.add_parser("check", help="validate scenarios and show the KV pool they get, without simulating")
    ck.add_argument("scenarios", nargs="*", help="scenario YAML files (none: the built-in default)")
    ck.add_argument("--set", action="append", default=[], metavar="KEY=VALUE", help=SET_HELP)
    ck.set_defaults(fn=cmd_check)

    f = sub.add_parser("fields", help="print every scenario field with its default, unit and vLLM knob")
    fmt = f.add_mutually_exclusive_group()
    fmt.add_argument("--markdown", action="store_true", help="as a Markdown table (docs/scenario-reference.md)")
    fmt.add_argument(
        "--json-schema",
        action="store_true",
        help="as a JSON Schema for editors (e.g. `servesim fields --json-schema > servesim.schema.json`, "
        "then `# yaml-language-server: $schema=servesim.schema.json` atop a scenario)",
    )
    f.set_defaults(fn=cmd_fields)

    s = sub.add_parser("step-time", help="predicted latency of one decode step (ms)")
    s.add_argument(
        "--model",
        default="llama-3.1-8b",
        help="built-in model name or a Hugging Face config.json (default: llama-3.1-8b)",
    )
    s.add_argument(
        "--gpu", default="h100-sxm", help="GPU name in the catalogue, or a GPU YAML file (default: h100-sxm)"
    )
    s.add_argument(
        "--tp",
        type=number("--tp", int, least=1),
        default=1,
        help="tensor-parallel GPUs (must divide the model's heads, as vLLM requires; default 1)",
    )
    s.add_argument(
        "--batch", type=number("--batch", int, least=1), default=1, help="sequences in the step (requests; default 1)"
    )
    s.add_argument(
        "--new-tokens",
        type=number("--new-tokens", int, least=1),
        default=1,
        help="tokens each sequence computes in the step (1: decode; more: a prefill chunk; default 1)",
    )
    s.add_argument(
        "--context",
        type=number("--context", int, least=0),
        default=0,
        help="tokens each sequence already holds in the KV cache (default 0)",
    )
    s.add_argument("--calibration", default="auto", help="'auto' (built-in for the GPU), 'none', or a calibration file")
    s.add_argument(
        "--vllm-version",
        default="0.32",
        help="the vLLM release line whose execution to follow (CUDA graphs, async scheduling; default 0.32)",
    )
    s.add_argument(
        "--gpu-only",
        action="store_true",
        help="the GPU's time alone: no engine CPU work, no graph padding or launch floors",
    )
    s.add_argument(
        "--set",
        action="append",
        default=[],
        metavar="KEY=VALUE",
        help="any other scenario field, e.g. engine.enforce_eager=true",
    )
    s.add_argument("--json", action="store_true", help="per-op breakdown (seconds) and bound, as JSON")
    s.set_defaults(fn=cmd_step_time)

    w = sub.add_parser("sweep", help="run a grid of settings in parallel and recommend one")
    w.add_argument("scenario", nargs="?", help="scenario YAML (none: the built-in default)")
    w.add_argument(
        "--param",
        action="append",
        default=[],
        metavar="KEY=V1,V2,...",
        help="a swept field, e.g. engine.max_num_seqs=256,512,1024 (values as YAML, split at commas outside "
        "brackets and quotes; one --param per field; repeat for a grid)",
    )
    w.add_argument("--set", action="append", default=[], metavar="KEY=VALUE", help="override a field in every point")
    w.add_argument(
        "--out",
        type=path("--out"),
        default="results/sweep",
        metavar="DIR",
        help="results folder (default: results/sweep)",
    )
    _executor_args(w)
    w.set_defaults(fn=cmd_sweep)

    pn = sub.add_parser("plan", help="the cheapest fleet that serves a target rate within latency targets")
    pn.add_argument(
        "scenario",
        nargs="?",
        help="scenario YAML (its model, hardware, engine and traffic shape; none: the built-in default)",
    )
    pn.add_argument(
        "--rate",
        type=number("--rate", above=0, unit="requests/s"),
        default=None,
        help="target arrival rate for the whole fleet (requests/s; required without --day)",
    )
    pn.add_argument(
        "--day",
        action="store_true",
        help="weigh the scenario's cluster.autoscaler policy over its whole run against a static fleet",
    )
    pn.add_argument(
        "--static",
        type=number("--static", int, least=1),
        default=None,
        metavar="N",
        help="with --day: the static fleet's replicas (default: the autoscaled fleet's peak)",
    )
    pn.add_argument(
        "--slo",
        default=None,
        metavar="p99_ttft_ms=MS,p99_tpot_ms=MS",
        help="latency targets in milliseconds (default: the scenario's slo block)",
    )
    pn.add_argument(
        "--search",
        action="append",
        default=[],
        metavar="FIELD=V1,V2,...",
        help="a field to choose, e.g. hardware.gpu=h100-sxm,a100-80gb (repeat: every combination is a candidate)",
    )
    pn.add_argument(
        "--set", action="append", default=[], metavar="KEY=VALUE", help="override a field in every candidate"
    )
    pn.add_argument(
        "--out",
        type=path("--out"),
        default="results/plan",
        metavar="DIR",
        help="results folder (default: results/plan)",
    )
    _executor_args(pn)
    pn.add_argument(
        "--strategy",
        choices=["grid", "optuna"],
        default="grid",
        help='every candidate (grid), or --trials of them chosen by Optuna\'s TPE sampler (pip install -e ".[search]")',
    )
    pn.add_argument(
        "--trials",
        type=number("--trials", int, least=1),
        default=40,
        help="with --strategy optuna: candidates to evaluate (default 40)",
    )
    pn.add_argument(
        "--search-seed",
        type=number("--search-seed", int, least=0),
        default=0,
        help="with --strategy optuna: the sampler's seed (default 0)",
    )
    pn.add_argument(
        "--price",
        action="append",
        default=[],
        metavar="GPU=USD",
        help="a GPU's price in US dollars per GPU-hour, overriding the catalogue's (repeatable)",
    )
    pn.add_argument(
        "--probe-s",
        type=number("--probe-s", above=0, unit="s"),
        default=120.0,
        help="simulated seconds of each capacity probe (default 120)",
    )
    pn.add_argument(
        "--tolerance",
        type=number("--tolerance", above=0),
        default=0.05,
        help="bisection stops when the bracket is this narrow, relative (default 0.05)",
    )
    pn.add_argument(
        "--check-s",
        type=number("--check-s", above=0, unit="s"),
        default=300.0,
        help="simulated seconds of the check run of the recommended fleet (default 300)",
    )
    pn.add_argument("--no-check", action="store_true", help="skip the check run")
    pn.set_defaults(fn=cmd_plan)

    c = sub.add_parser("compare", help="table and overlaid plots for finished runs")
    c.add_argument("dirs", nargs="+", help="results folders")
    c.add_argument(
        "--out",
        type=path("--out"),
        default="results/compare",
        metavar="DIR",
        help="where to write the plots and comparison.csv (default: results/compare)",
    )
    c.set_defaults(fn=cmd_compare)

    pl = sub.add_parser("plot", help="redraw the plots of a finished run, folder of runs or sweep from its CSV files")
    pl.add_argument("dir", help="results folder (of a run, of several runs, or of a sweep)")
    pl.set_defaults(fn=cmd_plot)

    rp = sub.add_parser(
        "report", help="one self-contained HTML page of a run, fleet, sweep or plan (opens with no network)"
    )
    rp.add_argument("dir", help="results folder (of a run, a fleet, several runs, a sweep or a plan)")
    rp.add_argument("-o", "--output", help="the page to write (default: DIR/report.html)")
    rp.set_defaults(fn=cmd_report)

    k = sub.add_parser("calibrate", help="fit the cost model to measured step latencies (profile CSVs)")
    k.add_argument("profiles", nargs="+", help="profile CSVs (gpu,model,batch,new_tokens,context,ms)")
    k.add_argument(
        "-o",
        "--output",
        type=path("--output"),
        default="calibration.yaml",
        metavar="FILE",
        help="calibration file to write (a bare file name goes in results/; default calibration.yaml)",
    )
    k.add_argument("--gpu", default=None, help="GPU key in the catalogue (default: the profiles' gpu column)")
    k.add_argument(
        "--tp",
        type=number("--tp", int, least=1),
        default=1,
        help="tensor-parallel GPUs the profiles were measured on (default 1)",
    )
    k.set_defaults(fn=cmd_calibrate)

    tr = sub.add_parser("trace", help="request traces: `servesim trace generate SCENARIO.yaml -o trace.csv`")
    trs = tr.add_subparsers(dest="trace_cmd", required=True, metavar="COMMAND")
    g = trs.add_parser(
        "generate",
        help="run a scenario and write every request it submitted (arrival and shape) as a trace (docs/workloads.md)",
    )
    g.add_argument("scenario", nargs="?", default=None, help="scenario YAML (none: the built-in default scenario)")
    g.add_argument(
        "-o",
        "--out",
        type=path("--out"),
        required=True,
        metavar="FILE",
        help="the trace to write: .csv, or .jsonl for JSON lines (a bare file name goes in results/)",
    )
    g.add_argument("--set", action="append", default=[], metavar="KEY=VALUE", help=SET_HELP)
    g.set_defaults(fn=cmd_trace)

    v = sub.add_parser(
        "validate",
        help="compare with measured vLLM servers: KV-pool log lines, public vllm bench serve runs, recorded servers, features",
    )
    v.add_argument(
        "--kv", action="store_true", help="the KV-pool check against vLLM's start-up log lines (public and recorded)"
    )
    v.add_argument(
        "--runs", action="store_true", help="the public end-to-end runs against their vllm bench serve results"
    )
    v.add_argument(
        "--recorded", action="store_true", help="the servers recorded with tools/e2e, replayed request for request"
    )
    v.add_argument(
        "--features",
        action="store_true",
        help="speculative decoding, multi-LoRA and KV offloading against public measurements",
    )
    v.add_argument("--only", action="append", metavar="TEXT", help="only runs whose id contains TEXT (repeat for more)")
    v.add_argument(
        "--out",
        type=path("--out"),
        default="results/validation",
        metavar="DIR",
        help="folder for the tables, the plot and report.txt (default: results/validation)",
    )
    v.add_argument(
        "--jobs",
        type=number("--jobs", int, least=1),
        default=os.cpu_count() or 1,
        help="parallel processes for the runs (default: one per core)",
    )
    v.set_defaults(fn=cmd_validate)

    q = sub.add_parser("parity", help="replay recorded vLLM scheduler traces and report the first divergent step")
    q.add_argument(
        "traces",
        nargs="*",
        help="trace CSV files (each with its NAME.json beside it); default: the "
        "recorded fixtures shipped with servesim",
    )
    q.set_defaults(fn=cmd_parity)
    return p


def main(argv: list[str] | None = None) -> int:
    # The simulator does no large linear algebra: one BLAS thread (set before numpy loads) saves
    # the start-up of a thread pool per process, and sweep workers do not oversubscribe the cores.
    for var in ("OPENBLAS_NUM_THREADS", "OMP_NUM_THREADS", "MKL_NUM_THREADS"):
        os.environ.setdefault(var, "1")
    args = parser().parse_args(argv)
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
    except OSError as e:  # a file that cannot be written or read mid-way: one line, no traceback
        print(f"error: {e.filename or ''}{': ' if e.filename else ''}{e.strerror or e}", file=sys.stderr)
        return 2
