"""The catalogue of broken inputs in tests/bad_inputs/: each gives its expected one-line error, exit 2, no traceback."""

from __future__ import annotations

import contextlib
import io
from pathlib import Path

import pytest

from simulator.cli import main

CASES = sorted((Path(__file__).parent / "bad_inputs").glob("*.*"))


def expected(path: Path) -> str:
    first = path.read_text().splitlines()[0]
    assert first.startswith("# expect: "), f"{path.name}: first line must be '# expect: <error>'"
    return first[len("# expect: ") :]


def test_catalogue_is_large_enough():
    """At least 25 broken inputs are checked."""
    assert len(CASES) >= 25


@pytest.mark.parametrize("path", CASES, ids=[p.name for p in CASES])
def test_bad_input_gives_its_error_line(path):
    """`servesim check FILE` exits 2 with the expected single error line on stderr."""
    err = io.StringIO()
    with contextlib.redirect_stderr(err), contextlib.redirect_stdout(io.StringIO()):
        code = main(["check", str(path)])
    text = err.getvalue().strip()
    assert code == 2, text
    assert "\n" not in text and "Traceback" not in text
    want = expected(path)
    assert text.startswith("error: ")
    msg = text[len("error: ") :]
    assert msg == want or msg == f"{path}: {want}" or msg.startswith(want) or msg.startswith(f"{path}: {want}"), msg
