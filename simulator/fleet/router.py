"""The router in front of a fleet of replicas: which replica gets the next request.

Policies (``cluster.router``):

- ``random``: uniformly at random (seeded);
- ``round_robin``: in turn;
- ``least_requests``: the fewest requests the router has sent there that have not ended (the
  router counts them itself, so this is always current; vLLM production-stack's "least loaded");
- ``power_of_two``: two replicas at random, the one with fewer such requests;
- ``least_kv``: the lowest KV-cache usage, then the fewest waiting (scraped engine state);
- ``prefix_affinity``: a request that shares a prefix group or a session with an earlier one goes
  where that one went (its prefix is likely cached there); others, and groups first seen, by
  least requests;
- ``score``: the highest ``prefix x hit + queue x (1 - load) + kv x (1 - usage)``, as llm-d's
  inference scheduler combines its scorers: ``hit`` is the share of the prompt the replica is
  believed to cache (the router remembers which replicas served each prefix group and session),
  ``load`` the replica's running + waiting requests over the fleet's largest, ``usage`` its KV usage.

Engine state (queues, KV usage) reaches the router as metrics are scraped: with
``router_staleness_s`` > 0 the router sees a snapshot refreshed that often, else the live state.
Ties go to the lowest-numbered replica among those tied after the replica the last request went to
(so equal replicas take turns).
"""

from __future__ import annotations

import numpy as np
import simpy

from simulator.engine.rules import kv_usage


class Router:
    def __init__(self, env: simpy.Environment, replicas: list, cfg, seed: int) -> None:
        self.env, self.replicas = env, replicas
        self.policy = "round_robin" if cfg is None else cfg.router
        self.staleness = 0.0 if cfg is None else cfg.router_staleness_s
        self.weights = (
            (2.0, 1.0, 1.0) if cfg is None else (cfg.score_prefix_weight, cfg.score_queue_weight, cfg.score_kv_weight)
        )
        self.rng = np.random.default_rng(seed)
        self.next = 0
        self.affinity: dict[tuple[int, int], int] = {}  # (kind, key) -> the replica's index
        self.seen: dict[int, set] = {r.index: set() for r in replicas}  # keys each replica has served
        self._snap = None
        if self.staleness > 0 and self.policy in ("least_kv", "score"):
            self._snap = self._scrape()
            env.process(self._scraper())

    # ---- engine state, live or scraped --------------------------------------------------------------
    def _scrape(self) -> np.ndarray:
        """Per replica: running + waiting requests, waiting, KV usage."""
        out = np.empty((len(self.replicas), 3))
        for i, r in enumerate(self.replicas):
            running, waiting, swapped, free = r.engine.queues()
            out[i] = (running + waiting + swapped, waiting, kv_usage(free, r.engine.num_blocks))
        return out

    def set_replicas(self, replicas: list) -> None:
        """The replicas requests may go to from now on (an autoscaled fleet's serving ones); a
        scraped snapshot is taken again, as a new replica's metrics are scraped once it is up."""
        self.replicas = replicas
        for r in replicas:
            self.seen.setdefault(r.index, set())
        if self._snap is not None:
            self._snap = self._scrape()

    def _scraper(self):
        while True:
            yield self.env.timeout(self.staleness)
            self._snap = self._scrape()

    def _state(self) -> np.ndarray:
        return self._snap if self._snap is not None else self._scrape()

    # ---- choosing -----------------------------------------------------------------------------------
    def _best(self, values, lowest: bool = True) -> int:
        """The position of the best value; ties by turn after the last choice."""
        n = len(values)
        start = self.next % n
        best, at = None, start
        for k in range(n):
            i = start + k
            if i >= n:
                i -= n
            v = values[i] if lowest else -values[i]
            if best is None or v < best:
                best, at = v, i
        return at

    def pick(self, prompt_len: int, group: int, group_len: int, content_key: int):
        reps, p = self.replicas, self.policy
        n = len(reps)
        if n == 1:
            i = 0
        elif p == "round_robin":
            i = self.next % n
        elif p == "random":
            i = int(self.rng.integers(n))
        elif p == "least_requests":
            i = self._best([r.in_flight for r in reps])
        elif p == "power_of_two":
            a, b = self.rng.choice(n, 2, replace=False)
            i = int(a) if reps[a].in_flight <= reps[b].in_flight else int(b)
        elif p == "least_kv":
            s = self._state()
            i = self._best((s[:, 2] + 1e-9 * s[:, 1]).tolist())
        elif p == "prefix_affinity":
            key = _key(group, content_key)
            i = self._position(self.affinity.get(key, -1)) if key is not None else -1
            if i < 0:
                i = self._best([r.in_flight for r in reps])
                if key is not None:
                    self.affinity[key] = reps[i].index
        else:  # score
            key = _key(group, content_key)
            s = self._state()
            load = s[:, 0] / max(float(s[:, 0].max()), 1.0)
            share = (group_len if group >= 0 else prompt_len) / max(prompt_len, 1)
            hit = np.array([share if key is not None and key in self.seen[r.index] else 0.0 for r in reps])
            wp, wq, wk = self.weights
            i = self._best((wp * hit + wq * (1.0 - load) + wk * (1.0 - s[:, 2])).tolist(), lowest=False)
            if key is not None:
                self.seen[reps[i].index].add(key)
        self.next = i + 1
        return reps[i]

    def _position(self, index: int) -> int:
        """Where the replica numbered ``index`` is among those requests may go to (-1: not there)."""
        for i, r in enumerate(self.replicas):
            if r.index == index:
                return i
        return -1


def _key(group: int, content_key: int):
    """What a request's cached prefix is known by: its shared-prefix group, or its session."""
    if group >= 0:
        return (0, group)
    if content_key >= 0:
        return (1, content_key)
    return None
