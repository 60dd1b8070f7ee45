"""What a step decided and what it observed: the plain records the scheduler hands the engine."""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from simulator.cost import StepWork


@dataclass(frozen=True)
class StepPlan:
    """What ``schedule()`` decided for one step, and the state right after it."""

    rids: np.ndarray  # scheduled requests, in scheduling order
    num_new: np.ndarray  # tokens scheduled for each
    computed_before: np.ndarray
    new: tuple[int, ...]
    resumed: tuple[int, ...]
    preempted: tuple[int, ...]
    aborted: tuple[int, ...]
    prefix_hits: tuple[tuple[int, int], ...]  # (request, cached tokens) for new and resumed
    work: StepWork
    recomputed_tokens: int
    kv_usage: float
    num_free_blocks: int
    num_running: int
    num_waiting: int
    num_swapped: int
    long_prefill_cap: int = 0  # the long_prefill_token_threshold in force this step (0: none)
    sampled: np.ndarray | None = None  # the scheduled requests that sample a token (None: all of them)


@dataclass(frozen=True)
class StepOutput:
    """What ``update()`` observed at the end of a step."""

    num_generated: int
    finished: np.ndarray
    itl_gaps: np.ndarray  # seconds between consecutive tokens of the same request
