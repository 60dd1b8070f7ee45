"""The test harness itself (tests/conftest.py): what coverage cannot keep is not traced, so the
README's test command does not pay for it."""

from __future__ import annotations

import multiprocessing
import sys

import pytest


def _traced() -> bool:
    return sys.gettrace() is not None


@pytest.mark.no_cover
def test_a_no_cover_test_runs_untraced_in_a_worker_too():
    """pytest-cov pauses a ``no_cover`` test only in a plain run; under ``-n`` the harness does."""
    assert not _traced()


def test_a_forked_process_runs_untraced():
    """Coverage never saves what a forked child records: the child does not trace at all."""
    with multiprocessing.get_context("fork").Pool(1) as pool:
        assert pool.apply(_traced) is False
