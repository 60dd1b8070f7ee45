"""Speculative decoding: what a scenario's ``engine.speculative_config`` makes of the engine.

vLLM V1's rules, as both engine steps follow them (``simulator.engine.rules``):
- a request that samples a token gets ``num_speculative_tokens`` drafts from the drafter in the same
  step; the next step schedules its token and its drafts together (1 + k query tokens, counted in the
  token budget, the budget cutting drafts first), and the target verifies them all at once;
- the drafts accepted are the leading ones that pass (one draw per verification, ``rules.spec_accepted``),
  and the request outputs them and the token sampled after them; the rejected ones' KV is dropped
  (the blocks stay with the request), and a preempted request loses its drafts;
- drafters that run a model (EAGLE, EAGLE-3 and MTP heads on the target's hidden states, or a draft
  model) keep KV slots for their own passes ahead of the request (vLLM's ``num_lookahead_tokens``),
  and a draft model keeps one token of the step's budget per scheduled request for its inputs
  (``max_num_new_slots_for_drafting``, ``rules.room``). Both as vLLM 0.32 does (the recorded
  ``spec_draft*`` parity fixtures), on every release line: vLLM 0.10's scheduler gave a request
  admitted with nothing computed no lookahead slots in its first step.

Here: the draft model's architecture, weights and KV, the acceptance probabilities, and the cost
terms (``cost.SpecCost``) for one scenario.
"""

from __future__ import annotations

from dataclasses import replace

from simulator.scenario.config import SpeculativeConfig
from simulator.scenario.models import ModelArch, load_model

# Methods whose drafter runs a head on the target's hidden states, with KV slots kept ahead of the
# request for its passes (vLLM: ``SpeculativeConfig.use_eagle()``, ``num_lookahead_tokens``).
EAGLE_LIKE = ("eagle", "eagle3", "mtp")
# EAGLE-3 heads predict over a reduced vocabulary (``draft_vocab_size`` in the published Llama-3
# heads' config.json, e.g. yuhuili/EAGLE3-LLaMA3.1-Instruct-8B: 32,000).
EAGLE3_DRAFT_VOCAB = 32000

# The n-gram drafter's host time per request it proposes for. vLLM's NgramProposer searches each
# request's tokens for the longest match of its last ones (KMP, compiled with numba, requests spread
# over cpu_count / 2 / tp threads), then builds the drafts' lists in a Python loop. Timed on a 2-core
# Xeon (data/spec_decode/README.md): 1.4 ns a context token plus 0.7 us a call; with 16 threads on a
# GPU server a 2,000-token request's search is about 0.2 us, and the loop about 1.5 us a request.
NGRAM_HOST_SEQ_S = 2e-6

# The host's time per pass of a draft model (its inputs prepared, its token sampled, the next pass
# launched), beside the pass's GPU time. Fitted on vLLM issue #20780's batch-1 TPOT at k = 2..7 for
# EAGLE and EAGLE-3 on Llama-3.1-8B (python benchmarks/spec_decode.py --fit; the other sets there are
# held out): TPOT x acceptance length, the time of one step, grows by 0.7-1.0 ms per draft there,
# several times a one-layer head's GPU time.
DRAFT_PASS_S = 570e-6

# Conditional acceptance per draft position when the scenario gives none (the last value holds for
# later positions). Each from one public measurement, listed with its source in
# data/spec_decode/public.yaml:
# - eagle3: vLLM's EAGLE-3 acceptance test, Llama-3.1-8B-Instruct on MT-Bench, k = 3: accepted at
#   positions 1-3 in 73.0%, 52.1%, 35.5% of verifications (tests/v1/spec_decode/test_acceptance_length.py);
# - eagle: a constant rate that gives the mean acceptance length 2.29 that EAGLE (1) reached on
#   Llama-3.1-8B at k = 3 (vLLM issue #20780);
# - mtp: DeepSeek-R1's MTP layer at k = 1, 81% (vLLM PR #12755);
# - ngram: ShareGPT, Llama-3.1-8B, k = 3: 16.0%, 12.8%, 10.7% (SpecDecode-Bench, arXiv 2601.11580;
#   mostly steps where the search found no match; vLLM then proposes nothing, here the drafts are
#   verified and rejected, which overstates the cost at large batches).
# A draft model's acceptance depends on the pair of models: the scenario must give it.
DEFAULT_ACCEPTANCE: dict[str, tuple[float, ...]] = {
    "eagle3": (0.7296, 0.5208 / 0.7296, 0.3545 / 0.5208),
    "eagle": (0.634,),
    "mtp": (0.81,),
    "ngram": (0.160, 0.128 / 0.160, 0.107 / 0.128),
}


def enabled(spec: SpeculativeConfig) -> bool:
    return spec.method != "none"


def acceptance(spec: SpeculativeConfig) -> tuple[float, ...]:
    """The conditional acceptance rate of each of the ``num_speculative_tokens`` draft positions."""
    k = spec.num_speculative_tokens
    a = spec.acceptance_rate
    if a is None:
        a = DEFAULT_ACCEPTANCE[spec.method]
    elif not isinstance(a, (list, tuple)):
        a = [a]
    a = tuple(float(x) for x in a)
    return tuple(a[i] if i < len(a) else a[-1] for i in range(k))


def accept_at_least(spec: SpeculativeConfig) -> tuple[float, ...]:
    """P(at least i + 1 drafts accepted) for i = 0..k-1: the products of the rates up to each position
    (what ``rules.spec_accepted`` compares its draw with)."""
    out, p = [], 1.0
    for r in acceptance(spec):
        p *= r
        out.append(p)
    return tuple(out)


def mean_acceptance_length(spec: SpeculativeConfig) -> float:
    """Expected tokens a verification outputs (vLLM's "mean acceptance length"), with every draft verified."""
    return 1.0 + sum(accept_at_least(spec))


def lookahead(spec: SpeculativeConfig) -> int:
    """KV slots a running request keeps ahead of its tokens for the drafter's passes (vLLM's
    ``num_lookahead_tokens``: a head's or a draft model's, none for n-gram lookup)."""
    return spec.num_speculative_tokens if spec.method in (*EAGLE_LIKE, "draft_model") else 0


def draft_slots(spec: SpeculativeConfig) -> int:
    """Budget tokens a scheduled request leaves for a draft model's inputs (vLLM's
    ``SpeculativeConfig.max_num_new_slots_for_drafting``: its first pass reads one token more than the
    target's; a head reads the target's hidden states instead)."""
    return 1 if spec.method == "draft_model" else 0


def draft_arch(spec: SpeculativeConfig, target: ModelArch) -> ModelArch | None:
    """The model the drafter runs (None for n-gram lookup): one decoder layer shaped as the target's
    (EAGLE heads are dense; an MTP layer is the target's own, experts included; EAGLE-3's predicts
    over its reduced vocabulary), or the named draft model, in the target's dtype."""
    if spec.method in EAGLE_LIKE:
        moe = spec.method == "mtp" and target.is_moe
        return replace(
            target,
            name=f"{target.name}-{spec.method}",
            num_layers=1,
            first_dense_layers=0,
            num_experts=target.num_experts if moe else 0,
            vocab_size=EAGLE3_DRAFT_VOCAB if spec.method == "eagle3" else target.vocab_size,
            vision_params=0,
            quantization="none",
        )
    if spec.method == "draft_model":
        assert spec.draft_model is not None  # checked when the scenario was loaded
        return replace(load_model(spec.draft_model), dtype=target.dtype)
    return None


def draft_weight_params(spec: SpeculativeConfig, target: ModelArch, draft: ModelArch) -> int:
    """Parameters the drafter loads beside the target's. A head (EAGLE, EAGLE-3, MTP) shares the
    target's embedding and (but for EAGLE-3's own smaller one) its LM head, and adds a projection of
    2 (EAGLE, MTP) or 3 (EAGLE-3) hidden states into one; a draft model loads all of its own."""
    if spec.method not in EAGLE_LIKE:
        return draft.total_params
    h = draft.hidden_size
    shared = draft.embedding_params + draft.lm_head_params
    own_head = draft.padded_vocab_size * h if spec.method == "eagle3" else 0
    fc = (3 if spec.method == "eagle3" else 2) * h * h
    return draft.total_params - shared + own_head + fc
