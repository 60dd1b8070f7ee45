"""Layers point one way: the workload generator depends on nothing above it, and the package on
nothing in ``tools/``.

``workloads`` may use only the simulator's leaf modules (errors, the field system, the exact-time
SimPy event), which themselves import nothing else of the project; every other dependency goes
from ``simulator`` to ``workloads``. Imports inside functions count too: a function-level import
that only dodges a cycle is still a cycle. Measurement harnesses (``tools/profiler``) import the
package, never the other way round, so a simulation loads none of them.
"""

from __future__ import annotations

import ast
import subprocess
import sys
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
    return {m for m in out if m.split(".")[0] in ("simulator", "workloads", "tools")}


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


def _loaded_after(code: str) -> set[str]:
    """The modules a fresh interpreter in the repository root holds after running ``code``."""
    out = subprocess.run([sys.executable, "-c", code + "\nimport sys\nprint('\\n'.join(sys.modules))"],
                         cwd=ROOT, capture_output=True, text=True, check=True).stdout
    return set(out.split())


def test_package_imports_nothing_of_tools():
    """No module of simulator/ or workloads/ imports tools/, at the top or inside a function."""
    for path in sorted([*(ROOT / "simulator").rglob("*.py"), *(ROOT / "workloads").glob("*.py")]):
        tools = {m for m in _imports(path) if m.split(".")[0] == "tools"}
        assert not tools, f"{path.relative_to(ROOT)} imports {sorted(tools)}"


def test_simulating_loads_no_profiler_module():
    """Importing the calibration and the run entry point loads no tools.profiler module (nor torch)."""
    loaded = _loaded_after("import simulator.calibrate, simulator.run")
    assert "simulator.calibrate" in loaded
    assert not {m for m in loaded if m == "tools" or m.startswith(("tools.", "torch"))}


def test_profiler_modules_import_and_print_help_without_torch():
    """Every tools.profiler module imports, and --help runs, where torch cannot be imported."""
    block_torch = "import sys\nsys.modules['torch'] = None\n"
    modules = sorted(p.stem for p in (ROOT / "tools" / "profiler").glob("*.py") if p.stem != "__init__")
    loaded = _loaded_after(block_torch + "".join(f"import tools.profiler.{m}\n" for m in modules))
    assert {f"tools.profiler.{m}" for m in modules} <= loaded
    run = subprocess.run([sys.executable, "-c", block_torch + "import runpy\nsys.argv = ['profiler', '--help']\n"
                          "runpy.run_module('tools.profiler', run_name='__main__')"],
                         cwd=ROOT, capture_output=True, text=True)
    assert run.returncode == 0, run.stderr
    assert "--mode" in run.stdout and "vllm_moe" in run.stdout
