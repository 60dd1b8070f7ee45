"""``servesim check``: validate scenarios and print what they resolve to, without simulating."""

from __future__ import annotations

import argparse
import sys

from simulator.commands.args import set_option
from simulator.errors import ConfigError


def add_parser(sub) -> None:
    p = sub.add_parser("check", help="validate scenarios and show the KV pool they get, without simulating")
    p.add_argument("scenarios", nargs="*", help="scenario YAML files (none: the built-in default)")
    set_option(p)
    p.set_defaults(fn=main)


def main(args: argparse.Namespace) -> int:
    from simulator.outputs.notes import scenario_notes
    from simulator.progress import compile_step
    from simulator.run import build
    from simulator.scenario.config import apply_overrides, in_file, load_scenario
    from simulator.size import check_size, run_size

    apply_overrides({}, args.set)  # a malformed or repeated --set: said once, not once per file
    status = 0
    for path in args.scenarios or [None]:
        try:
            sc, _ = load_scenario(path, args.set)
            check_size(sc, run_size(sc))  # every rule that needs no engine, before a first compile keeps one waiting
            compile_step()  # building the engine loads the compiled step
            _, _engine, parts = build(sc)
        except ConfigError as e:
            print(f"error: {in_file(path, e)}", file=sys.stderr)
            status = 2
            continue
        mem, cfg, size = parts["memory"], parts["sched_cfg"], parts["size"]
        tokens = mem.num_usable_blocks * cfg.block_size
        print(
            f"{path or 'default'}: ok; {parts['model'].name} on {parts['gpu'].key} x{sc.hardware.tensor_parallel_size}: "
            f"{mem.describe()}; {tokens:,} KV tokens; {_limits(cfg)}; about {size.requests:,} requests, "
            f"{size.step_rows:,} steps at most, {size.bytes / 2**20:,.0f} MB"
        )
        for n in scenario_notes(sc):
            print(f"note: {n}")
    return status


def _limits(cfg) -> str:
    """The running-request cap and the step's token budget, under the engine's own names."""
    from simulator.engine.rules import SGL_UNCHUNKED

    if cfg.framework == "sglang":
        chunk = "-1 (off)" if cfg.max_num_batched_tokens >= SGL_UNCHUNKED else f"{cfg.max_num_batched_tokens}"
        return f"max_running_requests={cfg.max_num_seqs}, chunked_prefill_size={chunk}, max_prefill_tokens={cfg.sgl_prefill_tokens}"
    return f"max_num_seqs={cfg.max_num_seqs}, max_num_batched_tokens={cfg.max_num_batched_tokens}"
