"""Tiling choices across the kernels (issue 6, item 3): the cost model's default is never slower than a fixed
naive tiling on every kernel's large example, near ties go to the fewest tiles, and run-configs carry a
``tiling:``.  Each kernel's own tilings (every one it lists right and honoured, bad ones refused) are tested
with the kernel, in tests/kernels/."""

from pathlib import Path

import pytest
import yaml

import sim
from kernels.examples import KERNELS, example
from sim.cli import main
from sim.config.run_config import load_config
from sim.errors import ConfigError
from sim.run.runner import execute

ROOT = Path(__file__).resolve().parent.parent


# --- the cost model's default against a fixed naive tiling on the large shapes ------------------------------

# kernel, a naive tiling of its large example (the benchmark's): a plain split, one tile size everywhere
NAIVE = [
    ("batch_norm_grad", {"split": "rows", "tile_elements": 4096}),
    ("fused_batch_norm_grad", {"split": "rows", "tile_elements": 4096}),
    ("fake_quant_with_min_max_vars_gradient", {"tile_elements": 4096}),
    ("depthwise_conv2d_backprop_input", {"channel_parts": 1, "tile_rows": 8, "tile_cols": 112, "tile_channels": 32}),
    # Conv2DBackpropFilter lists its own tilings already; checked here too so every kernel's large shape is.
    ("conv2d_backprop_filter", {"split": "spatial", "in_c_slice": 32, "out_c_slice": 32}),
    # GEMM: small A blocks and shallow k blocks (more blocks, more DMA setups and C traffic), narrow B blocks.
    ("gemm", {"split": "n", "m_block": 48, "n_block": 64, "k_block": 128, "m_panel": 12, "m_micro": 6}),
]


def test_every_kernel_has_a_naive_tiling_here():
    assert {k for k, _ in NAIVE} == set(KERNELS)


@pytest.mark.parametrize("chip,prefix", [("FT78NE", "fp"), ("MT7004", "hp")])
@pytest.mark.parametrize("name,naive", NAIVE, ids=[k for k, _ in NAIVE])
def test_default_never_slower_than_naive_on_large_shapes(name, naive, chip, prefix):
    """Strictly cheapest (tolerance 0): never slower than the naive tiling.  Default: within the tolerance of
    that, and never more tiles than the strict choice."""
    e = example(name, "large", chip, prefix)
    # The naive tiling's other keys (the cores of a call, the micro-kernel) at the kernel's preferred values.
    probe = sim.Simulator(chip)
    call = probe.bind(e.symbol, **e.args)
    naive = probe.kernel_of(call).tiling_space(call, probe.context(call)).completions(naive, 1)[0][0]
    runs = {}
    for label, tiling, tolerance in (("strict", None, 0.0), ("default", None, sim.TILING_TOLERANCE),
                                     ("naive", naive, 0.0)):
        m = sim.Simulator(chip, tiling_tolerance=tolerance)
        e.place_values(m.write)
        runs[label] = m.call(e.symbol, numerics=False, tiling=tiling, **e.args)
    strict, default, naive_run = runs["strict"], runs["default"], runs["naive"]
    assert strict.tiling.source == default.tiling.source == "cost model" and naive_run.tiling.source == "given"
    assert strict.cycles <= naive_run.cycles, (strict.tiling.describe(), naive_run.cycles)
    assert default.cycles <= strict.cycles * (1 + sim.TILING_TOLERANCE), default.tiling.describe()
    assert default.plan.tile_count <= strict.plan.tile_count
    assert default.cycles >= default.roofline.cycles


def test_near_ties_go_to_the_fewest_tiles():
    """MT7004 fp32 BatchNormGrad, large shape: rows-split tiles of 1769 elements are the cheapest, and tiles of
    7077 elements cost within 1 % of them in a quarter of the tiles; the default takes the fewest tiles within
    1 %, tolerance 0 the cheapest."""
    e = example("batch_norm_grad", "large", "MT7004", "fp")
    args, symbol = e.args, e.symbol
    # One simulator chooses at both tolerances (a choice is kept per tolerance, so each is a search of its own).
    m = sim.Simulator("MT7004", tiling_tolerance=0.0)
    runs = {}
    for tol in (0.0, 0.01):
        m.tiling_tolerance = tol
        runs[tol] = m.call(symbol, numerics=False, **args)
    priced = [(c, cycles) for c, cycles in runs[0.01].tiling.candidates if cycles is not None]
    best = min(cycles for _, cycles in priced)
    tiles = {str(c): m.plan(symbol, tiling=c, **args)[1].tile_count for c, _ in priced}
    tied = [c for c, cycles in priced if cycles <= best * 1.01]
    assert len(tied) >= 2
    assert runs[0.01].tiling.tiling == min(tied, key=lambda c: tiles[str(c)])
    assert runs[0.0].cycles == best and runs[0.0].plan.tile_count > runs[0.01].plan.tile_count
    assert runs[0.01].plan.tile_count == min(tiles[str(c)] for c in tied)
    assert "the fewest tiles within 1% of the cheapest" in runs[0.01].tiling.describe()
    assert "fewest tiles" not in runs[0.0].tiling.describe()
    # Back at each tolerance, the simulator gives the choice it made there (choices are kept per tolerance).
    m.tiling_tolerance = 0.0
    assert m.call(symbol, numerics=False, **args).tiling.tiling == runs[0.0].tiling.tiling
    m.tiling_tolerance = 0.01
    assert m.call(symbol, numerics=False, **args).tiling.tiling == runs[0.01].tiling.tiling


@pytest.mark.parametrize("bad", [-0.1, 1.0, "0.01", True, None, float("nan")])
def test_tiling_tolerance_must_be_a_fraction(bad):
    with pytest.raises(sim.KernelArgError, match="tiling_tolerance"):
        sim.Simulator("FT78NE", tiling_tolerance=bad)
    m = sim.Simulator("FT78NE")
    with pytest.raises(sim.KernelArgError, match="tiling_tolerance"):
        m.tiling_tolerance = bad
    assert m.tiling_tolerance == sim.TILING_TOLERANCE


# --- run-configs ---------------------------------------------------------------------------------------------

def bn_config(tmp_path: Path, tiling) -> Path:
    doc = yaml.safe_load((ROOT / "configs" / "ft78ne_batch_norm_grad_s.yaml").read_text())
    if tiling is not None:
        doc["tiling"] = tiling
    path = tmp_path / "bn.yaml"
    path.write_text(yaml.safe_dump(doc))
    return path


def test_run_config_tiling_is_kept_and_honoured(tmp_path, capsys):
    tiling = {"split": "rows", "tile_elements": 32}
    cfg = load_config(bn_config(tmp_path, tiling))
    assert cfg.tiling == tiling
    m, run = execute(cfg)
    assert run.tiling.tiling == tiling and run.tiling.source == "given"
    assert [p.name.split()[0] for p in run.plan.phases] == ["partial", "reduce"]
    assert main(["run", str(cfg.path), "--out-dir", str(tmp_path)]) == 0
    assert "(given)" in capsys.readouterr().out
    assert load_config(bn_config(tmp_path, None)).tiling is None


@pytest.mark.parametrize("tiling,match", [([1, 2], "tiling"), ({"split": {"a": 1}}, "tiling.split"),
                                          ({1: "rows"}, "tiling")])
def test_run_config_bad_tiling_refused_when_loaded(tmp_path, tiling, match):
    with pytest.raises(ConfigError, match=match):
        load_config(bn_config(tmp_path, tiling))


def test_run_config_tiling_the_kernel_refuses(tmp_path):
    with pytest.raises(sim.KernelArgError, match="tiling.split"):
        execute(load_config(bn_config(tmp_path, {"split": "diagonal"})))
    # validate plans with the config's tiling: one that cannot fit is a scratchpad-fit violation.
    path = bn_config(tmp_path, {"split": "channels", "channel_block": 64})
    assert main(["validate", str(path)]) == 0
    doc = yaml.safe_load(path.read_text())
    doc["args"]["params"][5:7] = [60000, 64]
    path.write_text(yaml.safe_dump(doc))
    assert main(["validate", str(path)]) == 1


def test_run_config_tiling_tolerance(tmp_path):
    """``tiling_tolerance:`` reaches the simulator: 0 keeps the strictly cheapest candidate."""
    doc = yaml.safe_load((ROOT / "configs" / "mt7004_hp_batch_norm_grad_s.yaml").read_text())
    # The bench's large shape, timing only: the params array in memory says 25088 rows.
    params = next(d for d in doc["data"] if d["name"] == "params")
    params["values"][5] = 25088
    doc["data"], doc["outputs"], doc["numerics"] = [params], [], False
    chosen = {}
    for tol in (0, 0.01):
        path = tmp_path / f"bn{tol}.yaml"
        path.write_text(yaml.safe_dump(dict(doc, tiling_tolerance=tol)))
        cfg = load_config(path)
        assert cfg.tiling_tolerance == tol
        m, run = execute(cfg)
        assert m.tiling_tolerance == tol
        chosen[tol] = run
    for tol, run in chosen.items():  # each run chose by its own tolerance: the fewest tiles within it
        choice = run.tiling
        assert choice.source == "cost model" and choice.tolerance == tol
        priced = [cycles for _, cycles in choice.candidates if cycles is not None]
        mine = next(cycles for c, cycles in choice.candidates if c == choice.tiling)
        assert mine <= min(priced) * (1 + tol)
    assert chosen[0.01].plan.tile_count <= chosen[0].plan.tile_count
    assert chosen[0].cycles <= chosen[0.01].cycles <= chosen[0].cycles * 1.01
    for bad in (-1, 1, "x", True):
        path = tmp_path / "bad.yaml"
        path.write_text(yaml.safe_dump(dict(doc, tiling_tolerance=bad)))
        with pytest.raises(ConfigError, match="tiling_tolerance"):
            load_config(path)
