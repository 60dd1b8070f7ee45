"""Request events of a run, and the step-by-step view built from them and the step log.

Asked to (``trace`` level 1: request events; 2: also every scheduled request's tokens each step),
both engine steps record the same events, as rows of (time, kind, request, value): ``NEW`` and
``RESUMED`` when a request is admitted (value: its prefix-cache hit tokens, or a swapped-in
request's computed tokens), ``PREEMPTED`` (value: ``RECOMPUTED``, ``SWAPPED_OUT`` or ``ABORTED``),
``SCHEDULED`` (value: its tokens this step), ``FIRST_TOKEN`` and ``FINISHED``. A step's
scheduling events carry its start time, its tokens and finishes its end time. ``step_records``
joins them with the step log into one record per step, which is what the parity replay compares
with vLLM's own traces and what the hand-computed tests read.
"""

from __future__ import annotations

from dataclasses import dataclass
from enum import IntEnum

import numpy as np


class EventKind(IntEnum):
    """What a request event records (the ``kind`` of a row)."""

    SCHEDULED = 0
    NEW = 1
    RESUMED = 2
    PREEMPTED = 3
    FIRST_TOKEN = 4
    FINISHED = 5


class PreemptionKind(IntEnum):
    """What a preemption did with its victim (the value of a ``PREEMPTED`` event)."""

    RECOMPUTED = 0
    SWAPPED_OUT = 1
    ABORTED = 2


KINDS = tuple(k.name.lower() for k in EventKind)
PREEMPTION_KINDS = ("preempted", "swapped out", "aborted")  # labels, by PreemptionKind
_AT_END = (EventKind.FIRST_TOKEN, EventKind.FINISHED)  # recorded at the step's end


@dataclass(frozen=True)
class StepRecord:
    """One engine step: what it scheduled and what the state was right after scheduling."""

    start: float
    duration: float
    scheduled: dict[int, int]  # request -> tokens, in scheduling order
    new: tuple[int, ...]
    resumed: tuple[int, ...]
    preempted: tuple[int, ...]
    swapped_out: tuple[int, ...]
    aborted: tuple[int, ...]
    prefix_hits: tuple[tuple[int, int], ...]  # (request, hit tokens) of the admitted, in order
    finished: tuple[int, ...]
    num_running: int
    num_waiting: int
    num_swapped: int
    num_free_blocks: int
    kv_usage: float
    num_generated: int
    recomputed_tokens: int


def step_records(events: np.ndarray, log: dict[str, np.ndarray]) -> list[StepRecord]:
    """One record per logged step, from the request events (level 2) and the step log's columns."""
    starts, durations = log["start"].tolist(), log["duration"].tolist()
    at_start = {t: k for k, t in enumerate(starts)}
    at_end = {t + d: k for k, (t, d) in enumerate(zip(starts, durations))}
    per_step: list[list[tuple[int, int, int]]] = [[] for _ in starts]
    for t, kind, rid, value in events.tolist():
        k = (at_end if int(kind) in _AT_END else at_start).get(t)
        if k is not None:
            per_step[k].append((int(kind), int(rid), int(value)))
    out = []
    for k, evs in enumerate(per_step):

        def of(kind, evs=evs):
            return tuple(r for c, r, _ in evs if c == kind)

        out.append(
            StepRecord(
                start=starts[k],
                duration=durations[k],
                scheduled={r: v for c, r, v in evs if c == EventKind.SCHEDULED},
                new=of(EventKind.NEW),
                resumed=of(EventKind.RESUMED),
                preempted=of(EventKind.PREEMPTED),
                swapped_out=tuple(r for c, r, v in evs if c == EventKind.PREEMPTED and v == PreemptionKind.SWAPPED_OUT),
                aborted=tuple(r for c, r, v in evs if c == EventKind.PREEMPTED and v == PreemptionKind.ABORTED),
                prefix_hits=tuple((r, v) for c, r, v in evs if c in (EventKind.NEW, EventKind.RESUMED)),
                finished=of(EventKind.FINISHED),
                num_running=int(log["num_running"][k]),
                num_waiting=int(log["num_waiting"][k]),
                num_swapped=int(log["num_swapped"][k]),
                num_free_blocks=int(log["num_free_blocks"][k]),
                kv_usage=float(log["kv_usage"][k]),
                num_generated=int(log["num_generated"][k]),
                recomputed_tokens=int(log["recomputed_tokens"][k]),
            )
        )
    return out
