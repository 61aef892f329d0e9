"""dspsim calibrate: a target perturbed by up to 40% is recovered from its own measurements; parameters the
measurements cannot identify are said and kept; the fitted file is a commented copy of the target."""

import csv
import io
import json
import re
from pathlib import Path

import numpy as np
import pytest
import yaml

import sim
import sim.run.progress
from kernels.common.args import check_args, require_address, require_int
from kernels.common.loops import gemm_micro_kernel
from sim.calibrate import (
    Measurement,
    calibrate,
    free_parameters,
    load_measurements,
    load_target_document,
    parameter_values,
    simulate,
    with_parameters,
)
from sim.cli import main
from sim.errors import ConfigError
from sim.model.call import ArgSpec, BoundCall, Buffer
from sim.model.plan import Compute, Operand, Phase, Plan, Tile
from sim.model.target_loader import parse_target

G = 0x40000000


def bn(batch, channel, base=0x80000000, mask=0xFF, step=0x100000):
    """BatchNormGrad's arguments with its buffers ``step`` apart from ``base`` (in GSM: 512 KiB apart, below the
    staging windows)."""
    return {"x": base, "dy": base + step, "dx": base + 2 * step,
            "params": [base + 3 * step, base + 3 * step + 0x10000, base + 3 * step + 0x20000, base + 3 * step + 0x30000,
                       base + 3 * step + 0x40000, batch, channel, 1], "core_mask": mask}


def conv_p(n, hw, c, tiling=None):
    args = {"input": 0x10000000, "out_backprop": 0x10400000, "output": 0x10800000, "input_shape": [n, hw, hw, c],
            "filter_sizes": [3, 3, c, c], "strides": [1, 1, 1, 1], "padding": "SAME", "core": 0}
    return {**args, "tiling": tiling} if tiling else args


class MicroKernels:
    """A user kernel whose tiles state their inner loop: ``tiles`` tiles on core 0, each a 2x32 fp32 GEMM
    micro-kernel of ``k`` steps entered ``entries`` times (recurrence-bound: its II is the FMAC latency), on 64
    floats in AM (timing only: no DMA, the tiles are all compute).  Its cycles lean on the compute parameters
    flops-priced computes cannot tell apart: the FMAC latency (times k), the loop overhead (times the entries)
    and the tile overhead (times the tiles)."""

    name = "micro_kernels"
    args = (ArgSpec("x", "in_ptr", "input"), ArgSpec("y", "out_ptr", "output"), ArgSpec("k", "int", "steps"),
            ArgSpec("entries", "int", "loop entries"), ArgSpec("tiles", "int", "tiles"))
    precisions = ("fp32",)

    def bind(self, symbol, precision, variant, cores, args, read):
        a = check_args(symbol, self.args, args)
        attrs = {n: require_int(n, a[n], minimum=1) for n in ("k", "entries", "tiles")}
        f32 = np.dtype(np.float32)
        return BoundCall(symbol, precision, variant, cores,
                         (Buffer("x", require_address("x", a["x"]), (64,), f32, "input"),
                          Buffer("y", require_address("y", a["y"]), (64,), f32, "output")), attrs)

    def plan(self, call, ctx):
        k, entries, tiles = (call.attrs[n] for n in ("k", "entries", "tiles"))
        loop = gemm_micro_kernel(ctx.target.core, "fp32", 2, 32, k, itemsize=4, entries=entries)
        out = []
        for i in range(tiles):
            slot = ctx.vector_level.base + (i % 2) * 0x1000
            # (it reads nothing: a compute may read only bytes the call wrote, and these tiles load none)
            dst = Operand(slot + 0x400, (64,), np.dtype(np.float32))
            out.append(Tile(i, (), Compute(lambda: (np.zeros(64, np.float32),), (), (dst,),
                                           flops=2 * 2 * 32 * k * entries, precision="fp32", loops=(loop,)), (),
                            slot=i % 2))
        return Plan(call.cores[:1], (Phase("loops", {call.cores[0]: tuple(out)}, barrier_after=False),), "fp32")


def micro(k, entries, tiles):
    return {"x": 0x80000000, "y": 0x80001000, "k": k, "entries": entries, "tiles": tiles, "core_mask": 0x1}


# Each measurement leans on some parameters more than others: a tiny call on the launch, big streams on DDR or
# GSM bandwidth, a long row of small DMAs on their setup, one cut into many small tiles on the per-tile
# overhead, and the micro-kernels: long recurrence-bound k-loops on the FMAC latency, loops entered many times
# on the loop overhead.
CALLS = [
    ("fp_batch_norm_grad_s", bn(4, 64)),
    ("fp_batch_norm_grad_s", bn(256, 1024)),
    ("fp_batch_norm_grad_s", bn(2, 4096, mask=0x1)),
    ("fp_batch_norm_grad_s", bn(64, 512, base=G, step=0x80000)),
    ("fp_batch_norm_grad_s", bn(16, 512, base=G, mask=0x3, step=0x80000)),
    ("fp_conv2d_backprop_filter_p", conv_p(2, 16, 64)),
    ("fp_conv2d_backprop_filter_p", conv_p(1, 8, 32, {"split": "filter", "in_c_slice": 32, "out_c_slice": 8})),
    ("fp_conv2d_backprop_filter_p", conv_p(1, 8, 32, {"split": "filter", "in_c_slice": 8, "out_c_slice": 8})),
    ("fp_conv2d_backprop_filter_s", {"input": 0x80000000, "out_backprop": 0x90000000, "output": 0xA0000000,
                                     "input_shape": [4, 28, 28, 64], "filter_sizes": [3, 3, 64, 64],
                                     "strides": [1, 1, 1, 1], "padding": "SAME"}),
    # One core through 32 tiles of 4 rows: the per-tile overhead shows even where the vector work is slow.
    ("fp_batch_norm_grad_s", {**bn(128, 64, mask=0x1), "tiling": {"split": "rows", "tile_elements": 256}}),
    ("fp_micro_kernels_s", micro(k=2048, entries=1, tiles=2)),
    ("fp_micro_kernels_s", micro(k=1, entries=400, tiles=2)),
    ("fp_micro_kernels_s", micro(k=1, entries=1, tiles=100)),
]
#: FT78NE's free parameters (its shared regions' bandwidths, DDR outermost, then the chip's), truth = nominal x factor.
FACTORS = {"regions.ddr.bandwidth_bytes_per_cycle": 1.3, "regions.gsm.bandwidth_bytes_per_cycle": 0.7,
           "dma.setup_cycles": 1.4, "core.tile_overhead_cycles": 1.35, "core.loop_overhead_cycles": 1.5,
           "core.units.fmac.latency_cycles": 1.34, "sync.launch_overhead_cycles": 1.25}


@pytest.fixture(autouse=True)
def micro_kernels():
    """The loop-stating user kernel the measurements call, registered for every test of the module."""
    with sim.registered_kernel(MicroKernels()):
        yield


ROOT = Path(__file__).resolve().parent.parent


def write_measurements(path, doc, calls=CALLS):
    cycles = simulate(doc, [Measurement(s, a, 1) for s, a in calls])
    with path.open("w", newline="") as fh:
        w = csv.writer(fh)
        w.writerow(["symbol", "args", "cycles"])
        for (symbol, args), c in zip(calls, cycles):
            w.writerow([symbol, json.dumps({k: (f"{v:#x}" if k in ("x", "dy", "dx", "input", "output") else v)
                                            for k, v in args.items()}), int(c)])
    return cycles


def test_perturbed_target_is_recovered_within_5_percent(tmp_path, capsys):
    doc, _ = load_target_document("FT78NE")
    names = free_parameters(doc)
    assert names == list(FACTORS)
    nominal = parameter_values(doc, names)
    truth_doc = with_parameters(doc, {n: nominal[n] * FACTORS[n] for n in names})
    truth = parameter_values(truth_doc, names)  # as stored: cycles rounded to whole numbers
    measured = write_measurements(tmp_path / "m.csv", truth_doc)
    out = tmp_path / "my_chip.yaml"
    assert main(["calibrate", str(tmp_path / "m.csv"), "--target", "FT78NE", "-o", str(out)]) == 0
    report = capsys.readouterr().out
    assert "before" in report and "after" in report
    fitted = parameter_values(yaml.safe_load(out.read_text()), names)
    for n in names:
        assert fitted[n] == pytest.approx(truth[n], rel=0.05), (n, fitted[n], truth[n])
    # The fitted file is an ordinary target, and it reproduces the measurements within 2%.
    chip = sim.load_target(out)
    assert chip.core.tile_overhead_cycles == pytest.approx(truth["core.tile_overhead_cycles"], rel=0.05)
    again = simulate(yaml.safe_load(out.read_text()), [Measurement(s, a, 1) for s, a in CALLS])
    assert (abs(again - measured) / measured).max() < 0.02
    before = simulate(doc, [Measurement(s, a, 1) for s, a in CALLS])
    assert (abs(before - measured) / measured).max() > 0.1  # the start really was off
    assert "not identified" not in report  # these measurements lean on every parameter
    assert_only_fitted_lines_changed((ROOT / "targets" / "FT78NE.yaml").read_text(), out.read_text(), names)


#: Keys of the free parameters as they appear on a target file's lines.
PARAM_KEYS = {n: n.split(".")[2] if n.startswith("core.units.") else n.rsplit(".", 1)[-1] for n in FACTORS}


def assert_only_fitted_lines_changed(original: str, written: str, fitted):
    """The written file is the original line for line (comments, hex, order, quoting), but for one comment on
    top, the name, the source notes and the fitted values."""
    head, *lines = written.splitlines()
    assert head.startswith("# Calibrated: a copy of") and all(n in head for n in fitted)
    old = original.splitlines()
    assert len(lines) == len(old)
    changed = {a.split(":")[0].strip() for a, b in zip(old, lines) if a != b}
    assert changed <= {"name", "source"} | {PARAM_KEYS[n] for n in fitted}, changed
    for a, b in zip(old, lines):
        key = a.split(":")[0].strip()
        if key == "name":
            assert b == a + " (calibrated)"
        elif key == "source" and a != b:
            assert b.startswith(a.removesuffix('"')) and "dspsim calibrate" in b
        elif key in ("bandwidth_bytes_per_cycle", "setup_cycles", "tile_overhead_cycles", "launch_overhead_cycles"):
            assert b.split(":")[0] == a.split(":")[0]  # same key, same indentation
    assert "0x" in written and original.count("0x") == written.count("0x") - written.splitlines()[0].count("0x")


def test_unidentified_parameters_are_named_and_kept_and_the_copy_keeps_the_file(tmp_path, capsys):
    """Three measurements (a DDR stream, a private and a shared convolution) say nothing about the DMA setup
    and per-tile overheads: both are reported and kept at the target's values, the others fitted."""
    doc, _ = load_target_document("FT78NE")
    names = free_parameters(doc)
    nominal = parameter_values(doc, names)
    # The parameters fitted here (the ones these kernels' timing depends on whatever inner loops they state); the
    # truth differs from the start in those only, so that what is kept is right.
    params = ["regions.ddr.bandwidth_bytes_per_cycle", "regions.gsm.bandwidth_bytes_per_cycle", "dma.setup_cycles",
              "core.tile_overhead_cycles", "sync.launch_overhead_cycles"]
    truth = with_parameters(doc, {n: nominal[n] * FACTORS[n] for n in params})
    calls = [CALLS[1], CALLS[5], CALLS[8]]
    write_measurements(tmp_path / "m.csv", truth, calls)
    # The starting target: a user's file with its own comments and hex numbers.
    original = (ROOT / "targets" / "FT78NE.yaml").read_text()
    original = original.replace("dma:\n", "dma:  # measured on board 3\n").replace("burst_bytes: 64",
                                                                                   "burst_bytes: 0x40")
    start = tmp_path / "board.yaml"
    start.write_text(original)
    out = tmp_path / "fitted.yaml"
    assert main(["calibrate", str(tmp_path / "m.csv"), "--target", str(start), "-o", str(out),
                 "--params", ",".join(params)]) == 0
    report = capsys.readouterr().out
    section = report.split("not identified by these measurements (kept at the target's values):\n")[1]
    why = dict(re.findall(r"^  ([\w.]+): (.*)$", section, re.MULTILINE))
    assert set(why) == {"dma.setup_cycles", "core.tile_overhead_cycles"}
    assert "changes no measurement" in why["dma.setup_cycles"] and "changes no measurement" in why[
        "core.tile_overhead_cycles"]
    assert "2 parameter(s) not identified, kept at board.yaml's values" in report
    written = yaml.safe_load(out.read_text())
    got = parameter_values(written, names)
    for n in ("dma.setup_cycles", "core.tile_overhead_cycles"):
        assert got[n] == nominal[n]
    for n in ("regions.ddr.bandwidth_bytes_per_cycle", "regions.gsm.bandwidth_bytes_per_cycle",
              "sync.launch_overhead_cycles"):
        assert got[n] == pytest.approx(parameter_values(truth, [n])[n], rel=0.05), n
    assert written["name"] == "FT78NE (calibrated)" and "not identified, kept: dma.setup_cycles" in written["source"]
    assert sim.load_target(out).name == "FT78NE (calibrated)"
    text = out.read_text()
    assert "dma:  # measured on board 3" in text and "burst_bytes: 0x40" in text
    assert_only_fitted_lines_changed(original, text, ["regions.ddr.bandwidth_bytes_per_cycle",
                                                      "regions.gsm.bandwidth_bytes_per_cycle",
                                                      "sync.launch_overhead_cycles"])


def test_more_parameters_than_measurements_is_refused_naming_what_to_fit(tmp_path):
    """One DDR stream (on one core, whose last tile's compute shows): its cycles move with the DDR bandwidth, the
    launch overhead and the DMA setup alike, so no fit can tell the three apart from one measurement: the fit is
    refused before it runs, naming the --params that would fit one and what each parameter moves; with one
    parameter named the same measurement fits it."""
    doc, _ = load_target_document("FT78NE")
    m = [Measurement(CALLS[2][0], CALLS[2][1], 15000)]
    three = ["regions.ddr.bandwidth_bytes_per_cycle", "sync.launch_overhead_cycles", "dma.setup_cycles"]
    with pytest.raises(ConfigError, match=r"^1 measurement\(s\) cannot identify 3 parameters: .* fit at most 1 of "
                                          r"them, .* e\.g\. --params regions\.ddr\.bandwidth_bytes_per_cycle, or add "
                                          r"measurements\.  What a change by a factor of 1\.5 moves the measurements "
                                          r"by, most first: regions\.ddr\.bandwidth_bytes_per_cycle \("):
        calibrate(doc, m, three)
    cal = calibrate(doc, m, three[:1])
    assert abs(cal.error_after[0]) < 0.005 and cal.fitted == three[:1]
    # Its own search on the fitted target gives what a call on it gives (the after column keeps the start's tiling).
    fitted = sim.Simulator(parse_target(cal.document), tuning_cache=False)
    call = m[0]
    assert cal.cycles_own_tiling is not None
    assert cal.cycles_own_tiling[0] == fitted.call(call.symbol, numerics=False, **call.args).cycles


def test_the_shipped_example_measurements_recover_the_boards_ddr(tmp_path, capsys):
    """configs/calibration/ft78ne_measurements.csv holds five calls as dspsim times them with FT78NE's DDR at 16
    bytes per cycle (configs/calibration/generate.py; no board measured them): the README's command fits the
    DDR bandwidth back to 16 within 1 %."""
    csv_path = ROOT / "configs" / "calibration" / "ft78ne_measurements.csv"
    out = tmp_path / "my_chip.yaml"
    assert main(["calibrate", str(csv_path), "--target", "FT78NE", "--params",
                 "regions.ddr.bandwidth_bytes_per_cycle", "-o", str(out)]) == 0
    fitted = parameter_values(yaml.safe_load(out.read_text()), ["regions.ddr.bandwidth_bytes_per_cycle"])
    assert fitted["regions.ddr.bandwidth_bytes_per_cycle"] == pytest.approx(16, rel=0.01)


def test_the_help_names_only_parameters_that_exist(capsys, monkeypatch):
    """`dspsim calibrate --help` lists the default free parameters by key path: each one the shipped chips have
    (the shared regions' bandwidths by pattern)."""
    monkeypatch.setenv("COLUMNS", "1000")  # one line per option: no key path broken across lines
    with pytest.raises(SystemExit):
        main(["calibrate", "--help"])
    text = capsys.readouterr().out
    paths = set(re.findall(r"\b[a-z_]+(?:\.[a-z_<>]+)+", text)) - {"e.g"}
    assert {"regions.<region>.bandwidth_bytes_per_cycle", "dma.setup_cycles"} <= paths
    for chip in ("FT78NE", "MT7004"):
        known = set(free_parameters(load_target_document(chip)[0]))
        for path in paths:
            if path == "regions.<region>.bandwidth_bytes_per_cycle":
                assert any(k.startswith("regions.") and k.endswith(".bandwidth_bytes_per_cycle") for k in known)
            else:
                assert path in known, (chip, path)
    assert "vector efficiency" not in text


class FakeTerminal(io.StringIO):
    """A stream that says it is a terminal (what tqdm draws on)."""

    def isatty(self):
        return True


def test_calibrate_shows_each_phase_on_a_terminal_only(monkeypatch):
    monkeypatch.setattr(sim.run.progress, "DELAY_SECONDS", 0.0)
    doc, _ = load_target_document("FT78NE")
    m = [Measurement(CALLS[0][0], CALLS[0][1], 4000)]
    tty = FakeTerminal()
    calibrate(doc, m, ["sync.launch_overhead_cycles"], progress=tty)
    for phase in ("calibrate: simulating 1 measurements on the starting target",
                  "calibrate: probing which parameters the measurements respond to",
                  "calibrate: fitting 1 parameters", "calibrate: checking the fitted parameters are identified",
                  "calibrate: simulating 1 measurements on the fitted target"):
        assert phase in tty.getvalue(), phase
    pipe = io.StringIO()
    calibrate(doc, m, ["sync.launch_overhead_cycles"], progress=pipe)
    assert pipe.getvalue() == ""


#: A shared on-chip L3 added to FT78NE (a region set of its own: calibration must find and fit it).
L3 = 0x50000000
L3_REGION = {"name": "l3", "source": "what-if: a 16 MiB shared L3 at 0x50000000, 48 B/cycle", "base": L3,
             "size_bytes": 0x1000000, "kind": "shared", "latency_cycles": 60, "bandwidth_bytes_per_cycle": 48,
             "burst_bytes": 32}


def test_a_chip_with_another_region_set_calibrates_its_own_regions(tmp_path):
    """A copy of FT78NE with an extra shared l3: its bandwidth is a free parameter (DDR and l3 hold no staging
    level, GSM does: outermost first), and measurements streaming from l3 recover its perturbed value; a chip
    whose shared on-chip memory is called sram has no gsm parameter at all."""
    doc, _ = load_target_document("FT78NE")
    doc["regions"].append(dict(L3_REGION))
    bandwidths = ["regions.ddr.bandwidth_bytes_per_cycle", "regions.l3.bandwidth_bytes_per_cycle",
                  "regions.gsm.bandwidth_bytes_per_cycle"]
    assert free_parameters(doc) == bandwidths + ["dma.setup_cycles", "core.tile_overhead_cycles",
                                                 "core.loop_overhead_cycles", "core.units.fmac.latency_cycles",
                                                 "sync.launch_overhead_cycles"]
    truth = with_parameters(doc, {bandwidths[0]: 20 * 1.3, bandwidths[1]: 48 * 0.6, bandwidths[2]: 64 * 0.7})
    calls = [CALLS[1], ("fp_batch_norm_grad_s", bn(256, 1024, base=L3)), CALLS[3]]
    measured = simulate(truth, [Measurement(s, a, 1) for s, a in calls])
    cal = calibrate(doc, [Measurement(s, a, int(c)) for (s, a), c in zip(calls, measured)], bandwidths)
    assert cal.fitted == bandwidths and not cal.unidentified
    for n, want in zip(bandwidths, (20 * 1.3, 48 * 0.6, 64 * 0.7)):
        assert cal.after[n] == pytest.approx(want, rel=0.05), n
    assert parse_target(cal.document).region("l3").bandwidth_bytes_per_cycle == cal.after[bandwidths[1]]
    renamed = yaml.safe_load((ROOT / "targets" / "FT78NE.yaml").read_text())
    next(r for r in renamed["regions"] if r["name"] == "gsm")["name"] = "sram"
    for level in renamed["staging"]["levels"]:  # the partial-results window and GEMM's blocks
        if level["region"] == "gsm":
            level["region"] = "sram"
    assert free_parameters(renamed)[:2] == ["regions.ddr.bandwidth_bytes_per_cycle",
                                            "regions.sram.bandwidth_bytes_per_cycle"]
    with pytest.raises(ConfigError, match=r"unknown free parameter 'regions\.gsm\.bandwidth_bytes_per_cycle' "
                                          r"\(this chip's, by key path: regions\.ddr\.bandwidth_bytes_per_cycle, "
                                          r"regions\.sram\.bandwidth_bytes_per_cycle, dma\.setup_cycles"):
        calibrate(renamed, [Measurement(calls[0][0], calls[0][1], 100000)], ["regions.gsm.bandwidth_bytes_per_cycle"])


def test_an_old_style_parameter_name_is_refused_naming_its_key_path(tmp_path, capsys):
    doc, _ = load_target_document("FT78NE")
    with pytest.raises(ConfigError, match=r"unknown free parameter 'ddr_bandwidth_bytes_per_cycle'; did you mean "
                                          r"regions\.ddr\.bandwidth_bytes_per_cycle\?"):
        calibrate(doc, [Measurement(CALLS[0][0], CALLS[0][1], 4000)], ["ddr_bandwidth_bytes_per_cycle"])
    with pytest.raises(ConfigError, match=r"'core\.vector_efficiency' is gone: a tile's compute is priced from its "
                                          r"kernel's inner loops .*; fit core\.tile_overhead_cycles, "
                                          r"core\.loop_overhead_cycles or core\.units\.fmac\.latency_cycles"):
        calibrate(doc, [Measurement(CALLS[0][0], CALLS[0][1], 4000)], ["core.vector_efficiency"])
    p = tmp_path / "m.csv"
    write_measurements(p, doc, CALLS[:1])
    assert main(["calibrate", str(p), "--target", "FT78NE", "-o", str(tmp_path / "o.yaml"),
                 "--params", "tile_overhead_cycles"]) == 2
    err = capsys.readouterr().err
    assert err.count("\n") == 1 and "did you mean core.tile_overhead_cycles?" in err


def test_bad_measurement_files(tmp_path):
    p = tmp_path / "m.csv"
    p.write_text("symbol,args,cycles\nfp_batch_norm_grad_s,{not json,100\n")
    with pytest.raises(ConfigError, match="line 2.*args"):
        load_measurements(p)
    p.write_text("symbol,args,cycles\nfp_batch_norm_grad_s,{},-5\n")
    with pytest.raises(ConfigError, match="cycles must be positive"):
        load_measurements(p)
    p.write_text("symbol,args\n")
    with pytest.raises(ConfigError, match="no measurements"):
        load_measurements(p)


def test_a_drams_activation_window_is_fitted_when_named():
    """A batch norm whose 8-channel slices (32 bytes) of 4,096 fp32 channels each open a DDR row is paced by the
    activations: measured on a copy whose tFAW window is 57 cycles instead of 38, the fit named that parameter
    recovers 57.  The rows' parameters are known to the fit but not fitted by default."""
    from sim.calibrate import ROW_PARAMETERS, row_parameters
    doc, _ = load_target_document("FT78NE")
    window = "regions.ddr.rows.window_cycles"
    assert row_parameters(doc) == [f"regions.ddr.{key}" for key in ROW_PARAMETERS]
    assert window not in free_parameters(doc)
    call = ("fp_batch_norm_grad_s", {**bn(64, 4096), "tiling": {"split": "channels", "channel_block": 8}})
    truth = simulate(with_parameters(doc, {window: 57}), [Measurement(*call, 1)])
    cal = calibrate(doc, [Measurement(*call, int(truth[0]))], [window])
    assert cal.fitted == [window]
    assert cal.after[window] == pytest.approx(57, rel=0.05) and abs(cal.error_after[0]) < 0.01


def test_a_parameter_named_twice_is_refused():
    """Named twice, a parameter would be fitted as two collinear ones and identified as neither (the fit kept it
    and wrote the file)."""
    doc, _ = load_target_document("FT78NE")
    with pytest.raises(ConfigError, match=r"free parameter 'dma\.setup_cycles' is named twice"):
        calibrate(doc, [Measurement(CALLS[0][0], CALLS[0][1], 4000)], ["dma.setup_cycles", "dma.setup_cycles"])


def test_the_shipped_measurements_are_what_the_timing_model_gives_the_board():
    """configs/calibration/ft78ne_measurements.csv holds the cycles the current timing model gives the board its
    script describes (FT78NE with DDR at 16 B/cycle): a timing-model change that moves them asks for the script."""
    import subprocess
    import sys
    script = Path(__file__).resolve().parent.parent / "configs" / "calibration" / "generate.py"
    proc = subprocess.run([sys.executable, str(script), "--check"], capture_output=True, text=True, timeout=300)
    assert proc.returncode == 0, proc.stdout + proc.stderr


def test_a_measurement_that_cannot_run_is_named_by_its_file_and_line(tmp_path, capsys):
    """The file's second measurement (line 3) writes dx 16 bytes into x's 64 x 64 floats: it cannot run on the
    starting target, and the one-line error names the file and line 3, then the layout rule."""
    good = bn(64, 64, mask=0x1)
    bad = {**good, "dx": good["x"] + 16}
    p = tmp_path / "m.csv"
    with p.open("w", newline="") as fh:
        w = csv.writer(fh)
        w.writerow(["symbol", "args", "cycles"])
        for args in (good, bad):
            w.writerow(["fp_batch_norm_grad_s", json.dumps(args), 5000])
    doc, _ = load_target_document("FT78NE")
    with pytest.raises(ConfigError, match=rf"^{re.escape(str(p))}: line 3: the measurement cannot run on the "
                                          r"starting target: layout rule 'no-overlap': output buffer 'dx'"):
        calibrate(doc, load_measurements(p), ["regions.ddr.bandwidth_bytes_per_cycle"])
    assert main(["calibrate", str(p), "--target", "FT78NE", "-o", str(tmp_path / "o.yaml")]) == 2
    err = capsys.readouterr().err
    assert err.count("\n") == 1 and err.startswith(f"dspsim: error: {p}: line 3: the measurement cannot run")


def test_a_measurements_file_with_a_utf8_bom_reads_as_without(tmp_path):
    """Excel's "CSV UTF-8" starts the file with a byte order mark: the first column is still 'symbol'."""
    text = 'symbol,args,cycles\nfp_batch_norm_grad_s,"{""x"": ""0x80000000"", ""core_mask"": 3}",1234\n'
    p = tmp_path / "m.csv"
    p.write_text(text, encoding="utf-8-sig")
    assert p.read_bytes()[:3] == b"\xef\xbb\xbf"
    (m,) = load_measurements(p)
    assert (m.symbol, m.args, m.cycles, m.where) == ("fp_batch_norm_grad_s", {"x": 0x80000000, "core_mask": 3},
                                                    1234, f"{p}: line 2")


@pytest.mark.parametrize("header,row,pattern", [
    ("symbol,args,cycles,core_mask", '"{""core_mask"": 255}",100,15',
     r"line 2: column 'core_mask': 15, but column 'args' gives core_mask 255: a call has one core_mask"),
    ("symbol,args,cycles,core", '"{""core"": 1}",100,2',
     r"line 2: column 'core': 2, but column 'args' gives core 1: a call has one core"),
    ("symbol,args,cycles,foo", "{},100,1",
     r"line 1: column 'foo' is not a measurements column \(allowed: symbol, args, cycles, core_mask, core\)"),
    ("symbol,args,cycles,cycles", "{},100,100", r"line 1: column 'cycles' appears twice"),
], ids=["core_mask twice", "core twice", "unknown column", "a column twice"])
def test_conflicting_or_unknown_measurement_columns_are_refused(tmp_path, header, row, pattern):
    p = tmp_path / "m.csv"
    p.write_text(f"{header}\nfp_batch_norm_grad_s,{row}\n")
    with pytest.raises(ConfigError, match=pattern) as info:
        load_measurements(p)
    assert str(info.value).startswith(f"{p}: line ") and "\n" not in str(info.value)


def test_a_core_mask_column_agreeing_with_args_is_one_core_mask(tmp_path):
    p = tmp_path / "m.csv"
    p.write_text('symbol,args,cycles,core_mask\nfp_batch_norm_grad_s,"{""core_mask"": ""0xf""}",100,15\n'
                 'fp_batch_norm_grad_s,{},200,3\n')
    assert [m.args for m in load_measurements(p)] == [{"core_mask": 15}, {"core_mask": 3}]
