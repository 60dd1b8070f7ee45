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
        "--served",
        "--overheads-from",
        dest="served",
        default=None,
        metavar="CSV",
        help="the engine's served steps (a profile CSV) to fit the --refit parameters on again",
    )
    k.add_argument(
        "--refit",
        type=refit,
        default=None,
        metavar="NAME,...",
        help="what --served refits, everything else held (default: per_layer_overhead_s,per_seq_overhead_s)",
    )
    k.add_argument(
        "--pin",
        action="append",
        default=[],
        type=pin,
        metavar="NAME=VALUE",
        help="hold an efficiency (matmul_* and attn_* compute and memory) or an overhead (per_layer_overhead_s, "
        "per_seq_overhead_s, seconds) at a measured value",
    )
    k.add_argument(
        "--scale",
        action="append",
        default=[],
        type=scale,
        metavar="NAME=FACTOR",
        help="multiply a fitted efficiency or overhead by FACTOR before --served refits (a ratio measured elsewhere)",
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


def _number(text: str) -> float:
    """``text`` as a number; -1 where it is none (every option here refuses a negative value)."""
    try:
        return float(text)
    except ValueError:
        return -1.0


def _named(option: str, text: str, rule: str, ok) -> tuple[str, float]:
    """``NAME=VALUE`` with NAME an efficiency or an overhead (``calibrate.FITTED``) and ``ok(NAME,
    VALUE)``; else refused in one line naming the option and the rule."""
    from simulator.validation.calibrate import FITTED

    name, _, value = text.partition("=")
    v = _number(value)
    if name not in FITTED or not ok(name, v):
        raise argparse.ArgumentTypeError(
            f"{option}: {text!r} must be NAME=VALUE with NAME one of {', '.join(FITTED)} and {rule}"
        )
    return name, v


def pin(text: str) -> tuple[str, float]:
    """``--pin NAME=VALUE``: an efficiency (a fraction, at most 1) or an overhead (seconds)."""
    from simulator.validation.calibrate import EFFICIENCIES, MAX_OVERHEAD_S

    rule = f"0 < VALUE <= 1 for an efficiency, 0 <= VALUE <= {MAX_OVERHEAD_S:g} s for an overhead"
    return _named("--pin", text, rule, lambda n, v: 0.0 < v <= 1.0 if n in EFFICIENCIES else 0.0 <= v <= MAX_OVERHEAD_S)


def scale(text: str) -> tuple[str, float]:
    """``--scale NAME=FACTOR``: a positive factor for a fitted efficiency or overhead."""
    return _named("--scale", text, "FACTOR > 0", lambda n, v: v > 0.0)


def refit(text: str) -> tuple[str, ...]:
    """``--refit NAME,...``: efficiencies and overheads, at least one, each once."""
    from simulator.validation.calibrate import FITTED

    names = tuple(text.split(","))
    if any(n not in FITTED for n in names) or len(set(names)) != len(names):
        raise argparse.ArgumentTypeError(
            f"--refit: {text!r} must be names from {', '.join(FITTED)}, comma-separated, each once"
        )
    return names


def blend(text: str) -> str | float:
    """``--roofline-blend``: 'auto' or an exponent from 0 (the max) to MAX_BLEND."""
    from simulator.validation.calibrate import MAX_BLEND

    if text == "auto":
        return text
    v = _number(text)
    if not 0.0 <= v <= MAX_BLEND:
        raise argparse.ArgumentTypeError(
            f"--roofline-blend: {text!r} must be 'auto' or a number from 0 to {MAX_BLEND:g}"
        )
    return v


def main(args: argparse.Namespace) -> int:
    from simulator.outputs.outdir import RESULTS, check_file, named_output
    from simulator.validation.calibrate import BLENDS, OVERHEADS, main_calibrate

    out = named_output(args.output, RESULTS)
    check_file(out, "--output")
    out.parent.mkdir(parents=True, exist_ok=True)
    pins = dict(args.pin)
    blends = BLENDS if args.roofline_blend == "auto" else (args.roofline_blend,)
    if args.refit and not args.served:
        from simulator.errors import ConfigError

        raise ConfigError("calibrate: --refit names what --served CSV refits; give the served steps too")
    refits = args.refit or OVERHEADS
    return main_calibrate(
        args.profiles, str(out), args.gpu, args.tp, args.served, pins, blends, refits, dict(args.scale)
    )
