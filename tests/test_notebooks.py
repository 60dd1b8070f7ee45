"""Every notebook in notebooks/ runs top to bottom in a fresh kernel and shows what it is for: its
tables with their rows and columns, its figures drawn, and numbers that a direct run of the same
scenario (or a direct computation) gives too. The notebooks assert their own claims besides."""

from __future__ import annotations

import base64
import io
import re
from html.parser import HTMLParser
from pathlib import Path

import pytest
from conftest import assert_png_drawn

from simulator.metrics import summarize
from simulator.run import simulate
from simulator.scenario.config import load_scenario

nbformat = pytest.importorskip("nbformat")
nbclient = pytest.importorskip("nbclient")

ROOT = Path(__file__).resolve().parents[1]
NOTEBOOKS = sorted((ROOT / "notebooks").glob("*.ipynb"))


class _Table(HTMLParser):
    """A pandas table's HTML as rows of (header cells, data cells), in order."""

    def __init__(self) -> None:
        super().__init__()
        self.rows: list[tuple[list[str], list[str]]] = []
        self._cell: list[str] | None = None

    def handle_starttag(self, tag, attrs) -> None:
        if tag == "tr":
            self.rows.append(([], []))
        elif tag in ("th", "td"):
            self._cell = []

    def handle_data(self, data) -> None:
        if self._cell is not None:
            self._cell.append(data)

    def handle_endtag(self, tag) -> None:
        if tag in ("th", "td") and self._cell is not None:
            self.rows[-1][0 if tag == "th" else 1].append("".join(self._cell).strip())
            self._cell = None


def _number(text: str) -> float:
    return float(text.replace(",", "").rstrip("%"))


class Executed:
    """A notebook run in a fresh kernel, read by what its cells show."""

    def __init__(self, path: Path, where: Path) -> None:
        nb = nbformat.read(path, as_version=4)
        nbclient.NotebookClient(
            nb, timeout=900, kernel_name="python3", resources={"metadata": {"path": str(where)}}
        ).execute()
        self.cells = [c for c in nb.cells if c.cell_type == "code"]
        assert all(c.execution_count for c in self.cells), "a cell did not run"
        errors = [o for c in self.cells for o in c.outputs if o.output_type == "error"]
        assert not errors, errors

    def cell(self, marker: str):
        """The one code cell whose source contains ``marker``."""
        (found,) = [c for c in self.cells if marker in c.source]
        return found

    def table(self, marker: str) -> list[tuple[list[str], list[str]]]:
        """The rows of the table the cell displays (its HTML, as the notebook shows it)."""
        (html,) = [o.data["text/html"] for o in self.cell(marker).outputs if "text/html" in o.get("data", {})]
        parser = _Table()
        parser.feed(html)
        return parser.rows

    def text(self, marker: str) -> str:
        return "".join(o.text for o in self.cell(marker).outputs if o.output_type == "stream")

    def figures(self, marker: str) -> int:
        """How many figures the cell shows; each must decode as a drawn PNG."""
        pngs = [o.data["image/png"] for o in self.cell(marker).outputs if "image/png" in o.get("data", {})]
        for png in pngs:
            assert_png_drawn(io.BytesIO(base64.b64decode(png)))
        return len(pngs)


def _column(rows, name: str) -> int:
    """The index among a row's data cells of the column ``name`` (the header row's cells start with
    a blank one per level of the index)."""
    header = rows[0][0]
    return header.index(name) - sum(not h for h in header)


def check_collapse(nb: Executed) -> None:
    rows = nb.table("table = pd.DataFrame")
    col = {name: _column(rows, name) for name in ("output_throughput", "num_preemptions")}
    body = {r[0][0]: r[1] for r in rows[1:] if r[0] and r[1]}
    assert set(body) == {"512", "1028", "1200"}
    assert nb.figures("fig, (a, b) = plt.subplots") == 1
    # The printed preemptions are the table's, and the table's 1,028-client run is what servesim run gives.
    shown = re.search(r"1200: ([\d,]+) preemptions", nb.text("above95 ="))
    assert shown and _number(shown.group(1)) == _number(body["1200"][col["num_preemptions"]])
    sc, _ = load_scenario(str(ROOT / "scenarios" / "collapse_c1028.yaml"), ["run.duration_s=300"])
    direct = summarize(simulate(sc))
    assert _number(body["1028"][col["output_throughput"]]) == pytest.approx(direct["output_throughput"], rel=1e-5)
    assert _number(body["1028"][col["num_preemptions"]]) == direct["num_preemptions"]


def check_collapse_conditions(nb: Executed) -> None:
    rows = nb.table("cases = {")
    body = {r[0][0]: r[1] for r in rows[1:] if r[0] and r[1]}
    assert len(body) == 8 and "chat-like, defaults" in body
    change = _column(rows, "throughput change")
    assert all(re.fullmatch(r"[+-]\d+\.\d%", cells[change]) for cells in body.values())
    assert nb.figures("Throughput change when the KV cache overflows") == 1
    # The deepest loss the notebook prints is the table's.
    deepest = re.search(r"first-chunk gate: ([+-][\d.]+%)", nb.text("deepest ="))
    assert deepest and deepest.group(1) == body["long prompts, caching off, budget 1024, first-chunk gate"][change]
    field = nb.table("FIELD = {")
    tput, pre = _column(field, "output tok/s"), _column(field, "preemptions")
    case, got = None, {}
    for heads, cells in field[1:]:
        if cells:
            case = heads[0] if len(heads) == 2 else case
            got[(case, heads[-1])] = (_number(cells[tput]), _number(cells[pre]))
    assert len(got) == 6
    assert nb.figures("PR #37307's production case") == 1
    # PR #21793's two runs are what servesim run gives for its scenario.
    for gate in ("first_chunk", "full_prompt"):
        sc, _ = load_scenario(str(ROOT / "scenarios" / "field_pr21793.yaml"), [f"engine.admission={gate}"])
        s = summarize(simulate(sc))
        assert got[("PR #21793", gate)] == (pytest.approx(s["output_throughput"], abs=0.05), s["num_preemptions"])


def check_roofline(nb: Executed) -> None:
    from simulator.engine.cost import CostModel, Efficiency, decode_work
    from simulator.scenario.hardware import load_gpu
    from simulator.scenario.models import load_model

    rows = nb.table("def point(")
    intensity = _column(rows, "intensity")
    kind, batch, new = _column(rows, "kind"), _column(rows, "batch"), _column(rows, "new_tokens")
    shown = {(r[1][kind], int(r[1][batch]), int(r[1][new])): _number(r[1][intensity]) for r in rows[1:] if r[1]}
    assert len(shown) == 9 and nb.figures("ax.loglog") == 1
    # Decode at batch 1 over a 1,024-token context, computed here from the ideal cost model.
    ideal = CostModel(
        load_model("llama-3.1-8b"),
        load_gpu("h100-sxm"),
        1,
        Efficiency(
            matmul_compute=1,
            matmul_memory=1,
            attn_compute=1,
            attn_memory=1,
            step_overhead_s=0,
            per_seq_overhead_s=0,
            per_layer_overhead_s=0,
        ),
    )
    ops = ideal.ops(decode_work(1, 1024, 1))
    assert shown[("decode", 1, 1)] == pytest.approx(sum(o.flops for o in ops) / sum(o.bytes for o in ops), rel=1e-5)
    assert re.search(r"ridge \d+ FLOP/B", nb.text("ridge = peak / bw"))


def check_tuning_max_num_seqs(nb: Executed) -> None:
    rows = nb.table('pd.read_csv(out / "sweep.csv")')
    seqs, tput = _column(rows, "param:engine.max_num_seqs"), _column(rows, "output_throughput")
    body = {int(r[1][seqs]): _number(r[1][tput]) for r in rows[1:] if r[1]}
    assert sorted(body) == [256, 512, 768, 1024, 1100, 1200]
    assert nb.figures("display(Image(") == 2  # the sweep's metrics and its KV usage
    # The recommendation printed names a swept value, with the table's throughput for it.
    rec = re.search(r"recommended: engine.max_num_seqs=(\d+): .*?([\d,]+) tok/s", nb.text("run_sweep("))
    assert rec and _number(rec.group(2)) == round(body[int(rec.group(1))])


CHECKS = {
    "collapse": check_collapse,
    "collapse_conditions": check_collapse_conditions,
    "roofline": check_roofline,
    "tuning_max_num_seqs": check_tuning_max_num_seqs,
}


def test_every_notebook_is_checked():
    """A new notebook comes with its checks."""
    assert {p.stem for p in NOTEBOOKS} == set(CHECKS)


def _checkout_beside(tmp_path: Path) -> Path:
    """A folder that reads as the checkout (its top-level entries linked) but has docs/img of its
    own: what a notebook saves for the docs lands there, not in the working tree."""
    for entry in ROOT.iterdir():
        if entry.name not in ("docs", ".git"):
            (tmp_path / entry.name).symlink_to(entry)
    (tmp_path / "docs" / "img").mkdir(parents=True)
    (tmp_path / "notebooks_run").mkdir()
    return tmp_path / "notebooks_run"


@pytest.mark.parametrize("path", NOTEBOOKS, ids=[p.stem for p in NOTEBOOKS])
def test_notebook_runs_and_shows_its_results(path, tmp_path):
    """The notebook runs without an error in a fresh kernel, and its tables, figures and numbers are
    what it claims and what a direct run gives."""
    CHECKS[path.stem](Executed(path, _checkout_beside(tmp_path)))
