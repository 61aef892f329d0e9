"""A real wheel install works outside the source tree: the chip files ship inside the package; and a user's kernel
package (examples/relu_grad_pkg) installed beside it joins through the ``dspsim.kernels`` entry points.

The wheel is built from a copy of the project's files (so the checkout stays clean) without build
isolation (offline: setuptools comes with the ``test`` extra), installed with ``--no-deps`` into a fresh
venv in a temporary folder, and the dependencies are reused from this interpreter's site-packages through
a ``.pth`` file appended after the venv's own, so the installed ``sim`` is the wheel's.  Everything then
runs from another folder with no ``PYTHONPATH``.
"""

from __future__ import annotations

import importlib.metadata
import importlib.util
import os
import shutil
import site
import subprocess
import sys
import sysconfig
import zipfile
from pathlib import Path

import numpy as np
import pytest
import yaml

import sim
from sim.config.run_config import load_config
from sim.run.runner import execute

REPO = Path(__file__).resolve().parent.parent
CHIPS = ("FT78NE", "MT7004")
CONFIG = REPO / "configs" / "ft78ne_batch_norm_grad_s.yaml"


def _version(text: str) -> tuple[int, ...]:
    return tuple(int(p) for p in text.split(".")[:2] if p.isdigit())


def _run(argv: list[str], cwd: Path) -> subprocess.CompletedProcess:
    env = {k: v for k, v in os.environ.items() if k not in ("PYTHONPATH", "PYTHONHOME", "VIRTUAL_ENV")}
    r = subprocess.run(argv, check=False, cwd=cwd, env=env, capture_output=True, text=True, timeout=300)
    assert r.returncode == 0, f"{' '.join(map(str, argv))} exited {r.returncode}:\n{r.stdout}\n{r.stderr}"
    return r


@pytest.fixture(scope="module")
def wheel(tmp_path_factory) -> Path:
    """The project's wheel, built from a copy of the files pyproject.toml packages."""
    src = tmp_path_factory.mktemp("src")
    for name in ("pyproject.toml", "README.md"):
        shutil.copy(REPO / name, src / name)
    for name in ("sim", "kernels", "targets"):
        shutil.copytree(REPO / name, src / name, ignore=shutil.ignore_patterns("__pycache__", "*.pyc"))
    dist = tmp_path_factory.mktemp("dist")
    if importlib.util.find_spec("setuptools") is None:
        pytest.fail("setuptools builds the wheel offline and is missing: pip install -e '.[test]'")
    _run([sys.executable, "-m", "pip", "wheel", "--quiet", "--no-deps", "--no-build-isolation", "--no-index",
          "--wheel-dir", str(dist), str(src)], cwd=src)
    (whl,) = dist.glob("dspsim-*.whl")
    return whl


@pytest.fixture(scope="module")
def venv(tmp_path_factory, wheel) -> Path:
    """A fresh venv with the wheel installed (no dependencies: those of this interpreter are reused)."""
    root = tmp_path_factory.mktemp("venv")
    python = root / ("Scripts" if os.name == "nt" else "bin") / "python"
    install = ["install", "--quiet", "--no-deps", "--no-index", str(wheel)]
    if _version(importlib.metadata.version("pip")) >= (22, 3):  # pip --python: no pip needed in the venv (fast)
        _run([sys.executable, "-m", "venv", "--without-pip", str(root)], cwd=root)
        _run([sys.executable, "-m", "pip", "--python", str(python), *install], cwd=root)
    else:
        _run([sys.executable, "-m", "venv", str(root)], cwd=root)
        _run([str(python), "-m", "pip", *install], cwd=root)
    purelib = Path(_run([str(python), "-c", "import sysconfig; print(sysconfig.get_paths()['purelib'])"],
                        cwd=root).stdout.strip())
    deps = dict.fromkeys([*site.getsitepackages(), sysconfig.get_paths()["purelib"], sysconfig.get_paths()["platlib"]])
    # Path lines of a .pth go after the venv's own site-packages; .pth files inside them are not run, so an
    # editable install of this checkout there stays invisible.
    (purelib / "_dspsim_test_deps.pth").write_text("".join(f"{d}\n" for d in deps))
    return root


def test_wheel_ships_the_chip_files(wheel):
    with zipfile.ZipFile(wheel) as z:
        for chip in CHIPS:
            assert z.read(f"sim/targets/{chip}.yaml") == (REPO / "targets" / f"{chip}.yaml").read_bytes()


def test_installed_wheel_loads_both_chips_outside_the_tree(venv, tmp_path):
    bindir = venv / ("Scripts" if os.name == "nt" else "bin")
    code = ("import sim, sim.model.target_loader\n"
            "print(sim.__file__)\nprint(sim.model.target_loader.TARGETS_DIR)\nprint(sim.available_targets())\n"
            "for c in ('FT78NE', 'MT7004'):\n"
            "    t = sim.Simulator(c).target\n    print(t.name, t.cores, len(t.regions), t.clock_hz)\n")
    out = _run([str(bindir / "python"), "-c", code], cwd=tmp_path).stdout.splitlines()
    assert Path(out[0]).resolve().is_relative_to(venv.resolve()), f"sim imported from {out[0]}, not the wheel"
    assert Path(out[1]).resolve().is_relative_to(venv.resolve())
    assert out[2] == repr(list(CHIPS))
    for line, chip in zip(out[3:], CHIPS):
        t = sim.load_target(REPO / "targets" / f"{chip}.yaml")
        assert line == f"{t.name} {t.cores} {len(t.regions)} {t.clock_hz}"


def test_installed_dspsim_runs_a_shipped_config_outside_the_tree(venv, tmp_path):
    dspsim = venv / ("Scripts" if os.name == "nt" else "bin") / "dspsim"
    out = _run([str(dspsim), "run", str(CONFIG), "--out-dir", "out"], cwd=tmp_path).stdout
    # The installed copy computes what the checkout computes: same cycles, same outputs.
    cfg = load_config(CONFIG)
    m, run = execute(cfg)
    assert f"{run.cycles} cycles" in out
    assert (tmp_path / "out" / cfg.trace).is_file()
    for spec in cfg.outputs:
        saved = np.load(tmp_path / "out" / f"{CONFIG.stem}.{spec.name}.npy")
        np.testing.assert_array_equal(saved, m.read(spec.addr, spec.shape, spec.dtype))


# --- a user's kernel package: examples/relu_grad_pkg through the dspsim.kernels entry points -----------

EXAMPLES = REPO / "examples"


@pytest.fixture(scope="module")
def example_wheel(tmp_path_factory) -> Path:
    """The example kernel package's wheel, built (offline) from a copy of examples/: its pyproject takes the
    module from the folder above it, examples/relu_grad.py itself."""
    src = tmp_path_factory.mktemp("example-src")
    shutil.copy(EXAMPLES / "relu_grad.py", src / "relu_grad.py")
    shutil.copytree(EXAMPLES / "relu_grad_pkg", src / "relu_grad_pkg",
                    ignore=shutil.ignore_patterns("__pycache__", "build", "*.egg-info"))
    dist = tmp_path_factory.mktemp("example-dist")
    _run([sys.executable, "-m", "pip", "wheel", "--quiet", "--no-deps", "--no-build-isolation", "--no-index",
          "--wheel-dir", str(dist), str(src / "relu_grad_pkg")], cwd=src)
    (whl,) = dist.glob("dspsim_relu_grad_example-*.whl")
    with zipfile.ZipFile(whl) as z:
        assert z.read("relu_grad.py") == (EXAMPLES / "relu_grad.py").read_bytes()
    return whl


def test_an_installed_kernel_package_works_through_its_entry_point(venv, example_wheel, tmp_path):
    bindir = venv / ("Scripts" if os.name == "nt" else "bin")
    python = bindir / "python"
    install = ["install", "--quiet", "--no-deps", "--no-index", str(example_wheel)]
    if _version(importlib.metadata.version("pip")) >= (22, 3):
        _run([sys.executable, "-m", "pip", "--python", str(python), *install], cwd=tmp_path)
    else:
        _run([str(python), "-m", "pip", *install], cwd=tmp_path)
    listing = _run([str(bindir / "dspsim"), "kernels"], cwd=tmp_path)
    assert listing.stderr == ""  # no broken entry point
    block = listing.stdout[listing.stdout.index("fp_relu_grad_s  [fp32, shared memory]"):]
    assert block.splitlines()[2] == ("    kernel: entry point 'relu_grad = relu_grad:KERNEL' (group dspsim.kernels) of "
                                     "distribution 'dspsim-relu-grad-example 0.1.0'")
    # The example's run-config without its kernels: list: the installed package provides the kernel.
    doc = yaml.safe_load((EXAMPLES / "relu_grad.yaml").read_text())
    del doc["kernels"]
    config = tmp_path / "relu_grad_installed.yaml"
    config.write_text(yaml.safe_dump(doc))
    out = _run([str(bindir / "dspsim"), "run", str(config), "--out-dir", "out"], cwd=tmp_path).stdout
    assert "kernel: entry point 'relu_grad = relu_grad:KERNEL'" in out
    # It computes what the checkout's copy of the example computes (named by the config's kernels:), in the same
    # cycles.
    m, run = execute(load_config(EXAMPLES / "relu_grad.yaml", allow_kernels=True))
    assert f"fp_relu_grad_s on FT78NE: {run.cycles} cycles" in out
    saved = np.load(tmp_path / "out" / "relu_grad_installed.dx.npy")
    np.testing.assert_array_equal(saved, m.read(0xA2000000, (256, 4096), np.float32))
