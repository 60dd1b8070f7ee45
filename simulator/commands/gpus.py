"""``servesim gpus``: the GPUs built into the catalogue (``hardware.gpu``), with the numbers the cost
model uses and where each GPU's efficiencies come from."""

from __future__ import annotations

import argparse


def add_parser(sub) -> None:
    p = sub.add_parser(
        "gpus",
        help="list the built-in GPUs (hardware.gpu): memory, bandwidth, peak rates, links, price, calibration",
    )
    p.set_defaults(fn=main)


def efficiency_source(key: str) -> str:
    """'fitted' (step profiles measured here), 'derived' (public measurements) or 'defaults'."""
    from simulator.engine.calibration import CALIBRATION_DIR, SAME_CHIP
    from simulator.scenario import yamlio

    path = CALIBRATION_DIR / f"{SAME_CHIP.get(key, key)}.yaml"
    if not path.is_file():
        return "defaults"
    return "derived" if "derived" in (yamlio.load(path.read_text()) or {}) else "fitted"


def rows() -> list[list[str]]:
    """One row per built-in GPU: the table ``servesim gpus`` prints."""
    from simulator.scenario.hardware import builtin_gpus, load_gpu
    from simulator.validation.validate import runs_per_gpu

    checked = runs_per_gpu()
    out = [
        [
            "gpu",
            "name",
            "GiB",
            "TB/s",
            "bf16",
            "fp8",
            "fp4",
            "link GB/s",
            "group",
            "arch",
            "$/h",
            "efficiency",
            "checked",
        ]
    ]
    for key in builtin_gpus():
        g = load_gpu(key)
        fp4 = g.peak_flops.get("fp4")
        rec, pub, sgl = checked.get(key, (0, 0, 0))
        out.append(
            [
                key,
                g.name,
                f"{g.hbm_bytes / 2**30:.0f}",
                f"{g.hbm_bandwidth / 1e12:.2f}",
                f"{g.peak_flops['bf16'] / 1e12:,.0f}",
                f"{g.flops('fp8') / 1e12:,.0f}",
                "-" if fp4 is None else f"{fp4 / 1e12:,.0f}",
                f"{g.interconnect_bandwidth / 1e9:,.0f}",
                str(g.link_group),
                g.gfx or (f"sm {g.compute_capability}" if g.compute_capability else "-"),
                "-" if g.price_per_hour is None else f"{g.price_per_hour:.2f}",
                efficiency_source(key),
                (f"{rec} rec, {pub} pub" + (f", {sgl} SGLang" if sgl else "")) if rec or pub or sgl else "none",
            ]
        )
    return out


def main(args: argparse.Namespace) -> int:
    table = rows()
    widths = [max(len(r[i]) for r in table) for i in range(len(table[0]))]
    print(
        "Built-in GPUs (hardware.gpu=KEY; simulator/data/hardware/catalog.yaml cites every number). Peak rates in "
        "dense TFLOP/s (fp8 at the bf16 rate where a GPU has no FP8 units); link: the fast interconnect per "
        "direction, joining `group` GPUs; efficiency: fitted to step profiles, derived from public "
        "measurements, or the cost model's defaults; checked: the real runs `servesim validate` replays on it "
        "(vLLM servers recorded with tools/e2e, public vLLM runs, public SGLang runs), 'none' where there is none to "
        "check against.\n"
    )
    for r in table:
        cells = [c.ljust(w) if i < 2 or i >= 9 else c.rjust(w) for i, (c, w) in enumerate(zip(r, widths))]
        print(("  " + "  ".join(cells)).rstrip())
    return 0
