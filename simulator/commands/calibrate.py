"""``servesim calibrate``: fit the cost model's efficiencies to measured step latencies."""

from __future__ import annotations

import argparse

from simulator.commands.args import number, out_option


def add_parser(sub) -> None:
    k = sub.add_parser("calibrate", help="fit the cost model to measured step latencies (profile CSVs)")
    k.add_argument("profiles", nargs="+", help="profile CSVs (gpu,model,batch,new_tokens,context,ms)")
    out_option(
        k,
        "-o",
        "--output",
        default="calibration.yaml",
        help="calibration file to write (a bare file name goes in results/; default calibration.yaml)",
        meta="FILE",
    )
    k.add_argument("--gpu", default=None, help="GPU key in the catalogue (default: the profiles' gpu column)")
    k.add_argument(
        "--tp",
        type=number("--tp", int, least=1),
        default=1,
        help="tensor-parallel GPUs the profiles were measured on (default 1)",
    )
    k.set_defaults(fn=main)


def main(args: argparse.Namespace) -> int:
    from simulator.outputs.outdir import RESULTS, check_file, named_output
    from simulator.validation.calibrate import main_calibrate

    out = named_output(args.output, RESULTS)
    check_file(out, "--output")
    out.parent.mkdir(parents=True, exist_ok=True)
    return main_calibrate(args.profiles, str(out), args.gpu, args.tp)
