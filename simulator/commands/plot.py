"""``servesim plot``: redraw the plots of a finished run, folder of runs or sweep from its CSV files."""

from __future__ import annotations

import argparse
from pathlib import Path

from simulator.errors import ConfigError


def add_parser(sub) -> None:
    p = sub.add_parser("plot", help="redraw the plots of a finished run, folder of runs or sweep from its CSV files")
    p.add_argument("dir", help="results folder (of a run, of several runs, or of a sweep)")
    p.set_defaults(fn=main)


def main(args: argparse.Namespace) -> int:
    from simulator.outputs.outdir import Writing
    from simulator.outputs.results import redraw
    from simulator.planning.sweep import is_sweep, redraw_sweep

    d = Path(args.dir)
    if not d.is_dir():
        raise ConfigError(f"plot: {d} is not a folder of results")
    with Writing(d, "plot"):
        files = redraw_sweep(d) if is_sweep(d) else redraw(d)
    for f in files:
        print(f"wrote {f}")
    return 0
