"""dspsim calibrate: a target perturbed by up to 40% is recovered from its own measurements."""

import csv
import json

import pytest
import yaml

import sim
from sim.calibrate import FREE_PARAMETERS, load_measurements, load_target_document, parameter_values, \
    simulate, with_parameters, Measurement
from sim.cli import main
from sim.errors import ConfigError

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
]
FACTORS = [1.3, 0.7, 1.4, 1.35, 1.25, 0.75]  # truth = nominal x factor, in FREE_PARAMETERS order


def write_measurements(path, doc):
    cycles = simulate(doc, [Measurement(s, a, 1) for s, a in CALLS])
    with path.open("w", newline="") as fh:
        w = csv.writer(fh)
        w.writerow(["symbol", "args", "cycles"])
        for (symbol, args), c in zip(CALLS, cycles):
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
