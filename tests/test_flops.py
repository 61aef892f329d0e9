"""A run reports the math's flops: the same for fp32 and fp16 storage and for every tiling of a call.

The counts below are derived by hand from the operations' definitions (SPEC section 4) and the
per-element operation counts each kernel documents: a multiply-add is two flops; conversions between
fp16 and fp32, empty lanes of part-filled vectors, zero-fills, casts and work a tiling repeats (partial
sums exchanged between cores, x̂ recomputed in a second pass) are issues of the kernels' inner loops:
they cost cycles (every cycle comes from the loops) but are not reported as flops.
"""

from __future__ import annotations

import pytest

import kernels
import sim

A, B, C, D = 0x80000000, 0x90000000, 0xA0000000, 0xB0000000


def taps_pairs(size: int, out: int, k: int, stride: int, dilation: int, pad: int) -> int:
    """(tap, output position) pairs of one axis whose input position lies inside the input."""
    return sum(1 for o in range(out) for t in range(k) if 0 <= o * stride - pad + t * dilation < size)


#: kernel -> (arguments, the math's flops by hand)
CASES = {
    # BatchNormGrad is FusedBatchNormGrad with H = W = 1 and rs (invar) given, so the same table without the
    # rsqrt: x̂ (2), the two sums (3), dx (training 4) per element; coefficients (3) per channel.
    "batch_norm_grad-train": (
        dict(x=A, dy=B, dx=C, params=[D, D + 0x10000, D + 0x20000, D + 0x30000, D + 0x40000, 700, 83, 1]),
        700 * 83 * 9 + 83 * 3),
    # ... inference dx = dy·k: 1.
    "batch_norm_grad-infer": (
        dict(x=A, dy=B, dx=C, params=[D, D + 0x10000, D + 0x20000, D + 0x30000, D + 0x40000, 9, 4000, 0]),
        9 * 4000 * 6 + 4000 * 3),
    # x̂ (2), the two sums (3), x_backprop (training 4) per element; rsqrt (2) and coefficients (3) per channel.
    "fused_batch_norm_grad-nhwc-train": (
        dict(y_backprop=A, x=B, scale=D, reserve_space_1=D + 0x10000, reserve_space_2=D + 0x20000, x_backprop=C,
             scale_backprop=D + 0x30000, offset_backprop=D + 0x40000, shape=[4, 28, 28, 72]),
        4 * 28 * 28 * 72 * 9 + 72 * 5),
    # ... inference x_backprop = dy·k: 1.
    "fused_batch_norm_grad-nchw-infer": (
        dict(y_backprop=A, x=B, scale=D, reserve_space_1=D + 0x10000, reserve_space_2=D + 0x20000, x_backprop=C,
             scale_backprop=D + 0x30000, offset_backprop=D + 0x40000, shape=[3, 5, 20, 13], data_format="NCHW",
             is_training=False),
        3 * 5 * 20 * 13 * 6 + 5 * 5),
    # A multiply-add per tap, output position and (in, out) channel pair: 2·fh·fw·C·O·N·oh·ow (SAME: oh = 14).
    "conv2d_backprop_filter": (
        dict(input=A, out_backprop=B, output=C, input_shape=[2, 14, 14, 40], filter_sizes=[3, 3, 40, 24],
             strides=[1, 1, 1, 1], padding="SAME"),
        2 * 3 * 3 * 40 * 24 * 2 * 14 * 14),
    "conv2d_backprop_filter-nchw-strided": (
        dict(input=A, out_backprop=B, output=C, input_shape=[1, 3, 9, 11], filter_sizes=[2, 3, 3, 5],
             strides=[1, 1, 2, 2], padding="VALID", data_format="NCHW"),
        2 * 2 * 3 * 3 * 5 * 1 * 4 * 5),
    # A multiply-add per (tap, output) pair landing inside the input, per channel and multiplier.
    "depthwise_conv2d_backprop_input": (
        dict(filter=D, out_backprop=A, output=C, input_sizes=[2, 17, 15, 20], filter_shape=[3, 3, 20, 2],
             strides=[1, 2, 2, 1], padding="SAME"),
        2 * 2 * 20 * 2 * taps_pairs(17, 9, 3, 2, 1, 1) * taps_pairs(15, 8, 3, 2, 1, 1)),
    # Two compares, a select (2) and two masked accumulations (2 each) per element; the nudge once (11).
    "fake_quant_with_min_max_vars_gradient": (
        dict(gradients=A, inputs=B, min=D, max=D + 0x100, backprops_wrt_input=C, backprop_wrt_min=D + 0x200,
             backprop_wrt_max=D + 0x300, shape=[37, 1001]),
        37 * 1001 * 8 + 11),
    # A multiply-add per (row, column, depth) triple: 2·m·n·k, whatever the transposes, pitches and blocking.
    "gemm": (dict(a=A, b=B, c=C, m=70, n=150, k=90), 2 * 70 * 150 * 90),
    "gemm-transposed-beta-pitched": (dict(a=A, b=B, c=C, m=33, n=17, k=600, trans_a=1, trans_b=1, beta=1, lda=40,
                                          ldb=610, ldc=20), 2 * 33 * 17 * 600),
}


def timing_run(m: sim.Simulator, symbol: str, args: dict, **kw) -> sim.Run:
    return m.call(symbol, numerics=False, **args, **kw)


#: Unit classes whose issues do arithmetic (a vector FMAC or ALU op on every lane, a scalar op or broadcast).
ARITHMETIC_UNITS = ("fmac", "valu", "salu", "broadcast")


def arithmetic_issues(loop) -> int:
    """Arithmetic instructions ``loop`` issues over all its entries (body and epilogue)."""
    body = sum(n for u, n in loop.issues.items() if u in ARITHMETIC_UNITS)
    tail = sum(n for u, n in loop.epilogue.items() if u in ARITHMETIC_UNITS)
    return loop.entries * (loop.trips * body + tail)


def check_counts(run: sim.Run, want: int) -> None:
    """The run reports ``want`` flops everywhere, and no tile claims more math than its loops issue: at most
    two flops (a multiply-add) per lane of every arithmetic instruction."""
    assert run.roofline.total_flops == want
    assert sum(e.flops for e in run.events) == want
    precisions = run.target.core.precisions
    for phase in run.plan.phases:
        for tiles in phase.tiles.values():
            for t in tiles:
                c = t.compute
                if c is not None:
                    lanes = precisions[c.precision].lanes
                    assert 0 <= c.flops <= 2 * lanes * sum(arithmetic_issues(lp) for lp in c.loops), t.tile_id


def conversion_issues(run: sim.Run) -> int:
    """Vector ALU instructions (compares, selects, conversions) the run's loops issue."""
    return sum(lp.entries * (lp.trips * lp.issues.get("valu", 0) + lp.epilogue.get("valu", 0))
               for phase in run.plan.phases for tiles in phase.tiles.values() for t in tiles
               if t.compute is not None for lp in t.compute.loops)


@pytest.mark.parametrize("case", sorted(CASES))
def test_fp32_and_fp16_runs_of_one_shape_report_the_math_flops(case):
    args, want = CASES[case]
    kernel = case.split("-")[0]
    m = sim.Simulator("MT7004")
    fp = timing_run(m, f"fp_{kernel}_s", args)
    hp = timing_run(m, f"hp_{kernel}_s", args)
    check_counts(fp, want)
    check_counts(hp, want)
    # The conversions still take time: an hp_ run stores fp16 and computes or accumulates wider, so its loops
    # issue conversions on the vector ALU (not counted as flops, priced as every issue is).
    assert conversion_issues(hp) > 0


@pytest.mark.parametrize("case", sorted(CASES))
def test_every_candidate_tiling_and_core_count_reports_the_same_flops(case):
    args, want = CASES[case]
    kernel = case.split("-")[0]
    m = sim.Simulator("FT78NE")
    symbol = f"fp_{kernel}_s"
    _, _, choice = m.plan_with_choice(symbol, **args)
    tilings = [c for c, _ in choice.candidates] or [choice.tiling]
    for tiling in tilings:
        check_counts(timing_run(m, symbol, args, tiling=tiling), want)
    for mask in (0x1, 0x5):
        check_counts(timing_run(m, symbol, args, core_mask=mask), want)


def test_the_cases_cover_every_kernel():
    assert {c.split("-")[0] for c in CASES} == {s.kernel.name for s in kernels.symbols()}


def test_fused_batch_norm_grad_fp16_no_longer_reports_its_conversions_as_flops():
    # The issue's example: the same math reported 412 MFLOP in fp16 against 285 MFLOP in fp32.
    args, want = CASES["fused_batch_norm_grad-nhwc-train"]
    m = sim.Simulator("MT7004")
    hp = timing_run(m, "hp_fused_batch_norm_grad_s", args)
    assert hp.roofline.total_flops == want

    def alu_issues(symbol: str) -> int:
        _, plan = m.plan(symbol, **args)
        return sum(loop.issues.get("valu", 0) * loop.trips * loop.entries for ph in plan.phases
                   for tiles in ph.tiles.values() for t in tiles if t.compute is not None for loop in t.compute.loops)
    # Widening and narrowing are counted apart: vector ALU issues of the hp_ symbol's loops, not flops.
    assert alu_issues("hp_fused_batch_norm_grad_s") > alu_issues("fp_fused_batch_norm_grad_s")


# --- what hp_ symbols store and compute in which precision, said plainly -------------------------------

def bound_dtypes(symbol: str, args: dict) -> dict[str, str]:
    """Buffer name -> the dtype a bound call of ``symbol`` reads or writes it in (the truth a note must tell)."""
    call = sim.Simulator("MT7004").bind(symbol, **args)
    return {b.name: str(b.dtype) for b in call.buffers}


def listed(note: str, label: str) -> set[str]:
    """The buffer names a precision note lists after ``label`` (up to the next ';')."""
    for part in note.split("; "):
        if part.startswith(label):
            return {n.strip() for n in part[len(label):].split(",")}
    return set()


@pytest.mark.parametrize("kernel", sorted({c.split("-")[0] for c in CASES}))
def test_precision_note_names_every_buffer_with_the_dtype_the_kernel_uses(kernel):
    args = next(a for c, (a, _) in CASES.items() if c.split("-")[0] == kernel)
    hp, fp = kernels.lookup(f"hp_{kernel}_s"), kernels.lookup(f"fp_{kernel}_s")
    dtypes = bound_dtypes(hp.name, args)
    note = hp.precision_note
    assert listed(note, "stored in fp16: ") == {n for n, d in dtypes.items() if d == "float16"}, note
    assert listed(note, "stored in fp32: ") == {n for n, d in dtypes.items() if d == "float32"}, note
    assert "computed in fp32" in note or "accumulated in fp32" in note
    # The conversions are issues of the kernel's loops (on the vector ALU); or the kernel multiplies fp16 at the
    # target's mixed rate (fp16_fp32acc) and says what a chip without it does.
    assert "vector ALU issue" in note or ("fp16_fp32acc" in note and "without it" in note)
    assert set(bound_dtypes(fp.name, args).values()) == {"float32"}
    assert fp.precision_note == "fp32 storage and fp32 arithmetic throughout"
    assert kernels.lookup(f"hp_{kernel}_p").precision_note == note


def test_kernels_listing_says_what_each_symbol_stores_and_computes(capsys):
    from sim.cli import main
    assert main(["kernels"]) == 0
    out = capsys.readouterr().out
    for sym in kernels.symbols():
        block = out[out.index(f"{sym.name}  ["):]
        block = block[:block.index("\n", block.index("    precision:"))]
        assert block.endswith(f"    precision: {sym.precision_note}")
