"""``F``: a documented scenario field (doc, unit, vLLM knob, bounds) for the config dataclasses."""

from __future__ import annotations

import dataclasses
from dataclasses import field
from typing import Any


def F(default: Any = dataclasses.MISSING, doc: str = "", unit: str = "", vllm: str = "", **rules: Any) -> Any:
    """A documented scenario field. ``rules``: ge, gt, le, lt (numeric bounds)."""
    meta = {"doc": doc, "unit": unit, "vllm": vllm, **rules}
    if isinstance(default, (dict, list)):
        return field(default_factory=lambda: type(default)(default), metadata=meta)
    if dataclasses.is_dataclass(default):
        return field(default_factory=lambda: default, metadata=meta)
    return field(default=default, metadata=meta)
