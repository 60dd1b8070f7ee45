"""``servesim step-time``: the predicted latency of one engine step, and its terms."""

from __future__ import annotations

import argparse
import json

from simulator.commands.args import number, set_option
from simulator.errors import ConfigError

# step-time's own options, and the scenario fields they set (a --set of one of these would be ignored).
STEP_TIME_FIELDS = {
    "model": "--model",
    "hardware.gpu": "--gpu",
    "hardware.tensor_parallel_size": "--tp",
    "cost.calibration": "--calibration",
    "engine.vllm_version": "--vllm-version",
}


def add_parser(sub) -> None:
    s = sub.add_parser("step-time", help="predicted latency of one decode step (ms)")
    s.add_argument(
        "--model",
        default="llama-3.1-8b",
        help="built-in model name or a Hugging Face config.json (default: llama-3.1-8b)",
    )
    s.add_argument(
        "--gpu", default="h100-sxm", help="GPU name in the catalogue, or a GPU YAML file (default: h100-sxm)"
    )
    s.add_argument(
        "--tp",
        type=number("--tp", int, least=1),
        default=1,
        help="tensor-parallel GPUs (must divide the model's heads, as vLLM requires; default 1)",
    )
    s.add_argument(
        "--batch", type=number("--batch", int, least=1), default=1, help="sequences in the step (requests; default 1)"
    )
    s.add_argument(
        "--new-tokens",
        type=number("--new-tokens", int, least=1),
        default=1,
        help="tokens each sequence computes in the step (1: decode; more: a prefill chunk; default 1)",
    )
    s.add_argument(
        "--context",
        type=number("--context", int, least=0),
        default=0,
        help="tokens each sequence already holds in the KV cache (default 0)",
    )
    s.add_argument("--calibration", default="auto", help="'auto' (built-in for the GPU), 'none', or a calibration file")
    s.add_argument(
        "--vllm-version",
        default=None,
        help="the vLLM release whose execution to follow (CUDA graphs, async scheduling): a release line or any release from 0.10.0 (docs/vllm-releases.md); default the newest line (with --set engine.framework=sglang: SGLang's)",
    )
    s.add_argument(
        "--gpu-only",
        action="store_true",
        help="the GPU's time alone: no engine CPU work, no graph padding or launch floors",
    )
    set_option(s, "any other scenario field, e.g. engine.enforce_eager=true")
    s.add_argument("--json", action="store_true", help="per-op breakdown (seconds) and bound, as JSON")
    s.set_defaults(fn=main)


def main(args: argparse.Namespace) -> int:
    from simulator.engine.cost import Execution, decode_work
    from simulator.resolve import check_vllm_rules, cost_model, engine_defaults, load_arch, memory_plan
    from simulator.scenario.config import blank_scenario, check_model, load_scenario, parse_override
    from simulator.scenario.hardware import load_gpu

    given = {}
    for text in args.set:
        key, given[key] = parse_override(text)
        if key in STEP_TIME_FIELDS:
            raise ConfigError(f"--set {key}: give it as {STEP_TIME_FIELDS[key]} (got {text!r})")
    overrides = [
        f"model={args.model}",
        f"hardware.gpu={args.gpu}",
        f"hardware.tensor_parallel_size={args.tp}",
        f"cost.calibration={args.calibration}",
        *([f"engine.vllm_version={args.vllm_version}"] if args.vllm_version else []),
        *args.set,
    ]
    if given.get("engine.framework") == "sglang":  # the built-in scenario's engine settings are vLLM's
        sc = blank_scenario(overrides)
    else:
        sc, _ = load_scenario(None, overrides)
    model, gpu = load_arch(sc), load_gpu(sc.hardware.gpu)
    seqs, tokens = engine_defaults(gpu, sc)
    try:  # what a scenario with these settings is refused for, refused here too
        check_vllm_rules(model, args.tp, seqs, tokens, sc.engine.framework == "sglang")
        memory_plan(sc, model, gpu, seqs, tokens)
        check_model(sc, model)
    except ConfigError as e:
        raise ConfigError(str(e).replace("hardware.tensor_parallel_size", "--tp", 1)) from None
    cm = cost_model(sc, model, gpu, seqs, tokens)
    if args.gpu_only:  # the GPU's time alone, as the profiles measure it
        cm = cm.with_execution(Execution())
    work = decode_work(args.batch, args.context, args.new_tokens)
    if args.json:
        print(json.dumps(cm.breakdown(work), indent=2))
    else:
        print(f"{cm.step_time(work) * 1e3:.3f} ms")
    return 0
