"""The user kernel of examples/ (ReluGrad: dx = dy * (x > 0)) from Python, from its run-config through the CLI
(run, validate, report, sweep) and in a fresh sweep worker.  From an installed entry point: test_packaging.py.

Truth: the outputs against the rule written another way (``where(x > 0, dy, dy * 0)``, which keeps TensorFlow's
NaN for an inf or NaN gradient where x <= 0) and against hand-written values; the roofline's DDR cycles
against the bytes the op must move over the bandwidth in the target file; double buffering against the trace
(a tile's loads run while the previous tile computes).
"""

from __future__ import annotations

import dataclasses
import importlib.util
import json
import shutil
import subprocess
import sys
import time
from pathlib import Path

import numpy as np
import pytest
import yaml

import sim
from sim.cli import main
from sim.config.run_config import load_config
from sim.sweep import load_sweep, run_point
from sim.testing import check_results, check_tiling_space
from sim.timing import bus_cost_per_written_byte

REPO = Path(__file__).resolve().parent.parent
EXAMPLES = REPO / "examples"
EXAMPLE = EXAMPLES / "relu_grad.py"
CONFIG = EXAMPLES / "relu_grad.yaml"
SWEEP = EXAMPLES / "relu_grad_sweep.yaml"
SHARED, PRIVATE = 0xA0000000, 0x10000000  # DDR; each core's private L2 (both chips)


@pytest.fixture(scope="module")
def example():
    """examples/relu_grad.py imported as a user would (from its file), not registered yet."""
    spec = importlib.util.spec_from_file_location("relu_grad_example_under_test", EXAMPLE)
    assert spec is not None and spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def expected(dy: np.ndarray, x: np.ndarray) -> np.ndarray:
    """ReluGrad written another way: the gradient where x > 0, else the gradient times zero (0, -0, or NaN for
    an inf or NaN gradient, as TensorFlow's product gives)."""
    return np.where(x > 0, dy, dy * dy.dtype.type(0))


def _call(m: sim.Simulator, symbol: str, dy: np.ndarray, x: np.ndarray, core: int | None, **extra):
    """Place dy and x (4 MiB apart) in shared memory, or in ``core``'s private memory; call; read dx back."""
    base, step = (SHARED if core is None else PRIVATE), 0x400000
    m.write(base, dy, core=core)
    m.write(base + step, x, core=core)
    where = {"core": core} if core is not None else {}
    run = m.call(symbol, dy=base, x=base + step, dx=base + 2 * step, shape=list(dy.shape), **where, **extra)
    return run, m.read(base + 2 * step, dy.shape, dy.dtype, core=core)


def test_hand_written_values(example):
    dy = np.array([1, 2, 3, np.inf, np.nan, 5, -4, 6], np.float32)
    x = np.array([1, -1, 0, -2, 3, np.nan, -0.0, 1e-30], np.float32)
    with sim.registered_kernel(example.KERNEL):
        _, dx = _call(sim.Simulator("FT78NE"), "fp_relu_grad_s", dy, x, None)
    np.testing.assert_array_equal(dx, np.array([1, 0, 0, np.nan, np.nan, 0, 0, 6], np.float32))
    assert np.signbit(dx[6])  # -4 * 0 is -0.0, as in TensorFlow


@pytest.mark.parametrize("chip,symbol,core,shape", [
    ("FT78NE", "fp_relu_grad_s", None, (3, 1000, 7)),  # 8 cores, 21000 elements: a part-filled last vector
    ("MT7004", "hp_relu_grad_s", None, (64, 4096)),  # fp16 on the chip that computes in it
    ("MT7004", "fp_relu_grad_p", 3, (1000, 33)),
    ("FT78NE", "fp_relu_grad_p", 1, (5,)),  # less than one vector
])
def test_from_python_matches_numpy(example, chip, symbol, core, shape):
    dtype = np.float16 if symbol.startswith("hp") else np.float32
    rng = np.random.default_rng(sum(shape))
    dy = rng.standard_normal(shape).astype(dtype)
    x = rng.standard_normal(shape).astype(dtype)
    x.flat[::97] = 0  # exact zeros pass no gradient
    base, step = (SHARED if core is None else PRIVATE), 0x400000
    args = dict(dy=base, x=base + step, dx=base + 2 * step, shape=list(shape), **({"core": core} if core is not None
                                                                                 else {}))
    with sim.registered_kernel(example.KERNEL):
        # sim.testing: what a kernel author checks a kernel with (exact here: rtol and atol 0).
        run = check_results(chip, symbol, args, [(base, dy), (base + step, x)],
                            {"dx": (base + 2 * step, shape, dtype)}, {"dx": expected(dy, x)}, rtol=0, atol=0)
    assert run.cores == ((core,) if core is not None else tuple(range(run.target.cores)))
    assert run.roofline.total_flops == 2 * dy.size  # a compare and a multiply per element (empty lanes not flops)


def test_the_run_is_ddr_bound_at_the_bytes_the_op_must_move(example):
    """dy and x read once, dx written once: 3 * 4 bytes per element over FT78NE's 20 B/cycle DDR (shared fluidly
    by the cores' streams), and the double-buffered pipeline gets within 1 % of it."""
    n = 1 << 20
    dy = np.ones(n, np.float32)
    with sim.registered_kernel(example.KERNEL):
        m = sim.Simulator("FT78NE")
        run, _ = _call(m, "fp_relu_grad_s", dy, dy, None, numerics=False)
    ddr = m.target.region("ddr")
    assert ddr.bandwidth_bytes_per_cycle == 20
    assert run.roofline.bound_by == "ddr"
    assert run.roofline.resource_cycles["ddr"] == pytest.approx(3 * 4 * n / 20)
    assert run.roofline.cycles <= run.cycles <= 1.01 * run.roofline.cycles


def test_tiles_are_double_buffered(example):
    """Tiles alternate two slots with two sets of buffers, and that pays: the same tiles through one slot (each
    tile's loads wait for the previous tile's stores) take longer on one core."""
    n = 4 * 4096
    dy = np.ones(n, np.float32)

    class OneSlot(type(example.KERNEL)):  # the example's plan with every tile in slot 0
        name = "relu_grad_one_slot"

        def plan(self, call, ctx):
            p = super().plan(call, ctx)
            phase = p.phases[0]
            serial = {c: tuple(dataclasses.replace(t, slot=0) for t in ts) for c, ts in phase.tiles.items()}
            return dataclasses.replace(p, phases=(dataclasses.replace(phase, tiles=serial),))

    with sim.registered_kernel(example.KERNEL), sim.registered_kernel(OneSlot()):
        runs = {name: _call(sim.Simulator("FT78NE"), f"fp_{name}_s", dy, dy, None, core_mask=1,
                            tiling={"tile_elements": 4096})[0] for name in ("relu_grad", "relu_grad_one_slot")}
    tiles = runs["relu_grad"].plan.phases[0].tiles[0]
    assert len(tiles) == 4 and [t.slot for t in tiles] == [0, 1, 0, 1]
    slots = {t.slot: {op.addr for op in t.compute.inputs + t.compute.outputs} for t in tiles}
    assert not slots[0] & slots[1]  # two sets of buffers

    def first_load_start(run, tile):  # when the tile's loads start
        return min(e.start for e in run.events if e.kind == "dma_in" and e.tile == tile)

    def computed(run, tile):  # when the tile's compute ends
        return next(e.end for e in run.events if e.unit == "compute" and e.tile == tile)

    def landed(run, tile):  # when the tile's last store lands
        return max(e.end for e in run.events if e.kind == "dma_out" and e.tile == tile)

    double, serial = runs["relu_grad"], runs["relu_grad_one_slot"]
    # Tile 1's loads overlap tile 0's compute; later ones wait only for their own slot's previous tile.  Through
    # one slot every tile's loads wait for the previous tile's stores.
    assert first_load_start(double, 1) < computed(double, 0)
    for i in range(1, 4):
        assert i < 2 or first_load_start(double, i) >= landed(double, i - 2)
        assert first_load_start(serial, i) >= landed(serial, i - 1)
    assert double.cycles < serial.cycles


def test_sim_testing_names_the_output_and_the_worst_element_and_checks_the_space(example):
    """check_results against a wrong reference (one element off) names the output, the element and both values;
    check_tiling_space passes on the example's space (every candidate plans legally or does not fit)."""
    dy = np.arange(1, 9, dtype=np.float32)
    x = np.ones(8, np.float32)
    wrong = dy.copy()
    wrong[5] = 0
    args = dict(dy=SHARED, x=SHARED + 0x400000, dx=SHARED + 0x800000, shape=[8])
    with sim.registered_kernel(example.KERNEL):
        with pytest.raises(AssertionError, match=r"fp_relu_grad_s on FT78NE: output 'dx' differs from the reference "
                                                 r"at 1 of 8 elements; worst at \(5,\): 6\.0 against 0\.0"):
            check_results("FT78NE", "fp_relu_grad_s", args, [(SHARED, dy), (SHARED + 0x400000, x)],
                          {"dx": (SHARED + 0x800000, (8,), np.float32)}, {"dx": wrong})
        assert check_tiling_space("FT78NE", "fp_relu_grad_s", {**args, "shape": [3, 1000, 7]})
        assert not check_tiling_space("FT78NE", "fp_relu_grad_s", {**args, "dx": SHARED + 1})  # a bad layout


def test_its_tiling_space(example):
    dy = np.ones((64, 4096), np.float32)
    with sim.registered_kernel(example.KERNEL):
        m = sim.Simulator("FT78NE")
        run, _ = _call(m, "fp_relu_grad_s", dy, dy, None)
        assert run.tiling is not None and run.tiling.source == "cost model" and len(run.tiling.candidates) >= 2
        run, _ = _call(m, "fp_relu_grad_s", dy, dy, None, tiling={"tile_elements": 1000})
        assert run.tiling.source == "given"
        assert max(t.compute.outputs[0].shape[0] for ts in run.plan.phases[0].tiles.values() for t in ts) == 1000
        with pytest.raises(sim.KernelArgError, match=r"argument 'tiling': unknown key 'rows' \(this kernel takes: "
                                                     r"tile_elements\)"):
            _call(m, "fp_relu_grad_s", dy, dy, None, tiling={"rows": 4})
        with pytest.raises(sim.KernelArgError, match=r"argument 'tiling.tile_elements': expected an integer in "
                                                     r"1..262144, got 0"):
            _call(m, "fp_relu_grad_s", dy, dy, None, tiling={"tile_elements": 0})
        with pytest.raises(sim.LayoutError, match=r"layout rule 'scratchpad-fit': .*tiling tile_elements=200000 "
                                                  r"does not fit: a slot of the vector staging level holds 32768 "
                                                  r"elements"):
            _call(m, "fp_relu_grad_s", dy, dy, None, tiling={"tile_elements": 200000})
        # Ten million one-element tiles are refused before a tile is planned, naming the key and the count.
        t0 = time.perf_counter()
        with pytest.raises(sim.KernelArgError,
                           match=r"plans up to 10000000 tiles .*, more than the 100000 .*tile_elements"):
            m.plan("fp_relu_grad_s", dy=0x80000000, x=0x88000000, dx=0x90000000, shape=[10 ** 7],
                   tiling={"tile_elements": 1})
        assert time.perf_counter() - t0 < 1


def test_its_arguments_are_checked_and_its_layout_too(example):
    with sim.registered_kernel(example.KERNEL):
        m = sim.Simulator("FT78NE")
        with pytest.raises(sim.KernelArgError, match=r"fp_relu_grad_s: missing argument 'shape' \(sizes of dy"):
            m.call("fp_relu_grad_s", dy=SHARED, x=SHARED, dx=SHARED + 0x1000)
        with pytest.raises(sim.KernelArgError, match=r"symbol 'hp_relu_grad_s' computes in fp16, which FT78NE lacks"):
            m.call("hp_relu_grad_s", dy=SHARED, x=SHARED, dx=SHARED + 0x1000, shape=[4])
        with pytest.raises(sim.LayoutError, match=r"layout rule 'no-overlap': output buffer 'dx'"):
            m.call("fp_relu_grad_s", dy=SHARED, x=SHARED + 0x1000, dx=SHARED + 8, shape=[64])


# --- through its run-config --------------------------------------------------------------------------

def _config_inputs() -> dict[str, np.ndarray]:
    """The config's data, rebuilt as docs/run-config.md says a ``random`` entry is built."""
    cfg = load_config(CONFIG, allow_kernels=True)
    out = {}
    for s in cfg.data:
        r = {"seed": 0, "low": -1.0, "high": 1.0, **s.source["random"]}
        out[s.name] = np.random.default_rng(r["seed"]).uniform(r["low"], r["high"], s.shape).astype(s.dtype)
    return out


def test_the_run_config_runs_validates_and_reports_through_the_cli(tmp_path, capsys):
    assert main(["validate", str(CONFIG), "--allow-kernels"]) == 0
    out = capsys.readouterr().out
    assert out.rstrip().endswith("layout OK") and "dx" in out
    assert main(["run", str(CONFIG), "--out-dir", str(tmp_path), "--allow-kernels"]) == 0
    out = capsys.readouterr().out
    assert f"kernel: file {EXAMPLE.resolve()}" in out
    assert "chosen by the cost model" in out
    data = _config_inputs()
    np.testing.assert_array_equal(np.load(tmp_path / "relu_grad.dx.npy"), expected(data["dy"], data["x"]))
    trace = json.loads((tmp_path / "relu_grad.json").read_text())
    assert trace["metadata"]["kernel_origin"] == f"file {EXAMPLE.resolve()}"
    assert trace["metadata"]["symbol"] == "fp_relu_grad_s"
    assert main(["report", str(CONFIG), "-o", str(tmp_path / "report.html"), "--allow-kernels"]) == 0
    page = (tmp_path / "report.html").read_text()
    assert f"<dt>kernel</dt><dd>file {EXAMPLE.resolve()}</dd>" in page


def test_the_cli_and_the_python_api_agree(example, tmp_path, capsys):
    assert main(["run", str(CONFIG), "--out-dir", str(tmp_path), "--allow-kernels"]) == 0
    cycles = int(capsys.readouterr().out.split(" cycles")[0].rsplit(" ", 1)[-1])
    data = _config_inputs()
    cfg = yaml.safe_load(CONFIG.read_text())
    with sim.registered_kernel(example.KERNEL, replace=True):  # (the config's file kernel is registered too)
        m = sim.Simulator("FT78NE")
        args = cfg["args"]
        m.write(args["dy"], data["dy"])
        m.write(args["x"], data["x"])
        assert m.call(cfg["symbol"], **args).cycles == cycles


def test_the_sweep_runs_through_the_cli(tmp_path, capsys):
    assert main(["sweep", str(SWEEP), "-o", str(tmp_path), "--workers", "2", "--allow-kernels"]) == 0
    out = capsys.readouterr().out
    assert "8 points: 8 ran, 0 failed" in out
    rows = [json.loads(line) for line in (tmp_path / "points.jsonl").read_text().splitlines()]
    by = {(r["cores"], r["tiling.tile_elements"]): r for r in rows}
    assert set(by) == {(c, t) for c in (1, 2, 4, 8) for t in (4096, 16384)}
    assert all(r["symbol"] == "fp_relu_grad_s" and not r["error"] for r in rows)
    # DDR-bound at every core count: one core's two engines can already draw all of DDR (a lone stream takes the
    # whole region), so more cores never make it slower and never beat DDR's bandwidth (3 tensors of 256x4096
    # fp32 over 20 B/cycle).  One core with the large tiles is within 10 % of that bound; with the small ones
    # within 20 %: each tile's compute (a vector-ALU-bound loop, 2 cycles a vector) and its transfers' setups and
    # latencies leave DDR idle while both slots wait, a larger share of a short tile's time.  The third it writes
    # costs DDR up to alpha more per byte where reads stream beside it (its bus turning, sim/engine/turnaround.py).
    ddr = sim.load_target("FT78NE").region("ddr")
    ddr_bound = 3 * 4 * 256 * 4096 / ddr.bandwidth_bytes_per_cycle
    turns = 4 * 256 * 4096 * float(bus_cost_per_written_byte(ddr)) / ddr.bandwidth_bytes_per_cycle
    for t, slack in ((4096, 1.2), (16384, 1.1)):
        cycles = [by[(c, t)]["cycles"] for c in (1, 2, 4, 8)]
        assert cycles == sorted(cycles, reverse=True)
        assert ddr_bound < cycles[-1] and cycles[0] < slack * (ddr_bound + turns)


def test_a_fresh_worker_process_imports_the_configs_kernel_file():
    """A sweep worker (a Dask one, or a spawned one) starts without the parent's registrations: run_point imports
    the config's kernels: itself."""
    point = load_sweep(SWEEP, allow_kernels=True).points()[0]
    here = run_point(point)
    code = "import json, sys\nfrom sim.sweep import run_point\nprint(json.dumps(run_point(json.load(sys.stdin))))"
    proc = subprocess.run([sys.executable, "-c", code], input=json.dumps(point), capture_output=True, text=True,
                          cwd=REPO, check=False)
    assert proc.returncode == 0, proc.stderr
    there = json.loads(proc.stdout)
    assert not there["error"] and there["cycles"] == here["cycles"] > 0


def test_an_edited_kernel_file_runs_its_sweep_points_again(tmp_path):
    for name in ("relu_grad.py", "relu_grad.yaml", "relu_grad_sweep.yaml"):
        shutil.copy(EXAMPLES / name, tmp_path / name)
    before = [p["id"] for p in load_sweep(tmp_path / "relu_grad_sweep.yaml", allow_kernels=True).points()]
    with (tmp_path / "relu_grad.py").open("a") as f:
        f.write("# edited\n")
    after = [p["id"] for p in load_sweep(tmp_path / "relu_grad_sweep.yaml", allow_kernels=True).points()]
    assert len(before) == len(after) == 8 and not set(before) & set(after)
