"""``servesim validate``: servesim against measured vLLM servers (KV-pool log lines, public runs,
recorded servers, features)."""

from __future__ import annotations

import argparse
import os
from pathlib import Path

from simulator.commands.args import number, out_option


def add_parser(sub) -> None:
    v = sub.add_parser(
        "validate",
        help="compare with measured vLLM servers: KV-pool log lines, public vllm bench serve runs, recorded servers, features",
    )
    v.add_argument(
        "--kv", action="store_true", help="the KV-pool check against vLLM's start-up log lines (public and recorded)"
    )
    v.add_argument(
        "--runs", action="store_true", help="the public end-to-end runs against their vllm bench serve results"
    )
    v.add_argument(
        "--recorded", action="store_true", help="the servers recorded with tools/e2e, replayed request for request"
    )
    v.add_argument("--sglang", action="store_true", help="the public SGLang runs against their benchmarks' results")
    v.add_argument(
        "--features",
        action="store_true",
        help="speculative decoding, multi-LoRA and KV offloading against public measurements",
    )
    v.add_argument("--only", action="append", metavar="TEXT", help="only runs whose id contains TEXT (repeat for more)")
    out_option(
        v,
        "--out",
        default="results/validation",
        help="folder for the tables, the plot and report.txt (default: results/validation)",
    )
    v.add_argument(
        "--jobs",
        type=number("--jobs", int, least=1),
        default=os.cpu_count() or 1,
        help="parallel processes for the runs (default: one per core)",
    )
    v.set_defaults(fn=main)


def main(args: argparse.Namespace) -> int:
    from simulator.outputs.outdir import LOCK, Writing, check_folder, check_names
    from simulator.progress import compile_step
    from simulator.validation.validate import OUTPUT_FILES, main_validate

    every = not (args.kv or args.runs or args.recorded or args.features or args.sglang)
    check_folder(Path(args.out), "--out")
    check_names(Path(args.out), [*OUTPUT_FILES, LOCK], "--out")
    with Writing(Path(args.out), "--out"):
        compile_step()
        return main_validate(
            args.kv or every,
            args.runs or every,
            Path(args.out),
            args.jobs,
            args.only,
            args.recorded or every,
            args.features or every,
            args.sglang or every,
        )
