"""Kernels written by users: the registry's checks, the dspsim.kernels entry points, a run-config's kernels: list.

What the example kernel computes is tests/test_relu_grad_example.py's; what a hostile plan gets is
tests/test_plan_check.py's.  Here: a kernel object is checked against the Kernel protocol when it registers
(each refusal names the kernel, where it came from and what is wrong), names clash only on purpose
(``replace=True``), a replaced kernel's cached plans are never reused, installed packages' kernels join on the
first lookup (a broken one is reported naming its distribution and leaves the shipped kernels working), and a
run-config's ``kernels:`` entries are imported before binding, with one-line errors naming ``kernels[i]``.
"""

from __future__ import annotations

import importlib.metadata
import subprocess
import sys
import types
from pathlib import Path

import numpy as np
import pytest
from tiny_kernels import Twice

import kernels
import sim
from kernels import registry
from sim.cli import main
from sim.config.run_config import load_config
from sim.model.call import ArgSpec, BoundCall
from sim.run.runner import execute

F32 = np.dtype(np.float32)
N = 1024
X, Y = 0xA0000000, 0xA0100000


def _run(m: sim.Simulator, symbol: str, **extra) -> np.ndarray:
    m.write(X, np.arange(N, dtype=F32))
    m.call(symbol, x=X, y=Y, n=N, core_mask=1, **extra)
    return m.read(Y, N, F32)


# --- registering ---------------------------------------------------------------------------------

def test_a_registered_kernel_has_its_symbols_and_runs():
    k = Twice("twice")
    assert sim.register_kernel(k) is k
    try:
        assert kernels.lookup("fp_twice_s").kernel is k and kernels.lookup("fp_twice_p").variant == "p"
        with pytest.raises(sim.KernelArgError, match=r"unknown kernel symbol 'hp_twice_s'; kernel twice \(registered "
                                                     r"from module tiny_kernels .*\) offers precisions fp32 and "
                                                     r"variants s, p: fp_twice_s, fp_twice_p$"):
            kernels.lookup("hp_twice_s")
        np.testing.assert_array_equal(_run(sim.Simulator("FT78NE"), "fp_twice_s"), 2 * np.arange(N, dtype=F32))
        info = next(i for i in kernels.kernels() if i.kernel is k)
        assert not info.shipped and info.origin.startswith("registered from module tiny_kernels (")
        assert info.symbol_names() == ["fp_twice_s", "fp_twice_p"]
        sim.register_kernel(k)  # the same object again changes nothing
    finally:
        sim.unregister_kernel(k)
    with pytest.raises(sim.KernelArgError, match="unknown kernel symbol 'fp_twice_s'"):
        kernels.lookup("fp_twice_s")


class _Bare:
    """Attributes set per test: the smallest object registration looks at."""

    def __init__(self, **attrs):
        self.name = "bare"
        self.args = (ArgSpec("x", "in_ptr", "input"),)
        self.bind = self.plan = lambda *a: None
        self.__dict__.update(attrs)


@pytest.mark.parametrize("attrs,message", [
    ({"name": "relu-grad"}, r"kernel 'relu-grad' \(.*\): 'name' must be an ASCII identifier"),
    ({"name": 42}, r"'name' must be an ASCII identifier .*got 42"),
    ({"name": "k" * 10_000}, r"^kernel <[^>]*> \(.*\): 'name' must be an ASCII identifier of at most 64 characters "
                             r"\(symbols are <fp\|hp>_<name>_<s\|p>\), got a name of 10000 characters$"),
    ({"name": "k" * 65}, r"at most 64 characters .*got a name of 65 characters$"),
    ({"args": (ArgSpec("a" * 5000, "in_ptr", "x"),)}, r"args\[0\]: the name must be an identifier of at most 64 "
                                                       r"characters, got 'aaaaaaaaa"),
    ({"args": [("x", "in_ptr")]}, r"'args' must be a tuple of sim.model.call.ArgSpec"),
    ({"args": (ArgSpec("tiling", "int", "t"),)}, r"args\[0\]: argument name 'tiling' is reserved: it is "
                                                 r"call\(tiling=...\)"),
    ({"args": (ArgSpec("core_mask", "int", "m"),)}, r"argument name 'core_mask' is reserved: the simulator selects "
                                                    r"an _s symbol's cores from it"),
    ({"args": (ArgSpec("core", "int", "c"),)}, r"argument name 'core' is reserved"),
    ({"args": (ArgSpec("x", "in_ptr", "a"), ArgSpec("x", "int", "b"))}, r"args\[1\]: argument 'x' is declared twice"),
    ({"args": (ArgSpec("x", "pointer", "a"),)}, r"args\[0\] 'x': kind 'pointer' is not one of in_ptr, out_ptr"),
    ({"plan": None}, r"it has no 'plan' method \(the Kernel protocol of kernels.base"),
    ({"tilings": [{"a": 1}]}, r"'tilings' must be a method tilings\(call, ctx\)"),
    ({"precisions": ("fp64",)}, r"'precisions' must list some of fp32, fp16, each once, got \('fp64',\)"),
    ({"precisions": "fp32"}, r"'precisions' must be a tuple of strings, got 'fp32'"),
    ({"variants": ()}, r"'variants' must list some of s, p"),
    ({"fp32_tensors": "x"}, r"'fp32_tensors' must be a tuple of strings"),
])
def test_registration_refuses_a_kernel_that_breaks_the_protocol(attrs, message):
    with pytest.raises(sim.KernelDefinitionError, match=message) as info:
        sim.register_kernel(_Bare(**attrs))
    assert not any(s.name.endswith("_bare_s") for s in kernels.symbols())
    assert len(str(info.value)) < 400  # one short line, whatever the kernel's name is


def test_a_kernel_name_of_64_characters_registers():
    name = "k" * 64
    with sim.registered_kernel(_Bare(name=name)):
        assert f"fp_{name}_s" in {s.name for s in kernels.symbols()}


def test_registration_refuses_a_class_or_a_module():
    with pytest.raises(sim.KernelDefinitionError, match="got the class .*: register an instance of it"):
        sim.register_kernel(Twice)  # type: ignore[arg-type]
    with pytest.raises(sim.KernelDefinitionError, match="got the module .*: register its KERNEL"):
        sim.register_kernel(types.ModuleType("relu_grad"))  # type: ignore[arg-type]


def test_a_name_clash_names_both_kernels_unless_replace():
    with pytest.raises(sim.KernelDefinitionError, match=r"^kernel 'batch_norm_grad' \(registered from module "
                                                        r"tiny_kernels .*\): the name is taken by kernel "
                                                        r"'batch_norm_grad' \(shipped with dspsim\); choose another "
                                                        r"name, or pass replace=True to shadow it$"):
        sim.register_kernel(Twice("batch_norm_grad"))
    first = Twice("mine")
    with sim.registered_kernel(first, origin="file a.py"):
        with pytest.raises(sim.KernelDefinitionError, match=r"kernel 'mine' \(file b.py\): the name is taken by "
                                                            r"kernel 'mine' \(file a.py\)"):
            sim.register_kernel(Twice("mine"), origin="file b.py")
        second = Twice("mine", factor=3.0)
        with sim.registered_kernel(second, replace=True):
            assert kernels.lookup("fp_mine_s").kernel is second
        assert kernels.lookup("fp_mine_s").kernel is first  # the context restored the one it replaced
    with pytest.raises(sim.KernelArgError):
        kernels.lookup("fp_mine_s")


def test_replacing_a_shipped_kernel_and_unregistering_brings_it_back():
    shipped = kernels.lookup("fp_batch_norm_grad_s").kernel
    sim.register_kernel(Twice("batch_norm_grad"), replace=True)
    assert isinstance(kernels.lookup("fp_batch_norm_grad_s").kernel, Twice)
    sim.unregister_kernel("batch_norm_grad")
    assert kernels.lookup("fp_batch_norm_grad_s").kernel is shipped
    with pytest.raises(sim.KernelDefinitionError, match=r"no kernel 'batch_norm_grad' was registered \(shipped "
                                                        r"kernels cannot be unregistered\)"):
        sim.unregister_kernel("batch_norm_grad")


def test_a_simulator_never_reuses_the_plans_of_a_replaced_kernel():
    """Plans are cached by the bound call, which names the symbol: replacing the kernel behind a symbol must not
    run the old kernel's cached plan (nor its tiling choice)."""
    m = sim.Simulator("FT78NE")
    with sim.registered_kernel(Twice("scale")):
        np.testing.assert_array_equal(_run(m, "fp_scale_s"), 2 * np.arange(N, dtype=F32))
    with sim.registered_kernel(Twice("scale", factor=3.0)):
        np.testing.assert_array_equal(_run(m, "fp_scale_s"), 3 * np.arange(N, dtype=F32))


def test_bind_must_return_a_bound_call_of_the_call_it_was_given():
    class Liar(Twice):
        def bind(self, symbol, precision, variant, cores, args, read):
            call = super().bind(symbol, precision, variant, cores, args, read)
            return BoundCall(call.symbol, call.precision, call.variant, (0, 1, 2), call.buffers, call.attrs)

    class Nothing(Twice):
        def bind(self, *a):
            return {"buffers": []}

    with sim.registered_kernel(Liar("liar")), sim.registered_kernel(Nothing("nothing")):
        m = sim.Simulator("FT78NE")
        with pytest.raises(sim.KernelDefinitionError, match=r"kernel 'liar' \(.*\): bind\(\) returned a call of .*"
                                                            r"\(0, 1, 2\)\), not the .*\(0,\)\) it was given"):
            m.bind("fp_liar_s", x=X, y=Y, n=N, core_mask=1)
        with pytest.raises(sim.KernelDefinitionError, match=r"bind\(\) returned \{'buffers': \[\]\}, not a "
                                                            r"sim.model.call.BoundCall"):
            m.bind("fp_nothing_s", x=X, y=Y, n=N)


# --- entry points ----------------------------------------------------------------------------------

class _Dist:
    def __init__(self, name: str):
        self.metadata = {"Name": name}
        self.version = "1.2.3"


class _EntryPoint:
    """What importlib.metadata.entry_points() yields, with a load() the test controls."""

    def __init__(self, name: str, value: str, dist: str, load):
        self.name, self.value, self.dist, self._load = name, value, _Dist(dist), load

    def load(self):
        return self._load()


def _module_with(**names) -> types.ModuleType:
    mod = types.ModuleType("pkg_module")
    mod.__dict__.update(names)
    return mod


def _broken():
    raise ImportError("No module named 'numpyy'")


@pytest.fixture
def fake_entry_points(monkeypatch):
    """Install fake dspsim.kernels entry points (the registry forgets it loaded the real ones; the suite's
    registry fixture restores everything after the test)."""
    def install(*eps):
        monkeypatch.setattr(registry.importlib.metadata, "entry_points",
                            lambda group=None: [e for e in eps if group == registry.ENTRY_POINT_GROUP])
        registry._STATE.entry_points_loaded = False
        registry._STATE.entry_point_errors.clear()
    return install


def test_entry_point_kernels_join_on_the_first_lookup_and_a_broken_one_is_reported(fake_entry_points, capsys):
    good = Twice("from_pkg")
    fake_entry_points(
        _EntryPoint("from_pkg", "pkg:KERNEL", "good-kernels", lambda: good),
        _EntryPoint("as_module", "pkg_module", "module-kernels", lambda: _module_with(KERNEL=Twice("as_module"))),
        _EntryPoint("broken", "broken_pkg:KERNEL", "broken-kernels", _broken),
        _EntryPoint("empty", "empty_module", "empty-kernels", lambda: _module_with()),
        _EntryPoint("clash", "clash:KERNEL", "clash-kernels", lambda: Twice("batch_norm_grad")),
    )
    assert not registry._STATE.entry_points_loaded  # lazily: nothing loaded until the first lookup
    assert kernels.lookup("fp_batch_norm_grad_s").origin == "shipped with dspsim"  # the shipped ones still work
    sym = kernels.lookup("fp_from_pkg_s")
    assert sym.kernel is good and sym.origin == ("entry point 'from_pkg = pkg:KERNEL' (group dspsim.kernels) of "
                                                 "distribution 'good-kernels 1.2.3'")
    assert kernels.lookup("fp_as_module_p").kernel.name == "as_module"
    errors = registry.entry_point_errors()
    assert errors == [
        "entry point 'broken = broken_pkg:KERNEL' (group dspsim.kernels) of distribution 'broken-kernels 1.2.3' "
        "failed to load: ImportError: No module named 'numpyy'",
        "entry point 'clash = clash:KERNEL' (group dspsim.kernels) of distribution 'clash-kernels 1.2.3' failed to "
        "load: kernel 'batch_norm_grad': the name is taken by kernel 'batch_norm_grad' (shipped with dspsim); choose "
        "another name, or pass replace=True to shadow it",
        "entry point 'empty = empty_module' (group dspsim.kernels) of distribution 'empty-kernels 1.2.3' failed to "
        "load: module pkg_module defines no KERNEL",
    ]
    # A symbol nobody provides says which entry points failed, in case one of them was to provide it.
    with pytest.raises(sim.KernelArgError, match=r"unknown kernel symbol 'fp_broken_s'.* \(3 kernel entry point\(s\) "
                                                 r"failed to load: entry point 'broken = broken_pkg:KERNEL'"):
        kernels.lookup("fp_broken_s")
    # dspsim kernels lists the good ones with where they came from and warns about the broken ones.
    assert main(["kernels"]) == 0
    out, err = capsys.readouterr()
    assert "fp_from_pkg_s  [fp32, shared memory]\n    precision: fp32 storage and fp32 arithmetic throughout\n" \
           "    kernel: entry point 'from_pkg = pkg:KERNEL' (group dspsim.kernels) of distribution 'good-kernels " \
           "1.2.3'\n" in out
    assert "fp_batch_norm_grad_s" in out
    assert err.splitlines() == [f"dspsim: warning: {e}" for e in errors]


def test_a_package_registering_itself_on_import_is_not_a_clash(fake_entry_points):
    k = Twice("self_registering")

    def load():
        sim.register_kernel(k)  # the package's module registers its kernel as it is imported
        return k

    fake_entry_points(_EntryPoint("self_registering", "pkg:KERNEL", "pkg", load))
    assert kernels.lookup("fp_self_registering_s").origin.startswith("entry point 'self_registering = pkg:KERNEL'")
    assert registry.entry_point_errors() == []


def test_listing_the_entry_points_failing_does_not_break_the_shipped_kernels(fake_entry_points, monkeypatch):
    fake_entry_points()

    def boom(group=None):
        raise importlib.metadata.PackageNotFoundError("metadata of some package is broken")

    monkeypatch.setattr(registry.importlib.metadata, "entry_points", boom)
    assert kernels.lookup("fp_batch_norm_grad_p").kernel.name == "batch_norm_grad"
    assert registry.entry_point_errors()[0].startswith("the dspsim.kernels entry points cannot be listed: "
                                                       "PackageNotFoundError")


# --- a run-config's kernels: list ----------------------------------------------------------------

KERNEL_FILE = '''import sys
sys.path.insert(0, {tests!r})
from tiny_kernels import Twice
KERNEL = Twice("{name}", factor={factor})
'''


def _config(folder: Path, kernels_list: str, symbol: str = "fp_cfg_twice_s") -> Path:
    path = folder / "cfg.yaml"
    path.write_text(f"target: FT78NE\nsymbol: {symbol}\nkernels: {kernels_list}\n"
                    f"args: {{x: {X:#x}, y: {Y:#x}, n: {N}, core_mask: 1}}\n"
                    f"data: [{{name: x, addr: {X:#x}, shape: [{N}], dtype: float32, random: {{seed: 3}}}}]\n"
                    f"outputs: [{{name: y, addr: {Y:#x}, shape: [{N}], dtype: float32}}]\n")
    return path


def _kernel_file(folder: Path, name: str = "cfg_twice", factor: float = 2.0, file: str = "mine.py") -> Path:
    path = folder / file
    path.write_text(KERNEL_FILE.format(tests=str(Path(__file__).resolve().parent), name=name, factor=factor))
    return path


def test_a_config_imports_its_kernel_files_before_binding(tmp_path):
    sub = tmp_path / "k"
    sub.mkdir()
    kfile = _kernel_file(sub)
    cfg = load_config(_config(tmp_path, "[k/mine.py]"), allow_kernels=True)
    assert cfg.kernels[0].path == sub / "mine.py"
    m, run = execute(cfg)
    x = np.random.default_rng(3).uniform(-1.0, 1.0, N).astype(F32)  # as run-config.md says random: builds it
    np.testing.assert_array_equal(m.read(Y, N, F32), 2 * x)
    assert run.kernel_origin == f"file {kfile.resolve()}" and run.user_kernel
    assert run.metadata()["kernel_origin"] == run.kernel_origin
    assert f"kernel: file {kfile.resolve()}" in run.summary_text()
    # A second config naming the same file reuses the imported module: the same kernel, no clash.
    other = tmp_path / "other"
    other.mkdir()
    cfg2 = load_config(_config(other, f"[{kfile}]"), allow_kernels=True)
    _, run2 = execute(cfg2)
    assert run2.kernel_origin == run.kernel_origin


def test_a_config_may_name_a_module(tmp_path, monkeypatch):
    (tmp_path / "my_kernels_mod.py").write_text(KERNEL_FILE.format(tests=str(Path(__file__).resolve().parent),
                                                                   name="cfg_twice", factor=2.0))
    monkeypatch.syspath_prepend(str(tmp_path))
    _, run = execute(load_config(_config(tmp_path, "[my_kernels_mod]"), allow_kernels=True))
    assert run.kernel_origin == "module my_kernels_mod"


@pytest.mark.parametrize("entry,setup,message", [
    ("[missing.py]", None, r"cfg.yaml: kernels\[0\]: .*missing.py is not a file \(a Python file defining a kernel\)"),
    ("[a b c]", None, r"kernels\[0\]: 'a b c' is neither a Python file \(ending in .py\) nor a module name"),
    ("mine.py", None, r"kernels: expected a list of Python files or module names, got 'mine.py'"),
    ("[3]", None, r"kernels\[0\]: expected a Python file or a module name"),
    ("[no_such_module_xyz]", None, r"kernels\[0\]: no module named 'no_such_module_xyz' \(a module name must be "
                                   r"importable: installed, or on PYTHONPATH; a file must end in .py\)"),
    ("[bad.py]", "def broken(:\n", r"kernels\[0\]: importing it raised SyntaxError \(line 1\): "),
    ("[bad.py]", "import numpy\nraise RuntimeError('no GPU here')\n", r"kernels\[0\]: importing it raised "
                                                                     r"RuntimeError \(line 2\): no GPU here"),
    ("[bad.py]", "x = 1\n", r"kernels\[0\]: bad.py defines no KERNEL and registered no kernel"),
    ("[bad.py]", "KERNEL = object()\n", r"kernels\[0\]: kernel <object object at .*> \(file .*bad.py\): 'name' must "
                                        r"be an ASCII identifier"),
])
def test_a_bad_kernels_entry_is_one_line_naming_it(tmp_path, entry, setup, message):
    if setup is not None:
        (tmp_path / "bad.py").write_text(setup)
    cfg = _config(tmp_path, entry)
    with pytest.raises(sim.ConfigError, match=message):
        execute(load_config(cfg, allow_kernels=True))
    proc = subprocess.run([sys.executable, "-m", "sim.cli", "run", str(cfg), "--out-dir", str(tmp_path / "out"),
                           "--allow-kernels"],
                          capture_output=True, text=True, check=False)
    assert proc.returncode == 2 and len(proc.stderr.strip().splitlines()) == 1, proc.stderr
    assert proc.stderr.startswith("dspsim: error: ")


def test_two_files_defining_the_same_kernel_name_clash_naming_both(tmp_path):
    a, b = tmp_path / "a", tmp_path / "b"
    a.mkdir()
    b.mkdir()
    fa, fb = _kernel_file(a), _kernel_file(b, factor=3.0)
    execute(load_config(_config(a, "[mine.py]"), allow_kernels=True))
    with pytest.raises(sim.ConfigError, match=rf"cfg.yaml: kernels\[0\]: kernel 'cfg_twice' \(file {fb.resolve()}\): "
                                              rf"the name is taken by kernel 'cfg_twice' \(file {fa.resolve()}\)"):
        execute(load_config(_config(b, "[mine.py]"), allow_kernels=True))


def test_dspsim_kernels_load_lists_a_files_kernels_with_where_they_came_from(tmp_path, capsys):
    kfile = _kernel_file(tmp_path)
    assert main(["kernels", "--load", str(kfile)]) == 0
    out = capsys.readouterr().out
    block = out[out.index("fp_cfg_twice_s  [fp32, shared memory]"):]
    assert block.splitlines()[1:4] == ["    precision: fp32 storage and fp32 arithmetic throughout",
                                       f"    kernel: file {kfile.resolve()}", "    x: input"]
    assert "hp_cfg_twice_s" not in out  # fp32 only
    lines = out.splitlines()
    origins = [lines[i - 2].split()[0] for i, line in enumerate(lines) if line.startswith("    kernel: ")]
    assert origins == ["fp_cfg_twice_p", "fp_cfg_twice_s"]  # a shipped symbol has no origin line


# --- a first call imports the one shipped kernel it calls ------------------------------------------------------

@pytest.mark.parametrize("module", registry.KERNEL_MODULES)
def test_each_shipped_kernel_is_named_as_its_module(module):
    # A lookup imports the one module a symbol names (``fp_<module>_s``): that holds only if the names agree.
    assert importlib.import_module(f"kernels.{module}").KERNEL.name == module


_FIRST_LOOKUP = """
import sys
import sim
from kernels import registry
g = registry.generation()
sym = registry.lookup(sys.argv[1])
print(sorted(registry._STATE.shipped), registry.generation() == g)
print(len([s for s in registry.symbols() if s.origin == registry.SHIPPED]), registry.generation() == g)
"""


@pytest.mark.parametrize("symbol, module", [("fp_gemm_s", "gemm"), ("hp_batch_norm_grad_p", "batch_norm_grad")])
def test_a_fresh_process_first_lookup_imports_only_its_kernel_and_a_listing_all(symbol, module):
    proc = subprocess.run([sys.executable, "-c", _FIRST_LOOKUP, symbol], capture_output=True, text=True,
                          cwd=Path(__file__).resolve().parent.parent, check=False)
    assert proc.returncode == 0, proc.stderr[-2000:]
    first, listing = proc.stdout.splitlines()
    # Only the kernel called, and symbols joining keeps the generation (a simulator keeps its plans).
    assert first == f"{[module]!r} True"
    # A listing then imports every shipped kernel: all their symbols, as this (fully loaded) process lists them.
    assert listing == f"{len([s for s in registry.symbols() if s.origin == registry.SHIPPED])} True"


def test_an_unknown_symbol_after_a_lone_kernel_still_hints_from_every_kernel():
    code = ("import sim\nfrom kernels import registry\nregistry.lookup('fp_gemm_s')\n"
            "try:\n    registry.lookup('fp_batch_norm_grad_x')\nexcept sim.KernelArgError as e:\n    print(e)")
    proc = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True,
                          cwd=Path(__file__).resolve().parent.parent, check=False)
    assert proc.returncode == 0, proc.stderr[-2000:]
    assert "unknown kernel symbol 'fp_batch_norm_grad_x'" in proc.stdout and "fp_batch_norm_grad_s" in proc.stdout


def test_the_same_kernel_imported_twice_is_one_kernel(tmp_path):
    """An installed package's kernel and the file a config names, both holding the same code (examples/relu_grad.py
    installed as relu_grad_pkg, and named by a config): the second registration is the first kernel, no clash.  A
    file of other bytes, or the same class with other attributes, still clashes."""
    import importlib.util

    source = (Path(__file__).resolve().parent.parent / "examples" / "relu_grad.py").read_bytes()

    def imported(name: str, data: bytes):
        path = tmp_path / f"{name}.py"
        path.write_bytes(data)
        spec = importlib.util.spec_from_file_location(name, path)
        module = importlib.util.module_from_spec(spec)
        spec.loader.exec_module(module)
        return module.KERNEL

    first = imported("relu_grad_installed", source)
    with sim.registered_kernel(first):
        assert sim.register_kernel(imported("relu_grad_from_config", source)) is first
        assert kernels.lookup("fp_relu_grad_s").kernel is first
        edited = imported("relu_grad_edited", source + b"\n# edited\n")
        with pytest.raises(sim.KernelDefinitionError, match="the name is taken by"):
            sim.register_kernel(edited)
        other = imported("relu_grad_other", source)
        other.extra = 1
        with pytest.raises(sim.KernelDefinitionError, match="the name is taken by"):
            sim.register_kernel(other)
        # Attributes equal to == but not bit for bit (True is 1), or that cannot be compared, are two kernels.
        first.flag, truthy = 1, imported("relu_grad_truthy", source)
        truthy.flag = True
        with pytest.raises(sim.KernelDefinitionError, match="the name is taken by"):
            sim.register_kernel(truthy)

        class Unequal:
            def __eq__(self, other):
                raise RuntimeError("cannot compare")
        first.odd, odd = Unequal(), imported("relu_grad_odd", source)
        odd.odd = Unequal()
        with pytest.raises(sim.KernelDefinitionError, match="the name is taken by"):
            sim.register_kernel(odd)


def test_kernels_of_classes_made_inside_a_function_are_never_one(tmp_path):
    """A factory making a kernel class per call (each closing over its own scale): the same name, file and
    attributes, yet different kernels: the second registration is a clash, as before."""
    import importlib.util

    source = (Path(__file__).resolve().parent.parent / "examples" / "relu_grad.py").read_text()
    (tmp_path / "factory.py").write_text(source + '''

def make(scale):
    class Scaled(ReluGrad):
        name = "scaled_factory"

        def plan(self, call, ctx):
            return super().plan(call, ctx)  # (scale would change what it computes)
    return Scaled()
''')
    spec = importlib.util.spec_from_file_location("factory_for_tests", tmp_path / "factory.py")
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    with sim.registered_kernel(module.make(1.0)):
        with pytest.raises(sim.KernelDefinitionError, match="the name is taken by"):
            sim.register_kernel(module.make(100.0))
