"""The host a scenario runs on: its CPU, which paces the engine core and the API server.

Two machines of the same GPU kind can differ by 1.2-1.5x in how fast their CPU runs the Python a
vLLM server spends its CPU time on (docs/hosts.md, "The catalog"). A scenario names its host
(``hardware.host``): a machine of the catalog (``simulator/data/hosts.yaml``: every cloud machine
servesim was measured on, with its probe reading), or ``{probe_us: X}``, the reading of
``servesim probe-host`` on the user's own server. Every host cost is the fitted cost on the
reference host times the host's ``scale``, ``(probe_us / reference_probe_us) ** exponent``, a rule
fitted across the hosts measured (``tools/validation/fit_host.py``). A scenario that names no host
runs on the catalog's median host, and its results carry the band between the slowest and the
fastest catalog host (``host_band``).

The fitted costs themselves come in sets (``HostCosts``), one per kind of measurement
(``HOST_SETS``): the public runs (vLLM 0.10-0.19, mixed hosts and clients), the servers recorded
with tools/e2e (vLLM 0.26), and the public SGLang runs (``simulator.scenario.sglang``);
``simulator.scenario.versions`` says which vLLM release line uses which.
"""

from __future__ import annotations

import functools
import math
from dataclasses import dataclass, replace
from pathlib import Path

from simulator.errors import ConfigError
from simulator.scenario import yamlio
from simulator.scenario.textfile import read_text

DATA = Path(__file__).resolve().parents[1] / "data"
HOST_COSTS_FILE = DATA / "host_costs.yaml"
HOSTS_FILE = DATA / "hosts.yaml"
HOST_CPUS_FILE = DATA / "host_cpus.yaml"
HOST_SETS = ("public", "recorded", "sglang")


@dataclass(frozen=True)
class HostCosts:
    """Seconds spent outside the GPU on the reference host, fitted on the calibration half of
    measured end-to-end runs (``tools/validation/fit_host.py`` writes a set of them to
    simulator/data/host_costs.yaml; ``servesim validate`` reports them with the held-out half): the
    engine core's CPU work per step and per scheduled request, and the API server's
    (``simulator.engine.host.ApiServer``), per endpoint: a request taken in and a token streamed
    cost more through /v1/chat/completions (chat template, larger chunks) than through
    /v1/completions. They include the benchmark client's own work, which runs on the same host in
    the measurements."""

    engine_step_s: float = 1.0e-3
    # Per scheduled sequence: up to 0.11 (synchronous scheduling, model runner V1), and from 0.19
    # (async scheduling, input preparation moved to the GPU). Both start the fit from ~21 us, V1's
    # decode-to-decode gap of "about 5-6ms" at batch 256 (https://github.com/vllm-project/vllm/issues/10634).
    engine_per_seq_s: float = 2.1e-5
    engine_per_seq_s_019: float = 2.1e-5
    # The engine core's work a step and a request where it is not overlapped with the GPU's (async
    # scheduling off on a line that has it): read off the iteration log of servers recorded without
    # it, where each step's CPU part shows as the gap after the GPU's (``fit_host.py --sync``). None:
    # not measured for this set, the costs above stand for both.
    engine_step_sync_s: float | None = None
    engine_per_seq_sync_s: float | None = None
    latency_s: float = 0.02
    # The fixed delay of a chat rendered in the Harmony format (gpt-oss) rather than by a Jinja chat
    # template: on the public set's machines its chat at 4 in flight waited far less outside any queue
    # than the Jinja chats and the completions did (fitted on one such run, three held out;
    # docs/validation.md, "The public runs": gpt-oss's chat).
    harmony_latency_s: float = 0.02
    # ~1 us per token: "DGX H100's CPU can do about only about 1k tokens/ms" (tokenizer, one
    # thread; https://github.com/vllm-project/vllm/issues/19012).
    prompt_token_s: float = 1.0e-6
    step_s: float = 2.0e-4
    request_s: float = 2.0e-3
    token_s: float = 1.5e-5
    chat_request_s: float = 4.0e-3
    chat_token_s: float = 3.0e-5
    finish_s: float = 2.0e-3
    chat_finish_s: float = 1.6e-2
    # The share of a request's intake before its task first yields the loop (simulator.engine.host),
    # started from the public bursts' TTFT spread: evenly from about a fifth (completions, vLLM
    # 0.19) and a half (chat, 0.11) of the way to the p99.
    first_pass: float = 0.25
    chat_first_pass: float = 0.5
    # Rounds of its API server's streams a request waits for on its way in (simulator.engine.host):
    # measured, not fitted, from the recorded servers' own TTFT against their clients'
    # (tools/validation/intake_rounds.py); the public runs record no server-side TTFT, and the recorded
    # value raises their calibration loss (8.44 to 8.51), so 0 there.
    intake_rounds: float = 0.0
    # The streams one batch of outputs serves at which a streamed token costs twice token_s (0: no
    # growth; simulator.engine.host.tokens_streamed_s): fitted on the recorded SGLang servers, whose token
    # took about 90 us at 256 streams and 145 us at 750; a count, not scaled with the host.
    stream_doubling: float = 0.0
    # Whether the engine core's per-request costs above are per request and KV-cache group (a hybrid
    # model's request costs them once for each of its groups: simulator.resolve.host_model), as the
    # recorded set measured them: without async scheduling gpt-oss's steps took 28.8 us a request on
    # the reference host, and dense models' 12-16 us (data/e2e/README.md, "h200_overlap3_2026-12-04").
    # False: per request, however many groups (the sets fitted before that was measured).
    per_kv_group: bool = False
    # The engine core's launch work per request and layer in a step run without a CUDA graph (above
    # the largest captured size: simulator.engine.cost.launch_s), beside the kernels' own launches:
    # fitted on the recorded Qwen3-0.6B servers at 384-1,024 running with four API servers, whose step
    # went from 10.8 ms at 384 (graphed) to 34-57 ms at 640-1,024 (data/e2e/README.md,
    # "h200_overlap4_2026-12-04"). 0: not measured for the set.
    engine_eager_seq_layer_s: float = 0.0
    # Whether, with async scheduling, a step without a graph takes the engine core's CPU work and its
    # launches in turn (simulator.engine.host.step_wall_s), as the recorded 0.26 servers' steps above
    # their largest graph did (the same data); False: the longest of the GPU's work, the launches and
    # the CPU work, which the public set's Qwen3-0.6B bursts (vLLM 0.19) fit far better.
    launch_serial: bool = False

    def engine_cpu(self, line: str, overlapped: bool) -> tuple[float, float]:
        """The engine core's CPU work (per step, per scheduled request) on release line ``line``,
        overlapped with the GPU's by async scheduling or not. Lines 0.10 and 0.11 (synchronous, model
        runner V1) have their own per-request cost; without async scheduling on a later line, the
        set's measured sync costs where it has them."""
        if line in ("0.10", "0.11"):
            return self.engine_step_s, self.engine_per_seq_s
        if not overlapped and self.engine_step_sync_s is not None and self.engine_per_seq_sync_s is not None:
            return self.engine_step_sync_s, self.engine_per_seq_sync_s
        return self.engine_step_s, self.engine_per_seq_s_019

    def api_costs(self, chat: bool, harmony: bool = False) -> dict[str, float]:
        """The API server's costs through one endpoint (/v1/chat/completions if ``chat``), for a model
        whose chat is rendered in the Harmony format or not: per request taken in, per output token
        streamed, per request that ends, the share of a request's intake before it first yields, and
        the fixed delay outside any queue."""
        if not chat:
            return {"request_s": self.request_s, "token_s": self.token_s, "finish_s": self.finish_s,
                    "first_pass": self.first_pass, "latency_s": self.latency_s}  # fmt: skip
        if harmony:  # no chat template to run: a request taken in and ended as through /v1/completions
            return {"request_s": self.request_s, "token_s": self.chat_token_s, "finish_s": self.finish_s,
                    "first_pass": self.chat_first_pass, "latency_s": self.harmony_latency_s}  # fmt: skip
        return {"request_s": self.chat_request_s, "token_s": self.chat_token_s, "finish_s": self.chat_finish_s,
                "first_pass": self.chat_first_pass, "latency_s": self.latency_s}  # fmt: skip

    def scaled(self, scale: float) -> HostCosts:
        """The same costs on a host ``scale`` times as slow: the CPU times scaled, the shares, the
        rounds and the network's latency kept (``simulator.resolve.host_model`` prices a scenario's
        host with it)."""
        return replace(self, **{k: v * scale for k in CPU_TIMES if (v := getattr(self, k)) is not None})


# The HostCosts fields that are CPU time, scaled by a host's factor.
CPU_TIMES = ("engine_step_s", "engine_per_seq_s", "engine_per_seq_s_019", "engine_step_sync_s", "engine_per_seq_sync_s",
             "engine_eager_seq_layer_s", "prompt_token_s", "step_s", "request_s", "token_s", "finish_s",
             "chat_request_s", "chat_token_s", "chat_finish_s")  # fmt: skip


def load_host_costs(which: str = "public", path: Path = HOST_COSTS_FILE) -> HostCosts:
    if not path.is_file():
        return HostCosts()
    data = yamlio.load(path.read_text()) or {}
    return HostCosts(**(data.get(which) or {}).get("host_costs", {}))


@dataclass(frozen=True)
class Host:
    """A machine whose CPU runs the engine core and the API server: its name, its probe reading
    (``servesim probe-host``: microseconds per request-step of the probe's kernel) and the factor
    its CPU costs take against the reference host."""

    name: str
    probe_us: float
    scale: float
    cpu: str = ""
    note: str = ""


@dataclass(frozen=True)
class HostCatalog:
    reference_probe_us: float  # the probe reading the fitted host costs refer to
    exponent: float  # scale = (probe_us / reference_probe_us) ** exponent
    hosts: dict[str, dict]  # name -> what the catalog says of it

    def scale(self, probe_us: float) -> float:
        return (probe_us / self.reference_probe_us) ** self.exponent

    def host(self, name: str) -> Host:
        """A catalog host: its factor as fitted on its own recordings, or, for one known only by its
        probe reading, as the rule gives it."""
        h = self.hosts[name]
        probe = float(h["probe_us"]) if h.get("probe_us") else math.nan
        scale = float(h["scale"]) if "scale" in h else self.scale(probe)
        return Host(name, probe, scale, h.get("cpu", ""), h.get("machine", ""))

    def by_speed(self) -> list[Host]:
        """Every catalog host, fastest first (ties by name)."""
        return sorted((self.host(n) for n in self.hosts), key=lambda h: (h.scale, h.name))

    def median(self) -> Host:
        """The catalog's median host (the lower middle one of an even count): a scenario's default."""
        hosts = self.by_speed()
        return hosts[(len(hosts) - 1) // 2]


@functools.lru_cache(maxsize=1)
def catalog(path: Path = HOSTS_FILE) -> HostCatalog:
    data = yamlio.load(read_text(path)) or {}
    return HostCatalog(float(data["reference_probe_us"]), float(data["exponent"]), dict(data["hosts"]))


@functools.lru_cache(maxsize=1)
def cpu_kinds(path: Path = HOST_CPUS_FILE) -> dict[str, dict[str, list[str]]]:
    """The CPUs of the machines servesim's hosts were measured on (``probe_host.cpu_kind``): for each
    kind, the recordings of the catalog, those held out and the others (tools/validation/fit_hosts.py
    --cpus)."""
    return dict((yamlio.load(read_text(path)) or {}).get("cpus") or {})


def probe_override(probe_us: float) -> str:
    """The ``--set`` override that runs a scenario on a host known by its probe reading."""
    return f"hardware.host={{probe_us: {float(probe_us)!r}}}"


def reference_host_override() -> str:
    """The ``--set`` override that runs a scenario at factor 1: on the host its host costs were
    fitted at. Public runs, whose hosts are not described, are replayed on it."""
    return probe_override(catalog().reference_probe_us)


def load_host(spec: str | dict | None) -> Host:
    """``hardware.host``: a catalog name, ``{probe_us: X}`` (a reading of ``servesim probe-host``),
    or None (the catalog's median host)."""
    cat = catalog()
    if spec is None:
        return cat.median()
    if isinstance(spec, str):
        if spec not in cat.hosts:
            raise ConfigError(
                f"hardware.host: unknown host '{spec}'; the catalog's hosts are {', '.join(sorted(cat.hosts))} "
                f"(or give your own reading: {{probe_us: X}} from `servesim probe-host`)"
            )
        return cat.host(spec)
    if not isinstance(spec, dict):
        raise ConfigError(f"hardware.host must be a host name or a mapping {{probe_us: X}} (got {type(spec).__name__})")
    unknown = set(spec) - {"probe_us", "name"}
    if unknown:
        raise ConfigError(f"hardware.host.{sorted(unknown)[0]}: unknown key; a host is {{probe_us: X, name: ...}}")
    if "probe_us" not in spec:
        raise ConfigError("hardware.host.probe_us is required: the reading of `servesim probe-host` on the host")
    v = spec["probe_us"]
    if isinstance(v, bool) or not isinstance(v, (int, float)) or not math.isfinite(v) or not 0.2 <= v <= 200.0:
        raise ConfigError(
            f"hardware.host.probe_us must be a number from 0.2 to 200 microseconds, as `servesim probe-host` "
            f"prints it (got {v!r})"
        )
    name = str(spec.get("name", f"probe {float(v):g} us"))
    return Host(name, float(v), cat.scale(float(v)))


def band_hosts() -> tuple[Host, Host]:
    """The slowest and the fastest catalog host: where a scenario that names no host reports its band."""
    hosts = catalog().by_speed()
    return hosts[-1], hosts[0]
