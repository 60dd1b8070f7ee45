"""The documentation that is generated from code stays in step with it."""

from __future__ import annotations

import contextlib
import io
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
    """README.md stays under 16 KB, and every relative link in it and in docs/ points at a file
    that exists."""
    import re

    assert (ROOT / "README.md").stat().st_size < 16 * 1024
    for page in [ROOT / "README.md", *(ROOT / "docs").glob("*.md")]:
        for target in re.findall(r"\]\(([^)#:]+)(?:#[^)]*)?\)", page.read_text()):
            assert (page.parent / target).exists(), f"{page.name}: broken link {target}"


def test_readme_quick_start_commands_are_the_ci_commands():
    """The README's test command is what .ci/run runs."""
    readme = (ROOT / "README.md").read_text()
    ci = (ROOT / ".ci" / "run").read_text()
    assert 'pip install -e ".[test,ray,search]"' in readme and 'pip install -q -e ".[test,ray,search]"' in ci
    assert "python -m pytest" in readme and "python -m pytest" in ci
