"""``servesim trace generate``: run a scenario and write every request it submitted as a trace
(the format ``workloads/trace.py`` reads and writes, docs/workloads.md)."""

from __future__ import annotations

import argparse
from pathlib import Path

from simulator.commands.args import out_option, set_option


def add_parser(sub) -> None:
    tr = sub.add_parser("trace", help="request traces: `servesim trace generate SCENARIO.yaml -o trace.csv`")
    trs = tr.add_subparsers(dest="trace_cmd", required=True, metavar="COMMAND")
    g = trs.add_parser(
        "generate",
        help="run a scenario and write every request it submitted (arrival and shape) as a trace (docs/workloads.md)",
    )
    g.add_argument("scenario", nargs="?", default=None, help="scenario YAML (none: the built-in default scenario)")
    out_option(
        g,
        "-o",
        "--out",
        default=None,
        required=True,
        meta="FILE",
        help="the trace to write: .csv, or .jsonl for JSON lines (a bare file name goes in results/)",
    )
    set_option(g)
    g.set_defaults(fn=main)


def main(args: argparse.Namespace) -> int:
    from simulator.outputs.outdir import RESULTS, check_file, named_output
    from simulator.progress import compile_step
    from simulator.scenario.config import apply_overrides

    apply_overrides({}, args.set)
    out = named_output(args.out, RESULTS)
    check_file(out, "--out")
    compile_step()
    n = generate_trace(args.scenario, out, args.set)
    print(f"wrote {n} requests to {out}")
    return 0


def trace_rows(result) -> list[dict]:
    """Every submitted request of a finished simulation as trace rows (in submission order)."""
    from workloads.trace import SESSION_KEY_BASE

    c = result.reqs.columns()
    rows = []
    for i in range(len(c["arrival"])):
        g, key = int(c["group"][i]), int(c["content_key"][i])
        cls, cl = int(c["client_class"][i]), int(c["client"][i])
        rows.append(
            {
                "arrival_time_s": float(c["arrival"][i]),
                "prompt_tokens": int(c["prompt_len"][i]),
                "output_tokens": int(c["max_tokens"][i]),
                "prefix_group": g if g >= 0 else None,
                "prefix_tokens": int(c["group_len"][i]) if g >= 0 else None,
                "session_id": key - SESSION_KEY_BASE if key >= SESSION_KEY_BASE else None,
                "client_class": cls if cls >= 0 else None,
                "priority": int(c["priority"][i]),
                "client": cl if cl >= 0 else None,
            }
        )
    return rows


def generate_trace(scenario, path: str | Path, overrides: list[str] | None = None) -> int:
    """Run ``scenario`` (a Scenario, or a YAML path) and write every submitted request to ``path``. Returns the count."""
    from simulator.outputs.writers import atomic_write_text
    from simulator.run import simulate
    from simulator.scenario.config import load_scenario
    from workloads.trace import trace_text

    if scenario is None or isinstance(scenario, (str, Path)):
        scenario, _ = load_scenario(None if scenario is None else str(scenario), overrides)
    rows = trace_rows(simulate(scenario))
    Path(path).parent.mkdir(parents=True, exist_ok=True)
    atomic_write_text(Path(path), trace_text(rows, path))
    return len(rows)
