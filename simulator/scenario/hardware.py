"""GPU catalogue: peak rates, memory and links, each number with its source (data/hardware)."""

from __future__ import annotations

import functools
import math
import re
from dataclasses import dataclass, field
from pathlib import Path

from simulator.errors import ConfigError
from simulator.scenario import yamlio
from simulator.scenario.textfile import read_text

CATALOG = Path(__file__).resolve().parents[1] / "data" / "hardware" / "catalog.yaml"
_REQUIRED = ("hbm_bytes", "hbm_bandwidth", "peak_flops", "interconnect_bandwidth", "host_link_bandwidth")


@dataclass(frozen=True)
class GPU:
    """One accelerator. Units: bytes, bytes/s, FLOP/s (dense)."""

    key: str
    name: str
    hbm_bytes: float
    hbm_bandwidth: float
    peak_flops: dict[str, float] = field(hash=False)
    interconnect_bandwidth: float
    host_link_bandwidth: float
    price_per_hour: float | None = None  # US dollars per GPU-hour (catalogue: with its source and date)
    compute_capability: str | None = None  # NVIDIA's, e.g. '8.0' (A100): picks vLLM's attention kernels
    # GPUs that reach each other over interconnect_bandwidth (NVLink, Infinity Fabric): 8 on an NVSwitch
    # board, 2 for PCIe cards bridged in pairs, 1 without such a link; a tensor-parallel group larger
    # than this talks over PCIe (host_link_bandwidth).
    link_group: int = 8
    # AMD's LLVM target (e.g. 'gfx942' for the MI300X), in place of NVIDIA's compute capability: an AMD
    # GPU runs vLLM's ROCm attention backends, never FlashAttention-2 or -3 (catalog.yaml's header).
    gfx: str | None = None

    def flops(self, dtype: str) -> float:
        """Peak dense FLOP/s for matmuls in this dtype (bf16 if the dtype is not listed)."""
        # int4 weights (W4A16) are dequantised and multiplied at 16-bit rates. NVFP4 and MXFP4 run
        # on the same 4-bit tensor cores (fp4); a GPU without them runs 4-bit formats at bf16.
        key = {
            "bfloat16": "bf16",
            "float16": "fp16",
            "float32": "bf16",
            "int4": "bf16",
            "nvfp4": "fp4",
            "mxfp4": "fp4",
        }.get(dtype, dtype)
        return float(self.peak_flops.get(key, self.peak_flops["bf16"]))


@functools.lru_cache(maxsize=1)
def _catalog() -> dict:
    """The built-in GPUs, read once (nothing changes the mapping it returns)."""
    return yamlio.load(CATALOG.read_text())


def builtin_gpus() -> list[str]:
    return sorted(_catalog())


def _num(v):
    """YAML 1.1 reads 3.35e12 (no exponent sign) as a string: accept numeric strings."""
    if isinstance(v, str):
        try:
            return float(v)
        except ValueError:
            return v
    return v


def gpu_from_dict(key: str, d: dict, where: str = "hardware") -> GPU:
    if not isinstance(d, dict):
        raise ConfigError(f"{where} must be a mapping (got {d!r})")
    d = {k: ({kk: _num(vv) for kk, vv in v.items()} if isinstance(v, dict) else _num(v)) for k, v in d.items()}
    for f in _REQUIRED:
        if f not in d:
            raise ConfigError(f"{where}.{f}: required for custom GPU '{key}' (missing)")
    flops = d["peak_flops"]
    if not isinstance(flops, dict) or "bf16" not in flops:
        raise ConfigError(f"{where}.peak_flops must be a mapping with at least 'bf16' (got {flops!r})")
    for f, v in [(f, d[f]) for f in ("hbm_bytes", "hbm_bandwidth", "interconnect_bandwidth", "host_link_bandwidth")] + [
        (f"peak_flops.{k}", v) for k, v in flops.items()
    ]:
        if isinstance(v, bool) or not isinstance(v, (int, float)) or not math.isfinite(v) or v <= 0:
            raise ConfigError(f"{where}.{f} must be a finite number > 0 (got {v!r})")
    return GPU(
        key=key,
        name=str(d.get("name", key)),
        hbm_bytes=float(d["hbm_bytes"]),
        hbm_bandwidth=float(d["hbm_bandwidth"]),
        peak_flops={k: float(v) for k, v in flops.items()},
        interconnect_bandwidth=float(d["interconnect_bandwidth"]),
        host_link_bandwidth=float(d["host_link_bandwidth"]),
        price_per_hour=_price(d.get("price_per_hour"), where),
        compute_capability=_capability(d.get("compute_capability"), where),
        link_group=_link_group(d, where),
        gfx=_gfx(d, where),
    )


def _gfx(d: dict, where: str) -> str | None:
    """``gfx``: an AMD GPU's LLVM target, e.g. 'gfx942' (MI300X); not with NVIDIA's compute_capability."""
    v = d.get("gfx")
    if v is None:
        return None
    text = str(v)
    if not re.fullmatch(r"gfx[0-9a-f]{3,4}", text):
        raise ConfigError(f"{where}.gfx must be an AMD LLVM target such as 'gfx942' (got {v!r})")
    if d.get("compute_capability") is not None:
        raise ConfigError(
            f"{where}.gfx: an AMD GPU has no NVIDIA compute_capability; give one or the other "
            f"(got gfx {text!r} and compute_capability {d['compute_capability']!r})"
        )
    return text


def _link_group(d: dict, where: str) -> int:
    """``link_group``, or 8 where the interconnect is faster than the host link, else 1."""
    v = d.get("link_group")
    if v is None:
        return 8 if float(d["interconnect_bandwidth"]) > float(d["host_link_bandwidth"]) else 1
    if isinstance(v, bool) or not isinstance(v, (int, float)) or not math.isfinite(v) or int(v) != v or v < 1:
        raise ConfigError(
            f"{where}.link_group must be an integer >= 1 (GPUs joined by the fast interconnect) (got {v!r})"
        )
    return int(v)


def hourly_price(configured: float | None, gpu: GPU, overrides: dict | None = None) -> float | None:
    """What one GPU costs per hour: the scenario's ``hardware.price_per_hour``, else a ``--price``
    override for its key, else the catalogue's (None: no price anywhere)."""
    return configured or (overrides or {}).get(gpu.key) or gpu.price_per_hour


def _price(v, where: str) -> float | None:
    if v is None:
        return None
    if isinstance(v, bool) or not isinstance(v, (int, float)) or v <= 0:
        raise ConfigError(f"{where}.price_per_hour must be a number > 0 (US dollars per GPU-hour) (got {v!r})")
    return float(v)


def _capability(v, where: str) -> str | None:
    if v is None:
        return None
    text = str(v)
    major, _, minor = text.partition(".")
    if not (major.isdigit() and minor.isdigit()):
        raise ConfigError(f"{where}.compute_capability must be NVIDIA's major.minor, e.g. '8.0' (got {v!r})")
    return text


def load_gpu(spec: str | dict) -> GPU:
    """A built-in GPU name (``h100-sxm``), a YAML file path, or an inline mapping."""
    if isinstance(spec, dict):
        return gpu_from_dict(str(spec.get("name", "custom")), spec, "hardware.gpu")
    cat = _catalog()
    if spec in cat:
        return gpu_from_dict(spec, cat[spec], f"catalog[{spec}]")
    path = Path(spec)
    if path.suffix in (".yaml", ".yml") and path.is_file():
        return gpu_from_dict(path.stem, yamlio.parse(read_text(path), f"hardware.gpu: {path}"), "hardware.gpu")
    key = catalog_key(spec)
    if key in cat:  # the same name written otherwise: H200, NVIDIA_H100_SXM, AMD Instinct MI300X
        return gpu_from_dict(key, cat[key], f"catalog[{key}]")
    near = sorted(k for k in cat if k.startswith(key)) if key else []
    if len(near) > 1:
        raise ConfigError(f"hardware.gpu: '{spec}' is more than one GPU; give {' or '.join(repr(k) for k in near)}")
    if near:
        raise ConfigError(f"hardware.gpu: unknown GPU '{spec}'; did you mean '{near[0]}'?")
    raise ConfigError(
        f"hardware.gpu: unknown GPU '{spec}'; built-in GPUs are {', '.join(sorted(cat))} (another: a YAML file "
        "or a mapping of its numbers, as simulator/data/hardware/catalog.yaml gives them)"
    )


def catalog_key(spec: str) -> str:
    """A GPU's name as the catalog keys it: lower case, words joined by '-', the maker's names left out."""
    words = spec.lower().replace("_", " ").replace("-", " ").split()
    return "-".join(w for w in words if w not in ("nvidia", "amd", "instinct", "tesla"))
