"""The direction of imports between the layers of ``sim/`` and ``kernels/``, and the registry dispatch.

The layers, lowest first (a module may import its own layer and the layers below it, nothing above)::

    sim.errors, sim.extras, sim.files  <-  sim.model  <-  sim.timing  <-  sim.engine  <-  sim.tuning  <-  sim.inspect
        <-  sim.plan_cache, sim.planning, sim.simulator (the facade; the package ``sim`` itself)
        <-  sim.config (run-configs, their schema, user kernels)  <-  sim.run (the run pipeline, preflight, progress)
        <-  sim.report, sim.sweep, sim.calibrate, sim.program (programs: chains of calls)  <-  sim.cli

The facade (``sim.simulator`` and its planning half, ``sim.planning``) is the one part of ``sim/`` that imports
``kernels`` (``kernels.base`` and ``kernels.registry``);
kernels import only ``sim.errors``, ``sim.model.*`` and ``sim.timing`` of the simulator (and never simpy).
``kernels/__init__.py`` imports the package ``sim`` first so that either package can be imported first.
Every import counts, at module level or inside a function.  No exceptions beyond these rules.
"""

import ast
import subprocess
import sys
from pathlib import Path

import pytest

import kernels

ROOT = Path(__file__).resolve().parent.parent

#: Layer of each part of sim/, lowest first.
LAYERS: dict[str, int] = {
    "sim.errors": 0, "sim.env_flags": 0, "sim.extras": 0, "sim.files": 0, "sim.model": 1, "sim.timing": 2,
    "sim.startup": 2, "sim.engine": 3, "sim.tuning": 4,
    "sim.inspect": 5, "sim.plan_cache": 6, "sim.planning": 6, "sim.simulator": 6, "sim": 6, "sim.config": 7,
    "sim.run": 8, "sim.report": 9, "sim.sweep": 9, "sim.calibrate": 9, "sim.program": 9,
    "sim.cli": 10,
}
#: The facade's modules: the only ones of sim/ that import kernels.
FACADE = ("sim.simulator", "sim.planning")
#: What kernels may import of sim.
KERNEL_MAY_IMPORT = ("sim.errors", "sim.model", "sim.timing", "sim.startup")


def imported_modules(path: Path) -> set[str]:
    """Every module ``path`` imports (absolute names; ``from a import b`` counts as ``a`` and ``a.b``)."""
    tree = ast.parse(path.read_text())
    names = set()
    for node in ast.walk(tree):
        if isinstance(node, ast.Import):
            names |= {a.name for a in node.names}
        elif isinstance(node, ast.ImportFrom) and node.module:
            assert node.level == 0, f"{path}: relative import"
            names.add(node.module)
            names |= {f"{node.module}.{a.name}" for a in node.names}
        elif isinstance(node, ast.Call) and getattr(node.func, "id", None) == "__import__":
            raise AssertionError(f"{path}: __import__ hides an import from this test")
    return names


def module_name(path: Path) -> str:
    rel = path.relative_to(ROOT).with_suffix("")
    parts = rel.parts[:-1] if rel.name in ("__init__", "__main__") else rel.parts
    return ".".join(parts)


def layer_of(module: str) -> int | None:
    """The layer of a sim module (by its longest listed prefix); None outside sim."""
    best = None
    for prefix, layer in LAYERS.items():
        if module == prefix or module.startswith(prefix + "."):
            if best is None or len(prefix) > len(best[0]):
                best = (prefix, layer)
    return None if best is None else best[1]


def sim_modules() -> list[Path]:
    return sorted((ROOT / "sim").rglob("*.py"))


def test_every_sim_module_has_a_layer():
    for path in sim_modules():
        assert layer_of(module_name(path)) is not None, f"{path}: not in a layer; add its package to LAYERS"


@pytest.mark.parametrize("path", sim_modules(), ids=lambda p: str(p.relative_to(ROOT)))
def test_sim_imports_only_downwards(path):
    me = module_name(path)
    mine = layer_of(me)
    for mod in imported_modules(path):
        if mod.split(".")[0] == "kernels":
            assert me in FACADE and mod.split(".")[:2] in (["kernels", "base"], ["kernels", "registry"]), \
                f"{me} imports {mod}: only the facade ({', '.join(FACADE)}) imports kernels, and only kernels.base " \
                f"and kernels.registry"
            continue
        theirs = layer_of(mod)
        if theirs is None or mod == "sim":
            # The package itself: only its own __init__ and the layers above the facade may import it.
            assert mod != "sim" or mine >= LAYERS["sim"], f"{me} imports the package sim (the facade's layer)"
            continue
        assert theirs <= mine, f"{me} (layer {mine}) imports {mod} (layer {theirs}): imports go downwards only"


def test_the_engine_model_timing_and_tuning_import_no_simulator_layer_above_them():
    # The engine imports nothing from kernels/ and nothing of the facade: checked module by module above, and
    # here once more by name, since the issue was exactly this.
    for path in sim_modules():
        me = module_name(path)
        if layer_of(me) <= LAYERS["sim.tuning"]:
            assert not any(m.startswith(("kernels", "sim.simulator", "sim.inspect", "sim.config", "sim.run",
                                           "sim.report", "sim.sweep", "sim.calibrate", "sim.program", "sim.cli"))
                           for m in imported_modules(path)), me


@pytest.mark.parametrize("path", sorted((ROOT / "kernels").rglob("*.py")), ids=lambda p: str(p.relative_to(ROOT)))
def test_kernels_import_only_the_model_timing_and_errors_of_sim(path):
    for mod in imported_modules(path):
        assert mod.split(".")[0] != "simpy", f"{path}: kernels never import simpy"
        if mod == "sim":
            assert path == ROOT / "kernels" / "__init__.py", f"{path}: only kernels/__init__.py imports sim itself"
            continue
        if mod.split(".")[0] == "sim":
            assert mod.startswith(KERNEL_MAY_IMPORT), f"{path}: kernels import only {', '.join(KERNEL_MAY_IMPORT)}"


@pytest.mark.parametrize("path", sorted((ROOT / "examples").rglob("*.py")), ids=lambda p: str(p.relative_to(ROOT)))
def test_example_kernels_use_only_the_public_pieces_a_kernel_may(path):
    """A user's kernel (examples/) builds on what the shipped ones may import: the plan IR and call types, the
    errors, the timing module, and kernels.base / kernels.common (never the engine, the facade or simpy)."""
    for mod in imported_modules(path):
        top = mod.split(".")[0]
        assert top != "simpy", f"{path}: a kernel never imports simpy"
        if top == "sim":
            assert mod.startswith(KERNEL_MAY_IMPORT), f"{path}: a kernel imports only {', '.join(KERNEL_MAY_IMPORT)}"
        if top == "kernels":
            assert mod.startswith(("kernels.base", "kernels.common")), f"{path}: {mod} is not public"


def test_the_architecture_test_catches_a_kernels_import_outside_the_facade(tmp_path):
    """The rule bites: a module of sim/ other than the facade that imports kernels is refused."""
    bad = tmp_path / "bad.py"
    bad.write_text("import kernels\nfrom kernels.base import PlanContext\n")
    assert {"kernels", "kernels.base", "kernels.base.PlanContext"} <= imported_modules(bad)
    assert layer_of("sim.inspect.summary") == LAYERS["sim.inspect"] < LAYERS["sim.simulator"]
    assert layer_of("sim.engine.walk") == LAYERS["sim.engine"]


@pytest.mark.parametrize("statement", ["import sim", "import kernels", "import sim.model.plan",
                                       "import sim.engine.engine", "import sim.cli", "import sim.sweep",
                                       *[f"import kernels.{m}" for m in kernels.KERNEL_MODULES]])
def test_either_package_imports_first_in_a_fresh_interpreter(statement):
    proc = subprocess.run([sys.executable, "-c", f"{statement}; import sim; sim.Simulator('FT78NE')"],
                          capture_output=True, text=True, cwd=ROOT, check=False)
    assert proc.returncode == 0, proc.stderr[-2000:]


def test_sim_has_no_module_getattr():
    tree = ast.parse((ROOT / "sim" / "__init__.py").read_text())
    assert not any(isinstance(n, ast.FunctionDef) and n.name == "__getattr__" for n in tree.body)


def code_strings(path: Path) -> list[str]:
    """Identifiers and string literals of a module, docstrings left out (examples there are documentation)."""
    tree = ast.parse(path.read_text())
    docs = set()
    for node in ast.walk(tree):
        if isinstance(node, (ast.Module, ast.FunctionDef, ast.ClassDef, ast.AsyncFunctionDef)) and node.body:
            first = node.body[0]
            if isinstance(first, ast.Expr) and isinstance(first.value, ast.Constant):
                docs.add(id(first.value))
    out = []
    for node in ast.walk(tree):
        if isinstance(node, ast.Constant) and isinstance(node.value, str) and id(node) not in docs:
            out.append(node.value)
        elif isinstance(node, ast.Name):
            out.append(node.id)
        elif isinstance(node, ast.Attribute):
            out.append(node.attr)
    return out


def test_sim_knows_no_kernel_by_name():
    names = {s.kernel.name for s in kernels.symbols()}
    for path in sim_modules():
        strings = code_strings(path)
        for name in names:
            assert not any(name in s for s in strings), f"{path.name} names kernel {name}"


def test_registry_has_every_form_of_each_kernel():
    for name in {s.kernel.name for s in kernels.symbols()}:
        for prefix in ("fp", "hp"):
            for variant in ("s", "p"):
                sym = kernels.lookup(f"{prefix}_{name}_{variant}")
                assert sym.precision == ("fp16" if prefix == "hp" else "fp32") and sym.variant == variant
