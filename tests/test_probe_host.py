"""``servesim probe-host``: its reading, its per-CPU pass, and what it tells a user of a machine whose
CPUs do not read alike."""

from __future__ import annotations

import argparse
import json
import os

import pytest

from simulator.commands import probe_host as P


def _run(monkeypatch, capsys, timings, cpus, as_json=False):
    monkeypatch.setattr(P, "timings", lambda repeat: list(timings))
    monkeypatch.setattr(P, "per_cpu", lambda: dict(cpus))
    monkeypatch.setattr(os, "getloadavg", lambda: (0.1, 0.1, 0.1))
    assert P.main(argparse.Namespace(repeat=len(timings), json=as_json)) == 0
    return capsys.readouterr().out


def test_the_reading_is_the_median_and_the_json_keeps_every_cpu(monkeypatch, capsys):
    out = _run(monkeypatch, capsys, [4.0, 4.4, 4.2], {0: 4.1, 3: 4.3}, as_json=True)
    report = json.loads(out)
    assert report["probe_us"] == 4.2
    assert report["per_cpu_us"] == {"0": 4.1, "3": 4.3}


def test_cpus_that_read_apart_are_named_with_their_range(monkeypatch, capsys):
    """An H200 cloud host's vCPUs read 4.3-8.9 us one after another (data/e2e/host_probe_noise_2026-11-29)."""
    out = _run(monkeypatch, capsys, [4.4, 4.5, 4.6], {0: 4.3, 1: 8.9, 2: 4.5})
    assert out.startswith("probe_us 4.50 ")
    assert "note: its CPUs read 4.30-8.90 us one after another" in out and "host band" in out
    calm = _run(monkeypatch, capsys, [4.4, 4.5, 4.6], {0: 4.3, 1: 4.6, 2: 4.5})
    assert "its CPUs read" not in calm and "note" not in calm


@pytest.mark.skipif(not hasattr(os, "sched_setaffinity"), reason="pinning is Linux's")
def test_the_per_cpu_pass_reads_each_allowed_cpu_and_gives_the_process_back_its_cpus(monkeypatch):
    monkeypatch.setattr(P, "kernel", lambda: 5.0)
    before = os.sched_getaffinity(0)
    got = P.per_cpu()
    if len(before) <= P.CPU_PASS:
        assert set(got) == before
    else:
        assert len(got) == P.CPU_PASS and set(got) <= before
    assert all(v == 5.0 for v in got.values())
    assert os.sched_getaffinity(0) == before
