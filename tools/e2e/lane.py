"""One GPU lane of the end-to-end recorder, run on the device machine: a real vLLM server with
dummy weights, then `vllm bench serve` runs against it, each recorded with the server's metrics.

    python3 tools/e2e/lane.py --plan tools/e2e/plans/PLAN.json --lane NAME --root /root/e2e

A plan (JSON) lists lanes; a lane names its GPUs, its model (a config.json in tools/e2e/models/),
the `vllm serve` flags and its runs. Each run is a closed loop (`max_concurrency`) or an open loop
(`request_rate`) over requests whose lengths the lane draws (fixed, or lognormal with a mean and a
sigma, as servesim's `workload.*_tokens` are), with a seed. Prompts are token ids sent as they are
(bench_tokens.py), so the server sees exactly the lengths drawn; the server and the benchmark share
a word-level tokenizer of the model's vocabulary in a folder of its own (`--tokenizer`).

A lane of `"framework": "sglang"` serves with SGLang (`python -m sglang.launch_server`, from the site
`device.sh sginstall` made, searched first) and is driven by the same client. Its /metrics series are
recorded under the vLLM names they correspond to (``SGLANG_AS_VLLM``), so that the checks and
ingest.py read both alike. SGLang's prefix cache matches single tokens (a radix tree), so each of a
run's prompts starts with a token no other prompt of the run starts with, and the lane flushes the
cache before each run (`/flush_cache`); a request it retracted (SGLang's preemption) finds its own
prompt again in the tree when it comes back, which the check allows.

Around the lane (after its GPUs are free, before the server starts, and after it stopped),
host_probe.py reads how fast the host runs a server's kind of Python (`host_probe` in lane.json).
After each run the lane checks what the server counted against the plan (checks.py: every prompt
exactly its planned tokens, no prefix-cache hit unless the plan shares prefixes); a run that fails
stops its lane, with the reasons in lane.json (`error`, the run's `check`) and a FAILED file.

For each run, under ROOT/results/LANE/RUN/: bench.json (`vllm bench serve`'s result without its
per-request arrays), requests.csv (a row per request: start, lengths, TTFT, latency, ITL
quantiles), planned.csv (the lengths asked), itl_quantiles.csv (every inter-token latency of the
run), metrics.csv (the server's /metrics once a second), cpu.csv (each server process's CPU seconds
so far, once a second, from /proc: unprofiled, what its API server and engine core spend; the
benchmark's client processes too, named ``client:...``; and the CPU each last ran on),
stat.csv (every CPU's time from /proc/stat once a second: busy, idle and steal, the time the
hypervisor gave the CPU to someone else), watch.csv (host_probe.py --watch's readings of the machine
every 10 s while the run went on: the kernel and the wide objects' timings; from 2026-12-04),
steps.csv (the engine's iteration log: a row per step), bench.log. The lane also keeps server.log (the server's start-up and periodic lines),
host_probe_before.json / _after.json and lane.json (commands, versions, timings, checks).
"""

from __future__ import annotations

import argparse
import contextlib
import csv
import fcntl
import json
import os
import re
import resource
import shlex
import signal
import subprocess
import sys
import threading
import time
import urllib.request
from pathlib import Path

import numpy as np

HERE = Path(__file__).resolve().parent
PY = sys.executable
sys.path.insert(0, str(HERE))
import checks  # noqa: E402
from host_probe import WATCH_COLUMNS, WIDE_OBJECTS  # noqa: E402

# The word-level tokenizer: token i is the word "t<i>", but for the special tokens, whose text no
# word of a prompt can contain (transformers matches special tokens anywhere in a text: with "t0"
# and "t1" special, "t123" split into "t1" and an unknown "23").
SPECIAL = ("<unk>", "<s>", "</s>")  # ids 0, 1, 2
FIRST_ID = 100  # prompts draw their token ids from [FIRST_ID, vocab): never a special token
PROBE_REPEAT = 15  # host_probe.py's timings around a lane (about 5 s on the hosts recorded)
WATCH_S = 10.0  # host_probe.py --watch beside each run: a reading of the machine under load this often

# The series sampled from /metrics (summed over their label sets), and the histograms whose _sum and
# _count are kept.
GAUGES = (
    "vllm:num_requests_running",
    "vllm:num_requests_waiting",
    "vllm:kv_cache_usage_perc",
    "vllm:num_preemptions_total",
    "vllm:prompt_tokens_total",
    "vllm:prompt_tokens_cached_total",  # prompt tokens served by the prefix cache (local or external)
    "vllm:generation_tokens_total",
    "vllm:prefix_cache_queries_total",
    "vllm:prefix_cache_hits_total",
    "vllm:request_success_total",
    "vllm:num_requests_swapped",
    "vllm:external_prefix_cache_queries_total",  # KV offloading's host tier (the connector's hits)
    "vllm:external_prefix_cache_hits_total",
)
HISTOGRAMS = (
    "vllm:iteration_tokens_total",
    "vllm:time_to_first_token_seconds",
    "vllm:inter_token_latency_seconds",
    "vllm:request_queue_time_seconds",
    "vllm:e2e_request_latency_seconds",
    "vllm:request_prefill_time_seconds",
    "vllm:request_decode_time_seconds",
)
METRIC_COLUMNS = ["t"] + list(GAUGES) + [h + s for h in HISTOGRAMS for s in ("_sum", "_count")]
# SGLang's series (sglang/srt/observability/metrics_collector.py, 0.5.16) under the vLLM names they
# correspond to. Its token usage is a fraction of the pool, as vLLM's KV usage is; it counts a
# request's prompt and cached tokens once, when the request ends; retracted requests stand for
# preemptions. Its prompt tokens are also the prefix cache's queries, its cached tokens the hits.
SGLANG_AS_VLLM = {
    "sglang:num_running_reqs": ("vllm:num_requests_running",),
    "sglang:num_queue_reqs": ("vllm:num_requests_waiting",),
    "sglang:token_usage": ("vllm:kv_cache_usage_perc",),
    "sglang:num_retracted_requests_total": ("vllm:num_preemptions_total",),
    "sglang:prompt_tokens_total": ("vllm:prompt_tokens_total", "vllm:prefix_cache_queries_total"),
    "sglang:cached_tokens_total": ("vllm:prompt_tokens_cached_total", "vllm:prefix_cache_hits_total"),
    "sglang:generation_tokens_total": ("vllm:generation_tokens_total",),
    "sglang:num_requests_total": ("vllm:request_success_total",),
    **{
        f"sglang:{h}{s}": (f"vllm:{h}{s}",)
        for h in ("time_to_first_token_seconds", "inter_token_latency_seconds", "e2e_request_latency_seconds")
        for s in ("_sum", "_count")
    },
}

# vLLM prefixes each line with its process: "(APIServer pid=123) 2026-11-27 07:55:03.103 INFO ...".
ITER_RE = re.compile(
    r"^(?:\([^)]*\) )?(\d{4}-\d\d-\d\d \d\d:\d\d:\d\d)\.(\d{3}) .*Iteration\((\d+)\): (\d+) context requests, (\d+) context tokens, "
    r"(\d+) generation requests, (\d+) generation tokens, iteration elapsed time: ([\d.]+) ms.*?"
    r"GPU KV cache usage: ([\d.]+)%"
)

LOGGING = {
    "version": 1,
    "disable_existing_loggers": False,
    "formatters": {
        "ms": {"format": "%(asctime)s.%(msecs)03d %(levelname)s %(name)s: %(message)s", "datefmt": "%Y-%m-%d %H:%M:%S"}
    },
    "handlers": {"out": {"class": "logging.StreamHandler", "formatter": "ms", "stream": "ext://sys.stdout"}},
    "loggers": {"vllm": {"handlers": ["out"], "level": "INFO", "propagate": False}},
}


def log(msg: str) -> None:
    print(f"[{time.strftime('%H:%M:%S')}] {msg}", flush=True)


def word(i: int) -> str:
    """Token ``i``'s text."""
    return SPECIAL[i] if i < len(SPECIAL) else f"t{i}"


def vocabulary(size: int) -> dict[str, int]:
    return {word(i): i for i in range(size)}


def tokenizer_config(max_len: int) -> dict:
    """tokenizer_config.json: a class transformers loads as it is from tokenizer.json (in a folder
    without a config.json, nothing maps it to the model family's own class), no token added."""
    return {
        "tokenizer_class": "PreTrainedTokenizerFast",
        "model_max_length": max_len,
        "unk_token": SPECIAL[0],
        "bos_token": SPECIAL[1],
        "eos_token": SPECIAL[2],
        "add_bos_token": False,
        "add_eos_token": False,
        "clean_up_tokenization_spaces": False,
    }


def _write(path: Path, text: str) -> None:
    """Whole or not at all (lanes of one machine may build the same folder at once)."""
    if path.is_file() and path.read_text() == text:
        return
    tmp = path.with_name(f".{path.name}.{os.getpid()}")
    tmp.write_text(text)
    os.replace(tmp, path)


def tokenizer_json(size: int) -> dict:
    """tokenizer.json of a word-level tokenizer of ``size`` tokens: words split at whitespace, each
    word one token (unknown words the unknown token), nothing added around a text; what the
    `tokenizers` library writes for it (tests/test_e2e_tools.py holds it to that)."""
    added = [
        {
            "id": i,
            "content": t,
            "single_word": False,
            "lstrip": False,
            "rstrip": False,
            "normalized": False,
            "special": True,
        }
        for i, t in enumerate(SPECIAL)
    ]
    return {
        "version": "1.0",
        "truncation": None,
        "padding": None,
        "added_tokens": added,
        "normalizer": None,
        "pre_tokenizer": {"type": "WhitespaceSplit"},
        "post_processor": None,
        "decoder": None,
        "model": {"type": "WordLevel", "vocab": vocabulary(size), "unk_token": SPECIAL[0]},
    }


def build_tokenizer(d: Path, vocab: int, max_len: int) -> Path:
    """The tokenizer's folder ``d``: tokenizer.json and tokenizer_config.json only."""
    d.mkdir(parents=True, exist_ok=True)
    _write(d / "tokenizer.json", json.dumps(tokenizer_json(vocab), ensure_ascii=False))
    _write(d / "tokenizer_config.json", json.dumps(tokenizer_config(max_len), indent=1))
    return d


def model_dir(root: Path, name: str) -> tuple[Path, Path]:
    """The model's folder (the exact config.json; no tokenizer) and its tokenizer's folder (no
    config.json, so that transformers does not load the model family's tokenizer class instead:
    a Qwen2 config.json made every word of a prompt the unknown token)."""
    d = root / "models" / name
    d.mkdir(parents=True, exist_ok=True)
    cfg = json.loads((HERE / "models" / f"{name}.json").read_text())
    _write(d / "config.json", json.dumps(cfg, indent=2))
    _write(d / "generation_config.json", json.dumps({"bos_token_id": 1, "eos_token_id": 2}))
    for f in ("tokenizer.json", "tokenizer_config.json"):  # an earlier recorder's, beside the config
        (d / f).unlink(missing_ok=True)
    vocab, max_len = int(cfg["vocab_size"]), int(cfg.get("max_position_embeddings", 131072))
    return d, build_tokenizer(root / "tokenizers" / f"words{vocab}_{max_len}", vocab, max_len)


def lengths(spec, n: int, rng: np.random.Generator) -> np.ndarray:
    """``n`` lengths: an integer (fixed), or {dist: lognormal, mean, sigma, min, max} as servesim draws them."""
    if isinstance(spec, int):
        return np.full(n, spec, np.int64)
    mu = np.log(spec["mean"]) - 0.5 * spec["sigma"] ** 2
    x = np.rint(rng.lognormal(mu, spec["sigma"], size=n))
    return np.clip(x, spec.get("min", 1), spec.get("max", 1 << 30)).astype(np.int64)


def prompts(run: dict, vocab: int, distinct_first: bool = False) -> tuple[list[list[int]], np.ndarray, np.ndarray]:
    """The run's requests in the order sent: each prompt's token ids, the output lengths, and each
    request's shared-prefix group (-1 for none). Token ids are drawn uniformly from [FIRST_ID, vocab)
    with the run's seed: two prompts share a 16-token block (the prefix cache's unit) by chance
    with odds far below 1 in 10^70. Shared prefixes ({groups: G, words: W}): each prompt starts
    with one of G prefixes of W tokens, drawn uniformly, then its own ``prompt`` tokens.
    ``distinct_first`` (a cache that matches single tokens, SGLang's): the first tokens are then
    drawn again, without replacement, so that no two prompts of the run share even one."""
    rng = np.random.default_rng(run.get("seed", 0))
    n = run["num_prompts"]
    p, o = lengths(run["prompt"], n, rng), lengths(run["output"], n, rng)
    pre = run.get("prefix")
    heads = [rng.integers(FIRST_ID, vocab, size=pre["words"]).tolist() for _ in range(pre["groups"])] if pre else []
    group = rng.integers(0, len(heads), size=n) if pre else np.full(n, -1)
    ids = [(heads[group[i]] if pre else []) + rng.integers(FIRST_ID, vocab, size=int(p[i])).tolist() for i in range(n)]
    if distinct_first and not pre:
        for x, first in zip(ids, rng.choice(vocab - FIRST_ID, size=n, replace=False) + FIRST_ID):
            x[0] = int(first)
    return ids, o, group


def datasets(d: Path, run: dict, vocab: int, clients: int, distinct_first: bool = False) -> list[Path]:
    """The run's requests as `vllm bench serve` custom datasets of token ids (bench_tokens.py), one per
    client (request i goes to client i mod clients, as its row i // clients), and planned.csv."""
    ids, o, group = prompts(run, vocab, distinct_first)
    paths = [d / f"dataset{k}.jsonl" for k in range(clients)]
    files = [path.open("w") for path in paths]
    for i, x in enumerate(ids):
        files[i % clients].write(json.dumps({"prompt_token_ids": x, "output_tokens": int(o[i])}) + "\n")
    for f in files:
        f.close()
    rows = [(i % clients, i // clients, len(x), int(o[i]), int(group[i])) for i, x in enumerate(ids)]
    (d / "planned.csv").write_text(checks.planned_csv(rows))
    if run.get("prefix"):
        (d / "groups.csv").write_text("client,index,group\n" + "".join(f"{c},{i},{g}\n" for c, i, _p, _o, g in rows))
    return paths


sglang = checks.serves_sglang


def with_sglang_site(env: dict, root: Path) -> dict:
    """``env`` with SGLang's site (``device.sh sginstall``) searched before the vLLM site."""
    return {**env, "PYTHONPATH": str(root / "sgsite") + os.pathsep + env.get("PYTHONPATH", "")}


CLOCK_TICKS = os.sysconf("SC_CLK_TCK") if hasattr(os, "sysconf") else 100


def process_cpu(group: int, clients: tuple[int, ...] = ()) -> list[tuple[int, str, float, int]]:
    """(pid, name, CPU seconds so far: user + system, the CPU it last ran on) of every live process of
    the session ``group`` (the server's: it starts in a session of its own), and of the benchmark's
    client processes ``clients`` (named ``client:`` and their own name), read from /proc; the API
    server is the session's leader with one API server, the engine core a process named
    ``VLLM::EngineCor``. The last CPU tells on which of a machine's CPUs, whose speeds may differ
    (``host_probe.py``'s ``per_cpu_us``), a process mostly ran."""
    out = []
    for d in Path("/proc").iterdir():
        if not d.name.isdigit():
            continue
        try:
            stat = (d / "stat").read_text()
        except OSError:  # gone meanwhile
            continue
        name = stat[stat.index("(") + 1 : stat.rindex(")")]
        f = stat[stat.rindex(")") + 2 :].split()  # from the state on: field 3 of proc(5) is f[0]
        pid = int(d.name)
        if int(f[3]) == group or pid in clients:  # f[3]: the session id (field 6)
            # f[11], f[12]: utime, stime (fields 14, 15); f[36]: the CPU last run on (field 39)
            role = "client:" if pid in clients and int(f[3]) != group else ""
            out.append((pid, role + name, (int(f[11]) + int(f[12])) / CLOCK_TICKS, int(f[36])))
    return sorted(out)


def proc_stat() -> list[tuple[int, ...]]:
    """Each CPU's time so far from /proc/stat, in clock ticks: (cpu, user, nice, system, idle,
    iowait, irq, softirq, steal); steal is the time the hypervisor ran something else while this
    virtual CPU had work."""
    out = []
    for line in Path("/proc/stat").read_text().splitlines():
        if line.startswith("cpu") and line[3:4].isdigit():
            f = line.split()
            out.append((int(f[0][3:]), *(int(x) for x in f[1:9])))
    return out


STAT_COLUMNS = ["t", "cpu", "user", "nice", "system", "idle", "iowait", "irq", "softirq", "steal"]


class Sampler(threading.Thread):
    """/metrics once a second into rows; with ``group``, the CPU seconds of the server's processes
    too (``process_cpu``), into ``cpu_rows``: what its API server and engine core spend, unprofiled;
    and every CPU's time from /proc/stat (``proc_stat``), into ``stat_rows``."""

    def __init__(self, port: int, aliases: dict | None = None, group: int | None = None) -> None:
        super().__init__(daemon=True)
        self.url, self.rows, self.stop = f"http://127.0.0.1:{port}/metrics", [], threading.Event()
        self.aliases, self.group, self.cpu_rows, self.stat_rows = aliases, group, [], []
        self.clients: tuple[int, ...] = ()  # the benchmark's processes, once started

    def run(self) -> None:
        while not self.stop.is_set():
            t = time.time()
            if self.group is not None:
                with contextlib.suppress(OSError, ValueError, IndexError):
                    self.cpu_rows += [(t, *row) for row in process_cpu(self.group, self.clients)]
                with contextlib.suppress(OSError, ValueError, IndexError):
                    self.stat_rows += [(t, *row) for row in proc_stat()]
            try:
                text = urllib.request.urlopen(self.url, timeout=2).read().decode()
                self.rows.append(parse_metrics(text, t, aliases=self.aliases))
            except Exception as e:  # the server may be busy: a missing sample is recorded as missing
                self.rows.append({"t": t, "error": str(e)[:80]})
            self.stop.wait(max(0.0, 1.0 - (time.time() - t)))


KEPT = set(GAUGES) | {h + s for h in HISTOGRAMS for s in ("_sum", "_count")}


def parse_metrics(text: str, t: float, keep=KEPT, aliases: dict | None = None) -> dict:
    """The kept series of a Prometheus text page, each summed over its label sets; with ``aliases``
    (``SGLANG_AS_VLLM``) another server's series under the names they stand for."""
    row = {"t": t}
    prefix = "sglang:" if aliases else "vllm:"
    for line in text.splitlines():
        if not line.startswith(prefix):
            continue
        name = re.split(r"[{ ]", line, maxsplit=1)[0]
        for kept in aliases.get(name, ()) if aliases else (name,):
            if kept in keep:
                row[kept] = row.get(kept, 0.0) + float(line.rsplit(" ", 1)[1])
    return row


def start_server(lane: dict, mdir: Path, tdir: Path, out: Path, root: Path) -> subprocess.Popen:
    env = dict(os.environ)
    env["CUDA_VISIBLE_DEVICES"] = ",".join(str(g) for g in lane["gpus"])
    cfg = root / "logging.json"
    cfg.write_text(json.dumps(LOGGING))
    env.update(
        VLLM_LOGGING_CONFIG_PATH=str(cfg),
        VLLM_USE_FLASHINFER_SAMPLER="0",
        PYTHONUNBUFFERED="1",
        VLLM_NO_USAGE_STATS="1",
        DO_NOT_TRACK="1",
        HF_HUB_OFFLINE="1",
        TRANSFORMERS_OFFLINE="1",
    )
    env.update(lane.get("env", {}))
    if sglang(lane):
        env = with_sglang_site(env, root)
    cmd = server_command(lane, mdir, tdir)
    if lane.get("server_cmd"):  # a stand-in server, to try the recorder without a GPU
        cmd = [PY if c == "python" else c for c in lane["server_cmd"]]
    log(f"{lane['name']}: {shlex.join(cmd)}")
    f = (out / "server.log").open("ab")
    p = subprocess.Popen(cmd, env=env, stdout=f, stderr=subprocess.STDOUT, start_new_session=True)
    return p


def server_command(lane: dict, mdir: Path, tdir: Path) -> list[str]:
    """The lane's server: `vllm serve` (its iteration log on) or SGLang's launcher (its metrics on),
    dummy weights, the model's folder and the tokenizer's, on 127.0.0.1, then the lane's own flags."""
    if sglang(lane):
        head = ["-m", "sglang.launch_server", "--model-path", str(mdir), "--tokenizer-path", str(tdir)]
        tail = ["--enable-metrics"]
    else:
        head = ["-m", "vllm.entrypoints.cli.main", "serve", str(mdir), "--tokenizer", str(tdir)]
        # its iteration log on, unless the lane turns it off ("iteration_log": false) to time its
        # steps as a server without it runs them
        tail = ["--enable-logging-iteration-details"] if lane.get("iteration_log", True) else []
    common = ["--served-model-name", lane["model"], "--load-format", "dummy", "--host", "127.0.0.1"]
    return [PY, *head, *common, "--port", str(lane["port"]), *tail, *lane.get("serve_args", [])]


SGLANG_READY = "The server is fired up and ready to roll"  # logged once its own warm-up request is done


def wait_ready(p: subprocess.Popen, port: int, limit_s: float, log_path: Path | None = None) -> float:
    """Seconds until the server answers /health (and, given ``log_path``, has logged ``SGLANG_READY``)."""
    t0 = time.time()
    while time.time() - t0 < limit_s:
        if p.poll() is not None:
            raise RuntimeError(f"server exited with {p.returncode}")
        try:
            if urllib.request.urlopen(f"http://127.0.0.1:{port}/health", timeout=2).status == 200 and (
                log_path is None or SGLANG_READY in log_path.read_text(errors="replace")
            ):
                return time.time() - t0
        except Exception:
            pass
        time.sleep(1.0)
    raise RuntimeError(f"server not ready after {limit_s:.0f} s")


def flush_cache(port: int) -> str:
    """Empty an SGLang server's prefix cache (its /flush_cache; it refuses while requests run)."""
    for _ in range(10):
        try:
            r = urllib.request.urlopen(
                urllib.request.Request(f"http://127.0.0.1:{port}/flush_cache", method="POST"), timeout=10
            )
            return f"{r.status} {r.read().decode()[:80]}"
        except Exception as e:
            last = repr(e)[:120]
            time.sleep(1.0)
    return f"not flushed: {last}"


def iteration_rows(log_path: Path, t0: float, t1: float) -> list[list]:
    rows = []
    with log_path.open(errors="replace") as f:
        for line in f:
            if "Iteration(" not in line:
                continue
            m = ITER_RE.match(line)
            if not m:
                continue
            t = time.mktime(time.strptime(m.group(1), "%Y-%m-%d %H:%M:%S")) + int(m.group(2)) / 1e3
            if t0 <= t <= t1:
                rows.append([f"{t - t0:.3f}", *m.group(3, 4, 5, 6, 7, 8, 9)])
    return rows


def counters(port: int, tries: int = 5, aliases: dict | None = None) -> dict:
    """The server's counters that checks.py compares (from /metrics, summed over their label sets)."""
    for k in range(tries):
        try:
            text = urllib.request.urlopen(f"http://127.0.0.1:{port}/metrics", timeout=10).read().decode()
            row = parse_metrics(text, time.time(), checks.COUNTERS, aliases)
            return {name: row[name] for name in checks.COUNTERS if name in row}
        except Exception as e:  # busy: try again
            log(f"/metrics not read ({e!r}), try {k + 1} of {tries}")
            time.sleep(2.0)
    return {}


def bench(
    lane: dict, run: dict, tdir: Path, out: Path, vocab: int, group: int | None = None, objects: int = WIDE_OBJECTS
) -> dict:
    d = out / run["name"]
    d.mkdir(parents=True, exist_ok=True)
    clients = int(run.get("clients", 1))
    aliases = SGLANG_AS_VLLM if sglang(lane) else None
    ds = datasets(d, run, vocab, clients, distinct_first=sglang(lane))
    cmds = []
    for k in range(clients):
        rows = sum(1 for _ in ds[k].open())
        cmd = [
            PY,
            str(HERE / "bench_tokens.py"),  # `vllm bench serve`, prompts sent as token ids
            "--backend",
            "vllm",
            "--base-url",
            f"http://127.0.0.1:{lane['port']}",
            "--endpoint",
            "/v1/completions",
            "--model",
            lane["model"],
            "--tokenizer",
            str(tdir),
            "--dataset-name",
            "custom",
            "--dataset-path",
            str(ds[k]),
            "--custom-output-len",
            "-1",
            "--skip-chat-template",
            "--disable-shuffle",
            "--num-prompts",
            str(rows),
            "--ignore-eos",
            "--seed",
            str(run.get("seed", 0)),
            # no single-prompt test before the run (vLLM 0.26's default, said here): it would send
            # the first prompt twice, the second copy found in the prefix cache (the lane waited
            # for /health)
            "--ready-check-timeout-sec",
            "0",
            "--save-result",
            "--save-detailed",
            "--result-dir",
            str(d),
            "--result-filename",
            f"raw{k}.json",
            "--percentile-metrics",
            "ttft,tpot,itl,e2el",
            "--metric-percentiles",
            "50,90,99",
            "--request-id-prefix",
            f"c{k}-",
        ]
        if run.get("max_concurrency"):
            cmd += ["--max-concurrency", str(run["max_concurrency"] // clients)]
        if run.get("request_rate"):
            cmd += ["--request-rate", str(run["request_rate"] / clients)]
        cmds.append(cmd)
    flushed = flush_cache(lane["port"]) if sglang(lane) else None
    before = counters(lane["port"], aliases=aliases)
    sampler = Sampler(lane["port"], aliases, group)
    sampler.start()
    watcher = subprocess.Popen(  # the machine read under load (host_probe.py --watch), beside the run
        [PY, str(HERE / "host_probe.py"), "--out", str(d / "watch_raw.csv"), "--watch", str(WATCH_S)]
        + ["--objects", str(objects)],
        stdout=subprocess.DEVNULL,
        stderr=subprocess.DEVNULL,
    )
    t0, mono0 = time.time(), time.monotonic()  # the bench's start times are time.perf_counter(): CLOCK_MONOTONIC
    try:
        log(f"{lane['name']}/{run['name']}: {shlex.join(cmds[0])}")
        procs = [
            subprocess.Popen(c, stdout=(d / f"bench{k}.log").open("w"), stderr=subprocess.STDOUT)
            for k, c in enumerate(cmds)
        ]
        sampler.clients = tuple(p.pid for p in procs)  # their CPU too: a client that cannot keep up paces the run
        rcs = []
        for p in procs:
            try:
                rcs.append(p.wait(timeout=run.get("timeout_s", 900)))
            except subprocess.TimeoutExpired:
                p.kill()
                rcs.append(-9)
        t1 = time.time()
        time.sleep(1.5)  # the last samples after the last request ended
    finally:  # whatever stopped the run, nothing it started beside the benchmark outlives it
        sampler.stop.set()
        sampler.join()
        watcher.terminate()
        try:
            watcher.wait(timeout=10)
        except subprocess.TimeoutExpired:
            watcher.kill()
            watcher.wait()
    after = counters(lane["port"], aliases=aliases)
    with (d / "metrics.csv").open("w", newline="") as f:
        w = csv.DictWriter(f, METRIC_COLUMNS + ["error"], extrasaction="ignore")
        w.writeheader()
        for r in sampler.rows:
            w.writerow({**r, "t": f"{r['t'] - t0:.3f}"})
    if sampler.cpu_rows:  # process_cpu's readings, once a second (t as metrics.csv's)
        with (d / "cpu.csv").open("w", newline="") as f:
            w = csv.writer(f)
            w.writerow(["t", "pid", "process", "cpu_s", "cpu"])
            w.writerows((f"{t - t0:.3f}", pid, name, f"{c:.2f}", k) for t, pid, name, c, k in sampler.cpu_rows)
    if sampler.stat_rows:  # proc_stat's readings, once a second (t as metrics.csv's)
        with (d / "stat.csv").open("w", newline="") as f:
            w = csv.writer(f)
            w.writerow(STAT_COLUMNS)
            w.writerows((f"{r[0] - t0:.3f}", *r[1:]) for r in sampler.stat_rows)
    raw = d / "watch_raw.csv"  # the watch's rows on metrics.csv's clock; a watch stopped before it
    with (d / "watch.csv").open("w", newline="") as g:  # began (a short run on a busy host): none
        w = csv.writer(g)
        w.writerow(WATCH_COLUMNS)
        if raw.is_file():
            with raw.open() as f:
                w.writerows([f"{float(row[0]) - t0:.3f}", *row[1:]] for row in list(csv.reader(f))[1:])
            raw.unlink()
    with (d / "steps.csv").open("w", newline="") as f:
        w = csv.writer(f)
        w.writerow(
            ["t", "iteration", "ctx_requests", "ctx_tokens", "gen_requests", "gen_tokens", "elapsed_ms", "kv_usage_pct"]
        )
        w.writerows(iteration_rows(out / "server.log", t0 - 1.0, t1 + 1.5))
    summarise(d, clients, mono0)
    for path in ds:
        path.unlink()
    info = {
        "name": run["name"],
        "rc": rcs,
        "wall_s": t1 - t0,
        "start_epoch": t0,  # to place stack samples (stack_sampler.py) in their run
        "server_pid": group,  # the API server's process with one API server (cpu.csv)
        "client_pids": list(sampler.clients),  # the benchmark's (cpu.csv's client: rows)
        "commands": [shlex.join(c) for c in cmds],
        "counters": {"before": before, "after": after},
        **({"flush_cache": flushed} if flushed else {}),
    }
    recorded = checks.read_csv((d / "requests.csv").read_text()) if (d / "requests.csv").is_file() else []
    info["check"] = checks.check_run(
        checks.read_csv((d / "planned.csv").read_text()),
        recorded,
        info["counters"],
        bool(run.get("prefix")),
        sglang=sglang(lane),
    )
    log(
        f"{lane['name']}/{run['name']}: rc {rcs} in {t1 - t0:.1f} s; check {'passed' if info['check']['ok'] else 'FAILED'}"
    )
    return info


def probe(out: Path, tag: str, label: str, repeat: int = PROBE_REPEAT, objects: int = WIDE_OBJECTS) -> dict:
    """host_probe.py alone (servesim's reading, microseconds per request-step, and the timings it
    comes from), with nothing else of the lane running."""
    path = out / f"host_probe_{tag}.json"
    cmd = [PY, str(HERE / "host_probe.py"), "--out", str(path), "--repeat", str(repeat), "--alone"]
    cmd += ["--objects", str(objects)]
    try:
        subprocess.run(cmd + ["--label", label], capture_output=True, timeout=300, check=True)
        r = json.loads(path.read_text())
    except Exception as e:  # the lane goes on; lane.json says why there is no reading
        log(f"host probe ({tag}) failed: {e!r}")
        return {"error": repr(e)[:200]}
    log(f"host probe ({tag}): {r['probe_us']:.3f} us per request-step")
    return {
        "probe_us": r["probe_us"],
        "alone_us_median": r["alone_us_median"],
        "alone_us": r["alone_us"],
        "per_cpu_us": r.get("per_cpu_us", {}),
        "wide_ns": r.get("wide_ns", {}),
        "loadavg": r.get("loadavg_before", "").strip(),
        "model_name": r.get("model_name", "").strip().removeprefix("model name").strip(" \t:"),
        "cpu_count": r.get("cpu_count"),
    }


def summarise(d: Path, clients: int, mono0: float) -> None:
    """Per-request rows and the ITL distribution from the bench's detailed result(s); the summary without arrays."""
    rows, itls, summaries = [], [], []
    for k in range(clients):
        raw = d / f"raw{k}.json"
        if not raw.is_file():
            continue
        r = json.loads(raw.read_text())
        n = len(r.get("ttfts", []))
        for i in range(n):
            itl = np.asarray(r["itls"][i], float) if r["itls"][i] else np.zeros(0)
            itls.append(itl)
            q = np.quantile(itl, [0.5, 0.9, 0.99]) if itl.size else [np.nan] * 3
            rows.append(
                {
                    "client": k,
                    "index": i,
                    "start_s": r["start_times"][i] - mono0 if "start_times" in r else "",
                    "prompt_tokens": r["input_lens"][i],
                    "output_tokens": r["output_lens"][i],
                    "ttft_s": r["ttfts"][i],
                    "itl_sum_s": float(itl.sum()),
                    "itl_p50_s": q[0],
                    "itl_p90_s": q[1],
                    "itl_p99_s": q[2],
                    "itl_max_s": float(itl.max()) if itl.size else "",
                    "error": (r.get("errors") or [""] * n)[i][:100],
                }
            )
        summaries.append({k: v for k, v in r.items() if not isinstance(v, list)})
        raw.unlink()
    (d / "bench.json").write_text(json.dumps(summaries, indent=1))
    if rows:
        with (d / "requests.csv").open("w", newline="") as f:
            w = csv.DictWriter(f, list(rows[0]))
            w.writeheader()
            w.writerows(rows)
    if itls:
        a = np.concatenate(itls)
        qs = [0.01 * k for k in range(1, 100)] + [0.995, 0.999, 1.0]
        with (d / "itl_quantiles.csv").open("w") as f:
            f.write("q,itl_s\n" + "".join(f"{q:.3f},{v:.6f}\n" for q, v in zip(qs, np.quantile(a, qs))))


def versions(lane: dict, root: Path) -> dict:
    out = {"python": sys.version.split()[0]}
    for mod in ("vllm", "torch", "transformers", "tokenizers", "triton"):
        try:
            out[mod] = __import__(mod).__version__
        except Exception as e:
            out[mod] = f"unavailable: {e}"
    if sglang(lane):  # the server's own packages, from its site
        code = (
            "import json, sglang, sgl_kernel, flashinfer, transformers; print(json.dumps({'sglang': sglang.__version__, "
            "'sgl_kernel': sgl_kernel.__version__, 'flashinfer': flashinfer.__version__, "
            "'server_transformers': transformers.__version__}))"
        )
        r = subprocess.run(
            [PY, "-c", code], capture_output=True, text=True, env=with_sglang_site(dict(os.environ), root)
        )
        try:
            out.update(json.loads(r.stdout.strip().splitlines()[-1]))
        except (ValueError, IndexError):
            out["sglang"] = f"unavailable: {r.stderr.strip()[-300:]}"
    with contextlib.suppress(OSError):
        out["nvidia_smi"] = subprocess.run(
            ["nvidia-smi", "--query-gpu=name,memory.total,driver_version,clocks.max.sm", "--format=csv,noheader"],
            capture_output=True,
            text=True,
        ).stdout.strip()
    return out


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--plan", required=True)
    ap.add_argument("--lane", required=True)
    ap.add_argument("--root", default="/root/e2e")
    ap.add_argument("--ready-s", type=float, default=600)
    ap.add_argument("--probe-repeat", type=int, default=PROBE_REPEAT, help="host_probe.py's timings around the lane")
    ap.add_argument(
        "--probe-objects", type=int, default=WIDE_OBJECTS, help="host_probe.py's wide reading's objects (--objects)"
    )
    a = ap.parse_args()
    soft, hard = resource.getrlimit(resource.RLIMIT_NOFILE)  # thousands of connections, client and server
    resource.setrlimit(resource.RLIMIT_NOFILE, (max(soft, min(hard, 1 << 20)), hard))
    plan = json.loads(Path(a.plan).read_text())
    lane = next(x for x in plan["lanes"] if x["name"] == a.lane)
    root = Path(a.root)
    out = root / "results" / lane["name"]
    out.mkdir(parents=True, exist_ok=True)
    (out / "FAILED").unlink(missing_ok=True)
    meta = {"lane": lane, "prompt_format": "token_ids", "runs": []}
    (out / "lane.json").write_text(json.dumps(meta, indent=1))
    locks = []
    for g in sorted(lane["gpus"]):  # lanes queue for their GPUs (in one order: no deadlock)
        f = (root / f"gpu{g}.lock").open("w")
        fcntl.flock(f, fcntl.LOCK_EX)
        locks.append(f)
    meta["gpus_free_at"] = time.time()
    log(f"{lane['name']}: GPUs {lane['gpus']} free")
    meta["versions"] = versions(lane, root)  # importing torch and vLLM: not while another lane runs
    meta["host_probe"] = {
        "repeat": a.probe_repeat,
        "before": probe(out, "before", f"{lane['name']} before", a.probe_repeat, a.probe_objects),
    }
    (out / "lane.json").write_text(json.dumps(meta, indent=1))
    p = None
    try:
        mdir, tdir = model_dir(root, lane["model"])
        meta["tokenizer"] = str(tdir)
        vocab = int(json.loads((mdir / "config.json").read_text())["vocab_size"])
        p = start_server(lane, mdir, tdir, out, root)
        meta["ready_s"] = wait_ready(p, lane["port"], a.ready_s, out / "server.log" if sglang(lane) else None)
        log(f"{lane['name']}: ready in {meta['ready_s']:.0f} s")
        for run in lane["runs"]:
            info = bench(lane, run, tdir, out, vocab, p.pid, a.probe_objects)
            meta["runs"].append(info)
            (out / "lane.json").write_text(json.dumps(meta, indent=1))
            if not info["check"]["ok"]:
                raise RuntimeError(f"run {run['name']} failed its check: " + "; ".join(info["check"]["problems"]))
    except Exception as e:
        meta["error"] = repr(e)
        log(f"{lane['name']}: {e!r}")
    finally:
        for sig in (signal.SIGTERM, signal.SIGKILL):
            if p is None:
                break
            try:
                os.killpg(p.pid, sig)
                p.wait(timeout=30)
                break
            except Exception:
                pass
        for _ in range(60):  # the server's other processes (engine core, workers) gone too
            try:
                os.killpg(p.pid, 0) if p is not None else None
            except ProcessLookupError:
                break
            time.sleep(0.5)
        meta["host_probe"]["after"] = probe(out, "after", f"{lane['name']} after", a.probe_repeat, a.probe_objects)
        meta["done"] = time.time()
        (out / "lane.json").write_text(json.dumps(meta, indent=1))
        if meta.get("error"):
            (out / "FAILED").write_text(meta["error"] + "\n")
            log(f"{lane['name']}: FAILED: {meta['error']}")
        (out / "DONE").write_text("")
    return 1 if meta.get("error") else 0


if __name__ == "__main__":
    raise SystemExit(main())
