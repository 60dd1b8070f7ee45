"""Layers point one way: the workload generator depends on nothing above it.

``workloads`` may use only the simulator's leaf modules (errors, the field system, the exact-time
SimPy event), which themselves import nothing else of the project; every other dependency goes
from ``simulator`` to ``workloads``. Imports inside functions count too: a function-level import
that only dodges a cycle is still a cycle.
"""

from __future__ import annotations

import ast
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
LEAVES = {"simulator.errors", "simulator.fields", "simulator.simtime", "simulator.textfile"}


def _imports(path: Path) -> set[str]:
    out = set()
    for node in ast.walk(ast.parse(path.read_text())):
        if isinstance(node, ast.Import):
            out.update(a.name for a in node.names)
        elif isinstance(node, ast.ImportFrom) and node.module and node.level == 0:
            out.add(node.module)
            out.update(f"{node.module}.{a.name}" for a in node.names)
    return {m for m in out if m.split(".")[0] in ("simulator", "workloads")}


def test_workloads_import_only_the_simulator_leaf_modules():
    for path in sorted((ROOT / "workloads").glob("*.py")):
        above = {m for m in _imports(path) if m.startswith("simulator") and not any(
            m == leaf or m.startswith(leaf + ".") for leaf in LEAVES)}
        assert not above, f"{path.relative_to(ROOT)} imports {sorted(above)}"


def test_leaf_modules_import_no_other_project_module():
    for leaf in LEAVES:
        path = ROOT / (leaf.replace(".", "/") + ".py")
        others = {m for m in _imports(path) if not any(m == x or m.startswith(x + ".") for x in LEAVES)}
        assert not others, f"{leaf} imports {sorted(others)}"
