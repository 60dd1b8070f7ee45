"""``servesim report``: one self-contained HTML page of a run, fleet, sweep or plan."""

from __future__ import annotations

import argparse
from pathlib import Path

from simulator.commands.args import out_option


def add_parser(sub) -> None:
    rp = sub.add_parser(
        "report", help="one self-contained HTML page of a run, fleet, sweep or plan (opens with no network)"
    )
    rp.add_argument("dir", help="results folder (of a run, a fleet, several runs, a sweep or a plan)")
    out_option(rp, "-o", "--output", default=None, meta="FILE", help="the page to write (default: DIR/report.html)")
    rp.set_defaults(fn=main)


def main(args: argparse.Namespace) -> int:
    from simulator.outputs.outdir import check_file
    from simulator.outputs.report import write_report

    out = Path(args.output) if args.output else Path(args.dir) / "report.html"
    check_file(out, "--output" if args.output else "report")
    print(f"wrote {write_report(Path(args.dir), out)}")
    return 0
