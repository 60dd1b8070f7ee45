"""How late `vllm bench serve` itself sees a request's first token: its client against a stand-in
server that costs next to nothing.

    python tools/e2e/client_loop.py --vllm-bench DIR --out FILE.csv [--grid 256:1,1200:1,1200:2 ...]

The benchmark client is one asyncio process: it starts each request, reads every streamed chunk of
every open request and parses it. Recorded runs put the client's TTFT well above the server's own
(data/e2e: 0.2-1.4 s more at 512-3,200 clients). This measures the client's share alone.

The stand-in server is a plain asyncio HTTP/1.1 server (one process per ``--server-procs``, sharing
the port): it takes a request in, and at the next tick of a step clock (``--step-ms``) starts
streaming it one SSE chunk per tick, shaped like vLLM's /v1/completions chunks, then the usage
chunk and ``[DONE]``. It writes down, by the request's ``x-request-id``, when it received the
request and when it wrote the first chunk. The client is vLLM's own request function
(``vllm/benchmarks/lib/endpoint_request_func.py`` from the vLLM wheel, in ``--vllm-bench``) driven
the way ``vllm bench serve --max-concurrency N`` drives it: every request a task behind one
semaphore of N, one aiohttp session with the same connector settings. ``--clients K`` runs K such
processes with N/K each, as two benchmark clients against one server.

Per request, on one clock (perf_counter is CLOCK_MONOTONIC on Linux in every process):
``inbound`` = server received - client started; ``server`` = first chunk written - received;
``outbound`` = client read the first chunk - server wrote it. One row per request in ``--out``,
and a summary per grid point on stdout.
"""

from __future__ import annotations

import argparse
import asyncio
import csv
import json
import math
import multiprocessing as mp
import os
import random
import socket
import statistics
import sys
import time

CHUNK = (
    'data: {{"id":"cmpl-{rid}","object":"text_completion","created":1764201600,"model":"m",'
    '"choices":[{{"index":0,"text":" w{k}","logprobs":null,"finish_reason":null,"stop_reason":null,'
    '"prompt_token_ids":null,"token_ids":null}}],"usage":null}}\n\n'
)
LAST = (
    'data: {{"id":"cmpl-{rid}","object":"text_completion","created":1764201600,"model":"m",'
    '"choices":[],"usage":{{"prompt_tokens":{p},"total_tokens":{t},"completion_tokens":{n}}}}}\n\n'
    "data: [DONE]\n\n"
)


def chunked(s: str) -> bytes:
    b = s.encode()
    return b"%x\r\n%s\r\n" % (len(b), b)


# ---- the stand-in server ------------------------------------------------------------------------


def serve(port: int, step_s: float, log_path: str, ready) -> None:
    streams: dict = {}  # transport -> [rid, tokens left, k]
    log: list = []

    class Conn(asyncio.Protocol):
        def connection_made(self, tr):
            # As uvicorn's: every chunk goes out at once (no Nagle wait for the client's delayed ACK).
            tr.get_extra_info("socket").setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
            self.tr = tr
            self.buf = b""

        def data_received(self, data):
            self.buf += data
            while True:
                head_end = self.buf.find(b"\r\n\r\n")
                if head_end < 0:
                    return
                head = self.buf[:head_end].decode("latin-1").split("\r\n")
                hdr = {k.lower(): v.strip() for k, _, v in (h.partition(":") for h in head[1:])}
                n = int(hdr.get("content-length", "0"))
                if len(self.buf) < head_end + 4 + n:
                    return
                body = json.loads(self.buf[head_end + 4 : head_end + 4 + n])
                self.buf = self.buf[head_end + 4 + n :]
                t = time.perf_counter()
                rid = hdr.get("x-request-id", "")
                self.tr.write(
                    b"HTTP/1.1 200 OK\r\ncontent-type: text/event-stream; charset=utf-8\r\n"
                    b"transfer-encoding: chunked\r\n\r\n"
                )
                entry = [rid, int(body["max_tokens"]), 0, t, 0.0]
                streams[self.tr] = entry

        def connection_lost(self, exc):
            streams.pop(self.tr, None)

    async def clock():
        loop = asyncio.get_running_loop()
        nxt = loop.time()
        while True:
            nxt += step_s
            await asyncio.sleep(max(0.0, nxt - loop.time()))
            for tr, e in list(streams.items()):
                rid, left, k = e[0], e[1], e[2]
                if left <= 0:
                    continue
                if k == 0:
                    e[4] = time.perf_counter()
                out = chunked(CHUNK.format(rid=rid, k=k))
                e[1] = left - 1
                e[2] = k + 1
                if e[1] == 0:
                    out += chunked(LAST.format(rid=rid, p=128, t=128 + k + 1, n=k + 1)) + b"0\r\n\r\n"
                    log.append((rid, e[3], e[4]))
                    del streams[tr]
                tr.write(out)

    async def main():
        loop = asyncio.get_running_loop()
        sock = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
        sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
        sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEPORT, 1)
        sock.bind(("127.0.0.1", port))
        server = await loop.create_server(Conn, sock=sock, backlog=4096)
        ready.set()
        task = asyncio.create_task(clock())
        while not os.path.exists(log_path + ".stop"):
            await asyncio.sleep(0.2)
        task.cancel()
        server.close()
        with open(log_path, "w") as f:
            for rid, t_recv, t_first in log:
                f.write(f"{rid},{t_recv!r},{t_first!r}\n")

    asyncio.run(main())


# ---- the client: vLLM's request function, driven as vllm bench serve drives it ----------------


def client(port: int, n_conc: int, lengths: list[int], tag: str, bench_dir: str, out_path: str, go) -> None:
    sys.path.insert(0, bench_dir)
    import aiohttp
    from endpoint_request_func import RequestFuncInput, async_request_openai_completions

    async def main():
        connector = aiohttp.TCPConnector(
            limit=n_conc,
            limit_per_host=n_conc,
            ttl_dns_cache=300,
            use_dns_cache=True,
            keepalive_timeout=60,
            enable_cleanup_closed=True,
            force_close=False,
            ssl=False,
        )
        session = aiohttp.ClientSession(
            connector=connector, trust_env=True, timeout=aiohttp.ClientTimeout(total=6 * 3600)
        )
        sem = asyncio.Semaphore(n_conc)
        url = f"http://127.0.0.1:{port}/v1/completions"

        async def one(i, n):
            async with sem:
                inp = RequestFuncInput(
                    prompt="w " * 127,
                    api_url=url,
                    prompt_len=128,
                    output_len=n,
                    model="m",
                    ignore_eos=True,
                    request_id=f"{tag}-{i}",
                )
                return await async_request_openai_completions(inp, session, None)

        go.wait()
        t0 = time.perf_counter()
        tasks = [asyncio.create_task(one(i, n)) for i, n in enumerate(lengths)]
        outs = await asyncio.gather(*tasks)
        dur = time.perf_counter() - t0
        await session.close()
        with open(out_path, "w") as f:
            for i, o in enumerate(outs):
                f.write(f"{tag}-{i},{o.start_time!r},{o.ttft!r},{o.latency!r},{int(o.success)},{dur!r}\n")

    asyncio.run(main())


def run_point(args, n_conc: int, n_clients: int, step_ms: float, port: int) -> list[dict]:
    ctx = mp.get_context("fork")
    tmp = f"/tmp/client_loop_{os.getpid()}_{n_conc}_{n_clients}"
    for p in [tmp + f".s{i}" for i in range(args.server_procs)]:
        for q in (p, p + ".stop"):
            if os.path.exists(q):
                os.remove(q)
    readies = [ctx.Event() for _ in range(args.server_procs)]
    servers = [
        ctx.Process(target=serve, args=(port, step_ms / 1000, tmp + f".s{i}", readies[i]))
        for i in range(args.server_procs)
    ]
    for s in servers:
        s.start()
    for r in readies:
        r.wait(10)
    rng = random.Random(args.seed)
    total = args.waves * n_conc
    mu = math.log(args.output_mean) - 0.5 * args.output_sigma**2
    lengths = [max(2, round(rng.lognormvariate(mu, args.output_sigma))) for _ in range(total)]
    go = ctx.Event()
    per = [lengths[k::n_clients] for k in range(n_clients)]
    clients = [
        ctx.Process(
            target=client,
            args=(port, n_conc // n_clients, per[k], f"c{k}", args.vllm_bench, tmp + f".c{k}", go),
        )
        for k in range(n_clients)
    ]
    for c in clients:
        c.start()
    time.sleep(1.0)
    go.set()
    for c in clients:
        c.join()
    for i in range(args.server_procs):
        open(tmp + f".s{i}.stop", "w").close()
    for s in servers:
        s.join()
    srv = {}
    for i in range(args.server_procs):
        with open(tmp + f".s{i}") as f:
            for line in f:
                rid, a, b = line.strip().split(",")
                srv[rid] = (float(a), float(b))
    rows = []
    for k in range(n_clients):
        with open(tmp + f".c{k}") as f:
            lines = f.read().splitlines()
        for line in lines:
            rid, st, ttft, _latency, ok, dur = line.split(",")
            if rid not in srv or ok != "1":
                continue
            t_recv, t_first = srv[rid]
            st, ttft = float(st), float(ttft)
            rows.append(
                {
                    "concurrency": n_conc,
                    "clients": n_clients,
                    "step_ms": step_ms,
                    "id": rid,
                    "start": st,
                    "ttft": ttft,
                    "inbound": t_recv - st,
                    "server": t_first - t_recv,
                    "outbound": st + ttft - t_first,
                    "duration": float(dur),
                }
            )
    return rows


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--vllm-bench", required=True, help="folder holding vLLM's endpoint_request_func.py")
    ap.add_argument("--out", required=True)
    ap.add_argument(
        "--grid", default="256:1:30,768:1:40,1200:1:60,1200:2:60,2000:1:100", help="CONCURRENCY:CLIENTS:STEP_MS,..."
    )
    ap.add_argument("--server-procs", type=int, default=4)
    ap.add_argument("--output-mean", type=float, default=150.0)
    ap.add_argument("--output-sigma", type=float, default=0.5)
    ap.add_argument("--waves", type=int, default=3)
    ap.add_argument("--seed", type=int, default=0)
    ap.add_argument("--port", type=int, default=18200)
    a = ap.parse_args(argv)
    for j, point in enumerate(a.grid.split(",")):
        n, k, step_ms = (float(x) for x in point.split(":"))
        n, k = int(n), int(k)
        rows = run_point(a, n, k, step_ms, a.port + j)
        # The first wave starts all at once; the steady state is what the client does after it.
        steady = [r for r in rows if r["start"] - min(x["start"] for x in rows) > 2.0] or rows
        q = {key: statistics.median(r[key] for r in steady) * 1000 for key in ("ttft", "inbound", "server", "outbound")}
        print(
            f"c{n} clients {k} step {step_ms:g} ms: {len(rows)} requests, {len(steady)} steady; median ms "
            f"ttft {q['ttft']:.1f} inbound {q['inbound']:.1f} server {q['server']:.1f} outbound {q['outbound']:.1f}; "
            f"duration {max(r['duration'] for r in rows):.1f} s",
            flush=True,
        )
        with open(a.out, "a", newline="") as f:  # each point as it ends: a run cut short keeps the rest
            w = csv.DictWriter(f, fieldnames=list(rows[0]))
            if f.tell() == 0:
                w.writeheader()
            w.writerows(rows)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
