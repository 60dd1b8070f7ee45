"""Time vLLM's n-gram drafter search on this CPU: the function that finds the longest match of a
request's last tokens in its context, read out of vLLM's own source file (not copied here) and
compiled with numba as vLLM compiles it.

Run: python tools/spec_decode/time_ngram.py --source PATH/TO/vllm/v1/spec_decode/ngram_proposer.py
(servesim's NGRAM_HOST_SEQ_S in simulator/engine/speculative.py quotes what it printed; data/spec_decode/README.md)
"""

from __future__ import annotations

import argparse
import ast
import time
from pathlib import Path

import numpy as np

FUNCTION = "_find_longest_matched_ngram_and_propose_tokens"


def load(source: Path):
    """The search function, compiled with numba from vLLM's source file."""
    from numba import njit

    tree = ast.parse(source.read_text())
    node = next(n for n in tree.body if isinstance(n, ast.FunctionDef) and n.name == FUNCTION)
    node.decorator_list = []  # compiled below, as vLLM's @jit(nopython=True) does
    node.returns = None
    for a in node.args.args:
        a.annotation = None
    ns: dict = {"np": np}
    exec(compile(ast.Module(body=[node], type_ignores=[]), str(source), "exec"), ns)
    return njit(ns[FUNCTION])


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--source", type=Path, required=True, help="vLLM's vllm/v1/spec_decode/ngram_proposer.py")
    ap.add_argument("--k", type=int, default=3, help="draft tokens asked for")
    args = ap.parse_args()
    search = load(args.source)
    rng = np.random.default_rng(0)
    search(np.zeros(1024, np.int32), 1, 4, 10**6, args.k)  # compile
    for n in (512, 2048, 8192):
        tokens = rng.integers(0, 32000, n).astype(np.int32)
        best = float("inf")
        for _ in range(3):
            t = time.perf_counter()
            for _ in range(3000):
                search(tokens, 1, 4, 10**6, args.k)
            best = min(best, (time.perf_counter() - t) / 3000)
        print(f"context {n:5d} tokens: {best * 1e6:6.2f} us a call, {best / n * 1e9:.2f} ns a context token")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
