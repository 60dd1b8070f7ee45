"""What the commands' parsers share: number and path types whose errors are one line naming the
option, and the options several commands take."""

from __future__ import annotations

import argparse
import math

SET_HELP = "override a scenario field, e.g. engine.max_num_seqs=512 (value as YAML; =null for the default; repeatable)"
SCENARIOS_HELP = (
    "scenario YAML files (none: the built-in collapse case, simulator/data/default_scenario.yaml; a file "
    "starts from the defaults `servesim fields` lists)"
)
JOBS_HELP = "parallel processes (0: one per core)"


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


def set_option(p: argparse.ArgumentParser, help: str = SET_HELP) -> None:
    """``--set KEY=VALUE``, repeatable."""
    p.add_argument("--set", action="append", default=[], metavar="KEY=VALUE", help=help)


def out_option(
    p: argparse.ArgumentParser, *names: str, default: str | None, help: str, meta: str = "DIR", required: bool = False
) -> None:
    """An output folder or file option (``names``: ``--out``, or ``-o``, ``--output``), never empty."""
    kw = {"required": True} if required else {"default": default}
    p.add_argument(*names, type=path(names[-1]), metavar=meta, help=help, **kw)


def executor_options(p: argparse.ArgumentParser) -> None:
    """Where a sweep's or a plan's points run, and how many at once."""
    p.add_argument(
        "--executor",
        choices=["local", "ray"],
        default="local",
        help='where the points run: local processes (default) or a Ray cluster (pip install "servesim[ray]")',
    )
    p.add_argument(
        "--address",
        default=None,
        metavar="ADDR",
        help="with --executor ray: the cluster to join ('auto', or ray://HEAD:10001); none: a local one",
    )
    p.add_argument("--jobs", type=number("--jobs", int, least=0), default=0, help=JOBS_HELP)
