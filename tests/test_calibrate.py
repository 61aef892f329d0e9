"""dspsim calibrate: a target perturbed by up to 40% is recovered from its own measurements; parameters the
measurements cannot identify are said and kept; the fitted file is a commented copy of the target."""

import csv
import io
import json
import re
from pathlib import Path

import pytest
import yaml

import sim
import sim.tools.progress
from sim.cli import main
from sim.errors import ConfigError
from sim.tools.calibrate import (
    FREE_PARAMETERS,
    Measurement,
    calibrate,
    load_measurements,
    load_target_document,
    parameter_values,
    simulate,
    with_parameters,
)

G = 0x40000000


def bn(batch, channel, base=0x80000000, mask=0xFF):
    return {"x": base, "dy": base + 0x100000, "dx": base + 0x200000,
            "params": [base + 0x300000, base + 0x310000, base + 0x320000, base + 0x330000, base + 0x340000,
                       batch, channel, 1], "core_mask": mask}


def conv_p(n, hw, c, tiling=None):
    args = {"input": 0x10000000, "out_backprop": 0x10400000, "output": 0x10800000, "input_shape": [n, hw, hw, c],
            "filter_sizes": [3, 3, c, c], "strides": [1, 1, 1, 1], "padding": "SAME", "core": 0}
    return {**args, "tiling": tiling} if tiling else args


# Each measurement leans on some parameters more than others: a tiny call on the launch, big streams on DDR or
# GSM bandwidth, a long row of small DMAs on their setup, compute-bound convolutions on the vector efficiency,
# and one cut into many small tiles on the per-tile overhead.
CALLS = [
    ("fp_batch_norm_grad_s", bn(4, 64)),
    ("fp_batch_norm_grad_s", bn(256, 1024)),
    ("fp_batch_norm_grad_s", bn(2, 4096, mask=0x1)),
    ("fp_batch_norm_grad_s", bn(64, 512, base=G)),
    ("fp_batch_norm_grad_s", bn(16, 512, base=G, mask=0x3)),
    ("fp_conv2d_backprop_filter_p", conv_p(2, 16, 64)),
    ("fp_conv2d_backprop_filter_p", conv_p(1, 8, 32, {"split": "filter", "in_c_slice": 32, "out_c_slice": 8})),
    ("fp_conv2d_backprop_filter_p", conv_p(1, 8, 64, {"split": "filter", "in_c_slice": 8, "out_c_slice": 8})),
    ("fp_conv2d_backprop_filter_s", {"input": 0x80000000, "out_backprop": 0x90000000, "output": 0xA0000000,
                                     "input_shape": [8, 28, 28, 64], "filter_sizes": [3, 3, 64, 64],
                                     "strides": [1, 1, 1, 1], "padding": "SAME"}),
    # One core through 64 tiles of 4 rows: the per-tile overhead shows even where the vector work is slow.
    ("fp_batch_norm_grad_s", {**bn(256, 64, mask=0x1), "tiling": {"split": "rows", "tile_elements": 256}}),
]
FACTORS = [1.3, 0.7, 1.4, 1.35, 1.25, 0.75]  # truth = nominal x factor, in FREE_PARAMETERS order


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
    names = list(FREE_PARAMETERS)
    nominal = parameter_values(doc, names)
    truth_doc = with_parameters(doc, {n: nominal[n] * f for n, f in zip(names, FACTORS)})
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
    assert chip.core.vector_efficiency == pytest.approx(truth["vector_efficiency"], rel=0.05)
    again = simulate(yaml.safe_load(out.read_text()), [Measurement(s, a, 1) for s, a in CALLS])
    assert (abs(again - measured) / measured).max() < 0.02
    before = simulate(doc, [Measurement(s, a, 1) for s, a in CALLS])
    assert (abs(before - measured) / measured).max() > 0.1  # the start really was off
    assert "not identified" not in report  # these measurements lean on every parameter
    assert_only_fitted_lines_changed((ROOT / "targets" / "FT78NE.yaml").read_text(), out.read_text(), names)


#: Keys of the free parameters as they appear on a target file's lines.
PARAM_KEYS = {n: FREE_PARAMETERS[n][0].rsplit(".", 1)[-1] for n in FREE_PARAMETERS}


def assert_only_fitted_lines_changed(original: str, written: str, fitted):
    """The written file is the original line for line (comments, hex, order, quoting), but for one comment on
    top, the name, the source notes and the fitted values."""
    head, *lines = written.splitlines()
    assert head.startswith("# Calibrated: a copy of") and all(n in head for n in fitted)
    old = original.splitlines()
    added = [x for x in lines if x.strip().startswith("vector_efficiency:")] \
        if "vector_efficiency:" not in original else []
    lines = [x for x in lines if x not in added]
    assert len(lines) == len(old)
    changed = {a.split(":")[0].strip() for a, b in zip(old, lines) if a != b}
    assert changed <= {"name", "source"} | {PARAM_KEYS[n] for n in fitted}, changed
    for a, b in zip(old, lines):
        key = a.split(":")[0].strip()
        if key == "name":
            assert b == a + " (calibrated)"
        elif key == "source" and a != b:
            assert b.startswith(a.removesuffix('"')) and "dspsim calibrate" in b
        elif key in ("bandwidth_bytes_per_cycle", "setup_cycles", "loop_overhead_cycles", "launch_overhead_cycles",
                     "vector_efficiency"):
            assert b.split(":")[0] == a.split(":")[0]  # same key, same indentation
    assert "0x" in written and original.count("0x") == written.count("0x") - written.splitlines()[0].count("0x")


def test_unidentified_parameters_are_named_and_kept_and_the_copy_keeps_the_file(tmp_path, capsys):
    """Three measurements (a DDR stream, a private and a shared convolution) say nothing about the DMA setup
    and per-tile overheads, and the fit would drive the launch overhead towards zero (the old code wrote
    3e-27): all three are reported and kept at the target's values, the others fitted."""
    doc, _ = load_target_document("FT78NE")
    names = list(FREE_PARAMETERS)
    nominal = parameter_values(doc, names)
    truth = with_parameters(doc, {n: nominal[n] * f for n, f in zip(names, FACTORS)})
    calls = [CALLS[1], CALLS[5], CALLS[8]]
    write_measurements(tmp_path / "m.csv", truth, calls)
    # The starting target: a user's file with its own comments, hex numbers, and vector_efficiency left out.
    original = (ROOT / "targets" / "FT78NE.yaml").read_text()
    original = original.replace("  vector_efficiency: 1.0\n", "").replace(
        "dma:\n", "dma:  # measured on board 3\n").replace("burst_bytes: 64", "burst_bytes: 0x40")
    start = tmp_path / "board.yaml"
    start.write_text(original)
    out = tmp_path / "fitted.yaml"
    assert main(["calibrate", str(tmp_path / "m.csv"), "--target", str(start), "-o", str(out)]) == 0
    report = capsys.readouterr().out
    section = report.split("not identified by these measurements (kept at the target's values):\n")[1]
    why = dict(re.findall(r"^  (\w+): (.*)$", section, re.MULTILINE))
    assert set(why) == {"dma_setup_cycles", "loop_overhead_cycles", "launch_overhead_cycles"}
    assert "changes no measurement" in why["dma_setup_cycles"] and "changes no measurement" in why[
        "loop_overhead_cycles"]
    # Driven towards zero: to its limit, or (here, to a few cycles) where it no longer changes any measurement.
    assert re.search(r"the fit drove it to|changes no measurement", why["launch_overhead_cycles"])
    assert "3 parameter(s) not identified, kept at board.yaml's values" in report
    written = yaml.safe_load(out.read_text())
    got = parameter_values(written, names)
    for n in ("dma_setup_cycles", "loop_overhead_cycles", "launch_overhead_cycles"):
        assert got[n] == nominal[n]
    for n in ("ddr_bandwidth_bytes_per_cycle", "gsm_bandwidth_bytes_per_cycle", "vector_efficiency"):
        assert got[n] == pytest.approx(parameter_values(truth, [n])[n], rel=0.05), n
    assert written["name"] == "FT78NE (calibrated)" and "not identified, kept: dma_setup_cycles" in written["source"]
    assert sim.load_target(out).name == "FT78NE (calibrated)"
    text = out.read_text()
    assert "dma:  # measured on board 3" in text and "burst_bytes: 0x40" in text
    assert_only_fitted_lines_changed(original, text, ["ddr_bandwidth_bytes_per_cycle",
                                                      "gsm_bandwidth_bytes_per_cycle", "vector_efficiency"])


def test_more_parameters_than_one_measurement_can_identify(tmp_path):
    """One DDR stream (on one core, whose last tile's compute shows): its cycles move with the DDR bandwidth, the
    launch overhead and the efficiency alike, so only one of them can be fitted; the others are named and kept."""
    doc, _ = load_target_document("FT78NE")
    m = [Measurement(CALLS[2][0], CALLS[2][1], 15000)]
    cal = calibrate(doc, m, ["ddr_bandwidth_bytes_per_cycle", "launch_overhead_cycles", "vector_efficiency"])
    assert set(cal.unidentified) == {"launch_overhead_cycles", "vector_efficiency"}
    assert all("1 measurement(s) cannot identify 3 parameters" in w for w in cal.unidentified.values())
    assert cal.after["launch_overhead_cycles"] == 1800 and cal.after["vector_efficiency"] == 1.0
    assert abs(cal.error_after[0]) < 0.005 and cal.fitted == ["ddr_bandwidth_bytes_per_cycle"]


class FakeTerminal(io.StringIO):
    """A stream that says it is a terminal (what tqdm draws on)."""

    def isatty(self):
        return True


def test_calibrate_shows_each_phase_on_a_terminal_only(monkeypatch):
    monkeypatch.setattr(sim.tools.progress, "DELAY_SECONDS", 0.0)
    doc, _ = load_target_document("FT78NE")
    m = [Measurement(CALLS[0][0], CALLS[0][1], 4000)]
    tty = FakeTerminal()
    calibrate(doc, m, ["launch_overhead_cycles"], progress=tty)
    for phase in ("calibrate: simulating 1 measurements on the starting target",
                  "calibrate: probing which parameters the measurements respond to",
                  "calibrate: fitting 1 parameters", "calibrate: checking the fitted parameters are identified",
                  "calibrate: simulating 1 measurements on the fitted target"):
        assert phase in tty.getvalue(), phase
    pipe = io.StringIO()
    calibrate(doc, m, ["launch_overhead_cycles"], progress=pipe)
    assert pipe.getvalue() == ""


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
