"""The documentation that is generated from code stays in step with it."""

from __future__ import annotations

import contextlib
import io
import re
from pathlib import Path

from simulator.cli import main

ROOT = Path(__file__).resolve().parents[1]


def test_scenario_reference_is_current():
    """docs/scenario-reference.md lists exactly what `servesim fields --markdown` prints."""
    buf = io.StringIO()
    with contextlib.redirect_stdout(buf):
        main(["fields", "--markdown"])
    doc = (ROOT / "docs" / "scenario-reference.md").read_text()
    assert buf.getvalue().strip() in doc, (
        "docs/scenario-reference.md: regenerate the table with: servesim fields --markdown"
    )


def test_readme_is_the_newcomers_page_and_its_links_resolve():
    """README.md stays under 16 kB (16,000 bytes), and every relative link in it and in docs/ points at a file
    that exists."""
    import re

    assert (ROOT / "README.md").stat().st_size < 16_000
    for page in [ROOT / "README.md", *(ROOT / "docs").glob("*.md")]:
        for target in re.findall(r"\]\(([^)#:]+)(?:#[^)]*)?\)", page.read_text()):
            assert (page.parent / target).exists(), f"{page.name}: broken link {target}"


def test_readme_quick_start_commands_are_the_ci_commands():
    """The README's test command is what .ci/run runs: the same extras installed (CI holds them to
    the numba and numpy its engine build started with), the same pytest."""
    readme = (ROOT / "README.md").read_text()
    ci = (ROOT / ".ci" / "run").read_text()
    assert 'pip install -e ".[test,ray,search]"' in readme
    assert re.search(r'^pip install -q (-c \S+ )?-e "\.\[test,ray,search\]"$', ci, re.M), (
        "CI installs the README's extras"
    )
    assert "python -m pytest" in readme and "python -m pytest" in ci


def test_validation_page_is_for_users():
    """docs/validation.md stays a page a user reads in one sitting (at most 25 KB): what is checked,
    how close, how to rerun; every run's figures are in docs/validation-runs.md and the history of the
    recordings beside their data, in data/e2e/README.md."""
    assert (ROOT / "docs" / "validation.md").stat().st_size <= 25 * 1024


def _headings(page: Path) -> list[str]:
    return [line.lstrip("#").strip() for line in page.read_text().splitlines() if line.startswith("#")]


def _slug(heading: str) -> str:
    """The anchor GitHub gives a heading."""
    import re

    return re.sub(r"[^\w\- ]", "", heading.lower()).replace(" ", "-")


def _sources() -> list[Path]:
    """The files that point readers at sections of the docs: the package, the tools, the tests and
    every page."""
    import os

    pages = [ROOT / "README.md", *(ROOT / "docs").glob("*.md"), *(ROOT / "data").rglob("*.md")]
    code = []
    for unit in ("simulator", "workloads", "tools", "tests", "benchmarks"):
        for folder, dirs, files in os.walk(ROOT / unit):
            dirs[:] = [d for d in dirs if not d.startswith(".")]  # a tool's own virtual environment
            code += [Path(folder) / f for f in files if f.endswith(".py")]
    return pages + code


def _flat(text: str) -> str:
    """The text on one line, comment markers dropped, so a reference wrapped over lines reads whole."""
    import re

    lines = (re.sub(r"^\s*(#\s?)?", "", line) for line in text.splitlines())
    return re.sub(r"\s+", " ", " ".join(lines))


def test_section_references_resolve():
    """A reference to a section of a page, written `docs/validation.md, "Overload"` (or
    `("Overload")`, or `... "A" and "B"`), names a heading of that page (the heading may go on after
    the quoted words); a link to `page.md#anchor` names one of its headings' anchors."""
    import re

    ref = re.compile(r'((?:[\w.-]+/ ?)*[\w.-]+\.md)\)?,? \(?"([^"]+)"(?: and "([^"]+)")?')
    link = re.compile(r"\]\(([^)#:\s]+\.md)#([^)\s]+)\)")
    bad = []
    for src in _sources():
        text = src.read_text()
        for target, *titles in ref.findall(_flat(text)):
            page = next((p for p in (ROOT / target.replace(" ", ""), src.parent / target) if p.is_file()), None)
            if page is None:
                continue  # a bare README.md and the like: not a page this check can place
            heads = [" ".join(h.split()).casefold() for h in _headings(page)]
            for title in filter(None, titles):
                if not any(h.startswith(title.casefold()) for h in heads):
                    bad.append(f'{src.relative_to(ROOT)}: {target}, "{title}"')
        if src.suffix == ".md":
            for target, anchor in link.findall(text):
                if anchor not in {_slug(h) for h in _headings(src.parent / target)}:
                    bad.append(f"{src.relative_to(ROOT)}: {target}#{anchor}")
    assert not bad, f"references to sections that do not exist: {bad}"


def test_generated_blocks_have_their_generator():
    """Every generated block of a page (between `<!-- results:NAME -->` and its closing marker) is
    closed and is one that tools/docs/regenerate.py writes, so rerunning it refreshes every table."""
    import importlib.util
    import re

    spec = importlib.util.spec_from_file_location("regenerate", ROOT / "tools" / "docs" / "regenerate.py")
    assert spec and spec.loader
    regenerate = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(regenerate)
    seen = set()
    for page in regenerate.PAGES:
        text = page.read_text()
        for name in re.findall(r"<!-- results:(\w+) -->", text):
            assert f"<!-- /results:{name} -->" in text, f"{page.name}: block {name} is not closed"
            assert name in regenerate.BLOCKS, f"{page.name}: no generator for block {name}"
            seen.add(name)
    assert {"validation", "validation_report", "recorded_runs", "public_runs"} <= seen
