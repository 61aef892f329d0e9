"""The Python API of SPEC section 3 and the library's two BatchNormGrad examples, checked against the formula."""

import json

import numpy as np
import pytest

import sim


def bn_formula(x, dy, mean, invar, scale, train):
    """SPEC section 4's formulas in float64."""
    x, dy = x.astype(np.float64), dy.astype(np.float64)
    m = x.shape[0]
    xh = (x - mean) * invar
    dbias, dscale = dy.sum(0), (dy * xh).sum(0)
    dx = scale * invar / m * (m * dy - dbias - xh * dscale) if train else dy * scale * invar
    return dx, dbias, dscale


def place_bn(m, rng, batch, channel, addrs, core=None, dtype=np.float32):
    x = rng.uniform(-2, 2, (batch, channel)).astype(dtype)
    dy = rng.uniform(-1, 1, (batch, channel)).astype(dtype)
    mean = x.astype(np.float32).mean(0)
    invar = rng.uniform(0.5, 2, channel).astype(np.float32)
    scale = rng.uniform(0.5, 1.5, channel).astype(np.float32)
    for name, arr in (("x", x), ("dy", dy), ("mean", mean), ("invar", invar), ("scale", scale)):
        m.write(addrs[name], arr, core=core)
    return x, dy, mean, invar, scale


SHARED_EXAMPLE = dict(x=0xA0000000, dy=0xB0000000, dx=0xA1000000, mean=0xC0000000, invar=0xD0000000,
                      scale=0xE0000000, dbias=0xB1000000, dscale=0xC1000000)
PRIVATE_EXAMPLE = dict(x=0x10000000, dy=0x10100000, dx=0x10200000, mean=0x10300000, invar=0x10400000,
                       scale=0x10500000, dbias=0x10600000, dscale=0x10700000)


def test_shared_library_example_exactly_as_written():
    m = sim.Simulator(sim.load_target("FT78NE"))
    x, dy, mean, invar, scale = place_bn(m, np.random.default_rng(0), 4, 64, SHARED_EXAMPLE)
    run = m.call("fp_batch_norm_grad_s", x=0xA0000000, dy=0xB0000000, dx=0xA1000000,
                 params=[0xC0000000, 0xD0000000, 0xE0000000, 0xB1000000, 0xC1000000, 4, 64, 1],
                 core_mask=0xFF)
    dx, dbias, dscale = bn_formula(x, dy, mean, invar, scale, True)
    np.testing.assert_allclose(m.read(0xA1000000, (4, 64), np.float32), dx, rtol=1e-5, atol=1e-5)
    np.testing.assert_allclose(m.read(0xB1000000, (64,), np.float32), dbias, rtol=1e-5, atol=1e-5)
    np.testing.assert_allclose(m.read(0xC1000000, (64,), np.float32), dscale, rtol=1e-5, atol=1e-5)
    assert isinstance(run.cycles, int) and run.cycles > sim.load_target("FT78NE").launch_overhead_cycles
    assert {e.core for e in run.events} == set(range(8))


def test_private_library_example_exactly_as_written():
    m = sim.Simulator("FT78NE")
    x, dy, mean, invar, scale = place_bn(m, np.random.default_rng(1), 4, 32, PRIVATE_EXAMPLE, core=0)
    run = m.call("fp_batch_norm_grad_p", x=0x10000000, dy=0x10100000, dx=0x10200000,
                 params=[0x10300000, 0x10400000, 0x10500000, 0x10600000, 0x10700000, 4, 32, 1])
    dx, dbias, dscale = bn_formula(x, dy, mean, invar, scale, True)
    np.testing.assert_allclose(m.read(0x10200000, (4, 32), np.float32, core=0), dx, rtol=1e-5, atol=1e-5)
    np.testing.assert_allclose(m.read(0x10600000, (32,), np.float32, core=0), dbias, rtol=1e-5, atol=1e-5)
    np.testing.assert_allclose(m.read(0x10700000, (32,), np.float32, core=0), dscale, rtol=1e-5, atol=1e-5)
    assert {e.core for e in run.events} == {0}
    # Core 0's private memory is not core 1's.
    assert not m.read(0x10200000, (4, 32), np.float32, core=1).any()


@pytest.mark.parametrize("train", [0, 1])
def test_fp16_on_mt7004_matches_formula(train):
    m = sim.Simulator("mt7004")
    x, dy, mean, invar, scale = place_bn(m, np.random.default_rng(2), 40, 100, SHARED_EXAMPLE, dtype=np.float16)
    m.call("hp_batch_norm_grad_s", x=0xA0000000, dy=0xB0000000, dx=0xA1000000,
           params=[0xC0000000, 0xD0000000, 0xE0000000, 0xB1000000, 0xC1000000, 40, 100, train])
    dx, dbias, dscale = bn_formula(x, dy, mean, invar, scale, train)
    got = m.read(0xA1000000, (40, 100), np.float16)
    assert got.dtype == np.float16
    np.testing.assert_allclose(got.astype(np.float64), dx, rtol=2e-3, atol=2e-3)
    np.testing.assert_allclose(m.read(0xB1000000, (100,), np.float32), dbias, rtol=1e-5, atol=1e-4)


def test_long_batch_takes_the_two_pass_row_tiling_and_stays_exact():
    """A batch too long for one whole-batch tile goes through row tiles; the formula still holds."""
    m = sim.Simulator("MT7004")
    batch, channel = 6000, 40
    x, dy, mean, invar, scale = place_bn(m, np.random.default_rng(3), batch, channel, SHARED_EXAMPLE)
    call, plan = m.plan("fp_batch_norm_grad_s", x=0xA0000000, dy=0xB0000000, dx=0xA1000000,
                        params=[0xC0000000, 0xD0000000, 0xE0000000, 0xB1000000, 0xC1000000, batch, channel, 1])
    # Row tiles read x twice (sums, then dx): more loads of x than channel blocks.
    n_tiles = sum(len(t) for ph in plan.phases for t in ph.tiles.values())
    assert n_tiles > 8
    m.call("fp_batch_norm_grad_s", x=0xA0000000, dy=0xB0000000, dx=0xA1000000,
           params=[0xC0000000, 0xD0000000, 0xE0000000, 0xB1000000, 0xC1000000, batch, channel, 1])
    dx, dbias, dscale = bn_formula(x, dy, mean, invar, scale, True)
    np.testing.assert_allclose(m.read(0xA1000000, (batch, channel), np.float32), dx, rtol=1e-3, atol=1e-4)
    np.testing.assert_allclose(m.read(0xC1000000, (channel,), np.float32), dscale, rtol=1e-4, atol=1e-2)


def test_write_read_roundtrip_little_endian_and_sparse():
    m = sim.Simulator("FT78NE")
    m.write(0xFFFFFFF0, np.arange(4, dtype=np.uint32))
    assert m.read(0xFFFFFFF0, 16, np.uint8).tolist()[:8] == [0, 0, 0, 0, 1, 0, 0, 0]
    big = np.arange(3 << 18, dtype=np.float32)  # spans several pages
    m.write(0x80000004, big)
    np.testing.assert_array_equal(m.read(0x80000004, big.shape, np.float32), big)
    assert not m.read(0xC0000000, (1024,), np.float32).any()  # untouched memory reads as zeros


def test_trace_json_and_csv(tmp_path):
    m = sim.Simulator("FT78NE")
    run = m.call("fp_batch_norm_grad_s", x=0xA0000000, dy=0xB0000000, dx=0xA1000000,
                 params=[0xC0000000, 0xD0000000, 0xE0000000, 0xB1000000, 0xC1000000, 4, 64, 1],
                 tiling={"split": "channels", "channel_block": 8})  # (every core a block: its rows in the trace)
    doc = json.loads(run.write_trace(tmp_path / "bn.json").read_text())
    slices = [e for e in doc["traceEvents"] if e["ph"] == "X"]
    names = {e["args"]["name"] for e in doc["traceEvents"] if e["ph"] == "M" and e["name"] == "thread_name"}
    assert "core 0 · compute" in names and "core 7 · DMA 0" in names
    assert len(slices) == len(run.events)
    clock = sim.load_target("FT78NE").clock_hz
    assert max(e["ts"] + e["dur"] for e in slices) == pytest.approx(run.cycles * 1e6 / clock)
    csv_text = run.write_trace(tmp_path / "bn.csv").read_text().splitlines()
    assert csv_text[0].startswith("core,unit,kind,start,end,bytes,src,dst")
    assert len(csv_text) == len(run.events) + 1
    kinds = {e.kind for e in run.events}
    assert {"launch", "dma_in", "compute", "dma_out"} <= kinds
    dma = [e for e in run.events if e.kind == "dma_in"]
    assert all(e.src is not None and e.dst is not None and e.bytes > 0 and e.tile is not None for e in dma)
