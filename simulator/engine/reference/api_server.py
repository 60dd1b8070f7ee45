"""The API server in front of the reference engine, one request at a time (``simulator.engine.host``
says what it models; ``simulator.engine.compiled.intake`` is the production form of the same rules).

Its intake is a queue of pieces of work ordered by when each became ready, then by request id; a
request's last piece sends it on its way to the engine, which takes it in between steps. Its output
side is one batch of work per step, after the batches before it. Both run lazily: ``run_until(t)``
starts every piece of intake that can start by ``t``, with the output batches queued so far.
"""

from __future__ import annotations

import heapq
from collections import deque

from simulator.engine.host import after_intake, delivered, intake_passes, intake_start, reaches_engine
from simulator.engine.params import P


class ApiServer:
    def __init__(self, cp) -> None:
        self.cp = cp
        self.on = cp[P.FE_ON] != 0.0
        self.outputs_free = 0.0  # the output batches queued are done by then
        self.batch_start = 0.0  # the last batch queued starts then
        self.intake_busy = 0.0  # the latest piece of intake ends then
        self.turn = 0.0  # having chosen to wait for its outputs, it turns to its intake again then
        self._pieces: list[tuple[float, int, float, float]] = []  # heap of (ready, request, work, work after it)
        self._on_way: deque[tuple[float, int]] = deque()  # (when it reaches the engine, request), in order

    def send(self, rid: int, ready: float, prompt_len: int) -> None:
        """A request its client sent, ready for the API server at ``ready``."""
        if not self.on:
            self._on_way.append((ready, rid))
            return
        first, rest = intake_passes(self.cp, prompt_len)
        heapq.heappush(self._pieces, (ready, rid, first, rest))

    def _turn(self) -> float:
        """When it turns to the first queued piece: once that is ready, the piece before it is done,
        and any wait for its outputs is over."""
        return max(self._pieces[0][0], self.intake_busy, self.turn)

    def _next_start(self) -> float:
        return intake_start(self._turn(), self.intake_busy, self.outputs_free, self.batch_start)

    def run_until(self, t: float) -> None:
        """Start, in order, every piece of intake that can start by ``t``. Having turned to a piece
        and chosen to wait for the outputs, it looks again only when the wait is over, at the output
        batches queued by then."""
        while self._pieces:
            turn = self._turn()
            start = intake_start(turn, self.intake_busy, self.outputs_free, self.batch_start)
            if start > t:
                if turn <= t:
                    self.turn = start
                return
            _ready, rid, work, rest = heapq.heappop(self._pieces)
            end = start + work
            self.outputs_free, self.batch_start = after_intake(self.outputs_free, self.batch_start, start, work)
            self.intake_busy = end
            if rest > 0.0:
                heapq.heappush(self._pieces, (end, rid, rest, 0.0))
            else:
                self._on_way.append((reaches_engine(self.cp, end), rid))

    def reached(self, t: float) -> list[int]:
        """The requests that reached the engine by ``t``, in the order they came (taken off the way)."""
        out = []
        while self._on_way and self._on_way[0][0] <= t:
            out.append(self._on_way.popleft()[1])
        return out

    def next_event(self) -> float:
        """When the intake next moves on its own (a request reaching the engine, a piece starting);
        infinity when nothing is in the API server."""
        t = float("inf")
        if self._on_way:
            t = self._on_way[0][0]
        if self._pieces:
            t = min(t, self._next_start())
        return t

    def stream(self, t_end: float, num_tokens: int, num_finished: int) -> float:
        """A step ended at ``t_end`` with ``num_tokens`` tokens for the clients (the last of
        ``num_finished`` requests among them): its batch of outputs is queued; returns when the
        tokens reach their clients."""
        start, end = delivered(self.cp, self.outputs_free, self.intake_busy, t_end, num_tokens, num_finished)
        if num_tokens:
            self.outputs_free, self.batch_start = end, start
        return end
