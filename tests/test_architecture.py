"""The direction of imports and the registry dispatch that SPEC section 1 fixes."""

import ast
from pathlib import Path

import kernels

ROOT = Path(__file__).resolve().parent.parent


def imported_modules(path: Path) -> set[str]:
    tree = ast.parse(path.read_text())
    names = set()
    for node in ast.walk(tree):
        if isinstance(node, ast.Import):
            names |= {a.name.split(".")[0] for a in node.names}
        elif isinstance(node, ast.ImportFrom) and node.module:
            names.add(node.module)
    return names


def test_kernels_never_import_simpy_nor_the_engine():
    for path in (ROOT / "kernels").glob("*.py"):
        mods = imported_modules(path)
        assert "simpy" not in mods, path
        assert not any(m.startswith(("sim.engine.engine", "sim.simulator", "sim.cli")) for m in mods), path


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
    for path in (ROOT / "sim").glob("*.py"):
        strings = code_strings(path)
        for name in names:
            assert not any(name in s for s in strings), f"{path.name} names kernel {name}"
        mods = imported_modules(path)
        assert not any(m.startswith("kernels.") and m not in ("kernels.base",) for m in mods), path


def test_registry_has_every_form_of_each_kernel():
    for name in {s.kernel.name for s in kernels.symbols()}:
        for prefix in ("fp", "hp"):
            for variant in ("s", "p"):
                sym = kernels.lookup(f"{prefix}_{name}_{variant}")
                assert sym.precision == ("fp16" if prefix == "hp" else "fp32") and sym.variant == variant
