"""Request traces: a documented CSV / JSONL schema, replay, and generation from a scenario.

Schema (one request per row; docs/workloads.md):

    arrival_time_s   number >= 0      when the request arrives (rows may come in any order)
    prompt_tokens    integer >= 1     the whole prompt, shared prefix included
    output_tokens    integer >= 1     tokens generated (max_tokens with ignore_eos)
    prefix_group     integer >= 0     optional: shared-prefix group id (with prefix_tokens)
    prefix_tokens    integer >= 1     optional: leading prompt tokens that are the group's prefix
    session_id       integer >= 0     optional: requests of one session share content position by position
    client_class     integer >= 0     optional: client class index
    priority         integer          optional: scheduling priority (default 0)
    client           integer >= 0     optional: client id (closed-loop runs record it)

An empty CSV cell or a JSON null means "not given". Bad rows give ``NAME line N: COLUMN must be ...``.
"""

from __future__ import annotations

import codecs
import contextlib
import csv
import difflib
import functools
import io
import itertools
import json
import math
import os
import re
from pathlib import Path
from typing import cast

import numpy as np
import simpy

from simulator.engine.simtime import TimeoutAt
from simulator.engine.submission import DirectTarget, RequestRow, Submission
from simulator.errors import ConfigError
from simulator.scenario.textfile import ENCODING, utf8_error
from workloads.arrivals import RunEnd, closed_loop, hand_over_ahead

# Content keys of multi-turn sessions: far above any request id (request ids are the default keys).
SESSION_KEY_BASE = 1 << 40

# Columns of a Trace, with the CSV column each comes from, the default when not given, and the
# least value allowed (None: any integer; the arrival time is the one non-integer column).
_FIELDS = (
    ("arrival", "arrival_time_s", None, 0),
    ("prompt", "prompt_tokens", None, 1),
    ("output", "output_tokens", None, 1),
    ("group", "prefix_group", -1, 0),
    ("group_len", "prefix_tokens", 0, 1),
    ("session", "session_id", -1, 0),
    ("client_class", "client_class", -1, 0),
    ("priority", "priority", 0, None),
    ("client", "client", -1, 0),
)
COLUMNS = tuple(col for _, col, _, _ in _FIELDS)
REQUIRED = tuple(col for _, col, default, _ in _FIELDS if default is None)  # the others may be left out


class Trace:
    """Parsed trace rows as numpy columns, sorted by arrival time (stable: ties keep file order)."""

    # the columns, one per key of ``_FIELDS`` (set from ``cols`` below)
    arrival: np.ndarray
    prompt: np.ndarray
    output: np.ndarray
    group: np.ndarray
    group_len: np.ndarray
    session: np.ndarray
    client_class: np.ndarray
    priority: np.ndarray
    client: np.ndarray

    def __init__(self, cols: dict[str, np.ndarray]) -> None:
        arrival = cols["arrival"]
        if (arrival[1:] >= arrival[:-1]).all():  # already in order (a stable sort would keep it)
            for k, v in cols.items():
                setattr(self, k, v)
        else:
            order = np.argsort(arrival, kind="stable")
            for k, v in cols.items():
                setattr(self, k, v[order])
        self.n = len(arrival)

    def __len__(self) -> int:
        return self.n


def _session_key(sid: int) -> int:
    return SESSION_KEY_BASE + sid if sid >= 0 else -1


# ---- reading ------------------------------------------------------------------------------------


def read_trace(path: str) -> Trace:
    """Read and check a trace file (``.jsonl``/``.json``: JSON lines; anything else: CSV). Cached per file version."""
    p = Path(path)
    if not p.is_file():
        raise ConfigError(f"workload.trace: file not found (got {path!r})")
    st = p.stat()
    return _read(str(p.resolve()), os.path.basename(path), st.st_mtime_ns, st.st_size)


@functools.lru_cache(maxsize=8)
def _read(resolved: str, name: str, _mtime: int, _size: int) -> Trace:
    jsonl = resolved.endswith((".jsonl", ".json"))
    if not jsonl:
        fast = _csv_fast(resolved)
        if fast is not None:
            return Trace(fast)
    rows = _jsonl_rows(resolved, name) if jsonl else _csv_rows(resolved, name)
    cols: dict[str, list] = {key: [] for key, *_ in _FIELDS}
    try:
        for line, rec in rows:
            _check_row(rec, name, line, cols)
    except UnicodeDecodeError:
        raise utf8_error(resolved, name) from None
    if not cols["arrival"]:
        raise ConfigError(f"{name}: no requests (got an empty trace)")
    return Trace({k: np.array(v, np.float64 if k == "arrival" else np.int64) for k, v in cols.items()})


_NOT_PLAIN = re.compile(rb"[^0-9eE.+\-,\n\r \t]")


def _csv_fast(path: str) -> dict[str, np.ndarray] | None:
    """A plain numeric CSV (one header line, then rows of numbers, all of the header's width, no
    blank lines, quotes or comments) parsed in C and checked column by column.

    Returns None whenever the file is not plain or any row breaks a rule: the row-by-row reader
    then reads it, and names the line and column of the first bad row. Both readers give the same
    values.
    """
    import pandas as pd

    with open(path, "rb") as fh:
        data = fh.read()
    nl = data.find(b"\n") + 1
    bom = len(codecs.BOM_UTF8) if data.startswith(codecs.BOM_UTF8) else 0
    header = [h.strip() for h in data[bom:nl].decode("utf-8", "replace").split(",")]
    if (
        nl == 0
        or nl == len(data)
        or data.find(b"\n\n", nl - 1) >= 0
        or _NOT_PLAIN.search(data, nl)
        or any(h not in COLUMNS for h in header)
        or len(set(header)) != len(header)
        or any(k not in header for k in REQUIRED)
    ):
        return None
    lines = data.count(b"\n", nl) + (0 if data.endswith(b"\n") else 1)
    if data.count(b",", nl) != (len(header) - 1) * lines:  # every row has exactly the header's width
        return None
    del data
    n = lines
    given = {h: np.zeros(n, np.bool_) for h in header}
    raw = {h: np.zeros(n, np.float64) for h in header}
    at = 0
    try:
        # In slices, so the parser's working memory stays small next to the columns. Arrival times
        # are read as text and converted by Python's float (correctly rounded, as the row reader
        # does); token counts are integers, which any parser reads exactly.
        for chunk in pd.read_csv(
            path,
            header=0,
            names=header,
            skipinitialspace=True,
            keep_default_na=False,
            encoding=ENCODING,
            na_values=[""],
            chunksize=1 << 17,
            dtype={h: (str if h == "arrival_time_s" else np.float64) for h in header},
        ):
            k = len(chunk)
            if at + k > n:
                return None
            for h in header:
                c = chunk[h]
                v = np.array(c.to_numpy(object), np.float64) if h == "arrival_time_s" else c.to_numpy(np.float64)
                raw[h][at : at + k] = v
                given[h][at : at + k] = ~np.isnan(v)
            at += k
    except (ValueError, TypeError, pd.errors.ParserError):
        return None
    if at != n:
        return None
    cols: dict[str, np.ndarray] = {}
    for key, col, default, lo in _FIELDS:
        if col not in raw:
            assert default is not None  # the required columns are in the header (checked above)
            cols[key] = np.broadcast_to(np.int64(default), n)  # one value for every row, no memory per row
            continue
        v, g = raw.pop(col), given[col]
        if default is None and not g.all():
            return None
        vals = v[g]
        if not np.isfinite(vals).all() or (lo is not None and (vals < lo).any()):
            return None
        if key == "arrival":
            cols[key] = v
            continue
        if (vals != np.floor(vals)).any() or (np.abs(vals) > 2.0**53).any():
            return None
        cols[key] = v.astype(np.int64) if default is None else np.where(g, v, default).astype(np.int64)
    g_given = cols["group"] >= 0
    glen_given = given.get("prefix_tokens", np.zeros(n, np.bool_))
    if (g_given != glen_given).any() or (cols["group_len"] > cols["prompt"]).any():
        return None
    return cols


def _check_columns(keys, name: str, line: int) -> None:
    for k in keys:
        if k not in COLUMNS:
            hint = difflib.get_close_matches(str(k), COLUMNS, n=1)
            extra = f"; did you mean {hint[0]!r}?" if hint else f"; known columns: {', '.join(COLUMNS)}"
            raise ConfigError(f"{name} line {line}: unknown column {k!r}{extra}")


def _csv_rows(path: str, name: str):
    with open(path, newline="", encoding=ENCODING) as fh:
        reader = csv.reader(fh)
        header = None
        for row in reader:
            if not row or not any(c.strip() for c in row) or row[0].lstrip().startswith("#"):
                continue
            if header is None:
                header = [h.strip() for h in row]
                _check_columns(header, name, reader.line_num)
                for k in REQUIRED:
                    if k not in header:
                        raise ConfigError(
                            f"{name} line {reader.line_num}: missing column {k!r} (got {', '.join(header)})"
                        )
                continue
            if len(row) != len(header):
                raise ConfigError(f"{name} line {reader.line_num}: expected {len(header)} fields (got {len(row)})")
            yield reader.line_num, {k: (v.strip() or None) for k, v in zip(header, row)}


def _jsonl_rows(path: str, name: str):
    with open(path, encoding=ENCODING) as fh:
        for i, text in enumerate(fh, 1):
            if not text.strip():
                continue
            try:
                rec = json.loads(text)
            except json.JSONDecodeError as e:
                raise ConfigError(f"{name} line {i}: malformed JSON: {e.msg}") from None
            if not isinstance(rec, dict):
                raise ConfigError(f"{name} line {i}: each line must be a JSON object (got {text.strip()[:60]!r})")
            _check_columns(rec, name, i)
            for k in REQUIRED:
                if rec.get(k) is None:
                    raise ConfigError(f"{name} line {i}: missing {k!r}")
            yield i, rec


def _number(v, name: str, line: int, col: str) -> float:
    if isinstance(v, str):
        try:
            x = float(v)
        except ValueError:
            x = math.nan
    elif isinstance(v, (int, float)) and not isinstance(v, bool):
        x = float(v)
    else:
        x = math.nan
    if not (math.isfinite(x) and x >= 0):
        raise ConfigError(f"{name} line {line}: {col} must be a number >= 0 (got {v!r})")
    return x


def _integer(v, name: str, line: int, col: str, lo: int | None) -> int:
    x = math.nan
    if isinstance(v, str):
        with contextlib.suppress(ValueError):
            x = float(v)
    elif isinstance(v, (int, float)) and not isinstance(v, bool):
        x = float(v)
    if not (math.isfinite(x) and x == int(x)) or (lo is not None and x < lo):
        rule = "an integer" if lo is None else f"an integer >= {lo}"
        raise ConfigError(f"{name} line {line}: {col} must be {rule} (got {v!r})")
    return int(x)


def _check_row(rec: dict, name: str, line: int, cols: dict) -> None:
    """Check one row against ``_FIELDS`` (in their order) and append its values to ``cols``."""
    row = {}
    for key, col, default, lo in _FIELDS:
        v = rec.get(col)
        if key == "arrival":
            row[key] = _number(v, name, line, col)
        elif v is None and default is not None:
            row[key] = default
        else:
            row[key] = _integer(v, name, line, col, lo)
        if key == "group_len":
            g_given, glen_given = rec.get("prefix_group") is not None, v is not None
            if g_given != glen_given:
                missing, other = ("prefix_tokens", "prefix_group") if g_given else ("prefix_group", "prefix_tokens")
                raise ConfigError(f"{name} line {line}: {missing} must be given with {other} (got none)")
            if glen_given and row["group_len"] > row["prompt"]:
                raise ConfigError(
                    f"{name} line {line}: prefix_tokens must be <= prompt_tokens ({row['prompt']}) "
                    f"(got {row['group_len']})"
                )
    for key, x in row.items():
        cols[key].append(x)


# ---- replay -------------------------------------------------------------------------------------


def replay(env: simpy.Environment, submit, tr: Trace, budget):
    """Open loop: submit each row at its recorded arrival time."""
    for i in range(tr.n):
        if not budget.take():
            return
        t = float(tr.arrival[i])
        if t > env.now:
            yield TimeoutAt(env, t)
        submit(Submission(*_row(tr, i, int(tr.client[i]))[:-1]))


def _row(tr: Trace, i: int, client: int) -> RequestRow:
    """Row ``i`` of the trace as a request of ``client``: the fields a replay submits."""
    return (
        int(tr.prompt[i]),
        int(tr.output[i]),
        int(tr.group[i]),
        int(tr.group_len[i]),
        int(tr.priority[i]),
        _session_key(int(tr.session[i])),
        client,
        int(tr.client_class[i]),
        -1,
    )


def replay_ahead(env: simpy.Environment, engine: DirectTarget, tr: Trace, budget, end: RunEnd | None):
    """``replay`` for one engine, when no row names a client (none waits on an earlier request): the
    rows handed to the engine ahead (``arrivals.hand_over_ahead``), each sent at the time ``replay``
    would submit it (its recorded arrival, or the one before it if later)."""
    times = itertools.islice(itertools.accumulate(tr.arrival.tolist(), max, initial=env.now), 1, None)
    sent = [0]  # rows handed over so far

    def send(batch: list[float]) -> None:
        i = sent[0]
        sent[0] += len(batch)
        engine.submit_rows([_row(tr, j, int(tr.client[j])) for j in range(i, sent[0])], batch)

    return hand_over_ahead(env, times, send, budget, end)


def replay_closed_loop(
    env: simpy.Environment,
    submit,
    tr: Trace,
    budget,
    concurrency: int,
    client_latency_s: float,
    ramp_up_s: float = 0.0,
    runner: DirectTarget | None = None,
) -> None:
    """Closed loop: ``concurrency`` clients send the trace's requests in order (recorded arrival times
    ignored), each the next one when its previous one ends (after ``client_latency_s``); ``runner``:
    the engine, which runs the clients' turns (``arrivals.closed_loop``)."""
    rows = iter(range(tr.n))

    def request(client: int, want_event: bool = True):
        return submit(Submission(*_row(tr, next(rows), client)[:-1]), want_event)

    def requests(clients: list[int]) -> None:
        cast(DirectTarget, runner).submit_rows([_row(tr, next(rows), c) for c in clients])

    budget.left = tr.n if budget.left is None else min(budget.left, tr.n)
    closed_loop(
        env,
        submit,
        None,
        concurrency,
        0.0,
        ramp_up_s,
        budget,
        request=request,
        client_latency_s=client_latency_s,
        runner=runner,
        requests=requests if runner is not None else None,
    )


# ---- generation ---------------------------------------------------------------------------------


def trace_text(rows: list[dict], path: str | Path) -> str:
    """``rows`` as the text of a trace file named ``path``: JSON lines for .jsonl (or .json), else CSV."""
    if Path(path).suffix in (".jsonl", ".json"):
        return "".join(json.dumps({k: v for k, v in r.items() if v is not None}) + "\n" for r in rows)
    buf = io.StringIO()
    w = csv.writer(buf)
    w.writerow(COLUMNS)
    for r in rows:
        w.writerow(["" if r.get(k) is None else repr(r[k]) if isinstance(r[k], float) else r[k] for k in COLUMNS])
    return buf.getvalue()


def write_trace(rows: list[dict], path: str | Path) -> None:
    path = Path(path)
    path.parent.mkdir(parents=True, exist_ok=True)
    with open(path, "w", newline="") as fh:
        fh.write(trace_text(rows, path))
