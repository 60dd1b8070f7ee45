"""The step cost is one formula: ``CostModel.ops`` (what `servesim step-time --json` shows, term by
term) adds up to ``step_time`` (what both engine steps charge) on any step, model and execution; and a
step's work is counted one way (``rules.add_request``), whoever counts it."""

from __future__ import annotations

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from simulator.engine import rules, speculative
from simulator.engine.cost import CostModel, Efficiency, Execution, SpecCost, StepWork, decode_work
from simulator.engine.host import EngineCpu, HostModel
from simulator.scenario.config import SpeculativeConfig
from simulator.scenario.hardware import load_gpu
from simulator.scenario.models import load_model

MODELS = ["llama-3.1-8b", "qwen3-30b-a3b", "deepseek-v3", "llama-3.1-70b"]
GPUS = ["h100-sxm", "a100-80gb", "l40s", "h100-pcie"]


@settings(max_examples=200, deadline=None)
@given(
    model=st.sampled_from(MODELS),
    gpu=st.sampled_from(GPUS),
    tp=st.sampled_from([1, 2, 4, 8]),
    seqs=st.integers(0, 2048),
    extra=st.integers(0, 8192),
    context=st.integers(0, 2_000_000),
    swap=st.sampled_from([0.0, 1e6, 3e9]),
    graphs=st.sampled_from([0, 512]),
    async_=st.booleans(),
    eager=st.booleans(),
    mixed_rows=st.sampled_from([0.0, 106.0]),
    cpu=st.booleans(),
    spec=st.sampled_from([None, "ngram", "eagle3", "mtp"]),
)
def test_the_terms_of_a_step_add_up_to_its_time(
    model, gpu, tp, seqs, extra, context, swap, graphs, async_, eager, mixed_rows, cpu, spec
):
    """Whatever the step (decodes, prefill chunks, swap traffic, drafts verified), model (dense, MoE,
    MLA), GPU, tensor parallelism, execution (CUDA graphs or not, async scheduling, eager, the engine's
    CPU work) and drafter, the listed terms sum to the step time."""
    m = load_model(model)
    if m.num_heads % tp:
        return
    tokens = seqs + (extra if seqs else 0)
    w = StepWork(
        num_seqs=seqs,
        num_tokens=tokens,
        num_prefill_tokens=tokens - seqs,
        num_decode_tokens=seqs,
        context_tokens=context if seqs else 0,
        attn_pairs=float(context + tokens) * max(seqs, 1),
        num_sampled=seqs,
        swap_bytes=swap,
        single_row_context=context // 2 if seqs else 0,
        num_draft_tokens=min(extra, 3 * seqs) if spec else 0,
    )
    x = Execution(max_capture_size=graphs, pad=graphs > 0, enforce_eager=eager, mixed_decode_rows=mixed_rows)
    host = HostModel(EngineCpu(step_s=1e-3, per_seq_s=3e-5), async_scheduling=async_) if cpu else None
    eff = Efficiency()
    sc = None
    if spec:
        draft = speculative.draft_arch(SpeculativeConfig(method=spec), m)
        sc = SpecCost(
            3, 5e-6 if spec == "ngram" else 0.0, draft and CostModel(draft, load_gpu(gpu), tp, eff, execution=x)
        )
    cm = CostModel(m, load_gpu(gpu), tp, eff, execution=x, host=host, spec=sc)
    total = sum(o.seconds for o in cm.ops(w))
    assert total == pytest.approx(cm.step_time(w), rel=1e-12, abs=1e-15)


@settings(max_examples=300, deadline=None)
@given(st.lists(st.integers(1, 100_000), min_size=0, max_size=50))
def test_decodes_summed_at_once_are_the_decodes_added_one_by_one(contexts):
    """``rules.add_decodes`` (the compiled step's lazily decoding requests, as one sum) adds what
    ``rules.add_request`` adds for each of them, request by request."""
    one, many = np.zeros(rules.N_WORK, np.int64), np.zeros(rules.N_WORK, np.int64)
    for c in contexts:
        rules.add_request(one, 1, c, c + 1, 0)
    rules.add_decodes(many, len(contexts), sum(contexts))
    assert one.tolist() == many.tolist()


@settings(max_examples=300, deadline=None)
@given(batch=st.integers(1, 512), context=st.integers(0, 100_000), new=st.integers(1, 8192))
def test_a_uniform_step_is_its_requests_added_one_by_one(batch, context, new):
    """``cost.decode_work`` (what `servesim step-time` and the calibration price) is the step of
    ``batch`` identical requests as both engine steps count it, with the pairs written out by hand."""
    w = np.zeros(rules.N_WORK, np.int64)
    for _ in range(batch):
        rules.add_request(w, new, context, context + new, 0)
    uniform = decode_work(batch, context, new)
    assert uniform == StepWork.of(w)
    assert uniform.attn_pairs == batch * new * (context + (new + 1) / 2)
    assert uniform.num_sampled == batch and uniform.num_tokens == batch * new
    assert uniform.num_decode_tokens == (batch if new == 1 and context > 0 else 0)
