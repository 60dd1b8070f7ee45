"""Every numeric scenario field, every extreme value: inf, -inf, nan, 1e308, -0.0 and integers far
past 64 bits each give one line naming the field, the rule and the value (exit 2, no traceback), or a
scenario that builds (``servesim check``) and runs.

The fields are enumerated from their declarations (``servesim fields``): a field added later is
tried too. A field that means something only beside a sibling's value (``only``) gets that value,
and one in an optional section gets the section (``SECTIONS``)."""

from __future__ import annotations

import contextlib
import dataclasses
import io
import json
import math
import typing

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from simulator.cli import main
from simulator.scenario.config import Scenario, field_reference

# What an optional section needs to exist, as --set values.
SECTIONS = {
    "engine.speculative_config": ["engine.speculative_config={method: ngram}"],
    "engine.max_loras": ["engine.enable_lora=true"],
    "engine.max_lora_rank": ["engine.enable_lora=true"],
    "engine.max_cpu_loras": ["engine.enable_lora=true"],
    "workload.session": ["workload.session={}"],
    "workload.lora": ["engine.enable_lora=true", "workload.lora={adapters: 2}"],
    "cluster": ["cluster={replicas: 2}"],
    "cluster.autoscaler": ["cluster.autoscaler={target: 8}"],
    "disaggregation": ["disaggregation={}"],
}
SHORT = ["run.duration_s=2", "run.warmup_s=0"]
pytestmark = pytest.mark.filterwarnings("error")  # a numpy overflow warning is no one-line error either
EXTREMES = [math.inf, -math.inf, math.nan, 1e308, -1e308, -0.0, 10**30, -(10**30), 2**63]


def _numeric_fields() -> list[str]:
    return [r[0] for r in field_reference() if "integer" in r[1] or "number" in r[1]]


FIELDS = _numeric_fields()


def _field(path: str) -> dataclasses.Field:
    cls: typing.Any = Scenario
    *sections, name = path.split(".")
    for part in sections:
        tp = typing.get_type_hints(cls)[part]
        cls = (
            tp if dataclasses.is_dataclass(tp) else next(a for a in typing.get_args(tp) if dataclasses.is_dataclass(a))
        )
    return {f.name: f for f in dataclasses.fields(cls)}[name]


def _yaml(v) -> str:
    if isinstance(v, float) and math.isnan(v):
        return ".nan"
    if isinstance(v, float) and math.isinf(v):
        return ".inf" if v > 0 else "-.inf"
    return repr(v)


def _sets(path: str, value) -> list[str]:
    """--set values giving ``path`` the ``value`` in a scenario where the field means something."""
    parts = path.split(".")
    sets = [s for i in range(1, len(parts) + 1) for s in SECTIONS.get(".".join(parts[:i]), [])]
    for sibling, allowed in _field(path).metadata.get("only", {}).items():
        sets.append(f"{'.'.join([*parts[:-1], sibling])}={json.dumps(allowed[0])}")
    fixed = [s for s in SHORT if s.split("=")[0] != path]
    return list(dict.fromkeys([*fixed, *sets, f"{path}={_yaml(value)}"]))


def _servesim(args: list[str]) -> tuple[int, str]:
    err = io.StringIO()
    with contextlib.redirect_stdout(io.StringIO()), contextlib.redirect_stderr(err):
        try:
            code = main(args)
        except SystemExit as e:
            code = int(e.code or 0)
    return code, err.getvalue()


def _check(path: str, value, tmp_path) -> tuple[int, str]:
    blank = tmp_path / "blank.yaml"
    blank.write_text("name: blank\n")
    return _servesim(["check", str(blank), *(a for s in _sets(path, value) for a in ("--set", s))])


def _one_line_or_ok(path: str, value, code: int, err: str, names_it: bool = False) -> None:
    """Exit 0, or exit 2 with one line (``names_it``: naming the field, when the value alone is wrong)."""
    assert code in (0, 2), (path, value, code, err)
    if code == 2:
        assert err.startswith("error: ") and err.count("\n") == 1 and "Traceback" not in err, (path, value, err)
        assert not names_it or path.split(".")[-1] in err, (path, value, err)


def test_the_fields_are_enumerated_and_each_context_builds(tmp_path):
    """Over a hundred numeric fields, and each one's section and siblings make a scenario that
    builds with its default (or a small) value: the extremes below are tried where they mean something."""
    assert len(FIELDS) > 100 and "workload.arrival.rate" in FIELDS and "engine.swap_space_gb" in FIELDS
    for path in FIELDS:
        tried = (_check(path, v, tmp_path) for v in (1, 0.5, 64, 4096, 2**20))
        assert any(code == 0 for code, _ in tried), path


@pytest.mark.no_cover  # every field nine times over; the checks' lines are traced by the other tests here
def test_every_numeric_field_takes_every_extreme_value(tmp_path):
    """Each field, each of inf, -inf, nan, 1e308, -1e308, -0.0, +-10**30 and 2**63: one line or a
    scenario that builds; inf, -inf and nan are refused everywhere."""
    for path in FIELDS:
        for v in EXTREMES:
            code, err = _check(path, v, tmp_path)
            _one_line_or_ok(path, v, code, err, names_it=True)
            if isinstance(v, float) and not math.isfinite(v):
                assert code == 2, (path, v)


@settings(max_examples=200, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(
    path=st.sampled_from(FIELDS),
    value=st.one_of(
        st.floats(allow_nan=True, allow_infinity=True),
        st.integers(min_value=-(2**80), max_value=2**80),
        st.sampled_from(EXTREMES),
    ),
)
def test_any_number_in_any_field_is_one_line_or_a_scenario(tmp_path, path, value):
    """Any float (subnormals, the largest, the signed zeros) or integer in any numeric field."""
    code, err = _check(path, value, tmp_path)
    _one_line_or_ok(path, value, code, err)


@settings(max_examples=20, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(path=st.sampled_from(FIELDS), value=st.sampled_from([1e308, -0.0, 10**30, 2**53]))
def test_an_extreme_value_that_checks_runs(tmp_path, path, value):
    """Where ``servesim check`` takes an extreme value, a two-second run takes it too: results or
    one line (a run refused by the size guard, say), never a traceback."""
    code, _ = _check(path, value, tmp_path)
    if code != 0:
        return
    blank = tmp_path / "blank.yaml"
    args = ["run", str(blank), "--out", str(tmp_path / "out"), *(a for s in _sets(path, value) for a in ("--set", s))]
    code, err = _servesim(args)
    _one_line_or_ok(path, value, code, err)


def test_the_size_guard_takes_any_rate(tmp_path):
    """The issue's case: `rate: .inf` or `rate: 1e308` overflowed in the size guard. Now inf is not a
    number a field takes, and 1e308 requests/s are refused by the guard, naming the run's length."""
    code, err = _check("workload.arrival.rate", math.inf, tmp_path)
    assert code == 2 and "workload.arrival.rate must be a finite number (got inf)" in err, err
    code, err = _check("workload.arrival.rate", 1e308, tmp_path)
    assert code == 2 and "run.duration_s: up to 4.6e+18 requests" in err, err


def test_a_shared_prefix_longer_than_any_request_may_be_runs(tmp_path):
    """Found by the test above: a 2**53-token shared prefix (no request fits max_model_len, so each is
    sent as drawn and rejected when it reaches the engine) made the compiled engine size a block
    table for it (2 EiB); it now makes no row for a request the engine will reject."""
    code, err = _servesim(
        ["run", "collapse_c512", "--out", str(tmp_path / "out"), *(a for s in SHORT for a in ("--set", s)),
         "--set", f"workload.shared_prefix={{tokens: {2**53}, num_groups: 2}}", "--set", "run.host_band=false"]
    )  # fmt: skip
    assert code == 0, err
    assert (tmp_path / "out" / "summary.json").is_file()
