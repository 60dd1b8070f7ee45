"""The CPU side of serving: the engine core's host work, the API server(s) in front of it, and how
both meet the GPU's steps. Every host cost is named here once (``HostModel``), written into the
cost vector once (``HostModel.params``), and read by the rules below, which both engine steps use:
the compiled step compiles these very functions (``simulator.engine.compiled.build``), the reference
calls them as plain Python.

**The engine core** (vLLM's EngineCore process) spends CPU time on every step: scheduling, preparing
the inputs, launching, and the bookkeeping of sampled tokens: ``engine_step_s`` per step plus
``engine_per_seq_s`` per scheduled request and ``engine_per_token_s`` per token
(``engine_cpu_s``). With async scheduling (vLLM >= 0.14 by default) that work overlaps the GPU's:
the step takes the longer of the two; without it they add (``step_wall_s``), at the costs measured
so where the release line has them (``simulator.scenario.hosts.HostCosts.engine_cpu``). Past a few hundred
running requests the CPU side is the longer one and TPOT grows with ``max_num_seqs`` even though the
GPU's step barely does (data/e2e/README.md, "h200x2_steps_2026-11-27"; docs/hosts.md).

**The API server** (one asyncio event loop per ``api_server_count`` process; modelled as one server
whose costs the processes share) takes every request in before the engine sees it and streams every
step's tokens before the clients see them:

* intake is a queue of work done one piece at a time, in the order the pieces became ready (their
  ``ready`` time, then the request id). A request's intake comes in two passes
  (``intake_passes``): the share done before its task first yields the loop (``first_pass``:
  parsing, validation, the chat template), ready when its client sends it; and the rest (the
  tokenizer's result, the hand-off to the engine), ready when the first pass ends, so behind
  whatever became ready meanwhile. It reaches the engine when its second pass ends, plus a fixed
  latency (network, process hops) that occupies nothing (``reaches_engine``);
* a client that sends its next request as its last one ends (a closed loop) has it ready only
  ``rounds`` rounds of its API server's streams later (``turnaround``; a round: one step's outputs
  for every request in flight). The recorded 0.26 servers' own TTFT (stamped when rendering
  starts) was shorter than their closed-loop clients' by 7.9-10.4 such rounds on the calibration
  runs (median 9.17, tools/validation/intake_rounds.py), and by 0.5-1.3 for Poisson arrivals;
* a step's outputs are one batch of work, processed after the step ends, after the batches before
  them and the piece of intake in progress (``delivered``), ahead of the intake still queued: the
  loop streams tokens while a burst is still being taken in. A batch costs a fixed part and a part
  per token (``tokens_streamed_s``), whose per-token cost may grow with the tokens of the batch, the
  streams it serves (``stream_doubling``: the streams at which a token costs twice its base; the
  recorded SGLang servers streamed a token in about 90 us at 256 streams and 145 us at 750);
* a piece of intake waits for the outputs queued when they are one batch at most, and otherwise goes
  ahead of the batches not started (``intake_start``): the backlog waits in the engine's output
  socket while a new request's task runs as soon as the loop comes round to it. The batches it
  overtakes are pushed back by its work (``after_intake``);
* from release line 0.26 (``paces_engine``) the engine starts no step while its previous step's
  outputs still wait for the API server (``step_start``): a stand-in that fits the recorded 0.26
  servers best with one set of host costs; profiled, their engine runs ahead (docs/validation.md,
  "Where the time goes, profiled").

A burst of N requests sent at once thus reaches the engine from about N first passes on, one by one,
its first tokens streamed in between; its TTFTs spread evenly from there to the end of its intake, as
the public bursts show.

**The host** runs all of it. A scenario's ``hardware.host`` names a measured machine or gives a
probe reading (``servesim probe-host``); every CPU time here is the fitted cost on the reference host
times that host's ``scale`` (``simulator.scenario.hosts``).
"""

from __future__ import annotations

from dataclasses import dataclass

from simulator.engine.params import P


@dataclass(frozen=True)
class EngineCpu:
    """CPU seconds of the engine core per step, per scheduled request and per scheduled token, and
    per step shape it runs for the first time without CUDA graphs whose kernels it compiles then
    (``jit_shape_s``, 0: none; ``simulator.engine.cost.shape_key``), per variant of an expert
    matmul it compiles then (``jit_variant_s``; ``simulator.engine.cost.matmul_variant``), and per
    request of a step it launches without a graph, all layers together (``eager_seq_s``;
    ``simulator.engine.cost.launch_s``); ``launch_serial``: with async scheduling, whether those
    launches follow its CPU work on its thread (``step_wall_s``)."""

    step_s: float = 0.0
    per_seq_s: float = 0.0
    per_token_s: float = 0.0
    jit_shape_s: float = 0.0
    jit_variant_s: float = 0.0
    eager_seq_s: float = 0.0
    launch_serial: bool = False


@dataclass(frozen=True)
class ApiServer:
    """CPU seconds of the API server(s): per request taken in (HTTP, validation, chat template,
    request to the engine), per prompt token (tokenization), per batch of outputs and per output
    token streamed (detokenizing, building and writing the stream's chunks), per request that ends
    (its last chunks, the response's end); ``servers`` API-server processes share the work.
    ``latency_s``: a fixed delay every request spends outside any queue (network round trip,
    process hops), occupying nothing. ``first_pass``: the share of a request's intake done before it
    first yields the event loop (1: all at once). ``paces_engine``: the engine starts no step while
    the outputs of the step before it still wait (``step_start``). ``rounds``: rounds of its API
    server's streams a closed-loop client's next request waits before it is ready (``turnaround``).
    ``stream_doubling``: the streams one batch of outputs serves at which a streamed token costs
    twice ``token_s`` (0: a token costs ``token_s`` however many; ``tokens_streamed_s``)."""

    request_s: float = 0.0
    prompt_token_s: float = 0.0
    step_s: float = 0.0
    token_s: float = 0.0
    servers: int = 1
    latency_s: float = 0.0
    finish_s: float = 0.0
    first_pass: float = 1.0
    paces_engine: bool = True
    rounds: float = 0.0
    stream_doubling: float = 0.0


@dataclass(frozen=True)
class HostModel:
    """The CPU side of one engine: its engine core, its API server(s) (None: requests go straight
    to the engine and tokens straight to their clients, as ``servesim parity`` drives it), and
    whether async scheduling overlaps the engine core's work with the GPU's."""

    engine: EngineCpu = EngineCpu()
    api_server: ApiServer | None = None
    async_scheduling: bool = False

    def params(self) -> dict[str, float]:
        """The host's slots of the cost vector (``simulator.engine.params.P``), by name; the API
        server's per-piece costs already divided among its processes."""
        e, a = self.engine, self.api_server
        out = {
            "engine_step_s": e.step_s,
            "engine_per_seq_s": e.per_seq_s,
            "engine_per_token_s": e.per_token_s,
            "jit_shape_s": e.jit_shape_s,
            "jit_variant_s": e.jit_variant_s,
            "eager_seq_s": e.eager_seq_s,
            "launch_serial": 1.0 if e.launch_serial else 0.0,
            "async_scheduling": 1.0 if self.async_scheduling else 0.0,
        }
        if a is None:
            return {
                **out,
                "fe_on": 0.0,
                "fe_request_s": 0.0,
                "fe_prompt_token_s": 0.0,
                "fe_step_s": 0.0,
                "fe_token_s": 0.0,
                "fe_latency_s": 0.0,
                "fe_finish_s": 0.0,
                "fe_first_pass": 1.0,
                "fe_pace": 0.0,
                "fe_rounds": 0.0,
                "fe_token_growth": 0.0,
            }
        k = float(a.servers)
        return {
            **out,
            "fe_on": 1.0,
            "fe_request_s": a.request_s / k,
            "fe_prompt_token_s": a.prompt_token_s / k,
            "fe_step_s": a.step_s / k,
            "fe_token_s": a.token_s / k,
            "fe_latency_s": a.latency_s,
            "fe_finish_s": a.finish_s / k,
            "fe_first_pass": a.first_pass,
            "fe_pace": 1.0 if a.paces_engine else 0.0,
            "fe_rounds": a.rounds,
            # each of the servers streams its share of a batch's tokens
            "fe_token_growth": 1.0 / (a.stream_doubling * k) if a.stream_doubling > 0 else 0.0,
        }


# ---- the engine core ---------------------------------------------------------------------------------
def engine_cpu_s(cp, num_seqs, num_tokens):
    """The engine core's CPU work for one step (scheduling, input preparation, output bookkeeping)."""
    return cp[P.ENGINE_STEP_S] + cp[P.ENGINE_PER_SEQ_S] * num_seqs + cp[P.ENGINE_PER_TOKEN_S] * num_tokens


def step_wall_s(cp, gpu, cpu, launch):
    """A step's time from the GPU's work ``gpu``, the engine core's CPU work ``cpu`` and, for a step
    run without a CUDA graph, the seconds the engine core's thread takes to launch it (``launch``; 0
    for a graphed step). Without async scheduling the CPU work comes first, then the GPU works as the
    kernels are launched. With it the CPU work overlaps the GPU's: the step takes the longest of the
    three, or, where the set of host costs measured it so (``launch_serial``: the recorded vLLM 0.26
    servers' steps above their largest graph), the longer of the GPU's work and the thread's, its CPU
    work then its launches."""
    if cp[P.ASYNC_SCHEDULING] == 0.0:
        return cpu + max(gpu, launch)
    if cp[P.LAUNCH_SERIAL] != 0.0:
        return max(gpu, cpu + launch)
    return max(gpu, launch, cpu)


# ---- the API server ------------------------------------------------------------------------------------
def intake_passes(cp, prompt_tokens):
    """Seconds of API-server work to take in a request of ``prompt_tokens``: (first pass, second
    pass); (0, 0) without an API server."""
    if cp[P.FE_ON] == 0.0:
        return 0.0, 0.0
    work = cp[P.FE_REQUEST_S] + cp[P.FE_PROMPT_TOKEN_S] * prompt_tokens
    first = cp[P.FE_FIRST_PASS] * work
    return first, work - first


def reaches_engine(cp, intake_done):
    """When a request taken in at ``intake_done`` reaches the engine (after the fixed latency)."""
    return intake_done + cp[P.FE_LATENCY_S]


def turnaround(cp, previous_end, streams):
    """When a request whose client's previous request ended at ``previous_end`` is ready for the
    API server: ``rounds`` rounds of its loop later, each the work of one step's outputs for
    ``streams`` requests in flight (shared by the API servers)."""
    return previous_end + cp[P.FE_ROUNDS] * (cp[P.FE_STEP_S] + tokens_streamed_s(cp, streams))


def tokens_streamed_s(cp, num_tokens):
    """The API server's work on the ``num_tokens`` tokens (one a stream) of one step's batch of
    outputs, beside the batch's fixed part: per token, growing by ``FE_TOKEN_GROWTH`` per token of
    the batch (the streams it serves; 0: the same cost per token however many)."""
    return cp[P.FE_TOKEN_S] * num_tokens * (1.0 + cp[P.FE_TOKEN_GROWTH] * num_tokens)


def intake_start(now, intake_busy, free_at, batch_start):
    """When a piece of intake that the server turns to at ``now`` can start: after the piece of
    intake in progress (done at ``intake_busy``), then after the outputs queued if they are one
    batch at most (the last one queued runs from ``batch_start`` to ``free_at``); with more queued
    than that, at once, ahead of the batches not started: the output task takes one batch at a time
    off the engine's socket, while a new request's task runs as soon as the loop comes round to it,
    so a backlog of outputs does not hold the intake back."""
    t = max(now, intake_busy)
    if free_at - t > free_at - batch_start:  # more than the last batch still to do
        return t
    return max(t, free_at)


def after_intake(free_at, batch_start, start, work):
    """The output batches' (end, last start) once a piece of intake of ``work`` seconds has run from
    ``start``: the batches not yet started then wait for it."""
    if free_at > start:
        return free_at + work, max(batch_start, start) + work
    return free_at, batch_start


def delivered(cp, free_at, intake_busy, t_end, num_tokens, num_finished):
    """(start, end) of the batch of outputs of a step that ends at ``t_end``: its ``num_tokens``
    tokens reach their clients at the end, the last ones of ``num_finished`` requests among them;
    it starts after the batches before it (done at ``free_at``) and the piece of intake in progress
    (done at ``intake_busy``). Without an API server (or tokens), both are ``t_end``."""
    if cp[P.FE_ON] == 0.0 or num_tokens == 0:
        return t_end, t_end
    start = max(t_end, free_at, intake_busy)
    return start, start + cp[P.FE_STEP_S] + tokens_streamed_s(cp, num_tokens) + cp[P.FE_FINISH_S] * num_finished


def step_start(cp, now, batch_start):
    """When the engine may start its next step: at once, unless the API server paces it
    (``paces_engine``): then not before the API server starts on the outputs of the step before
    (``batch_start``, the start of the last batch queued). The engine is thus at most one step of
    outputs ahead of its API server: while the API server keeps up, the GPU's step and the API
    server's processing of the step before overlap; once it does not, the engine steps at its pace."""
    if cp[P.FE_PACE] == 0.0 or batch_start <= now:
        return now
    return batch_start
