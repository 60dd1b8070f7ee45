"""Token-length distributions, drawn in batches from a seeded numpy Generator."""

from __future__ import annotations

import numpy as np

_BATCH = 4096


class LengthSampler:
    """Draws integer lengths >= 1 one at a time, refilling a pre-drawn batch (same seed, same values)."""

    def __init__(self, cfg, rng: np.random.Generator) -> None:
        self.cfg = cfg
        self.rng = rng
        self._buf = np.empty(0, np.int64)
        self._i = 0

    def draw(self, n: int) -> np.ndarray:
        c, rng = self.cfg, self.rng
        if c.dist == "fixed":
            x = np.full(n, float(c.value))
        elif c.dist == "uniform":
            x = rng.integers(c.min, c.max, size=n, endpoint=True).astype(float)
        elif c.dist == "lognormal":
            mu = np.log(c.mean) - 0.5 * c.sigma**2  # so that E[x] = mean
            x = rng.lognormal(mu, c.sigma, size=n)
        elif c.dist == "normal":
            x = rng.normal(c.mean, c.std, size=n)
        else:  # pragma: no cover - validated at load
            raise ValueError(c.dist)
        return np.clip(np.rint(x), max(c.min, 1), c.max).astype(np.int64)

    def __call__(self) -> int:
        if self._i == len(self._buf):
            self._buf = self.draw(_BATCH)
            self._i = 0
        v = self._buf[self._i]
        self._i += 1
        return int(v)

    def mean(self) -> float:
        """Mean of the clipped distribution, estimated from a fixed-seed sample (for sizing hints)."""
        probe = LengthSampler(self.cfg, np.random.default_rng(12345))
        return float(probe.draw(200_000).mean())
