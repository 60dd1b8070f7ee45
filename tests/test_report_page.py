"""``servesim report``: one self-contained HTML page, opened in a real headless browser (Debian's
chromium driven by Selenium through chromium-driver) with the network off."""

from __future__ import annotations

import os
import re
import shutil
from pathlib import Path

import pytest

from simulator.cli import main

ROOT = Path(__file__).resolve().parents[1]
FLEET = [
    "--set",
    "run.duration_s=240",
    "--set",
    "run.warmup_s=0",
    "--set",
    "workload.arrival={type: time_varying, interpolation: linear, schedule: {0: 4, 100: 50, 240: 50}}",
    "--set",
    "cluster={replicas: 1, autoscaler: {target: 16, max_replicas: 4, cold_start_s: 30, interval_s: 10}}",
    "--set",
    "slo={p99_ttft_ms: 500}",
]


@pytest.fixture(scope="module")
def pages(tmp_path_factory):
    """Pages of an autoscaled fleet's run and of a sweep."""
    d = tmp_path_factory.mktemp("report")
    assert main(["run", str(ROOT / "scenarios" / "workload_diurnal_ramp.yaml"), "--out", str(d / "fleet"), *FLEET]) == 0
    assert main(["report", str(d / "fleet")]) == 0
    short = ["--set", "run.duration_s=20", "--set", "run.warmup_s=0"]
    sweep = ["sweep", "--param", "engine.max_num_seqs=256,512", *short, "--band", "--out", str(d / "sw"), "--jobs", "1"]
    assert main(sweep) == 0
    assert main(["report", str(d / "sw"), "-o", str(d / "sweep.html")]) == 0
    return {"fleet": d / "fleet" / "report.html", "sweep": d / "sweep.html"}


def test_pages_hold_everything_they_show(pages):
    fleet = pages["fleet"].read_text()
    # Nothing fetched from elsewhere: no script, no stylesheet or image by address.
    assert not re.search(r"""(src|href)=["'](https?:)?//""", fleet)
    assert "<script" not in fleet
    assert fleet.count("data:image/png;base64,") == 3  # fleet.png, kv_cache_usage.png, throughput.png
    assert fleet.count("<svg") == 1  # the latency distributions
    assert "GPU-hours" in fleet and "requests within the SLO" in fleet and "scale-ups" in fleet
    sweep = pages["sweep"].read_text()
    assert '<div class="rec"><b>Recommendation</b><p>Recommended: engine.max_num_seqs=' in sweep
    # the recommendation's band across hosts, and each point's (``--band``) in the table
    assert "<p>Across hosts: engine.max_num_seqs=" in sweep and "band tok/s low" in sweep
    assert sweep.count("data:image/png;base64,") == 3


def test_report_of_a_folder_without_results_says_so(tmp_path, capsys):
    assert main(["report", str(tmp_path)]) == 2
    assert "holds no run, fleet, sweep or plan" in capsys.readouterr().err
    assert main(["report", str(tmp_path / "missing")]) == 2


def _browser():
    chromium = shutil.which("chromium") or shutil.which("chromium-browser")
    driver = shutil.which("chromedriver")
    if not (chromium and driver):
        if os.environ.get("SERVESIM_REQUIRE_BROWSER"):
            pytest.fail("SERVESIM_REQUIRE_BROWSER is set but chromium / chromedriver are not installed")
        pytest.skip("needs Debian's chromium and chromium-driver")
    webdriver = pytest.importorskip("selenium.webdriver")
    opts = webdriver.ChromeOptions()
    opts.binary_location = chromium
    for a in ("--headless=new", "--no-sandbox", "--disable-gpu", "--disable-dev-shm-usage"):
        opts.add_argument(a)
    opts.set_capability("goog:loggingPrefs", {"browser": "ALL"})
    return webdriver.Chrome(service=webdriver.ChromeService(executable_path=driver), options=opts)


@pytest.mark.parametrize("which", ["fleet", "sweep"])
def test_the_page_loads_offline_without_errors_and_draws_its_charts(pages, which):
    b = _browser()
    try:
        b.execute_cdp_cmd("Network.enable", {})
        b.execute_cdp_cmd(
            "Network.emulateNetworkConditions",
            {"offline": True, "latency": 0, "downloadThroughput": -1, "uploadThroughput": -1},
        )
        b.get(pages[which].as_uri())
        images = b.execute_script(
            "return Array.from(document.images).map(i => [i.complete, i.naturalWidth, i.getBoundingClientRect().width])"
        )
        assert images and all(done and w > 100 and shown > 100 for done, w, shown in images), images
        if which == "fleet":
            svg = b.execute_script(
                "const s = document.querySelector('svg'); const r = s.getBoundingClientRect();"
                "return [r.width, r.height, s.querySelectorAll('path').length]"
            )
            assert svg[0] > 300 and svg[1] > 100 and svg[2] > 10, svg
        errors = [e for e in b.get_log("browser") if e["level"] in ("SEVERE", "ERROR")]
        assert not errors, errors
        assert b.title.startswith("servesim:")
    finally:
        b.quit()


def test_a_damaged_folder_is_one_line(tmp_path, capsys):
    (tmp_path / "summary.json").write_text("{broken")
    assert main(["report", str(tmp_path)]) == 2
    err = capsys.readouterr().err.strip()
    assert err.startswith("error: report:") and "summary.json is not valid JSON" in err and "\n" not in err
    (tmp_path / "summary.json").write_text('{"scenario": "x", "model": "m", "gpu": "g"}')
    (tmp_path / "requests.csv").write_text("id,status\n0,finished\n")
    assert main(["report", str(tmp_path)]) == 2
    assert "requests.csv cannot be read" in capsys.readouterr().err


def test_the_page_and_its_plots_show_one_window(tmp_path):
    """A run with a warm-up: the latency plots count the requests the table counts (those measured,
    after the warm-up) and mark the table's percentiles, written as the table writes them."""
    import json

    short = ["--set", "run.duration_s=60", "--set", "run.warmup_s=20"]
    assert main(["run", *short, "--out", str(tmp_path / "r")]) == 0
    assert main(["report", str(tmp_path / "r")]) == 0
    page = (tmp_path / "r" / "report.html").read_text()
    s = json.loads((tmp_path / "r" / "summary.json").read_text())
    assert f"<td>requests finished</td><td>{s['num_completed']:,}</td>" in page
    assert f"The {s['num_completed']:,} requests measured (arrived after the warm-up, finished)" in page
    assert f"p50 {s['median_ttft_ms']:,.0f} ms" in page and f"p99 {s['p99_ttft_ms']:,.0f} ms" in page
    assert f"p50 {s['median_tpot_ms']:,.1f} ms" in page and f"p99 {s['p99_tpot_ms']:,.1f} ms" in page


def test_shares_are_written_one_way_and_never_round_to_all_or_nothing():
    """A share within an SLO reads the same in a table and a plot, and 99.995% is never '100.00%'."""
    from simulator.outputs.figures import share
    from simulator.planning.plan_day import _table

    assert share(0.99995, 2) == "99.995%" and share(1.0, 2) == "100.00%" and share(0.5) == "50.0%"
    assert share(0.00004) == "0.004%" and share(0.0) == "0.0%" and share(None) == "-"
    row = {"policy": "static", "replicas": "6", "gpu_hours": 144.0, "cost_usd": 113.76}
    row |= {"slo_attainment": 0.99995, "p99_ttft_ms": 83.0}
    assert "99.995%" in _table([row]) and "100.00%" not in _table([row])
