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

**The third version** zeroed the experts' biases too (`EXPERT_BIASES`). vLLM allocates gpt-oss's
MXFP4 expert weights and scales as zeros and its dummy loader fills only floating-point tensors, so
an expert's output is its biases alone, and the residual stream gathers the chosen experts' biases
layer after layer; the guess was that the tokens' hidden states converged so, and the later layers'
routers chose alike. With the biases zeroed the experts add nothing, yet the routing stayed as
concentrated (`h200_gptoss_routed_2026-11-29`: 5.0 and 8.0 ms at 16 and 64 in flight). Why dummy
weights route every token alike is not known.

**The fourth version** does not rely on the hidden states: each gpt-oss MoE block's router, once
built, returns a unit normal of its output's shape (`torch.randn_like`, traced into the compiled
graph and replayed by its CUDA graphs), so every token goes to 4 experts drawn at random at every
layer: uniform routing, as servesim prices a real checkpoint. The kernels read and multiply the same
bytes whatever the weights hold, so a step costs what it costs with real weights, but for one small
random draw a layer. It spread the routing (`h200_gptoss_noise_2026-11-29`: 13.0 and 25.0 ms). The
line printed then ends with `NOISE`, and `ingest.py` prices such a lane as real weights; a lane of
the second or third version (router weights drawn again, no `NOISE`) is marked confounded.
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
