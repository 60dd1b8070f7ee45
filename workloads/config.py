"""The ``workload:`` section of a scenario: typed and documented like the rest of the config."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Literal, Union

from simulator.fields import F


@dataclass(frozen=True)
class ArrivalConfig:
    type: Literal["closed_loop", "poisson"] = F("closed_loop", "closed loop (fixed concurrency) or open-loop Poisson arrivals")
    concurrency: int = F(64, "closed loop: requests in flight (each client sends its next request when its previous one ends)", "requests", ge=1)
    think_time_s: float = F(0.0, "closed loop: pause between a response and the client's next request", "s", ge=0.0)
    ramp_up_s: float = F(0.0, "closed loop: clients start evenly spread over this time (0: all at once)", "s", ge=0.0)
    rate: float = F(1.0, "poisson: mean arrival rate", "requests/s", gt=0.0)


@dataclass(frozen=True)
class LengthConfig:
    dist: Literal["fixed", "uniform", "lognormal", "normal"] = F("fixed", "length distribution (samples are rounded and clipped to [min, max])")
    value: int = F(512, "fixed: the length", "tokens", ge=1)
    mean: float = F(512.0, "lognormal, normal: mean of the distribution", "tokens", gt=0.0)
    sigma: float = F(0.5, "lognormal: sigma of the underlying normal", gt=0.0)
    std: float = F(128.0, "normal: standard deviation", "tokens", ge=0.0)
    min: int = F(1, "smallest length (uniform: lower bound)", "tokens", ge=1)
    max: int = F(1_000_000, "largest length (uniform: upper bound)", "tokens", ge=1)


@dataclass(frozen=True)
class SharedPrefixConfig:
    num_groups: int = F(1, "distinct shared prefixes (system prompts)", ge=1)
    tokens: int = F(256, "prefix length, put in front of the sampled prompt", "tokens", ge=1)
    fraction: float = F(1.0, "fraction of requests that carry a shared prefix", ge=0.0, le=1.0)


@dataclass(frozen=True)
class WorkloadConfig:
    arrival: ArrivalConfig = F(ArrivalConfig(), "how requests arrive")
    prompt_tokens: LengthConfig = F(LengthConfig(), "prompt length")
    output_tokens: LengthConfig = F(LengthConfig(value=256), "output length (max_tokens with ignore_eos)")
    shared_prefix: Union[SharedPrefixConfig, None] = F(None, "optional shared-prefix groups (prefix caching hits)")
