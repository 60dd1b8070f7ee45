"""How `vllm bench serve` sends its requests, as a scenario's arrivals: the one rule both
``servesim bench`` (a user's result file) and ``servesim validate`` (the public runs) replay by."""

from __future__ import annotations

import math

from simulator.errors import ConfigError


def bench_arrival(num_prompts: int, request_rate, max_concurrency, burstiness=None, where: str = "bench") -> dict:
    """``workload.arrival`` for ``num_prompts`` requests sent as the benchmark sends them: with
    ``--max-concurrency``, that many clients back to back (requests beyond the cap wait in the client,
    untimed, whatever the rate offers); without a cap and at an infinite ``--request-rate``, every
    request at once (as many clients as requests); else a Poisson stream at the rate, or gamma with
    the coefficient of variation 1/sqrt(``--burstiness``) where the burstiness is not 1 (the
    benchmark's gaps are gamma with shape ``burstiness``). Values as the benchmark's result keeps them
    ('inf', numbers or null); a wrong one is refused in one line naming ``where``'s field."""
    rate = _number(request_rate, "request_rate", where, inf=True)
    conc = _number(max_concurrency, "max_concurrency", where)
    if conc is not None or rate is None:
        return {"type": "closed_loop", "concurrency": int(conc) if conc is not None else int(num_prompts)}
    shape = _number(burstiness, "burstiness", where)
    if shape is None or shape == 1.0:
        return {"type": "poisson", "rate": rate}
    return {"type": "gamma", "rate": rate, "cv": 1.0 / math.sqrt(shape)}


def _number(v, key: str, where: str, inf: bool = False) -> float | None:
    """``v`` as a number > 0; None where it is absent (or, with ``inf``, infinite: 'inf')."""
    if v is None or (inf and isinstance(v, str) and v.strip().lower() in ("inf", "infinity")):
        return None
    if not isinstance(v, bool) and isinstance(v, (int, float)) and v > 0:
        if math.isinf(v):
            if inf:
                return None
        elif math.isfinite(v):
            return float(v)
    allowed = "a number > 0 or 'inf'" if inf else "a number > 0 or null"
    raise ConfigError(f"{where}: {key} must be {allowed} (got {v!r})")
