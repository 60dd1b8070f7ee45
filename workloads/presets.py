"""Named length presets (``workload: {preset: chat}``), each number with where it comes from.

Lengths are tokens. Where a source counts words, tokens = words x 4/3 (OpenAI's rule of thumb
"1 token ~ 3/4 of a word", https://help.openai.com/en/articles/4936856). A lognormal with mean m and
standard deviation s has sigma = sqrt(ln(1 + (s/m)^2)); with only a median M known, mean = M exp(sigma^2/2).
Where a source gives no spread, sigma is an assumption and is marked so. docs/workloads.md has the table.
"""

from __future__ import annotations

import math

from workloads.config import LengthConfig

TOKENS_PER_WORD = 4.0 / 3.0


def sigma_from_cv(mean: float, std: float) -> float:
    """Lognormal sigma that gives this mean and standard deviation."""
    return math.sqrt(math.log1p((std / mean) ** 2))


def mean_from_median(median: float, sigma: float) -> float:
    return median * math.exp(sigma**2 / 2)


# name -> (prompt_tokens, output_tokens, sources)
PRESETS: dict[str, tuple[LengthConfig, LengthConfig, str]] = {
    # LMSYS-Chat-1M (Zheng et al., ICLR 2024, arXiv:2309.11998, Table 1): tokens per user prompt
    # 69.5 +- 143.4, tokens per response 214.5 +- 226.8 (1M real conversations, Llama tokenizer).
    "chat": (
        LengthConfig(dist="lognormal", mean=69.5, sigma=round(sigma_from_cv(69.5, 143.4), 4), max=32_768),
        LengthConfig(dist="lognormal", mean=214.5, sigma=round(sigma_from_cv(214.5, 226.8), 4), max=8_192),
        "LMSYS-Chat-1M, arXiv:2309.11998 Table 1: prompt 69.5 +- 143.4 tokens, response 214.5 +- 226.8 tokens",
    ),
    # arXiv summarisation dataset (Cohan et al., NAACL 2018, arXiv:1804.05685), as published on the
    # Hugging Face hub as ccdv/arxiv-summarization: train split, 203,037 papers, whitespace tokens
    # 6038 (article) / 299 (abstract) on average. Spread not published: sigma 0.5 is an assumption.
    "summarisation": (
        LengthConfig(dist="lognormal", mean=round(6038 * TOKENS_PER_WORD), sigma=0.5, max=131_072),
        LengthConfig(dist="lognormal", mean=round(299 * TOKENS_PER_WORD), sigma=0.5, max=4_096),
        "arXiv summarisation (Cohan et al. 2018; dataset card ccdv/arxiv-summarization): article 6038 words, abstract 299 words",
    ),
    # Splitwise (Patel et al., ISCA 2024, arXiv:2311.18677), Azure production "coding" trace
    # (published as AzurePublicDataset AzureLLMInferenceTrace_code): median prompt 1500 tokens,
    # median output 13 tokens. Spread not restated here: sigma 1.0 (prompt), 1.0 (output) assumed.
    "code_completion": (
        LengthConfig(dist="lognormal", mean=round(mean_from_median(1500, 1.0)), sigma=1.0, max=32_768),
        LengthConfig(dist="lognormal", mean=round(mean_from_median(13, 1.0), 1), sigma=1.0, max=2_048),
        "Splitwise, arXiv:2311.18677 (Azure coding trace): median prompt 1500 tokens, median output 13 tokens",
    ),
    # LongBench (Bai et al., ACL 2024, arXiv:2308.14508): English tasks average 6,711 words of
    # context. Answers are short (QA); output mean 128 tokens, sigma 0.6 are assumptions.
    "long_context_rag": (
        LengthConfig(dist="lognormal", mean=round(6711 * TOKENS_PER_WORD), sigma=0.6, max=131_072),
        LengthConfig(dist="lognormal", mean=128.0, sigma=0.6, max=2_048),
        "LongBench, arXiv:2308.14508: average context 6,711 words (English); output length assumed",
    ),
}


def preset_lengths(name: str) -> tuple[LengthConfig, LengthConfig]:
    p, o, _ = PRESETS[name]
    return p, o
