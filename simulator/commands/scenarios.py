"""``servesim scenarios``: the scenarios servesim ships, runnable by name from anywhere
(``servesim run collapse_c1200``), and any one printed whole to start a scenario of one's own."""

from __future__ import annotations

import argparse
import textwrap

from simulator.errors import ConfigError


def add_parser(sub) -> None:
    p = sub.add_parser(
        "scenarios",
        help="list the built-in scenarios (run one by name: servesim run collapse_c1200), or print one",
    )
    p.add_argument(
        "--show",
        metavar="NAME",
        default=None,
        help="print the built-in scenario NAME as it is (to start your own: servesim scenarios --show NAME > mine.yaml)",
    )
    p.set_defaults(fn=main)


def summary(text: str, width: int = 96) -> str:
    """The first sentence of a scenario file's opening comment, cut to ``width`` characters."""
    lines = []
    for line in text.splitlines():
        if not line.startswith("#"):
            break
        lines.append(line.lstrip("#").strip())
    words = " ".join(lines)
    first = words.split(". ")[0].rstrip(".")
    return textwrap.shorten(first, width, placeholder=" ...")


def main(args: argparse.Namespace) -> int:
    from simulator.scenario.config import builtin_scenario, builtin_scenarios
    from simulator.scenario.textfile import read_text

    if args.show is not None:
        print(read_text(builtin_scenario(args.show)), end="")
        return 0
    found = builtin_scenarios()
    if not found:
        raise ConfigError("scenarios: none found in this installation (simulator/data/scenarios/)")
    print(
        "Built-in scenarios: run one by name from any folder (servesim run collapse_c1200, servesim sweep "
        "collapse_c1200 --param ...); print one to start your own (servesim scenarios --show NAME > mine.yaml).\n"
    )
    width = max(len(n) for n in found)
    for name, path in found.items():
        print(f"  {name:{width}}  {summary(read_text(path))}")
    return 0
