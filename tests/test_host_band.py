"""The band a scenario without a host reports (``simulator.run.HostBand``): the spread across the
catalog's hosts, widened by servesim's own error given the host (``simulator/data/band_margin.yaml``),
by hand, in a run's summary, and as its fit gives it."""

from __future__ import annotations

import importlib.util
import json
import math
import sys
from pathlib import Path

import pytest
from conftest import line_of

from simulator import run as R
from simulator.cli import main
from simulator.scenario.hosts import band_hosts
from simulator.scenario.yamlio import load

ROOT = Path(__file__).resolve().parents[1]
SHORT = ["--set", "run.duration_s=20", "--set", "run.warmup_s=5", "--set", "workload.arrival.concurrency=64"]


def test_the_band_widens_the_spread_across_hosts_by_the_margin_by_hand(monkeypatch):
    """A margin of ln 1.25 puts 100-200 tok/s at 80-250; a metric without a margin keeps the hosts' range."""
    monkeypatch.setattr(R, "band_margin", lambda: {"output_throughput": math.log(1.25)})
    b = R.widen({"output_throughput": [100.0, 200.0], "p99_tpot_ms": [5.0, 6.0]})
    assert b["output_throughput"] == pytest.approx([80.0, 250.0])
    assert b["p99_tpot_ms"] == [5.0, 6.0]
    assert b["on_hosts"] == {"output_throughput": [100.0, 200.0], "p99_tpot_ms": [5.0, 6.0]}
    assert b["margin"] == {"output_throughput": 0.25}


def test_a_run_without_a_host_reports_a_band_around_its_own_figures(tmp_path, capsys):
    """The run's own figures (the median host) lie inside the hosts' spread, which lies inside the
    band by the file's margins; the summary line says what the band spans; a run on a named host
    gets its own figures widened by the margins alone (servesim's own error given the host), and says
    so."""
    assert main(["run", "collapse_c512", *SHORT, "--out", str(tmp_path / "a")]) == 0
    out = capsys.readouterr().out
    s = json.loads((tmp_path / "a" / "summary.json").read_text())
    b, margin = s["host_band"], R.band_margin()
    assert set(margin) == {"output_throughput", "median_tpot_ms", "median_ttft_ms"}
    assert b["hosts"] == [h.name for h in band_hosts()]
    for m in R.BAND_METRICS:
        lo, hi = b["on_hosts"][m]
        assert lo <= s[m] <= hi
        k = margin.get(m, 0.0)
        assert b[m] == pytest.approx([lo * math.exp(-k), hi * math.exp(k)])
    assert b["margin"] == {m: round(math.expm1(k), 4) for m, k in margin.items()}
    lo, hi = b["output_throughput"]
    assert f"across the catalog's hosts and servesim's own error: out tok/s {lo:,.0f}-{hi:,.0f}" in out
    assert b["named"] is False
    host = band_hosts()[1].name
    for i, (given, label) in enumerate(((host, host), ("{probe_us: 4.6}", "probe 4.6 us"))):
        assert (
            main(["run", "collapse_c512", *SHORT, "--set", f"hardware.host={given}", "--out", str(tmp_path / f"n{i}")])
            == 0
        )
        out = capsys.readouterr().out
        s = json.loads((tmp_path / f"n{i}" / "summary.json").read_text())
        b = s["host_band"]
        assert b["named"] is True and b["hosts"] == [label]
        for m in R.BAND_METRICS:
            assert b["on_hosts"][m] == [s[m], s[m]]
            k = margin.get(m, 0.0)
            assert b[m] == pytest.approx([s[m] * math.exp(-k), s[m] * math.exp(k)])
        lo, hi = b["output_throughput"]
        assert f"on {label} and servesim's own error given the host: out tok/s {lo:,.0f}-{hi:,.0f}" in out
        assert "in 80% of runs" in out
    off = ["--set", f"hardware.host={host}", "--set", "run.host_band=false", "--out", str(tmp_path / "off")]
    assert main(["run", "collapse_c512", *SHORT, *off]) == 0
    assert "host_band" not in json.loads((tmp_path / "off" / "summary.json").read_text())


def test_the_margins_are_what_their_fit_on_the_calibration_runs_gives():
    """simulator/data/band_margin.yaml is the fit's output for the model as it stands: a change that
    moves servesim's error on the calibration runs calls for
    `python tools/validation/band_coverage.py --fit --write`."""
    path = ROOT / "tools" / "validation" / "band_coverage.py"
    spec = importlib.util.spec_from_file_location("band_coverage", path)
    assert spec is not None and spec.loader is not None
    mod = importlib.util.module_from_spec(spec)
    sys.modules["band_coverage"] = mod
    spec.loader.exec_module(mod)
    margin, n = mod.fit_margins(jobs=1, say=lambda _: None)
    data = load(R.MARGIN_FILE.read_text())
    assert data["margin"] == margin and data["runs"] == n >= 15
    assert all(0.0 < v < 1.0 for v in margin.values())


def test_a_sweep_with_band_gives_every_point_its_band_and_shades_it(tmp_path, capsys):
    """``servesim sweep --band``: every point's figures lie inside its band in sweep.csv, which is each
    point's own run's ``host_band`` (as ``servesim run`` gives the same scenario); the recommendation's
    band is its point's; points reused from a sweep without it are run again, once; on a named host
    every point's band is its own figures widened by the margins, which a point reused from a sweep
    without it gets without running again."""
    import pandas as pd

    sweep = ["sweep", "collapse_c512", *SHORT, "--param", "engine.max_num_seqs=32,64", "--jobs", "1"]
    out = tmp_path / "s"
    assert main([*sweep, "--out", str(out)]) == 0
    assert not any(c.startswith("band.") for c in pd.read_csv(out / "sweep.csv").columns)
    capsys.readouterr()
    assert main([*sweep, "--band", "--out", str(out)]) == 0
    assert capsys.readouterr().out.count("recomputed, run without its band across hosts") == 2
    df = pd.read_csv(out / "sweep.csv")
    rec = json.loads((out / "recommendation.json").read_text())
    for _, row in df.iterrows():
        s = json.loads(
            (out / "points" / f"max_num_seqs={row['param:engine.max_num_seqs']}" / "summary.json").read_text()
        )
        for m in R.BAND_METRICS:
            assert row[f"band.{m}.lo"] == pytest.approx(s["host_band"][m][0])
            assert row[f"band.{m}.lo"] <= row[m] <= row[f"band.{m}.hi"]
        if rec["best_no_preemption"]["param:engine.max_num_seqs"] == row["param:engine.max_num_seqs"]:
            assert rec["host_band"] == s["host_band"]
    one = tmp_path / "one"
    assert main(["run", "collapse_c512", *SHORT, "--set", "engine.max_num_seqs=64", "--out", str(one)]) == 0
    alone = json.loads((one / "summary.json").read_text())["host_band"]
    assert df[df["param:engine.max_num_seqs"] == 64]["band.output_throughput.hi"].item() == pytest.approx(
        alone["output_throughput"][1]
    )
    capsys.readouterr()
    assert main([*sweep, "--band", "--out", str(out)]) == 0  # now every point is reused as it is
    assert "recomputed" not in capsys.readouterr().out
    host = band_hosts()[1].name
    named = tmp_path / "named"
    assert main([*sweep, "--set", f"hardware.host={host}", "--out", str(named)]) == 0
    assert not any(c.startswith("band.") for c in pd.read_csv(named / "sweep.csv").columns)
    rec = json.loads((named / "recommendation.json").read_text())
    assert rec["host_band"]["named"] is True and rec["host_band"]["hosts"] == [host]  # the pick's, all the same
    assert capsys.readouterr().out.count(f"on {host} and servesim's own error given the host") == 1
    assert main([*sweep, "--band", "--set", f"hardware.host={host}", "--out", str(named)]) == 0
    assert "recomputed" not in capsys.readouterr().out
    df = pd.read_csv(named / "sweep.csv")
    k = R.band_margin()["output_throughput"]
    assert list(df["band.output_throughput.lo"]) == pytest.approx(list(df["output_throughput"] * math.exp(-k)))
    assert list(df["band.p99_tpot_ms.hi"]) == pytest.approx(list(df["p99_tpot_ms"]))  # no margin: the figure


def test_a_sweep_with_band_names_the_setting_whose_slo_holds_on_every_host(tmp_path, capsys, monkeypatch):
    """Where the SLO's pick (the most goodput on the median host) misses its p99 TPOT target on the
    slowest catalog host, ``sweep --band`` names the point with the most goodput among those that
    meet the target on every host, marks it on the plot, and says when none does; without ``--band``
    it says how to find it; where the pick holds on the slowest host there is nothing to add. The
    targets are set between the figures of a first sweep, read from its sweep.csv."""
    import matplotlib.figure
    import pandas as pd

    figures: list = []  # the figures given a legend (the per-knob plot's is the last)
    real_legend = matplotlib.figure.Figure.legend

    def legend(self, *a, **k):
        figures.append(self)
        return real_legend(self, *a, **k)

    monkeypatch.setattr(matplotlib.figure.Figure, "legend", legend)
    sweep = ["sweep", "collapse_c512", *SHORT, "--param", "engine.max_num_seqs=16,64", "--jobs", "1"]
    first = tmp_path / "first"
    assert main([*sweep, "--band", "--out", str(first)]) == 0
    df = pd.read_csv(first / "sweep.csv").set_index("param:engine.max_num_seqs")
    busy, calm = df["output_throughput"].idxmax(), df["output_throughput"].idxmin()
    # the busier point's p99 TPOT on the median host below its slowest host's, the calmer's below both
    assert df.loc[calm, "band.p99_tpot_ms.hi"] < df.loc[busy, "p99_tpot_ms"] < df.loc[busy, "band.p99_tpot_ms.hi"]
    between = (df.loc[busy, "p99_tpot_ms"] + df.loc[busy, "band.p99_tpot_ms.hi"]) / 2

    def swept(target: float, *more: str) -> tuple[dict, str]:
        out = tmp_path / f"slo{target:g}{''.join(more)}"
        capsys.readouterr()
        assert main([*sweep, *more, "--set", f"slo.p99_tpot_ms={target}", "--out", str(out)]) == 0
        return json.loads((out / "recommendation.json").read_text()), capsys.readouterr().out

    rec, printed = swept(between, "--band")
    assert rec["best_goodput"] == {"param:engine.max_num_seqs": int(busy)}
    assert rec["best_every_host"] == {"param:engine.max_num_seqs": int(calm)}
    assert f"misses the {between:g} ms target: it holds only on a faster host" in rec["text_hosts"]
    line = f"within the SLO on every host: engine.max_num_seqs={calm}, the most goodput of the points"
    assert line in printed and rec["text_every_host"] in printed
    assert f"p99 TPOT at most {df.loc[calm, 'band.p99_tpot_ms.hi']:,.0f} ms" in rec["text_every_host"]
    panels = figures[-1].axes[:4]  # marked on every panel of the per-knob plot, each keeping its own label
    for ax in panels:
        assert list(line_of(ax, "within the SLO on every host").get_xdata()) == [calm]
    assert [ax.get_ylabel() for ax in panels][1:] == ["p99 TTFT (ms)", "p99 TPOT (ms)", "preemptions in the window"]

    rec, printed = swept(between)  # no band for the other points: how to find it
    assert "best_every_host" not in rec and "within the SLO on every host" not in printed
    assert "--band runs every point on each host and names the setting that holds on all of them" in rec["text_hosts"]

    rec, printed = swept(df["band.p99_tpot_ms.hi"].min() * 0.99, "--band")  # no point holds on the slowest host
    assert "best_every_host" not in rec
    assert "within the SLO on every host: no point swept meets the targets on the slowest catalog host" in printed

    rec, printed = swept(df["band.p99_tpot_ms.hi"].max() * 2, "--band")  # the pick holds everywhere: nothing to add
    assert "best_every_host" not in rec and "text_every_host" not in rec
    assert "holds on the slowest host too" in rec["text_hosts"]
