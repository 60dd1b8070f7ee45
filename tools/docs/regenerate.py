"""Write the tables of numbers that README.md and docs/ quote, from the commands they quote.

    python tools/docs/regenerate.py [BLOCK ...]      # all blocks by default

A page marks a generated block with ``<!-- results:NAME -->`` ... ``<!-- /results:NAME -->``; this
script runs what the block reports and replaces what lies between the markers (every page that has
the block). Nothing else in a page is touched. Blocks:

- collapse: the three collapse scenarios (scenarios/collapse_c*.yaml), as `servesim run` runs them;
- validation: `servesim validate`'s medians per check and split, against the targets;
- recorded: the recorded Llama-3.1-8B sweeps against servesim (tools/e2e/figures.py's table);
- hosts: the host catalog (simulator/data/hosts.yaml), each recorded machine's CPU factor;
- targets: the targets for choosing max_num_seqs, as `servesim validate --recorded` counts them;
- sweep: `servesim sweep` over max_num_seqs on the collapse case;
- routers, affinity, disaggregation: the three cluster scenarios' router / split comparisons;
- frameworks: the collapse case's traffic on vLLM and on SGLang;
- sglang_validation: `servesim validate --sglang`, per split and GPU, and every run;
- sglang_recorded: the SGLang servers recorded with tools/e2e against servesim, per split and every run.
"""

from __future__ import annotations

import argparse
import io
import re
import subprocess
import sys
from collections.abc import Sequence
from contextlib import redirect_stdout
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parents[2]
sys.path.insert(0, str(ROOT))

PAGES = [ROOT / "README.md", *sorted((ROOT / "docs").glob("*.md")), ROOT / "data" / "e2e" / "README.md"]


def _summaries(paths: list[str], overrides: Sequence[str] = ()) -> list[tuple[str, dict]]:
    from simulator.metrics import summarize
    from simulator.run import simulate
    from simulator.scenario.config import load_scenario

    out = []
    for p in paths:
        sc, _ = load_scenario(str(ROOT / p), list(overrides))
        out.append((sc.name, summarize(simulate(sc))))
    return out


def block_collapse() -> str:
    paths = [f"scenarios/collapse_c{c}.yaml" for c in (512, 1028, 1200)]
    _cli_lines(
        ["run", *paths],
        (),
        {"kv_cache_usage.png": "collapse_kv_cache_usage.png", "throughput.png": "collapse_throughput.png"},
    )
    runs = _summaries(paths)
    rows = [
        "| run | output tok/s | KV mean | KV max | preemptions | recomputed tokens | p50 TTFT ms | p50 TPOT ms |",
        "|---|---|---|---|---|---|---|---|",
    ]
    for name, s in runs:
        rows.append(
            f"| {name} | {s['output_throughput']:,.0f} | {100 * s['kv_cache_usage_mean']:.1f}% | "
            f"{100 * s['kv_cache_usage_max']:.1f}% | {s['num_preemptions']:,} | {s['recomputed_tokens']:,} | "
            f"{s['median_ttft_ms']:,.0f} | {s['median_tpot_ms']:.1f} |"
        )
    (_, a), (_, b), (_, c) = runs
    rows.append("")
    rows.append(
        f"Measured window 60-600 s. KV usage {100 * a['kv_cache_usage_mean']:.0f}% -> "
        f"{100 * b['kv_cache_usage_mean']:.0f}% from 512 to 1,028 clients; at 1,200 the cache averages "
        f"{100 * c['kv_cache_usage_mean']:.0f}%, {c['num_preemptions']:,} preemptions recompute "
        f"{c['recomputed_tokens']:,} tokens, and output throughput is "
        f"{100 * (c['output_throughput'] / b['output_throughput'] - 1):+.1f}% against the 1,028 run."
    )
    return "\n".join(rows)


def block_frameworks() -> str:
    """The collapse case's traffic on vLLM and on SGLang (scenarios/collapse_c1200.yaml, sglang_collapse.yaml)."""
    paths = ["scenarios/collapse_c1200.yaml", "scenarios/sglang_collapse.yaml"]
    _cli_lines(["run", *paths], (), {"kv_cache_usage.png": "frameworks_kv_cache_usage.png"})
    rows = [
        "| engine | output tok/s | KV mean | preemptions | p50 TTFT ms | p50 TPOT ms |",
        "|---|---|---|---|---|---|",
    ]
    for (_, s), engine in zip(_summaries(paths), ("vLLM 0.32", "SGLang 0.5")):
        rows.append(
            f"| {engine} | {s['output_throughput']:,.0f} | {100 * s['kv_cache_usage_mean']:.1f}% | "
            f"{s['num_preemptions']:,} | {s['median_ttft_ms']:,.0f} | {s['median_tpot_ms']:.1f} |"
        )
    return "\n".join(rows)


def block_sglang_validation() -> str:
    """`servesim validate --sglang`: the medians per split and GPU, and every run."""
    from simulator.validation import validate

    runs = validate.load(validate.SGLANG_FILE)["runs"]
    results = validate.run_all(runs, jobs=2)
    out = ROOT / "results" / "docs" / "sglang_validation"
    out.mkdir(parents=True, exist_ok=True)
    lines = validate.write_runs_report(
        runs, results, out, validate.SGLANG_METRICS, "sglang_runs.csv", "Public SGLang runs"
    )
    summary = "```\n" + "\n".join(line for line in lines if not line.startswith("Public")) + "\n```"
    return summary + "\n\n" + "\n".join(_run_rows(runs, results, validate.SGLANG_METRICS[:3]))


def block_sglang_recorded() -> str:
    """The recorded SGLang servers (`servesim validate --sglang`'s second table): medians per split, every run."""
    from simulator.validation import validate

    runs = validate.load(validate.E2E_SGLANG_FILE)["runs"]
    results = validate.run_all(runs, jobs=2, recorded=True)
    out = ROOT / "results" / "docs" / "sglang_recorded"
    out.mkdir(parents=True, exist_ok=True)
    shown = ("output_throughput", "median_tpot_ms", "median_ttft_ms")
    lines = validate.write_runs_report(runs, results, out, validate.E2E_METRICS, "recorded_sglang.csv", "Recorded")
    summary = "```\n" + "\n".join(line for line in lines if not line.startswith("Recorded")) + "\n```"
    return summary + "\n\n" + "\n".join(_run_rows(runs, results, shown))


FIELD = [
    (
        "[vLLM PR #37307](https://github.com/vllm-project/vllm/pull/37307), production case (mocked lengths: 4 x 100k "
        "tokens hold 90% of the cache, a 5th is admitted)",
        'generation "~100 tok/s/GPU" falls "as low as 1.5 tok/s/GPU"',
        "scenarios/field_pr37307_production.yaml",
    ),
    (
        "PR #37307 test setup (Qwen3-235B-A22B-FP8, TP8, 100 x 40k-token prompts, max-model-len 41001)",
        "271 -> 387 tok/s with the gate (x1.43; a third-party write-up)",
        "scenarios/field_pr37307.yaml",
    ),
    (
        "[vLLM PR #21793](https://github.com/vllm-project/vllm/pull/21793) (Llama-3.1-8B, one L40S, 2 x 120k-token "
        "prompts)",
        "the admit-prefill-preempt loop; numbers not public",
        "scenarios/field_pr21793.yaml",
    ),
]


def block_field() -> str:
    rows = ["| report | reported | servesim, first-chunk gate | servesim, full-prompt gate |", "|---|---|---|---|"]
    for name, reported, path in FIELD:
        cells = []
        for gate in ("first_chunk", "full_prompt"):
            ((_, s),) = _summaries([path], [f"engine.admission={gate}"])
            from simulator.scenario.config import load_scenario

            gpus = load_scenario(str(ROOT / path), [])[0].hardware.tensor_parallel_size
            pre = f"{s['num_preemptions']:,} preemptions" if s["num_preemptions"] else "no preemption"
            rec = f", {s['recomputed_tokens'] / 1e6:.1f}M tokens recomputed" if s["recomputed_tokens"] else ""
            total = (
                f"{s['output_throughput']:,.0f} tok/s ({s['output_throughput'] / gpus:,.1f} per GPU)"
                if gpus > 1
                else f"{s['output_throughput']:,.1f} tok/s"
            )
            cells.append(f"{total}, {pre}{rec}")
        rows.append(f"| {name} | {reported} | {cells[0]} | {cells[1]} |")
    return "\n".join(rows)


def block_validation() -> str:
    """`servesim validate`'s verdict (simulator/validation/verdict.py): each check on the calibration
    runs and the held-out ones, against its target, and what was replayed."""
    from simulator.validation import validate, verdict

    judged: dict[str, Any] = {
        "kv": validate.kv_rows(),
        "kv_recorded": validate.kv_rows_recorded(),
        "public": validate.run_all(validate.load(validate.RUNS_FILE)["runs"], jobs=2),
        "recorded": validate.run_all(validate.load(validate.E2E_FILE)["runs"], jobs=2, recorded=True),
    }
    cal = {o.check.name: o for o in verdict.outcomes(**judged, split="calibrate")}
    held = verdict.outcomes(**judged)

    def cell(o) -> str:
        if o is None or not o.runs:
            return ""
        if o.check.source == "preemptions":
            return f"{o.within}/{o.runs}"
        return f"{o.median:.1%} ({o.within}/{o.runs})"

    rows = [
        "| check: median error (runs within tolerance / runs) | calibration | held out | target (held out) | verdict |",
        "|---|---|---|---|---|",
    ]
    for o in held:
        rows.append(
            f"| {o.check.name} | {cell(cal.get(o.check.name))} | {cell(o)} | {o.check.target} | "
            f"{'met' if o.met else '**not met**'} |"
        )
    offload = validate.load(validate.OFFLOAD_FILE)["runs"]
    rows += ["", validate.counts(judged, offload) + "."]
    return "\n".join(rows)


def _run_rows(runs: list[dict], results, metrics: tuple[str, ...]) -> list[str]:
    from simulator.validation import validate

    by_id = {r["id"]: r for r in runs}
    head = "| run | split | GPU | model | load | " + " | ".join(
        f"{validate.LABELS[m]}, measured / servesim" for m in metrics
    )
    rows = [head + " |", "|" + "---|" * (5 + len(metrics))]
    for r in results:
        run = by_id[r.id]
        cells = []
        for m in metrics:
            a, b = r.measured.get(m), r.simulated.get(m)
            cells.append("n/a" if not a or b is None else f"{a:,.1f} / {b:,.1f} ({100 * (b / a - 1):+.0f}%)")
        split = r.split + (" (confounded)" if r.confounded else "")
        rows.append(
            f"| {r.id} | {split} | {run['gpu']} x {run['tensor_parallel_size']} | {run['model']} | "
            f"{validate._load_text(run)} | " + " | ".join(cells) + " |"
        )
    return rows


def block_recorded_runs() -> str:
    from simulator.validation import validate

    runs = validate.load(validate.E2E_FILE)["runs"]
    results = validate.run_all(runs, jobs=2, recorded=True)
    return "\n".join(_run_rows(runs, results, ("output_throughput", "median_ttft_ms", "median_tpot_ms")))


def block_public_runs() -> str:
    from simulator.validation import validate

    runs = validate.load(validate.RUNS_FILE)["runs"]
    return "\n".join(_run_rows(runs, validate.run_all(runs, jobs=2), validate.METRICS))


def block_validation_report() -> str:
    import shutil

    from simulator.validation.validate import main_validate

    buf = io.StringIO()
    out = Path("results") / "validation"
    with redirect_stdout(buf):
        main_validate(True, True, ROOT / out, jobs=2, recorded=True)
    for name in ("validation.png", "validation_recorded.png"):
        shutil.copyfile(ROOT / out / name, IMG / name)
    return "```\n" + buf.getvalue().strip().replace(str(ROOT / out), str(out)) + "\n```"


def block_hosts() -> str:
    """The host catalog (simulator/data/hosts.yaml): each recorded machine's fitted CPU factor."""
    from simulator.scenario import hosts

    cat = hosts.catalog()
    rows = [
        "| host (slowest last) | machine | probe (us) | CPU factor | fit loss |",
        "|---|---|---|---|---|",
    ]
    for h in cat.by_speed():
        entry = cat.hosts[h.name]
        probe = f"{h.probe_us:.2f}" if h.probe_us == h.probe_us else "not read"
        rows.append(f"| `{h.name}` | {h.note} | {probe} | x{h.scale:.2f} | {entry['loss']} |")
    rows += [
        "",
        f"A reading of your own: factor = (probe_us / {cat.reference_probe_us:.4f}) ** {cat.exponent:g}. "
        f"Default host: `{cat.median().name}` (the median factor).",
    ]
    return "\n".join(rows)


def block_targets() -> str:
    """The held-out recorded runs of each kind a user choosing max_num_seqs leans on and how many meet
    their target (``validate.targets``), then the ratio of p50 TPOT at 512 over 128 and the hosts'
    medians, as `servesim validate --recorded` prints them."""
    from simulator.validation import validate

    runs = validate.load(validate.E2E_FILE)["runs"]
    results = validate.run_all(runs, jobs=2, recorded=True)
    rows = ["| held-out runs | target, every run | met |", "|---|---|---|"]
    rows += [
        f"| {t.kind} | {t.target} | {t.runs - len(t.missed)} of {t.runs} |" for t in validate.targets(runs, results)
    ]
    lo, hi = validate.KNOB_RATIO_SEQS
    for what, target, line in (
        (
            f"p50 TPOT at max_num_seqs {hi} over {lo}, one recording's runs",
            f"servesim's ratio within {validate.KNOB_RATIO_TOLERANCE:.0%} of the server's",
            validate.knob_ratio_lines(runs, results)[-1],
        ),
        (
            "each host's median errors",
            f"throughput and p50 TPOT within {validate.HOST_TOLERANCE:.0%}",
            validate.host_lines(runs, results)[-1],
        ),
    ):
        count = re.search(r": (\d+ of \d+)", line)
        rows.append(f"| {what} | {target} | {count.group(1) if count else line.strip()} |")
    return "\n".join(rows)


def block_recorded() -> str:
    out = subprocess.run(
        [sys.executable, str(ROOT / "tools" / "e2e" / "figures.py")],
        capture_output=True,
        text=True,
        check=True,
        cwd=ROOT,
    )
    return out.stdout.strip()


def _sweep_table(
    scenario: str, param: str, values: list[str], columns: list[tuple[str, str, str]], extra: Sequence[str] = ()
) -> str:
    """One row per value of ``param``: (header, summary key, format) columns."""
    from simulator.metrics import summarize
    from simulator.run import simulate
    from simulator.scenario.config import load_scenario

    head = "| " + param.split(".")[-1] + " | " + " | ".join(c[0] for c in columns) + " |"
    rows = [head, "|" + "---|" * (len(columns) + 1)]
    for v in values:
        s = summarize(simulate(load_scenario(str(ROOT / scenario), [f"{param}={v}", *extra])[0]))
        rows.append(f"| {v} | " + " | ".join(fmt.format(s.get(key, float("nan"))) for _, key, fmt in columns) + " |")
    return "\n".join(rows)


IMG = ROOT / "docs" / "img"


def _cli_lines(args: list[str], keep: tuple[str, ...], figures: dict[str, str] | None = None) -> str:
    """Run a servesim command into a fresh results/docs/NAME folder; the lines of its output that start
    with ``keep``; ``figures``: its plots copied into docs/img (file there -> name in docs/img)."""
    import shutil

    out = Path("results") / "docs" / args[0]
    shutil.rmtree(ROOT / out, ignore_errors=True)
    done = subprocess.run(
        [sys.executable, "-m", "simulator", *args, "--out", str(out)], capture_output=True, text=True, cwd=ROOT
    )
    for src, dst in (figures or {}).items():
        shutil.copyfile(ROOT / out / src, IMG / dst)
    lines = [line for line in done.stdout.splitlines() if line.startswith(keep)]
    return "```\n" + "\n".join(lines) + "\n```"


def block_sweep() -> str:
    return _cli_lines(
        [
            "sweep",
            "scenarios/collapse_c1200.yaml",
            "--param",
            "engine.max_num_seqs=0,256,512,768,900,1024,1100,1150,1200",
        ],
        ("sweep:", "[", "recommended", "across hosts", "8 of", "9 of"),
        {"metrics_vs_knob.png": "sweep_metrics_vs_knob.png"},
    )


def block_plan() -> str:
    return _cli_lines(
        [
            "plan",
            "scenarios/plan_chat.yaml",
            "--rate",
            "50",
            "--search",
            "model=llama-3.1-8b,llama-3.1-70b",
            "--search",
            "hardware.gpu=a100-80gb,h100-sxm,h200",
            "--search",
            "hardware.tensor_parallel_size=1,2,4",
            "--search",
            "engine.max_num_seqs=64,256,1024",
        ],
        ("plan:", "recommended", "runner-up", "cheapest per", "check", "  on the slowest", "  and for", "54 of"),
        {"plan_cost.png": "plan_cost.png", "latency_vs_rate.png": "plan_latency.png"},
    )


LATENCY = [
    ("median TTFT ms", "median_ttft_ms", "{:,.0f}"),
    ("p99 TTFT ms", "p99_ttft_ms", "{:,.0f}"),
    ("p99 TPOT ms", "p99_tpot_ms", "{:,.1f}"),
    ("preemptions", "num_preemptions", "{:,}"),
]


def block_routers() -> str:
    return _sweep_table(
        "scenarios/cluster_routers.yaml",
        "cluster.router",
        ["random", "round_robin", "least_kv", "score", "power_of_two", "least_requests"],
        LATENCY,
    )


def block_affinity() -> str:
    return _sweep_table(
        "scenarios/cluster_prefix_affinity.yaml",
        "cluster.router",
        ["round_robin", "least_requests", "prefix_affinity", "score"],
        [
            ("prefix-cache hit rate", "prefix_cache_hit_rate", "{:.0%}"),
            ("requests/s served", "request_throughput", "{:.1f}"),
            ("output tok/s", "output_throughput", "{:,.0f}"),
            ("median TTFT ms", "median_ttft_ms", "{:,.0f}"),
        ],
    )


def block_staleness() -> str:
    rows = ["| router | state scraped every | p99 TTFT ms | preemptions |", "|---|---|---|---|"]
    for router in ("least_kv", "score"):
        for stale in ("0", "1", "5"):
            ((_, s),) = _summaries(
                ["scenarios/cluster_routers.yaml"], [f"cluster.router={router}", f"cluster.router_staleness_s={stale}"]
            )
            rows.append(f"| {router} | {stale} s | {s['p99_ttft_ms']:,.0f} | {s['num_preemptions']:,} |")
    return "\n".join(rows)


DISAGG = [
    ("4 co-located replicas", ["disaggregation=null", "cluster.replicas=4"]),
    ("3 prefill + 1 decode, 400 Gbit/s links", []),
    ("2 prefill + 2 decode, 400 Gbit/s", ["disaggregation.prefill={count: 2}", "disaggregation.decode={count: 2}"]),
]


def block_disaggregation() -> str:
    rows = [
        "| four GPUs as | median TTFT ms | p99 TTFT ms | median TPOT ms | p99 TPOT ms | goodput (req/s) |",
        "|---|---|---|---|---|---|",
    ]
    for name, over in DISAGG:
        ((_, s),) = _summaries(["scenarios/cluster_disaggregation.yaml"], over)
        rows.append(
            f"| {name} | {s['median_ttft_ms']:,.0f} | {s['p99_ttft_ms']:,.0f} | {s['median_tpot_ms']:.1f} | "
            f"{s['p99_tpot_ms']:.1f} | {s['goodput']:.2f} |"
        )
    rows += [
        "",
        "| link per prefill GPU (Gbit/s) | " + " | ".join(("400", "100", "50", "40", "35", "30", "25")) + " |",
        "|---|" + "---|" * 7,
    ]
    cells = []
    for bw in ("400", "100", "50", "40", "35", "30", "25"):
        ((_, s),) = _summaries(
            ["scenarios/cluster_disaggregation.yaml"], [f"disaggregation.kv_transfer.bandwidth_gbps={bw}"]
        )
        cells.append(f"{s['goodput']:.2f}")
    rows.append("| goodput (req/s), 3 prefill + 1 decode | " + " | ".join(cells) + " |")
    return "\n".join(rows)


BLOCKS = {name[len("block_") :]: fn for name, fn in globals().items() if name.startswith("block_")}


def replace_block(text: str, name: str, body: str) -> str:
    pattern = re.compile(rf"(<!-- results:{name} -->\n).*?(<!-- /results:{name} -->)", re.S)
    return pattern.sub(lambda m: m.group(1) + body.rstrip() + "\n" + m.group(2), text)


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("blocks", nargs="*", help=f"blocks to regenerate (default: all of {', '.join(BLOCKS)})")
    a = ap.parse_args()
    names = a.blocks or list(BLOCKS)
    for n in names:
        if n not in BLOCKS:
            raise SystemExit(f"unknown block {n!r}; blocks are {', '.join(BLOCKS)}")
    for n in names:
        pages = [p for p in PAGES if f"<!-- results:{n} -->" in p.read_text()]
        if not pages:
            print(f"{n}: no page has it", file=sys.stderr)
            continue
        body = BLOCKS[n]()
        for p in pages:
            p.write_text(replace_block(p.read_text(), n, body))
        print(f"{n}: {', '.join(str(p.relative_to(ROOT)) for p in pages)}", file=sys.stderr)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
