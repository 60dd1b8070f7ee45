"""Fit the constants of simulator/scenario/memory.py on the calibration half of the KV-pool log lines.

    python tools/validation/fit_memory.py

Reads simulator/data/validation/kv_cache_lines.yaml (entries with ``split: calibrate``) and prints:
- the sampler's peak, ``base + copies x min(tokens, seqs) x vocab x 4 bytes``, least squares over
  the entries whose printed activation peak exceeds the forward pass's (dense, 16-bit weights);
- the non-PyTorch memory at tensor parallelism 1 and >= 2 (medians of the printed values);
- the CUDA-graph memory, ``base + per_layer x layers``, least squares over the printed
  "Graph capturing finished ... took X GiB".
The held-out entries are not read. ``servesim validate --kv`` then checks every entry.
"""

from __future__ import annotations

import sys
from pathlib import Path

import numpy as np

sys.path.insert(0, str(Path(__file__).resolve().parents[2]))

from simulator.scenario import yamlio
from simulator.scenario.memory import FORWARD_HIDDEN_COPIES
from simulator.scenario.models import load_model

GIB = float(1 << 30)
DATA = Path(__file__).resolve().parents[2] / "simulator" / "data" / "validation" / "kv_cache_lines.yaml"


def main() -> int:
    lines = [e for e in yamlio.load(DATA.read_text())["lines"] if e["split"] == "calibrate"]
    x, y, names = [], [], []
    for e in lines:
        m = load_model(e["model"])
        T, seqs, tp = e["max_num_batched_tokens"], e["max_num_seqs"], e["tensor_parallel_size"]
        forward = T * 2 * (3 * m.intermediate_size / tp + FORWARD_HIDDEN_COPIES * m.hidden_size)
        act = e["printed"]["activation_peak_gib"] * GIB
        if m.is_moe or e["dtype"] == "float32" or act <= forward:
            continue
        x.append(min(T, seqs) * m.vocab_size * 4.0)
        y.append(act)
        names.append(e["id"])
    A = np.column_stack([np.ones(len(x)), x])
    (base, copies), *_ = np.linalg.lstsq(A, np.array(y), rcond=None)
    print(
        f"sampler peak over {len(x)} entries: SAMPLER_BASE_BYTES = {base / GIB:.3f} GiB, SAMPLER_COPIES = {copies:.3f}"
    )
    nt1 = [e["printed"]["non_torch_gib"] for e in lines if e["tensor_parallel_size"] == 1]
    nt2 = [e["printed"]["non_torch_gib"] for e in lines if e["tensor_parallel_size"] > 1]
    print(
        f"non-PyTorch memory: tp 1 median {np.median(nt1):.3f} GiB ({len(nt1)}), tp >= 2 median {np.median(nt2):.3f} GiB ({len(nt2)})"
    )
    g = [
        (load_model(e["model"]).num_layers, e["printed"]["cudagraph_gib"])
        for e in lines
        if e["printed"].get("cudagraph_gib")
    ]
    A = np.column_stack([np.ones(len(g)), [n for n, _ in g]])
    (gb, gl), *_ = np.linalg.lstsq(A, np.array([v for _, v in g]), rcond=None)
    print(f"CUDA graphs over {len(g)} entries: GRAPH_BASE_BYTES = {gb:.3f} GiB, GRAPH_PER_LAYER_BYTES = {gl:.4f} GiB")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
