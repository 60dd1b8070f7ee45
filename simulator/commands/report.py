"""``servesim report``: one self-contained HTML page of a run, fleet, sweep or plan."""

from __future__ import annotations

import argparse
from pathlib import Path


def add_parser(sub) -> None:
    rp = sub.add_parser(
        "report", help="one self-contained HTML page of a run, fleet, sweep or plan (opens with no network)"
    )
    rp.add_argument("dir", help="results folder (of a run, a fleet, several runs, a sweep or a plan)")
    rp.add_argument("-o", "--output", help="the page to write (default: DIR/report.html)")
    rp.set_defaults(fn=main)


def main(args: argparse.Namespace) -> int:
    from simulator.outputs.report import write_report

    print(f"wrote {write_report(Path(args.dir), Path(args.output) if args.output else None)}")
    return 0
