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
    k.add_argument(
        "--overheads-from",
        default=None,
        metavar="CSV",
        help="the engine's served steps (a profile CSV) to fit the per-layer and per-sequence overheads on again",
    )
    k.add_argument(
        "--pin",
        action="append",
        default=[],
        type=pin,
        metavar="NAME=VALUE",
        help="hold one of the four efficiencies (matmul_* and attn_* compute and memory) at a measured value",
    )
    k.add_argument(
        "--roofline-blend",
        type=blend,
        default=0.0,
        metavar="P",
        help="how an operator's compute and memory times combine: 0, their max (default); P > 0, their "
        "P-norm; 'auto', the exponent among a few (and the max) that fits the profiles best",
    )
    k.set_defaults(fn=main)


def pin(text: str) -> tuple[str, float]:
    """``--pin NAME=VALUE``: an efficiency and its value, refused in one line naming the rule."""
    from simulator.validation.calibrate import EFFICIENCIES

    name, _, value = text.partition("=")
    try:
        v = float(value)
    except ValueError:
        v = -1.0
    if name not in EFFICIENCIES or not 0.0 < v <= 1.0:
        raise argparse.ArgumentTypeError(
            f"--pin: {text!r} must be NAME=VALUE with NAME an efficiency ({', '.join(EFFICIENCIES)}) and 0 < VALUE <= 1"
        )
    return name, v


def blend(text: str) -> str | float:
    """``--roofline-blend``: 'auto' or an exponent from 0 (the max) to MAX_BLEND."""
    from simulator.validation.calibrate import MAX_BLEND

    if text == "auto":
        return text
    try:
        v = float(text)
    except ValueError:
        v = -1.0
    if not 0.0 <= v <= MAX_BLEND:
        raise argparse.ArgumentTypeError(
            f"--roofline-blend: {text!r} must be 'auto' or a number from 0 to {MAX_BLEND:g}"
        )
    return v


def main(args: argparse.Namespace) -> int:
    from simulator.outputs.outdir import RESULTS, check_file, named_output
    from simulator.validation.calibrate import BLENDS, main_calibrate

    out = named_output(args.output, RESULTS)
    check_file(out, "--output")
    out.parent.mkdir(parents=True, exist_ok=True)
    pins = dict(args.pin)
    blends = BLENDS if args.roofline_blend == "auto" else (args.roofline_blend,)
    return main_calibrate(args.profiles, str(out), args.gpu, args.tp, args.overheads_from, pins, blends)
