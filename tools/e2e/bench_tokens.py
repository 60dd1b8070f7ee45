"""`vllm bench serve` sending token ids: on the device, in place of `vllm bench serve`.

    python3 tools/e2e/bench_tokens.py --dataset-name custom --dataset-path D.jsonl ... (vllm bench serve's flags)

A custom dataset whose rows carry `prompt_token_ids` ({"prompt_token_ids": [...], "output_tokens": N})
becomes one request per row whose `prompt` is that list: vLLM's /v1/completions takes a list of token
ids as the prompt and tokenizes nothing, so the server's prompt is exactly those tokens whatever the
tokenizer or transformers make of text. Everything else is vLLM's own benchmark (its clients, timing,
`--save-detailed` result); rows with a text `prompt` are left to it unchanged. Rows are sent in file
order and never repeated (a repeat would share its prompt with the first copy). The request's
prompt length in the result is the server's own count (`usage.prompt_tokens` of its response).
"""

from __future__ import annotations

import importlib
import json
import sys


def _rows(path: str) -> list[dict]:
    with open(path) as f:
        return [json.loads(line) for line in f if line.strip()]


def patch(datasets) -> None:
    """Teach ``datasets.CustomDataset`` (vllm.benchmarks.datasets.datasets) rows of token ids."""
    custom = datasets.CustomDataset
    load_text, sample_text = custom.load_data, custom.sample

    def load_data(self) -> None:
        if not str(self.dataset_path).endswith(".jsonl"):
            return load_text(self)
        rows = _rows(self.dataset_path)
        if not rows or "prompt_token_ids" not in rows[0]:
            return load_text(self)
        if not getattr(self, "disable_shuffle", False):
            raise SystemExit("bench_tokens: token-id datasets are sent in file order: pass --disable-shuffle")
        self.data = rows
        return None

    def sample(self, tokenizer, num_requests: int, request_id_prefix: str = "", **kwargs):
        if not self.data or "prompt_token_ids" not in self.data[0]:
            return sample_text(self, tokenizer, num_requests, request_id_prefix=request_id_prefix, **kwargs)
        n = len(self.data) if num_requests <= 0 else num_requests
        if n > len(self.data):
            raise SystemExit(
                f"bench_tokens: {n} prompts asked, {len(self.data)} in {self.dataset_path}: none is repeated"
            )
        out = []
        for i, row in enumerate(self.data[:n]):
            ids = [int(t) for t in row["prompt_token_ids"]]
            out.append(
                datasets.SampleRequest(
                    prompt=ids,
                    prompt_len=len(ids),
                    expected_output_len=int(row["output_tokens"]),
                    request_id=f"{request_id_prefix}{i}",
                )
            )
        return out

    custom.load_data, custom.sample = load_data, sample


def main() -> None:
    patch(importlib.import_module("vllm.benchmarks.datasets.datasets"))
    from vllm.entrypoints.cli.main import main as vllm_main

    sys.argv = ["vllm", "bench", "serve", *sys.argv[1:]]
    vllm_main()


if __name__ == "__main__":
    main()
