"""The efficiency factors a GPU's calibration file gives the cost model (``cost.calibration``): the
built-in one for a GPU we have measurements of (``simulator/data/calibration/``), none, or a
user's file (``servesim calibrate`` writes them; ``simulator.validation.calibrate`` fits them)."""

from __future__ import annotations

from dataclasses import fields
from pathlib import Path

from simulator.engine.cost import Efficiency
from simulator.errors import ConfigError
from simulator.scenario.config import load_yaml_text
from simulator.scenario.textfile import read_text

CALIBRATION_DIR = Path(__file__).resolve().parents[1] / "data" / "calibration"


# What a GPU's step profiles determine (the rest of Efficiency is about the host, the engine's CPU
# work and kernels the profiles do not run, and keeps its defaults).
GPU_FIELDS = (
    "matmul_compute",
    "matmul_memory",
    "attn_compute",
    "attn_memory",
    "step_overhead_s",
    "per_seq_overhead_s",
    "per_layer_overhead_s",
    "per_token_overhead_s",
    "allreduce_latency_s",
    "roofline_blend",
)


def load(path: str | Path) -> Efficiency:
    p = Path(path)
    if not p.is_file():
        raise ConfigError(f"cost.calibration: file not found: {path}")
    doc = load_yaml_text(read_text(p), f"cost.calibration: {path}")
    eff = doc.get("efficiency")
    if not isinstance(eff, dict):
        raise ConfigError(f"cost.calibration: {path} has no 'efficiency' mapping")
    known = {f.name for f in fields(Efficiency)}
    unknown = set(eff) - known
    if unknown:
        raise ConfigError(f"cost.calibration: {path}: unknown efficiency key(s) {', '.join(sorted(unknown))}")
    bad = {k: v for k, v in eff.items() if isinstance(v, bool) or not isinstance(v, (int, float))}
    if bad:
        k, v = next(iter(bad.items()))
        raise ConfigError(f"cost.calibration: {path}: efficiency.{k} must be a number (got {v!r})")
    return Efficiency(**{k: float(v) for k, v in eff.items()})


def resolve(spec: str, gpu_key: str) -> Efficiency:
    """A calibration setting: 'auto' (the GPU's built-in file, else the defaults), 'none', or a file."""
    if spec == "auto":
        return builtin(gpu_key) or Efficiency()
    if spec == "none":
        return Efficiency()
    return load(spec)


# GPUs that share a calibration: the same chip at the same clocks, with a smaller memory.
SAME_CHIP = {"a100-40gb": "a100-80gb"}


# The attention rates (attn_compute, attn_memory) of the kernel vLLM runs by default on an AMD GPU
# before 0.19 (its Triton unified attention, ``versions.attention_kernel``), where a GPU's file fitted
# them: SGLang and later vLLM releases run other kernels there, which the file's ``efficiency`` covers.
VLLM_TRITON_ATTENTION = "vllm_triton_attention"


# The rate at which SGLang's MoE kernels multiply on a GPU where its public runs showed them far from
# the GPU's own (``moe_compute`` of the MI300X family, fitted on a prefill-bound run:
# tools/validation/fit_gpu_family.py --prefill): vLLM's kernels there keep the file's ``efficiency``.
SGLANG_RATES = "sglang_rates"


def vllm_attention(gpu_key: str) -> dict[str, float]:
    """The built-in file's rates of vLLM's Triton attention on ``gpu_key`` ({} where none were fitted)."""
    return _section(gpu_key, VLLM_TRITON_ATTENTION, ("attn_compute", "attn_memory"))


def sglang_rates(gpu_key: str) -> dict[str, float]:
    """The built-in file's rates of SGLang's own kernels on ``gpu_key`` ({} where none were fitted)."""
    return _section(gpu_key, SGLANG_RATES, ("moe_compute",))


def _section(gpu_key: str, name: str, keys: tuple[str, ...]) -> dict[str, float]:
    """The factors ``keys`` of section ``name`` of ``gpu_key``'s built-in file, where it has them."""
    p = builtin_path(gpu_key)
    if not p.is_file():
        return {}
    rates = load_yaml_text(read_text(p), str(p)).get(name) or {}
    return {k: float(rates[k]) for k in keys if k in rates}


def builtin_path(gpu_key: str) -> Path:
    """Where a built-in GPU's shipped calibration file is (or would be)."""
    return CALIBRATION_DIR / f"{SAME_CHIP.get(gpu_key, gpu_key)}.yaml"


def builtin(gpu_key: str) -> Efficiency | None:
    """The shipped calibration for a built-in GPU, if we have measurements for it."""
    p = builtin_path(gpu_key)
    return load(p) if p.is_file() else None
