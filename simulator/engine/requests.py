"""Per-request state as numpy columns, indexed by request id (ids count from 0).

A step touches hundreds of requests at once, so the scheduler works on slices of these columns
instead of Python objects. The same columns are the per-request records written at the end.
Columns of one dtype are stored as one row-major table (``ROW_LAYOUT``: a request's fields side by
side, the ones every step touches first), so a compiled step that visits a request reads one or two
cache lines instead of one per field; each column is a strided view into its table.
"""

from __future__ import annotations

from typing import Any

import numpy as np

from simulator.engine.rules import RequestStatus

# name -> (dtype, initial value)
_FIELDS: dict[str, tuple[type, float]] = {
    "arrival": (np.float64, np.nan),
    # when the API server may take it in: its arrival, or later for a closed loop's next request
    # (``host.turnaround``)
    "ready": (np.float64, np.nan),
    "first_scheduled": (np.float64, np.nan),
    "first_token": (np.float64, np.nan),
    "last_token": (np.float64, np.nan),
    "finish": (np.float64, np.nan),
    "prompt_len": (np.int64, 0),
    "max_tokens": (np.int64, 0),
    "num_tokens": (np.int64, 0),
    "num_computed": (np.int64, 0),
    "num_out": (np.int64, 0),
    "computed_hwm": (np.int64, 0),  # most tokens ever computed (for counting recomputation)
    "num_blocks": (np.int64, 0),  # blocks held on the GPU (== ceil(num_computed / block_size))
    "cached_tokens": (np.int64, -1),  # prefix-cache hit tokens at first admission
    "host_cached_tokens": (np.int64, 0),  # of them, those found in the host tier (KV offloading)
    "preemptions": (np.int32, 0),
    "recomputed": (np.int64, 0),
    "swapped_bytes": (np.float64, 0.0),
    "status": (np.int8, RequestStatus.WAITING),
    "priority": (np.int32, 0),
    "group": (np.int64, -1),
    "group_len": (np.int64, 0),
    "content_key": (np.int64, -1),
    "client": (np.int64, -1),
    "client_class": (np.int64, -1),
    "external": (np.int64, 0),  # prompt tokens whose KV arrives with the request (disaggregated decode)
    "lora": (np.int64, -1),  # the LoRA adapter it asks for (-1: the base model)
}


# Storage: per dtype, the fields in table-column order (the hot ones of a step first).
ROW_LAYOUT: dict[type, tuple[str, ...]] = {
    np.int64: (
        "num_tokens",
        "num_computed",
        "num_out",
        "max_tokens",
        "computed_hwm",
        "num_blocks",
        "cached_tokens",
        "recomputed",
        "prompt_len",
        "group",
        "group_len",
        "content_key",
        "client",
        "client_class",
        "external",
        "lora",
        "host_cached_tokens",
    ),
    np.float64: ("first_scheduled", "first_token", "last_token", "finish", "arrival", "swapped_bytes", "ready"),
    np.int32: ("preemptions", "priority"),
    np.int8: ("status",),
}
assert sorted(n for names in ROW_LAYOUT.values() for n in names) == sorted(_FIELDS)


_ADDED = (
    "arrival",
    "ready",
    "prompt_len",
    "num_tokens",
    "max_tokens",
    "content_key",
    "priority",
    "group",
    "group_len",
    "client",
    "client_class",
    "external",
    "lora",
)  # the fields ``add`` writes


class RequestTable:
    """Growable columns of per-request state (views into one table per dtype, see ``ROW_LAYOUT``)."""

    # The columns, set by ``_grow`` (one line per name of ``_FIELDS``; a test checks they agree).
    arrival: np.ndarray
    ready: np.ndarray
    first_scheduled: np.ndarray
    first_token: np.ndarray
    last_token: np.ndarray
    finish: np.ndarray
    prompt_len: np.ndarray
    max_tokens: np.ndarray
    num_tokens: np.ndarray
    num_computed: np.ndarray
    num_out: np.ndarray
    computed_hwm: np.ndarray
    num_blocks: np.ndarray
    cached_tokens: np.ndarray
    host_cached_tokens: np.ndarray
    preemptions: np.ndarray
    recomputed: np.ndarray
    swapped_bytes: np.ndarray
    status: np.ndarray
    priority: np.ndarray
    group: np.ndarray
    group_len: np.ndarray
    content_key: np.ndarray
    client: np.ndarray
    client_class: np.ndarray
    external: np.ndarray
    lora: np.ndarray

    def __init__(self, capacity: int = 1024) -> None:
        self.n = 0
        self._cap = 0
        self.tables: dict[type, np.ndarray] = {}
        self._grow(capacity)

    def add(
        self,
        arrival: float,
        prompt_len: int,
        max_tokens: int,
        priority: int = 0,
        group: int = -1,
        group_len: int = 0,
        content_key: int = -1,
        client: int = -1,
        client_class: int = -1,
        external: int = 0,
        lora: int = -1,
        ready: float | None = None,
    ) -> int:
        if self.n == self._cap:
            self._grow()
        rid = self.n
        self.n += 1
        w = self._writers  # memoryviews of the columns: a scalar store costs less than numpy's
        w["arrival"][rid] = arrival
        w["ready"][rid] = arrival if ready is None else ready
        w["prompt_len"][rid] = prompt_len
        w["num_tokens"][rid] = prompt_len
        w["max_tokens"][rid] = max_tokens
        w["content_key"][rid] = rid if content_key < 0 else content_key
        # The rest only where they differ from the columns' initial values.
        if priority:
            w["priority"][rid] = priority
        if group >= 0:
            w["group"][rid] = group
            w["group_len"][rid] = group_len
        if client >= 0:
            w["client"][rid] = client
        if client_class >= 0:
            w["client_class"][rid] = client_class
        if external:
            w["external"][rid] = external
        if lora >= 0:
            w["lora"][rid] = lora
        return rid

    def reserve(self, n: int) -> None:
        """Make room for ``n`` requests at once (when the count is known, the columns are then
        allocated once instead of doubled, and the old copy is never live next to the new)."""
        if n > self._cap:
            self._grow(n)

    def _grow(self, new: int = 0) -> None:
        new = max(new, self._cap * 2)
        for dt, names in ROW_LAYOUT.items():
            table: np.ndarray = np.empty((new, len(names)), dt)
            table[:] = [_FIELDS[name][1] for name in names]
            old = self.tables.get(dt)
            if old is not None:
                table[: self._cap] = old
            self.tables[dt] = table
            for k, name in enumerate(names):
                setattr(self, name, table[:, k])
        self._writers: dict[str, memoryview[Any]] = {name: memoryview(getattr(self, name)) for name in _ADDED}
        self._cap = new

    def columns(self) -> dict[str, np.ndarray]:
        return {name: getattr(self, name)[: self.n] for name in _FIELDS}


assert {n for n, t in RequestTable.__annotations__.items() if t == "np.ndarray"} == set(_FIELDS)
