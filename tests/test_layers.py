"""Layers point one way: no module of the package imports, directly or through others, a module
that imports it back; the workload generator depends on nothing above it; the package on nothing in
``tools/``.

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
# The package's layers, top to bottom: a module may import from its own unit and the layers below
# it, never from a layer above or from a sibling in its own layer (docs/design.md, "The modules").
LAYERS = (
    ("simulator.__main__",),
    ("simulator.cli",),
    ("simulator.commands",),
    ("simulator.planning", "simulator.validation"),
    ("simulator.outputs",),
    ("simulator.run",),
    ("simulator.size",),
    ("simulator.fleet",),
    ("simulator.resolve",),
    ("simulator.metrics", "simulator.progress"),
    ("simulator.engine",),
    ("simulator.scenario",),
    ("simulator.errors", "simulator"),
)
LEAVES = {"simulator.errors", "simulator.scenario.fields", "simulator.engine.simtime", "simulator.scenario.textfile"}


def _imports(path: Path) -> set[str]:
    out = set()
    for node in ast.walk(ast.parse(path.read_text())):
        if isinstance(node, ast.Import):
            out.update(a.name for a in node.names)
        elif isinstance(node, ast.ImportFrom) and node.module and node.level == 0:
            out.add(node.module)
            out.update(f"{node.module}.{a.name}" for a in node.names)
    return {m for m in out if m.split(".")[0] in ("simulator", "workloads", "tools")}


def _module_graph() -> dict[str, set[str]]:
    """Each module of simulator/ and workloads/ and the project modules it imports (at the top or
    inside a function); ``from simulator import x`` counts as importing ``simulator.x`` when that is
    a module, and a package's own ``__init__`` is not an edge."""
    files = {}
    for path in sorted([*(ROOT / "simulator").rglob("*.py"), *(ROOT / "workloads").rglob("*.py")]):
        parts = path.relative_to(ROOT).with_suffix("").parts
        files[".".join(parts[:-1] if parts[-1] == "__init__" else parts)] = path
    graph = {}
    for name, path in files.items():
        targets = set()
        for m in _imports(path):
            while m and m not in files:
                m = m.rpartition(".")[0]
            if m and m != name and not name.startswith(m + "."):
                targets.add(m)
        graph[name] = targets
    return graph


def test_no_import_cycles():
    """Depth-first search for a back edge; the message names the whole cycle."""
    graph = _module_graph()
    assert len(graph) > 40 and graph["simulator.run"] >= {"simulator.resolve", "simulator.size"}
    state: dict[str, int] = {}  # 1: on the current path, 2: done

    def visit(m: str, path: list[str]) -> None:
        state[m] = 1
        for t in sorted(graph[m]):
            if state.get(t) == 1:
                cycle = path[path.index(t) :] + [m, t] if t in path else [m, t]
                raise AssertionError("import cycle: " + " -> ".join(cycle))
            if t not in state:
                visit(t, path + [m])
        state[m] = 2

    for m in sorted(graph):
        if m not in state:
            visit(m, [])


def _unit(module: str) -> str | None:
    """The layer unit a module belongs to (its subpackage, or itself at the top)."""
    for layer in LAYERS:
        for unit in layer:
            if module == unit or (module.startswith(unit + ".") and unit != "simulator"):
                return unit
    return "simulator" if module == "simulator" else None


def test_layers_point_down():
    """Every import of a simulator module goes to its own unit or a layer below it: the layer
    contract, checked on the whole package (imports inside functions included)."""
    depth = {unit: i for i, layer in enumerate(LAYERS) for unit in layer}
    graph = _module_graph()
    units = {_unit(m) for m in graph if m.startswith("simulator")}
    assert None not in units, "a module of simulator/ belongs to no layer: add its unit to LAYERS"
    wrong = []
    for m, targets in sorted(graph.items()):
        src = _unit(m)
        if src is None or not m.startswith("simulator"):
            continue
        for t in sorted(targets):
            dst = _unit(t)
            if dst is None or dst == src:
                continue
            if depth[dst] <= depth[src]:
                wrong.append(f"{m} ({src}) imports {t} ({dst})")
    assert not wrong, "imports against the layers:\n" + "\n".join(wrong)


def test_workloads_import_only_the_simulator_leaf_modules():
    for path in sorted((ROOT / "workloads").glob("*.py")):
        above = {
            m
            for m in _imports(path)
            if m.startswith("simulator") and not any(m == leaf or m.startswith(leaf + ".") for leaf in LEAVES)
        }
        assert not above, f"{path.relative_to(ROOT)} imports {sorted(above)}"


def test_leaf_modules_import_no_other_project_module():
    for leaf in LEAVES:
        path = ROOT / (leaf.replace(".", "/") + ".py")
        others = {m for m in _imports(path) if not any(m == x or m.startswith(x + ".") for x in LEAVES)}
        assert not others, f"{leaf} imports {sorted(others)}"


def _loaded_after(code: str) -> set[str]:
    """The modules a fresh interpreter in the repository root holds after running ``code``."""
    out = subprocess.run(
        [sys.executable, "-c", code + "\nimport sys\nprint('\\n'.join(sys.modules))"],
        cwd=ROOT,
        capture_output=True,
        text=True,
        check=True,
    ).stdout
    return set(out.split())


def test_package_imports_nothing_of_tools():
    """No module of simulator/ or workloads/ imports tools/, at the top or inside a function."""
    for path in sorted([*(ROOT / "simulator").rglob("*.py"), *(ROOT / "workloads").glob("*.py")]):
        tools = {m for m in _imports(path) if m.split(".")[0] == "tools"}
        assert not tools, f"{path.relative_to(ROOT)} imports {sorted(tools)}"


def test_simulating_loads_no_profiler_module():
    """Importing the calibration and the run entry point loads no tools.profiler module (nor torch)."""
    loaded = _loaded_after("import simulator.validation.calibrate, simulator.run")
    assert "simulator.validation.calibrate" in loaded
    assert not {m for m in loaded if m == "tools" or m.startswith(("tools.", "torch"))}


def test_profiler_modules_import_and_print_help_without_torch():
    """Every tools.profiler module imports, and --help runs, where torch cannot be imported."""
    block_torch = "import sys\nsys.modules['torch'] = None\n"
    modules = sorted(p.stem for p in (ROOT / "tools" / "profiler").glob("*.py") if p.stem != "__init__")
    loaded = _loaded_after(block_torch + "".join(f"import tools.profiler.{m}\n" for m in modules))
    assert {f"tools.profiler.{m}" for m in modules} <= loaded
    run = subprocess.run(
        [
            sys.executable,
            "-c",
            block_torch + "import runpy\nsys.argv = ['profiler', '--help']\n"
            "runpy.run_module('tools.profiler', run_name='__main__')",
        ],
        cwd=ROOT,
        capture_output=True,
        text=True,
    )
    assert run.returncode == 0, run.stderr
    assert "--mode" in run.stdout and "vllm_moe" in run.stdout
