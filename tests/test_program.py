"""Programs (docs/programs.md): the planner's sharing, each refusal with memory unchanged, the one timeline, and
``dspsim run|validate|report`` and ``trace summary|diff`` on program files.  Small elementwise programs keep it
fast; tests/test_program_examples.py runs the shipped blocks against their reference."""

from __future__ import annotations

import html as html_module
import json
import re
import textwrap
from pathlib import Path

import numpy as np
import pytest

import sim
from sim.cli import main
from sim.errors import ConfigError, LayoutError
from sim.program import load_program, run_program
from sim.program.planner import Lifetime, plan_memory
from sim.program.schema import TensorSpec

ROOT = Path(__file__).resolve().parent.parent
KERNELS = f"[{ROOT / 'examples' / 'relu_grad.py'}, {ROOT / 'examples' / 'binary_elementwise.py'}]"
DDR = 0x80000000


def program(tmp_path: Path, body: str, name: str = "prog") -> Path:
    """A program file in ``tmp_path``: FT78NE, the example kernels, then ``body``."""
    p = tmp_path / f"{name}.yaml"
    p.write_text(f"target: FT78NE\nkernels: {KERNELS}\n" + textwrap.dedent(body))
    return p


#: relu(dy, x) -> g, then g + dy -> y: x dies after step 1 and y is born at step 2, so they may share bytes.
CHAIN = """\
tensors:
  - {name: dy, shape: [4, 64], dtype: float32}
  - {name: x, shape: [4, 64], dtype: float32}
  - {name: g, shape: [4, 64], dtype: float32}
  - {name: y, shape: [4, 64], dtype: float32}
data:
  - {tensor: dy, random: {seed: 1}}
  - {tensor: x, random: {seed: 2}}
calls:
  - {name: relu, symbol: fp_relu_grad_s, args: {dy: dy, x: x, dx: g, shape: [4, 64]}}
  - {name: add, symbol: fp_binary_elementwise_s, args: {a: g, b: dy, out: y, shape: [4, 64], op: add}}
outputs:
  - {tensor: y}
"""


# -- the planner ---------------------------------------------------------------------------------------------


def t(name: str, nbytes: int, addr: int | None = None) -> TensorSpec:
    return TensorSpec(name, (nbytes // 4,), np.dtype(np.float32), "ddr", addr)


def test_tensors_with_disjoint_lifetimes_share_bytes_and_overlapping_ones_never():
    target = sim.load_target("FT78NE")
    tensors = [t("a", 4096), t("b", 4096), t("c", 1024), t("d", 2048)]
    lives = {"a": Lifetime(0, 1), "b": Lifetime(2, 3), "c": Lifetime(1, 2), "d": Lifetime(3, 4)}
    plan = plan_memory(target, tensors, lives)
    # Largest first, lowest address: a at the base; b (dead a) shares it; c lives with a and b, above them;
    # d lives with b only, so above b's 4096 bytes but it may take c's bytes (c is dead by step 3).
    assert [plan[n].addr - DDR for n in "abcd"] == [0, 0, 4096, 4096]
    assert {(x.tensor.name, y.tensor.name) for x, y in plan.sharing()} == {("a", "b"), ("c", "d")}


def test_the_planner_never_overlaps_tensors_alive_together_and_aligns_them():
    target = sim.load_target("FT78NE")
    rng = np.random.default_rng(7)
    for _ in range(30):
        n = int(rng.integers(2, 12))
        tensors = [t(f"t{i}", int(rng.integers(1, 40)) * 4) for i in range(n)]
        lives = {}
        for x in tensors:
            a, b = sorted(int(v) for v in rng.integers(0, 8, 2))
            lives[x.name] = Lifetime(a, b)
        plan = plan_memory(target, tensors, lives)
        for i, p in enumerate(plan.placements):
            assert p.addr % max(4, p.region.alignment_bytes, p.region.burst_bytes) == 0
            assert p.region.contains(p.addr, p.tensor.size_bytes)
            for q in plan.placements[i + 1:]:
                if p.lifetime.overlaps(q.lifetime):
                    assert not p.shares_bytes(q), (p, q)


def test_an_auto_tensor_keeps_clear_of_a_fixed_one_alive_with_it():
    target = sim.load_target("FT78NE")
    plan = plan_memory(target, [t("fixed", 1024, DDR), t("auto", 512)], {"fixed": Lifetime(0, 3),
                                                                        "auto": Lifetime(1, 2)})
    assert plan["fixed"].addr == DDR and plan["auto"].addr == DDR + 1024


# -- running, and the one timeline ----------------------------------------------------------------------------


def test_a_program_runs_its_calls_back_to_back_and_computes_the_chain(tmp_path):
    prog = load_program(program(tmp_path, CHAIN), allow_kernels=True)
    m = sim.Simulator("FT78NE")
    result = m.run_program(prog)
    plan = result.plan
    assert plan["x"].shares_bytes(plan["y"])  # x is dead when y is written
    cfg = prog.as_run_config(plan.addrs)
    dy, x = (cfg.materialise(s) for s in cfg.data)
    assert np.array_equal(m.read(plan["y"].addr, (4, 64), np.float32), dy * (x > 0) + dy)
    relu, add = result.calls
    assert (relu.start_cycle, add.start_cycle, result.cycles) == (0, relu.cycles, relu.cycles + add.cycles)
    # Each call starts at its own launch: the target's launch overhead, on every core of the call.
    launches = sorted((e.start, e.end) for e in result.events if e.kind == "launch" and e.core == 0)
    assert launches == [(0, 1800), (relu.cycles, relu.cycles + 1800)]
    assert all(add.start_cycle <= e.start for e in result.events if e.phase and e.phase.startswith("add"))
    rows = result.rows()
    assert [r.name for r in rows] == ["relu", "add"] and abs(sum(r.share for r in rows) - 1) < 1e-9
    assert "total" in result.table_text()


def test_tensors_named_in_a_params_list_are_the_buffers_the_pointer_table_gives(tmp_path):
    """docs/programs.md: an entry of a params list may name a tensor.  BatchNormGrad's pointer table names five
    auto tensors: they are those buffers (not raw addresses to keep clear of), and the gradients are SPEC's, with
    mean 0 and invar 1 (xhat = x): dx = dy - mean(dy) - x * mean(dy * x), dbias = sum(dy), dscale = sum(dy * x)."""
    prog = load_program(program(tmp_path, """\
        tensors:
          - {name: x, shape: [4, 64], dtype: float32}
          - {name: dy, shape: [4, 64], dtype: float32}
          - {name: dx, shape: [4, 64], dtype: float32}
          - {name: mean, shape: [64], dtype: float32}
          - {name: invar, shape: [64], dtype: float32}
          - {name: scale, shape: [64], dtype: float32}
          - {name: dbias, shape: [64], dtype: float32}
          - {name: dscale, shape: [64], dtype: float32}
        data:
          - {tensor: x, random: {seed: 1}}
          - {tensor: dy, random: {seed: 2}}
          - {tensor: mean, fill: 0.0}
          - {tensor: invar, fill: 1.0}
          - {tensor: scale, fill: 1.0}
        calls:
          - {name: bn, symbol: fp_batch_norm_grad_s,
             args: {x: x, dy: dy, dx: dx, params: [mean, invar, scale, dbias, dscale, 4, 64, 1]}}
        outputs:
          - {tensor: dx}
          - {tensor: dbias}
          - {tensor: dscale}
        """), allow_kernels=True)
    m = sim.Simulator("FT78NE")
    plan = m.run_program(prog).plan
    cfg = prog.as_run_config(plan.addrs)
    x, dy = (cfg.materialise(s).astype(np.float64) for s in cfg.data[:2])
    got = {name: m.read(plan[name].addr, shape, np.float32) for name, shape in
           (("dx", (4, 64)), ("dbias", (64,)), ("dscale", (64,)))}
    assert np.allclose(got["dx"], dy - dy.mean(0) - x * (dy * x).mean(0), atol=1e-5)
    assert np.allclose(got["dbias"], dy.sum(0), atol=1e-5)
    assert np.allclose(got["dscale"], (dy * x).sum(0), atol=1e-5)


# -- refusals: before anything runs, memory exactly as it was -----------------------------------------------------


#: A 4x64 array of ones, as a data entry's values (placed while the calls are bound, then rolled back).
ONES = str([[1.0] * 64] * 4)
REFUSALS = {
    "overwrite": ("""\
tensors:
  - {name: x, shape: [4, 64], dtype: float32, addr: 0xA0000000}
  - {name: dy, shape: [4, 64], dtype: float32, addr: 0xA0010000}
  - {name: g, shape: [4, 64], dtype: float32, addr: 0xA0000200}
  - {name: y, shape: [4, 64], dtype: float32}
data:
  - {tensor: x, values: ONES}
  - {tensor: dy, random: {seed: 1}}
calls:
  - {name: relu, symbol: fp_relu_grad_s, args: {dy: dy, x: dy, dx: g, shape: [4, 64]}}
  - {name: add, symbol: fp_binary_elementwise_s, args: {a: g, b: x, out: y, shape: [4, 64], op: add}}
""".replace("ONES", ONES),
        ["layout rule 'overwrite'", "call 'relu' (fp_relu_grad_s) writes its output 'dx' (tensor 'g') "
         "[0xa0000200, 0xa0000600) over 512 bytes [0xa0000200, 0xa0000400) of tensor 'x' in ddr, which call 'add' "
         "(fp_binary_elementwise_s) (its buffer 'b') still reads later"]),
    "unwritten-read": ("""\
tensors:
  - {name: dy, shape: [4, 64], dtype: float32}
  - {name: x, shape: [4, 64], dtype: float32}
  - {name: g, shape: [4, 64], dtype: float32}
data:
  - {tensor: dy, values: ONES}
calls:
  - {name: relu, symbol: fp_relu_grad_s, args: {dy: dy, x: x, dx: g, shape: [4, 64]}}
""".replace("ONES", ONES),
        ["layout rule 'unwritten-read'",
         "call 'relu' (fp_relu_grad_s) reads tensor 'x' [0x80000800, 0x80000c00) in ddr",
         "were placed by no data entry and written by no earlier call"]),
    "other-core": ("""\
tensors:
  - {name: dy, shape: [4, 64], dtype: float32, region: l2, core: 0}
  - {name: x, shape: [4, 64], dtype: float32, region: l2, core: 1}
  - {name: g, shape: [4, 64], dtype: float32, region: l2, core: 0}
data:
  - {tensor: dy, values: ONES}
  - {tensor: x, random: {seed: 2}}
calls:
  - {name: relu, symbol: fp_relu_grad_p, args: {dy: dy, x: x, dx: g, shape: [4, 64], core: 0}}
""".replace("ONES", ONES),
        ["layout rule 'other-core'", "call 'relu' (fp_relu_grad_p) runs on core 0 and reads buffer 'x' "
         "[0x10000000, 0x10000400) in tensor 'x' [0x10000000, 0x10000400)", "lives in core 1's l2"]),
}


@pytest.mark.parametrize("rule", sorted(REFUSALS))
def test_a_refused_program_runs_nothing_and_leaves_memory_as_it_was(tmp_path, rule):
    body, words = REFUSALS[rule]
    prog = load_program(program(tmp_path, body), allow_kernels=True)
    m = sim.Simulator("FT78NE")
    m.write(0xA0000000, np.full((8, 64), 7.0, np.float32))  # bytes a refusal must leave alone
    m.write(0x10000000, np.full(64, 3.0, np.float32), core=0)
    before = m.memory.snapshot()
    with pytest.raises(LayoutError) as e:
        m.run_program(prog)
    for w in words:
        assert w in str(e.value), str(e.value)
    assert [v.rule for v in e.value.violations] == [rule]
    assert m.memory.snapshot() == before


def test_a_pointer_argument_naming_no_tensor_is_refused_naming_the_call_and_key(tmp_path):
    prog = load_program(program(tmp_path, CHAIN.replace("x: x, dx: g", "x: xx, dx: g")), allow_kernels=True)
    with pytest.raises(ConfigError, match=r"calls\[0\]\.args\.x: 'xx' names no tensor of the program"):
        run_program(prog)


def test_a_raw_address_of_a_p_call_is_its_own_cores_copy_whatever_another_cores_copy_holds_there(tmp_path):
    """SPEC: 0x10000000 on core 3 is not 0x10000000 on core 2.  A core-3 call writing the raw address where core
    2's tensor p lies in core 2's copy touches no tensor (no other-core refusal), and core 2 then reads p as
    placed: o = p * (x > 0)."""
    prog = load_program(program(tmp_path, """\
        tensors:
          - {name: dy3, shape: [64], dtype: float32, region: l2, core: 3, addr: 0x10100000}
          - {name: p, shape: [64], dtype: float32, region: l2, core: 2, addr: 0x10000000}
          - {name: x, shape: [64], dtype: float32, region: l2, core: 2, addr: 0x10200000}
          - {name: o, shape: [64], dtype: float32, region: l2, core: 2, addr: 0x10300000}
        data:
          - {tensor: dy3, random: {seed: 1}}
          - {tensor: p, random: {seed: 4}}
          - {tensor: x, random: {seed: 3}}
        calls:
          - {name: w3, symbol: fp_relu_grad_p, args: {dy: dy3, x: dy3, dx: 0x10000000, shape: [64], core: 3}}
          - {name: r2, symbol: fp_relu_grad_p, args: {dy: p, x: x, dx: o, shape: [64], core: 2}}
        outputs:
          - {tensor: o}
        """), allow_kernels=True)
    m = sim.Simulator("FT78NE")
    cfg = prog.as_run_config(m.run_program(prog).plan.addrs)
    p, x = (cfg.materialise(s) for s in cfg.data[1:])
    assert np.array_equal(m.read(0x10300000, (64,), np.float32, core=2), p * (x > 0))
    dy3 = cfg.materialise(cfg.data[0])
    assert np.array_equal(m.read(0x10000000, (64,), np.float32, core=3), dy3 * (dy3 > 0))


def test_an_outputs_entry_at_a_raw_address_keeps_auto_tensors_off_its_bytes(tmp_path):
    """F, fixed at the start of DDR, is written by the first call and read back by a raw-address outputs entry;
    G, auto, is born after F's last call: the planner keeps it clear of the bytes the entry reads (it used to put G
    there, and the overwrite rule refused the legal program)."""
    prog = load_program(program(tmp_path, """\
        tensors:
          - {name: a, shape: [16, 16], dtype: float32}
          - {name: b, shape: [16, 16], dtype: float32}
          - {name: F, shape: [16, 16], dtype: float32, addr: 0x80000000}
          - {name: G, shape: [16, 16], dtype: float32}
        data:
          - {tensor: a, random: {seed: 1}}
          - {tensor: b, random: {seed: 2}}
        calls:
          - {name: c1, symbol: fp_binary_elementwise_s, args: {a: a, b: b, out: F, shape: [16, 16], op: add}}
          - {name: c2, symbol: fp_binary_elementwise_s, args: {a: a, b: a, out: G, shape: [16, 16], op: add}}
        outputs:
          - {name: Fraw, addr: 0x80000000, shape: [16, 16], dtype: float32}
          - {tensor: G}
        """), allow_kernels=True)
    m = sim.Simulator("FT78NE")
    plan = m.run_program(prog).plan
    assert plan["G"].addr >= DDR + 1024 or plan["G"].addr + 1024 <= DDR  # (clear of the bytes Fraw reads)
    cfg = prog.as_run_config(plan.addrs)
    a, b = (cfg.materialise(s) for s in cfg.data)
    assert np.array_equal(m.read(DDR, (16, 16), np.float32), a + b)
    assert np.array_equal(m.read(plan["G"].addr, (16, 16), np.float32), a + a)


def test_a_program_without_calls_is_told_it_needs_them(tmp_path, capsys):
    """A file with tensors but no calls is a program missing its calls, not a run-config with unknown keys."""
    p = program(tmp_path, CHAIN.split("calls:")[0])
    assert main(["validate", str(p), "--allow-kernels"]) == 2
    assert "<top>.calls: required key is missing" in capsys.readouterr().err


def test_a_tensor_of_no_elements_is_refused_on_load(tmp_path):
    """A tensor of shape [0] has no bytes for a buffer to lie in: refused naming its key, not planned around."""
    body = CHAIN.replace("{name: g, shape: [4, 64], dtype: float32}", "{name: g, shape: [0], dtype: float32}")
    with pytest.raises(ConfigError, match=re.escape("tensors[2].shape: a tensor holds at least one element, got "
                                                    "shape [0]")):
        load_program(program(tmp_path, body), allow_kernels=True)


# -- the command line -------------------------------------------------------------------------------------------


def test_validate_prints_the_memory_map_and_fails_on_a_violation(tmp_path, capsys):
    good = program(tmp_path, CHAIN)
    assert main(["validate", str(good), "--allow-kernels"]) == 0
    out = capsys.readouterr().out
    assert "steps 0..1  auto  shares bytes with y" in out and "program OK" in out
    assert "1 relu             fp_relu_grad_s: reads dy, x; writes g" in out
    bad = program(tmp_path, REFUSALS["unwritten-read"][0], "bad")
    assert main(["validate", str(bad), "--allow-kernels", "--format", "json"]) == 1
    report = json.loads(capsys.readouterr().out)
    assert not report["ok"] and [v["rule"] for v in report["violations"]] == ["unwritten-read"]
    assert {t["name"]: t["first_step"] for t in report["tensors"]} == {"dy": 0, "x": 1, "g": 1}


def test_validate_plot_draws_the_programs_memory_plan(tmp_path, capsys):
    """--plot on a program draws its plan: the tensors at their planned ranges, dy and x (placed by the data)
    inputs, y (read back) the output, g the calls' own; x and y share bytes (disjoint lifetimes)."""
    from sim.program import prepare_program, simulator_for
    from sim.program.report import program_layout
    prog = load_program(program(tmp_path, CHAIN), allow_kernels=True)
    checked = prepare_program(prog, simulator_for(prog))
    (ddr,) = program_layout(checked)["regions"]
    got = {b["buffer"]: (b["role"], b["start"], b["end"]) for b in ddr["buffers"]}
    plan = checked.plan
    assert got == {name: (role, plan[name].addr, plan[name].addr + 1024) for name, role in
                   (("dy", "input"), ("x", "input"), ("g", "tensor"), ("y", "output"))}
    assert got["x"][1:] == got["y"][1:]
    picture = tmp_path / "plan.png"
    assert main(["validate", str(program(tmp_path, CHAIN)), "--allow-kernels", "--plot", str(picture)]) == 0
    assert f"plot: {picture}" in capsys.readouterr().out
    assert picture.read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"


def test_validate_refuses_a_data_file_run_would_refuse(tmp_path, capsys):
    """README: validate fails exactly when run would refuse.  A tensor's data file that is missing, or of another
    dtype than the tensor: both refuse it (exit 2) naming the file, before anything is placed."""
    np.save(tmp_path / "x64.npy", np.zeros((4, 64), np.float64))
    for source, words in (("file: nothere.npy", "nothere.npy does not exist"),
                          ("file: x64.npy", "x64.npy has dtype float64, the config says float32")):
        p = program(tmp_path, CHAIN.replace("{tensor: x, random: {seed: 2}}", f"{{tensor: x, {source}}}"))
        for extra in ([], ["--out-dir", str(tmp_path / "o")]):
            assert main(["run" if extra else "validate", str(p), "--allow-kernels", *extra]) == 2
            assert words in capsys.readouterr().err


def test_run_writes_one_trace_with_the_calls_as_slices_and_trace_tools_read_it(tmp_path, capsys):
    out = tmp_path / "out"
    first = program(tmp_path, CHAIN, "first")
    second = program(tmp_path, CHAIN.replace("shape: [4, 64]}}", "shape: [4, 64]}, tiling: {tile_elements: 32}}"),
                     "second")
    for p in (first, second):
        assert main(["run", str(p), "--allow-kernels", "--out-dir", str(out)]) == 0
    text = capsys.readouterr().out
    assert "program first on FT78NE: 2 calls" in text and f"output: {out / 'first.y.npy'}" in text
    doc = json.loads((out / "first.json").read_text())
    slices = [e for e in doc["traceEvents"] if e.get("cat") == "call"]
    assert [s["name"] for s in slices] == ["relu", "add"]
    assert doc["metadata"]["cycles"] == slices[-1]["args"]["end_cycle"]
    assert main(["trace", "summary", str(out / "first.json")]) == 0
    assert "2 calls, back to back:" in capsys.readouterr().out
    assert main(["trace", "diff", str(out / "first.json"), str(out / "second.json")]) == 0
    diff = capsys.readouterr().out
    assert "per call (cycles):" in diff and "\nrelu " in diff
    report = tmp_path / "report.html"
    assert main(["report", str(first), "--allow-kernels", "-o", str(report)]) == 0
    page = report.read_text()
    assert 'id="calls-table"' in page and 'id="plan-table"' in page
    # The page's timeline draws the calls as spans on a track of their own, above the cores'.
    data = json.loads(html_module.unescape(re.search(r'<script type="application/json" id="run-data">(.*?)</script>',
                                                     page, re.S).group(1)))
    assert data["tracks"][0]["label"] == "calls"
    spans = [e for e in data["events"] if data["kinds"][e[1]] == "call"]
    assert [(e[0], e[12]) for e in spans] == [(0, "relu"), (0, "add")]
    assert spans[0][2] == 0 and spans[0][3] == spans[1][2] and spans[1][3] == data["cycles"]


def test_the_documented_program_file_parses_and_uses_every_key(tmp_path):
    import msgspec
    from markdown_blocks import blocks

    from sim.program.schema import ProgramFile
    (example,) = [b for b in blocks(ROOT / "docs" / "programs.md") if b.lang == "yaml"]
    p = tmp_path / "relu_add.yaml"
    p.write_text(example.code.replace("../../examples/", f"{ROOT / 'examples'}/"))
    prog = load_program(p)
    assert {t.name: t.addr for t in prog.tensors}["w"] == 0xA0000000
    assert [c.name for c in prog.calls] == ["relu", "add"] and prog.calls[0].tiling == {"tile_elements": 64}
    import yaml
    assert set(yaml.safe_load(example.code)) == {f.name for f in msgspec.structs.fields(ProgramFile)}


def test_a_call_failing_while_the_program_runs_leaves_memory_as_it_was_before_the_program(tmp_path, monkeypatch):
    # The second call fails after it ran (its own journal committed): the program's journal, around every call's,
    # undoes it, the first call's outputs and the data the program placed.
    prog = load_program(program(tmp_path, CHAIN), allow_kernels=True)
    m = sim.Simulator("FT78NE")
    m.write(0x80000000, np.full((8, 64), 7.0, np.float32))  # where the planner puts the auto tensors
    before = m.memory.snapshot()
    real, calls = sim.Simulator.run_bound, []

    def second_fails(self, call, args, **options):
        run = real(self, call, args, **options)
        calls.append(call.symbol)
        if len(calls) == 2:
            raise sim.TimeLimitError("stopped after it wrote")
        return run

    monkeypatch.setattr(sim.Simulator, "run_bound", second_fails)
    with pytest.raises(sim.TimeLimitError, match=r"call 'add' \(fp_binary_elementwise_s\), starting at cycle \d+"):
        m.run_program(prog)
    assert calls == ["fp_relu_grad_s", "fp_binary_elementwise_s"]
    assert m.memory.snapshot() == before


#: C += A @ B on 4x8x16 with nothing placed in c: GEMM reads c first when beta is 1.
IN_PLACE = """\
tensors:
  - {name: a, shape: [4, 16], dtype: float32}
  - {name: b, shape: [16, 8], dtype: float32}
  - {name: c, shape: [4, 8], dtype: float32}
data:
  - {tensor: a, random: {seed: 1}}
  - {tensor: b, random: {seed: 2}}
CPLACED
calls:
  - {name: acc, symbol: fp_gemm_s, args: {a: a, b: b, c: c, m: 4, n: 8, k: 16, beta: 1, core_mask: 0x1}}
outputs:
  - {tensor: c}
"""


def test_an_output_updated_in_place_is_read_first_by_the_cross_call_rules(tmp_path):
    unplaced = load_program(program(tmp_path, IN_PLACE.replace("CPLACED\n", "")), allow_kernels=True)
    m = sim.Simulator("FT78NE")
    with pytest.raises(LayoutError, match=r"layout rule 'unwritten-read': call 'acc' \(fp_gemm_s\) reads tensor 'c'"):
        m.run_program(unplaced)
    placed = load_program(program(tmp_path, IN_PLACE.replace("CPLACED", "  - {tensor: c, fill: 1.0}"), "placed"),
                          allow_kernels=True)
    result = m.run_program(placed)
    cfg = placed.as_run_config(result.plan.addrs)
    a, b, _ = (cfg.materialise(s) for s in cfg.data)
    got = m.read(result.plan["c"].addr, (4, 8), np.float32)
    assert np.allclose(got, 1.0 + a @ b, rtol=1e-5)


#: A GEMM writing C's first 16 columns of a pitch of 32 (ldc), then a call reading all 32 of C's columns.
PITCHED_C = """\
tensors:
  - {name: a, shape: [16, 16], dtype: float32}
  - {name: b, shape: [16, 16], dtype: float32}
  - {name: c, shape: [16, 32], dtype: float32}
  - {name: x, shape: [16, 32], dtype: float32}
  - {name: o, shape: [16, 32], dtype: float32}
data:
  - {tensor: a, random: {seed: 1}}
  - {tensor: b, random: {seed: 2}}
  - {tensor: x, random: {seed: 3}}
calls:
  - {name: mm, symbol: fp_gemm_s, args: {a: a, b: b, c: c, m: 16, n: 16, k: 16, ldc: 32}}
  - {name: r, symbol: fp_relu_grad_s, args: {dy: c, x: x, dx: o, shape: [16, 32]}}
outputs:
  - {tensor: o}
"""

#: A of 2 x 16 stored with a pitch of 32 (lda), only each row's 16 elements placed.
PITCHED_A = """\
tensors:
  - {name: a, shape: [2, 32], dtype: float32, addr: 0x80000000}
  - {name: b, shape: [16, 16], dtype: float32}
  - {name: c, shape: [2, 16], dtype: float32}
data:
  - {name: a0, addr: 0x80000000, shape: [16], dtype: float32, random: {seed: 1}}
  - {name: a1, addr: 0x80000080, shape: [16], dtype: float32, random: {seed: 2}}
  - {tensor: b, random: {seed: 3}}
calls:
  - {name: mm, symbol: fp_gemm_s, args: {a: a, b: b, c: c, m: 2, n: 16, k: 16, lda: 32}}
outputs:
  - {tensor: c}
"""


def test_a_pitched_matrix_is_read_and_written_in_its_rows_only(tmp_path):
    """GEMM touches only the first n (k) elements of each row of a matrix stored with a pitch (SPEC section 4): a
    later call reading C's untouched columns reads bytes nothing wrote (refused, naming the first gap: row 0's
    columns 16 to 32), and an A placed in its rows' elements only is all GEMM reads (accepted, C right)."""
    with pytest.raises(LayoutError, match=r"'unwritten-read': call 'r' \(fp_relu_grad_s\) \(its buffer 'dy'\) "
                                          r"reads tensor 'c' \[(0x[0-9a-f]+), (0x[0-9a-f]+)\) in ddr, but its "
                                          r"bytes \[(0x[0-9a-f]+), (0x[0-9a-f]+)\)") as e:
        sim.Simulator("FT78NE").run_program(load_program(program(tmp_path, PITCHED_C), allow_kernels=True))
    lo, hi, gap_lo, gap_hi = (int(v, 16) for v in re.search(
        r"reads tensor 'c' \[(0x[0-9a-f]+), (0x[0-9a-f]+)\) in ddr, but its bytes \[(0x[0-9a-f]+), (0x[0-9a-f]+)\)",
        str(e.value)).groups())
    assert hi - lo == 16 * 32 * 4 and (gap_lo - lo, gap_hi - lo) == (16 * 4, 32 * 4)
    m = sim.Simulator("FT78NE")
    result = m.run_program(load_program(program(tmp_path, PITCHED_A, "a"), allow_kernels=True))
    a = np.stack([m.read(0x80000000, (16,), np.float32), m.read(0x80000080, (16,), np.float32)])
    b = m.read(result.plan["b"].addr, (16, 16), np.float32)
    assert np.allclose(m.read(result.plan["c"].addr, (2, 16), np.float32), a @ b, rtol=1e-5, atol=1e-6)


#: A tensor in GSM alive across a GEMM whose buffers all lie in DDR: such a call takes all of GSM but its own
#: buffers as staging (gsm_blocks), and its plan stages its blocks of A there.
ACROSS_A_GEMM = """\
tensors:
  - {name: dy, shape: [64, 64], dtype: float32}
  - {name: x, shape: [64, 64], dtype: float32}
  - {name: t, shape: [64, 64], dtype: float32, region: REGION}
  - {name: a, shape: [64, 64], dtype: float32}
  - {name: b, shape: [64, 64], dtype: float32}
  - {name: c, shape: [64, 64], dtype: float32}
  - {name: out, shape: [64, 64], dtype: float32}
data:
  - {tensor: dy, random: {seed: 1}}
  - {tensor: x, random: {seed: 2}}
  - {tensor: a, random: {seed: 3}}
  - {tensor: b, random: {seed: 4}}
calls:
  - {name: r1, symbol: fp_relu_grad_s, args: {dy: dy, x: x, dx: t, shape: [64, 64]}}
  - {name: mm, symbol: fp_gemm_s, args: {a: a, b: b, c: c, m: 64, n: 64, k: 64}, tiling: {split: n}}
  - {name: r2, symbol: fp_relu_grad_s, args: {dy: t, x: x, dx: out, shape: [64, 64]}}
outputs:
  - {tensor: out}
"""


def test_a_tensor_a_call_stages_over_is_kept_clear_of_those_bytes_or_refused_at_a_fixed_address(tmp_path):
    """The GEMM's plan stages its blocks of A in GSM, where tensor t, which r2 reads after it, was planned: t (auto)
    is now planned clear of the bytes the GEMM's chosen plan stages (it used to run and read the GEMM's A as t, then
    to be refused), and the program is right; at a fixed address on those bytes it is refused before anything runs,
    memory as it was; in DDR it is right too."""
    from sim.program.pipeline import prepare_program

    def right(m: sim.Simulator, prog, result) -> None:
        cfg = prog.as_run_config(result.plan.addrs)
        dy, x, _, _ = (cfg.materialise(s) for s in cfg.data)
        t_want = np.where(x > 0, dy, dy * np.float32(0))
        got = m.read(result.plan["out"].addr, (64, 64), np.float32)
        np.testing.assert_array_equal(got, np.where(x > 0, t_want, t_want * np.float32(0)))

    m = sim.Simulator("FT78NE")
    in_gsm = load_program(program(tmp_path, ACROSS_A_GEMM.replace("REGION", "gsm")), allow_kernels=True)
    checked = prepare_program(in_gsm, m)
    assert checked.ok
    staged = [(lo, hi) for key, lo, hi, _ in checked.calls[1].staged if key == ("gsm", None)]
    t = checked.plan["t"]
    assert staged and t.region.name == "gsm" and not any(lo < t.end and t.addr < hi for lo, hi in staged)
    result = m.run_program(in_gsm)
    assert result.plan["t"].addr == t.addr
    right(m, in_gsm, result)
    # The bytes the GEMM stages at t's first planning (the start of GSM's free bytes): t fixed there is refused.
    lo = staged[0][0]
    fixed = ACROSS_A_GEMM.replace("REGION", f"gsm, addr: {lo:#x}")
    before = m.memory.snapshot()
    with pytest.raises(LayoutError, match=r"layout rule 'overwrite': call 'mm' \(fp_gemm_s\) stages blocks in gsm "
                                          r".* of tensor 't' in gsm, which call 'r2' \(fp_relu_grad_s\) \(its "
                                          r"buffer 'dy'\) still reads later"):
        m.run_program(load_program(program(tmp_path, fixed, "fixed"), allow_kernels=True))
    assert m.memory.snapshot() == before
    in_ddr = load_program(program(tmp_path, ACROSS_A_GEMM.replace("REGION", "ddr"), "ddr"), allow_kernels=True)
    right(m, in_ddr, m.run_program(in_ddr))


#: A call's output at a raw address (the planner must keep the auto tensors clear of it: dy used to land there),
#: read back by a raw outputs entry.
RAW_OUTPUT = """\
tensors:
  - {name: dy, shape: [4, 64], dtype: float32}
  - {name: x, shape: [4, 64], dtype: float32}
data:
  - {tensor: dy, random: {seed: 1}}
  - {tensor: x, random: {seed: 2}}
calls:
  - {name: relu, symbol: fp_relu_grad_s, args: {dy: dy, x: x, dx: 0x80000000, shape: [4, 64]}}
outputs:
  - {name: dx, addr: 0x80000000, shape: [4, 64], dtype: float32}
"""


def test_a_raw_buffer_is_raw_even_where_it_lands_on_a_tensor_the_call_names_elsewhere(tmp_path):
    """The planner keeps clear of a call's raw-address buffers, whatever tensors the call names for its other
    arguments: the raw dx stays the call's own bytes (dy, which the call also names, used to be placed there,
    and the program was refused for overlapping), and a raw x there is read as unwritten, not as dy."""
    m = sim.Simulator("FT78NE")
    raw = load_program(program(tmp_path, RAW_OUTPUT), allow_kernels=True)
    result = m.run_program(raw)
    assert all(not (p.addr < DDR + 1024 and DDR < p.end) for p in result.plan.placements)
    cfg = raw.as_run_config(result.plan.addrs)
    dy, x = (cfg.materialise(s) for s in cfg.data)
    np.testing.assert_array_equal(m.read(DDR, (4, 64), np.float32), np.where(x > 0, dy, dy * np.float32(0)))
    reads_raw = RAW_OUTPUT.replace("x: x, dx: 0x80000000", "x: 0x80000000, dx: x").replace(
        "  - {tensor: x, random: {seed: 2}}\n", "").replace("{name: dx, addr: 0x80000000, shape: [4, 64], dtype: "
                                                             "float32}", "{tensor: x}")
    with pytest.raises(LayoutError, match=r"'unwritten-read': call 'relu' \(fp_relu_grad_s\) reads buffer 'x' "
                                          r"\[0x80000000, 0x80000400\)"):
        m.run_program(load_program(program(tmp_path, reads_raw, "reads_raw"), allow_kernels=True))


@pytest.mark.parametrize("change,words", [
    (("{name: g, shape: [4, 64], dtype: float32}", "{name: g, shape: [4, 64], dtype: float32, region: am}"),
     r"tensors\[2\]\.region: 'am' is not a storage region of FT78NE"),
    (("dx: g, shape: [4, 64]}}", "dx: g, shape: [4, 64]}, tiling: {tile_elements: 9999}}"),
     r"call 'relu' \(fp_relu_grad_s\): argument 'tiling\.tile_elements'"),
])
def test_a_programs_refusals_name_its_file(tmp_path, change, words):
    """A tensor's region (or core, or address) and a tiling the kernel refuses: one line naming the file (and the
    call), as every other refusal of a program file does."""
    body = CHAIN.replace("  - {name: add, symbol: fp_binary_elementwise_s, args: {a: g, b: dy, out: y, shape: [4, 64], "
                         "op: add}}\n", "").replace("  - {tensor: y}", "  - {tensor: g}").replace(*change)
    path = program(tmp_path, body)
    with pytest.raises(sim.SimError, match=re.escape(str(path)) + ": " + words):
        sim.Simulator("FT78NE").run_program(load_program(path, allow_kernels=True))


BAD_ADDRESSES = [("bogus", "expected an address (an integer; hex like 0xA0000000 is fine) or auto, got 'bogus'"),
                 ("-5", "must be >= 0, got -5"),
                 (str(1 << 64), "must be <= 0xffffffffffffffff (addresses are at most 64 bits)")]


@pytest.mark.parametrize("addr,words", BAD_ADDRESSES)
def test_a_tensor_address_is_an_address_or_auto(tmp_path, addr, words):
    p = program(tmp_path, f"tensors: [{{name: x, shape: [4], dtype: float32, addr: {addr}}}]\n"
                          "calls: [{symbol: fp_relu_grad_s, args: {dy: x, x: x, dx: x, shape: [4]}}]\n")
    with pytest.raises(ConfigError, match=re.escape(f"tensors[0].addr: {words}")):
        load_program(p)


def test_the_byte_ledger_tracks_the_last_writer_of_every_byte():
    """The cross-call rules' ledger (segments found by bisection) against a byte-by-byte map: after random writes,
    possibly of several runs each, every byte's last writer is the one the ledger cuts a read at, and every
    tensor's bytes overwritten by another's write are recorded as clobbered."""
    import random

    from sim.program.checks import Access, _Bytes
    rng = random.Random(4)
    for _ in range(200):
        ledger, truth, lost = _Bytes(), {}, set()
        for n in range(rng.randint(1, 12)):
            runs = sorted((lo, lo + rng.randint(1, 9)) for lo in rng.sample(range(0, 60, 10), rng.randint(1, 3)))
            tensor = rng.choice(["t", "u", None])
            a = Access(f"w{n}", "b", ("ddr", None), runs[0][0], runs[-1][1], tensor, "ddr", runs=tuple(runs))
            for lo, hi in runs:
                for byte in range(lo, hi):
                    old = truth.get(byte)
                    if old is not None and old.tensor is not None and old.tensor != tensor:
                        lost.add((byte, old.tensor, a.who))
                    truth[byte] = a
            ledger.write(a)
        probe = Access("r", "b", ("ddr", None), 0, 70, None, "ddr")
        seen = {byte: seg.by if seg else None for lo, hi, seg in ledger.pieces(probe, 0, 70) for byte in range(lo, hi)}
        assert seen == {byte: truth.get(byte) for byte in range(70)}
        assert {(byte, c.victim, c.by.who) for c in ledger.clobbered for byte in range(c.start, c.end)} == lost


#: Two GEMMs writing the left and the right halves of t (ldc 128): the right one's C starts 256 bytes in.
HALVES = """\
tensors:
  - {name: a, shape: [16, 16], dtype: float32}
  - {name: b, shape: [16, 64], dtype: float32}
  - {name: t, shape: [16, 128], dtype: float32, addr: 0x80100000}
data:
  - {tensor: a, random: {seed: 1}}
  - {tensor: b, random: {seed: 2}}
calls:
  - {name: left, symbol: fp_gemm_s, args: {a: a, b: b, c: 0x80100000, m: 16, n: 64, k: 16, ldc: 128}}
  - {name: right, symbol: fp_gemm_s, args: {a: a, b: b, c: 0x80100100, m: 16, n: 64, k: 16, ldc: 128}}
outputs:
  - {tensor: t}
"""


def test_two_pitched_views_writing_a_tensors_halves_fit_it(tmp_path):
    """The right half's C, [16, 128] from 256 bytes into t, spans past t's end by its last row's padding, which GEMM
    never touches: it lies in t (tensor-bounds judges the bytes touched), and t ends up as both products."""
    m = sim.Simulator("FT78NE")
    result = m.run_program(load_program(program(tmp_path, HALVES), allow_kernels=True))
    a = m.read(result.plan["a"].addr, (16, 16), np.float32)
    b = m.read(result.plan["b"].addr, (16, 64), np.float32)
    t = m.read(0x80100000, (16, 128), np.float32)
    assert np.allclose(t, np.concatenate([a @ b, a @ b], axis=1), rtol=1e-5, atol=1e-5)
