"""``servesim sweep``: a grid of settings run in parallel (resumable), and a recommendation."""

from __future__ import annotations

import argparse
from pathlib import Path

from simulator.commands.args import executor_options, out_option, set_option


def add_parser(sub) -> None:
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
    w.add_argument(
        "--band",
        action="store_true",
        help="run every point on the slowest and the fastest catalog host too (a scenario that names no host: "
        "three runs a point): each figure's band in sweep.csv and shaded on metrics_vs_knob.png",
    )
    set_option(w, "override a field in every point")
    out_option(w, "--out", default="results/sweep", help="results folder (default: results/sweep)")
    executor_options(w)
    w.set_defaults(fn=main)


def main(args: argparse.Namespace) -> int:
    from simulator.planning.sweep import run_sweep

    return run_sweep(
        args.scenario, args.param, args.set, Path(args.out), args.jobs, args.executor, args.address, args.band
    )
