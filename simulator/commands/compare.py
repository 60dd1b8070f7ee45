"""``servesim compare``: a table and overlaid plots of finished runs."""

from __future__ import annotations

import argparse
from pathlib import Path

from simulator.commands.args import out_option
from simulator.errors import ConfigError


def add_parser(sub) -> None:
    c = sub.add_parser("compare", help="table and overlaid plots for finished runs")
    c.add_argument("dirs", nargs="+", help="results folders")
    out_option(
        c,
        "--out",
        default="results/compare",
        help="where to write the plots and comparison.csv (default: results/compare)",
    )
    c.set_defaults(fn=main)


def main(args: argparse.Namespace) -> int:
    from simulator.commands.run import COMPARISON_FILES, format_table
    from simulator.outputs.outdir import Outputs, Writing, check_folder
    from simulator.outputs.results import load_run, run_labels, write_comparison

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
