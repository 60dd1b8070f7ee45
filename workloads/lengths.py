"""Token-length distributions, drawn in batches from a seeded numpy Generator.

``LengthSampler`` draws one distribution independently; ``PairSampler`` draws (prompt, output) pairs
whose ranks are correlated through a Gaussian copula: z1, z2 standard normal with correlation rho,
each pushed through its own marginal's quantile function, so each marginal is exactly the configured
distribution and rho sets the dependence.
"""

from __future__ import annotations

import csv
import functools
import math
import os
from pathlib import Path
from typing import cast

import numpy as np

from simulator.errors import ConfigError
from simulator.scenario.textfile import ENCODING, utf8_error

_BATCH = 4096
_erfc = np.frompyfunc(math.erfc, 1, 1)


def normal_cdf(z: np.ndarray) -> np.ndarray:
    return cast(np.ndarray, 0.5 * _erfc(-np.asarray(z, float) / math.sqrt(2.0))).astype(float)


# ---- empirical lengths from a file -------------------------------------------------------------


def load_lengths(path: str, column: str | None, where: str) -> np.ndarray:
    """Lengths from a file: one positive integer per line, or a CSV column. Errors name file and line."""
    p = Path(path)
    if not p.is_file():
        raise ConfigError(f"{where}: file not found (got {path!r})")
    st = p.stat()
    return _load_lengths(str(p.resolve()), path, column, st.st_mtime_ns, st.st_size)


@functools.lru_cache(maxsize=32)
def _load_lengths(resolved: str, shown: str, column: str | None, _mtime: int, _size: int) -> np.ndarray:
    values: list[int] = []

    def parse(text: str, line: int, what: str) -> None:
        t = text.strip()
        try:
            v = float(t)
        except ValueError:
            v = float("nan")
        if not (v == v and v >= 1 and v == int(v)):
            raise ConfigError(f"{os.path.basename(shown)} line {line}: {what} must be an integer >= 1 (got {t!r})")
        values.append(int(v))

    try:
        with open(resolved, newline="", encoding=ENCODING) as fh:
            if column is None:
                for i, line in enumerate(fh, 1):
                    if line.strip() and not line.lstrip().startswith("#"):
                        parse(line, i, "length")
            else:
                reader = csv.reader(fh)
                header = next(reader, None)
                if header is None or column not in [h.strip() for h in header]:
                    raise ConfigError(f"{os.path.basename(shown)} line 1: no column {column!r} (got {header!r})")
                k = [h.strip() for h in header].index(column)
                for row in reader:
                    if not row or not any(c.strip() for c in row):
                        continue
                    parse(row[k] if k < len(row) else "", reader.line_num, column)
    except UnicodeDecodeError:
        raise utf8_error(resolved, os.path.basename(shown)) from None
    if not values:
        raise ConfigError(f"{os.path.basename(shown)}: no lengths found (got an empty file)")
    return np.array(values, np.int64)


@functools.lru_cache(maxsize=32)
def _zipf_cdf(lo: int, hi: int, alpha: float) -> np.ndarray:
    k = np.arange(lo, hi + 1, dtype=float)
    w = k ** (-alpha)
    c = np.cumsum(w)
    return c / c[-1]


class LengthSampler:
    """Draws integer lengths >= 1 one at a time, refilling a pre-drawn batch (same seed, same values)."""

    def __init__(self, cfg, rng: np.random.Generator) -> None:
        self.cfg = cfg
        self.rng = rng
        self._buf: list[int] = []  # drawn ahead, as Python ints (indexing a list costs less than an array)
        self._i = 0
        self._values = None
        if cfg.dist == "empirical":
            self._values = load_lengths(cfg.file, cfg.column, "empirical lengths")

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
        elif c.dist == "zipf":
            cdf = _zipf_cdf(max(c.min, 1), c.max, c.alpha)
            x = (np.searchsorted(cdf, rng.random(n), side="right") + max(c.min, 1)).astype(float)
        elif c.dist == "empirical":
            assert self._values is not None  # loaded in __init__ for dist 'empirical'
            x = self._values[rng.integers(len(self._values), size=n)].astype(float)
        else:  # pragma: no cover - validated at load
            raise ValueError(c.dist)
        return np.clip(np.rint(x), max(c.min, 1), c.max).astype(np.int64)

    def from_normal(self, z: np.ndarray) -> np.ndarray:
        """This marginal's lengths at standard-normal scores ``z`` (the copula transform)."""
        c = self.cfg
        if c.dist == "fixed":
            x = np.full(len(z), float(c.value))
        elif c.dist == "lognormal":
            x = np.exp(np.log(c.mean) - 0.5 * c.sigma**2 + c.sigma * z)
        elif c.dist == "normal":
            x = c.mean + c.std * z
        else:
            u = np.clip(normal_cdf(z), 0.0, np.nextafter(1.0, 0.0))
            if c.dist == "uniform":
                x = c.min + np.floor(u * (c.max - c.min + 1))
            elif c.dist == "zipf":
                lo = max(c.min, 1)
                x = (np.searchsorted(_zipf_cdf(lo, c.max, c.alpha), u, side="right") + lo).astype(float)
            elif c.dist == "empirical":
                assert self._values is not None  # loaded in __init__ for dist 'empirical'
                s = np.sort(self._values)
                x = s[np.floor(u * len(s)).astype(np.int64)].astype(float)
            else:  # pragma: no cover - validated at load
                raise ValueError(c.dist)
        return np.clip(np.rint(x), max(c.min, 1), c.max).astype(np.int64)

    def __call__(self) -> int:
        if self._i == len(self._buf):
            self._buf = self.draw(_BATCH).tolist()
            self._i = 0
        v = self._buf[self._i]
        self._i += 1
        return v

    def mean(self) -> float:
        """Mean of the clipped distribution, estimated from a fixed-seed sample of 2,000 (within a few
        percent: enough for the sizing hints that use it, ``simulator.size``, and cheap before a run)."""
        probe = LengthSampler(self.cfg, np.random.default_rng(12345))
        return float(probe.draw(2_000).mean())


class PairSampler:
    """(prompt, output) pairs with Gaussian-copula correlation ``rho`` between the two lengths."""

    def __init__(self, prompt: LengthSampler, output: LengthSampler, rho: float, rng: np.random.Generator) -> None:
        self.prompt, self.output, self.rho, self.rng = prompt, output, rho, rng
        self._p = self._o = np.empty(0, np.int64)
        self._i = 0

    def draw(self, n: int) -> tuple[np.ndarray, np.ndarray]:
        z = self.rng.standard_normal((2, n))
        z2 = self.rho * z[0] + math.sqrt(max(0.0, 1.0 - self.rho**2)) * z[1]
        return self.prompt.from_normal(z[0]), self.output.from_normal(z2)

    def __call__(self) -> tuple[int, int]:
        if self._i == len(self._p):
            self._p, self._o = self.draw(_BATCH)
            self._i = 0
        i = self._i
        self._i += 1
        return int(self._p[i]), int(self._o[i])
