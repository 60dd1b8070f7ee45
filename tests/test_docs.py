"""The documentation that is generated from code stays in step with it."""

from __future__ import annotations

import contextlib
import io
from pathlib import Path

from simulator.cli import main

ROOT = Path(__file__).resolve().parents[1]


def test_scenario_reference_is_current():
    """docs/scenario-reference.md and the README list exactly what `servesim fields --markdown` prints."""
    buf = io.StringIO()
    with contextlib.redirect_stdout(buf):
        main(["fields", "--markdown"])
    for name in ("docs/scenario-reference.md", "README.md"):
        doc = (ROOT / name).read_text()
        assert buf.getvalue().strip() in doc, f"{name}: regenerate the table with: servesim fields --markdown"


def test_readme_quick_start_commands_are_the_ci_commands():
    """The README's test command is what .ci/run runs."""
    readme = (ROOT / "README.md").read_text()
    ci = (ROOT / ".ci" / "run").read_text()
    assert 'pip install -e ".[test,ray,search]"' in readme and 'pip install -q -e ".[test,ray,search]"' in ci
    assert "python -m pytest" in readme and "python -m pytest" in ci
