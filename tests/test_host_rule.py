"""The rule that gives a host's CPU factor from its probe reading (``hardware.host: {probe_us: X}``):
the least-squares line of log(factor) on log(reading) over the catalog's hosts that were read
(``tools/validation/fit_hosts.py``), by hand and as simulator/data/hosts.yaml holds it."""

from __future__ import annotations

import math

import pytest

from simulator.scenario.hosts import catalog, load_host
from tools.validation.fit_hosts import probe_rule


def test_the_rule_recovers_a_line_by_hand():
    # Three hosts exactly on scale = (probe / 2.5) ** 0.6: the fit gives that line back.
    points = [(p, (p / 2.5) ** 0.6) for p in (3.0, 4.0, 6.0)]
    ref, exponent = probe_rule(points)
    assert ref == pytest.approx(2.5, rel=1e-12) and exponent == pytest.approx(0.6, rel=1e-12)


def test_the_rule_of_scattered_hosts_by_hand():
    # log readings -1, 0, 1 (around e^0 = 1 us) with log factors 0, 0.1, 0.4: slope
    # sum(dx * dy) / sum(dx^2) = (-1 * -0.1667 + 1 * 0.2333) / 2 = 0.2, mean log factor 0.1667, so
    # log ref = 0 - 0.1667 / 0.2 = -0.8333.
    points = [(math.exp(-1), 1.0), (1.0, math.exp(0.1)), (math.e, math.exp(0.4))]
    ref, exponent = probe_rule(points)
    assert exponent == pytest.approx(0.2, rel=1e-12)
    assert math.log(ref) == pytest.approx(-(0.5 / 3) / 0.2, rel=1e-12)


def test_the_rule_refuses_too_few_hosts_or_factors_that_fall_with_the_reading():
    with pytest.raises(ValueError, match="at least 3"):
        probe_rule([(4.0, 1.0), (5.0, 1.2)])
    with pytest.raises(ValueError, match="do not rise"):
        probe_rule([(4.0, 1.2), (5.0, 1.1), (6.0, 1.0)])


def test_the_catalog_holds_the_line_fitted_over_its_own_hosts():
    """hosts.yaml's reference and exponent are the fit over the (probe_us, scale) pairs it lists: a
    host refitted or added without `fit_hosts.py --write` fails here."""
    cat = catalog()
    points = [(float(h["probe_us"]), float(h["scale"])) for h in cat.hosts.values() if h.get("probe_us")]
    ref, exponent = probe_rule(points)
    assert cat.reference_probe_us == pytest.approx(ref, abs=1e-4)
    assert cat.exponent == pytest.approx(exponent, abs=1e-4)


def test_a_reading_runs_at_the_rules_factor():
    cat = catalog()
    assert load_host({"probe_us": cat.reference_probe_us}).scale == pytest.approx(1.0)
    # A reading twice the reference's is 2 ** exponent slower, and a slower reading never a faster host.
    assert load_host({"probe_us": 2 * cat.reference_probe_us}).scale == pytest.approx(2**cat.exponent)
    scales = [load_host({"probe_us": p}).scale for p in (3.5, 4.0, 5.0, 8.0)]
    assert scales == sorted(scales) and scales[0] < scales[-1]


def test_a_probe_reading_comes_with_a_note_on_what_it_tells():
    """A scenario on a probe reading says that, on the machines recorded, a reading did no better than
    the catalog's median host (docs/hosts.md, --probe-check); a catalog host or none says nothing."""
    from simulator.outputs.notes import PROBE_NOTE, scenario_notes
    from simulator.scenario.config import scenario_from_dict

    def notes(host):
        return scenario_notes(scenario_from_dict({"hardware": {"host": host}}))

    assert any(PROBE_NOTE in n for n in notes({"probe_us": 4.0}))
    assert not any(PROBE_NOTE in n for n in notes(None) + notes(next(iter(catalog().hosts))))


def test_the_cpu_kinds_file_is_what_the_recordings_report():
    """simulator/data/host_cpus.yaml (what `servesim probe-host` compares a machine's CPU with) is
    what the recordings' probe reports give, read again from data/e2e/: a recording ingested without
    `fit_hosts.py --cpus` fails here. Each recording is one machine, so of one kind; the lscpu text a
    report keeps gives vendor, family and model."""
    from simulator.scenario.hosts import cpu_kinds
    from tools.validation.fit_hosts import HELD_OUT, recorded_cpu_kind, recording_cpus

    assert recording_cpus() == cpu_kinds()
    every = [r for roles in cpu_kinds().values() for names in roles.values() for r in names]
    assert len(every) == len(set(every)) and {"h100_cpu3_2026-12-06", "h100_cpu4_2026-12-06"} <= set(every)
    assert set(cpu_kinds()["GenuineIntel family 6 model 143"]["held_out"]) <= HELD_OUT
    text = "Vendor ID:                 GenuineIntel\nCPU family:                6\nModel:                     143\n"
    assert recorded_cpu_kind({"lscpu": text + "Model name:                Intel(R) Xeon(R) Processor\n"}) == (
        "GenuineIntel family 6 model 143"
    )
    assert recorded_cpu_kind({}) == ""
