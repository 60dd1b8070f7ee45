"""``servesim parity``: replay recorded vLLM scheduler traces through both engine steps and report
the first divergent step."""

from __future__ import annotations

import argparse
from pathlib import Path

from simulator.errors import ConfigError


def add_parser(sub) -> None:
    q = sub.add_parser("parity", help="replay recorded vLLM scheduler traces and report the first divergent step")
    q.add_argument(
        "traces",
        nargs="*",
        help="trace CSV files (each with its NAME.json beside it); default: the "
        "recorded fixtures shipped with servesim",
    )
    q.set_defaults(fn=main)


def main(args: argparse.Namespace) -> int:
    from simulator.progress import compile_step
    from simulator.validation.parity import FIXTURES, main_parity

    paths = args.traces
    if not paths:
        paths = sorted(str(p) for p in FIXTURES.glob("*.csv"))
        if not paths:
            raise ConfigError(f"parity: no traces given and none found in {FIXTURES}")
    for p in paths:
        if not Path(p).is_file():
            raise ConfigError(f"parity: trace file not found: {p}")
    compile_step()
    return main_parity(paths)
