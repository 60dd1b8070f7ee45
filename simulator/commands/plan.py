"""``servesim plan``: the cheapest fleet that serves a target rate within latency targets, or
(``--day``) an autoscaling policy over a day against a static fleet."""

from __future__ import annotations

import argparse
from pathlib import Path

from simulator.commands.args import executor_options, number, out_option, set_option
from simulator.errors import ConfigError


def add_parser(sub) -> None:
    pn = sub.add_parser("plan", help="the cheapest fleet that serves a target rate within latency targets")
    pn.add_argument(
        "scenario",
        nargs="?",
        help="scenario YAML (its model, hardware, engine and traffic shape; none: the built-in default)",
    )
    pn.add_argument(
        "--rate",
        type=number("--rate", above=0, unit="requests/s"),
        default=None,
        help="target arrival rate for the whole fleet (requests/s; required without --day)",
    )
    pn.add_argument(
        "--day",
        action="store_true",
        help="weigh the scenario's cluster.autoscaler policy over its whole run against a static fleet",
    )
    pn.add_argument(
        "--static",
        type=number("--static", int, least=1),
        default=None,
        metavar="N",
        help="with --day: the static fleet's replicas (default: the autoscaled fleet's peak)",
    )
    pn.add_argument(
        "--slo",
        default=None,
        metavar="p99_ttft_ms=MS,p99_tpot_ms=MS",
        help="latency targets in milliseconds (default: the scenario's slo block)",
    )
    pn.add_argument(
        "--search",
        action="append",
        default=[],
        metavar="FIELD=V1,V2,...",
        help="a field to choose, e.g. hardware.gpu=h100-sxm,a100-80gb (repeat: every combination is a candidate)",
    )
    set_option(pn, "override a field in every candidate")
    out_option(pn, "--out", default="results/plan", help="results folder (default: results/plan)")
    executor_options(pn)
    pn.add_argument(
        "--strategy",
        choices=["grid", "optuna"],
        default="grid",
        help='every candidate (grid), or --trials of them chosen by Optuna\'s TPE sampler (pip install "servesim[search]")',
    )
    pn.add_argument(
        "--trials",
        type=number("--trials", int, least=1),
        default=40,
        help="with --strategy optuna: candidates to evaluate (default 40)",
    )
    pn.add_argument(
        "--search-seed",
        type=number("--search-seed", int, least=0),
        default=0,
        help="with --strategy optuna: the sampler's seed (default 0)",
    )
    pn.add_argument(
        "--price",
        action="append",
        default=[],
        metavar="GPU=USD",
        help="a GPU's price in US dollars per GPU-hour, overriding the catalogue's (repeatable)",
    )
    pn.add_argument(
        "--probe-s",
        type=number("--probe-s", above=0, unit="s"),
        default=120.0,
        help="simulated seconds of each capacity probe (default 120)",
    )
    pn.add_argument(
        "--tolerance",
        type=number("--tolerance", above=0),
        default=0.05,
        help="bisection stops when the bracket is this narrow, relative (default 0.05)",
    )
    pn.add_argument(
        "--check-s",
        type=number("--check-s", above=0, unit="s"),
        default=300.0,
        help="simulated seconds of the check run of the recommended fleet (default 300)",
    )
    pn.add_argument("--no-check", action="store_true", help="skip the check run")
    pn.set_defaults(fn=main)


def main(args: argparse.Namespace) -> int:
    from simulator.planning.plan import run_plan

    if args.day:
        from simulator.planning.plan_day import run_day_plan

        return run_day_plan(
            args.scenario, args.set, Path(args.out), args.static, args.jobs, args.executor, args.address
        )
    if args.static is not None:
        raise ConfigError("plan: --static is for --day (the static fleet a policy is weighed against)")
    if args.rate is None:
        raise ConfigError("plan: --rate is required (the fleet's target rate), or --day to weigh an autoscaling policy")
    return run_plan(
        args.scenario,
        args.rate,
        args.slo,
        args.search,
        args.set,
        Path(args.out),
        args.jobs,
        args.executor,
        args.address,
        args.strategy,
        args.trials,
        args.price,
        args.probe_s,
        args.tolerance,
        args.check_s,
        not args.no_check,
        args.search_seed,
    )
