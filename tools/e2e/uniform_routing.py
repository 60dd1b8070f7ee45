"""Installed as the device site's sitecustomize (`device.sh routing`): a dummy-weight server whose
mixture-of-experts routers route as trained ones do, spread over the experts.

vLLM's dummy loader fills every weight uniformly in +-1e-3. A router that adds a bias to its scores
(gpt-oss's `router.bias`, DeepSeek-V3's `e_score_correction_bias`) then picks the same top-k experts
for every token, since the bias (~6e-4) outweighs the scores (~1e-5): the server reads k experts'
weights a layer where a trained model reads nearly all of them at 64 tokens and more
(data/e2e/README.md, "h200_gptoss_2026-11-29"). With those biases zeroed after loading, the scores
alone pick the experts, and they differ from token to token: routing is close to uniform, as
servesim prices a real checkpoint. Each process that loads a model prints one line saying how many
biases it zeroed; `ingest.py` reads it from the server's log (`ROUTING_LINE`).

Standard library at import; the patch applies when vLLM's dummy loader is first imported.

**Zeroing the biases alone did not spread the routing.** Tried on gpt-oss-120b
(`h200_gptoss_uniform_2026-11-29`): the server zeroed its 36 router biases, but its decode steps at
16, 64 and 128 in flight (5.0, 9.0 and 14.0 ms) are within 1 ms of the dummy-routing server's, where
reading the ~51-126 experts a trained router touches would take several ms more: with scores of
~1e-5 on every expert the top-k still picks (nearly) the same experts. So gpt-oss's router weights
(`WEIGHTS`) are also drawn again, from a unit normal: a normalized hidden state of dummy weights
(entries ~1e-3) then gives scores of ~0.05 that differ from expert to expert and token to token.
The line printed says how many of each. That did not spread the routing either
(`h200_gptoss_spread_2026-11-29`: decode steps as short as with dummy routing), so `ingest.py` marks
every run of a lane whose server drew router weights again (`SPREAD`), and no more, confounded,
replayed as dummy routing is priced.

**Why, and the third version.** vLLM allocates gpt-oss's MXFP4 expert weights and scales as zeros,
and its dummy loader fills only floating-point tensors: every expert's matrices stay zero, and an
expert's output is its biases alone (`experts.w13_bias`, `experts.w2_bias`, filled in +-1e-3). The
residual stream therefore gains the chosen experts' `w2_bias` at each of the 24 or 36 layers, about as
large as a token's own embedding (entries within +-1e-3) after one layer and many times larger after
a few: the tokens' hidden states converge, and the routers of the later layers, whatever their
weights, choose the same experts for all of them. So the expert biases are zeroed too
(`EXPERT_BIASES`): the experts then add nothing, the residual stream stays each token's own embedding
(attention adds ~1e-6), and every layer's router, drawn again, scores each token differently. The
kernels read and multiply the same bytes whatever they hold, so a step costs what it costs with real
weights. The line then also says how many expert biases were zeroed (`QUIET`), and `ingest.py` takes
such a lane as routed as a trained model routes (priced as real weights) unless its steps say
otherwise.
"""

from __future__ import annotations

import importlib.abc
import importlib.machinery
import sys

TARGET = "vllm.model_executor.model_loader.dummy_loader"
GPT_OSS = "vllm.model_executor.models.gpt_oss"  # its MLPBlock: router logits drawn at random (NOISE)
NOISE = "router logits random"
_noisy = []  # set once gpt-oss's MLPBlock is patched
BIASES = ("router.bias", "e_score_correction_bias")
WEIGHTS = ("router.weight",)  # gpt-oss's router (DeepSeek's gate is not redrawn)
EXPERT_BIASES = ("experts.w13_bias", "experts.w2_bias")  # gpt-oss's experts' biases
ROUTING_LINE = "uniform routing: zeroed"
SPREAD = "redrew"
QUIET = "expert biases zeroed:"


def _patch(module) -> None:
    cls = module.DummyModelLoader
    original = cls.load_weights

    def load_weights(self, model, model_config):
        original(self, model, model_config)
        import torch

        n = m = k = 0
        with torch.no_grad():
            for name, p in model.named_parameters():
                if name.endswith(BIASES):
                    p.zero_()
                    n += 1
                elif name.endswith(WEIGHTS):
                    p.normal_(0.0, 1.0, generator=torch.Generator(p.device).manual_seed(1234 + m))
                    m += 1
                elif name.endswith(EXPERT_BIASES):
                    p.zero_()
                    k += 1
        noise = f", {NOISE}" if _noisy else ""
        print(f"{ROUTING_LINE} {n} router biases, {SPREAD} {m} router weights, {QUIET} {k}{noise}", flush=True)

    cls.load_weights = load_weights


def _patch_gpt_oss(module) -> None:
    """gpt-oss's MoE blocks route on logits drawn at random, token by token (uniform routing): each
    block's router, once built, returns a unit normal of its output's shape."""
    cls = module.MLPBlock
    original = cls.__init__

    def __init__(self, *args, **kwargs):
        original(self, *args, **kwargs)
        import torch

        inner = self.router.forward

        def noisy(h):
            return torch.randn_like(inner(h))

        self.router.forward = noisy

    cls.__init__ = __init__
    _noisy.append(cls)


PATCHES = {TARGET: _patch, GPT_OSS: _patch_gpt_oss}


class _Finder(importlib.abc.MetaPathFinder):
    """Finds the modules it patches as the path finder would, and patches each once it has run."""

    def find_spec(self, name, path, target=None):
        if name not in PATCHES:
            return None
        spec = importlib.machinery.PathFinder.find_spec(name, path)
        if spec is None or spec.loader is None:
            return spec
        run = spec.loader.exec_module

        def exec_module(module):
            run(module)
            PATCHES[name](module)

        spec.loader.exec_module = exec_module  # type: ignore[method-assign]
        return spec


if __name__ == "sitecustomize":  # as the site's sitecustomize; imported for its constants (ingest.py), inert
    sys.meta_path.insert(0, _Finder())
