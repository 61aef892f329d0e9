"""Every kernel runs its default tiling (the cost model's choice) on the smallest shapes there are.

Every symbol, on every chip that has its precision, in both variants: one element, one channel, a
batch of 1, 1x1 spatial, a filter as large as the input (VALID and SAME), strides and dilations
larger than the input.  Results are compared with naive float64 loops written here from the
definitions in SPEC section 4 (independent of the kernels' own vectorised references), with the
precision's tolerance, and the small TensorFlow golden cases run on a single core.
A hypothesis sweep draws further tiny shapes, core masks and cores; its examples are bounded so the
file stays fast.
"""

from __future__ import annotations

import itertools
import math
import os
from dataclasses import dataclass

import numpy as np
import pytest
from golden import arrays, assert_matches, cases, chips_for
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

import kernels
import sim

CHIPS = ("FT78NE", "MT7004")
TARGETS = {c: sim.load_target(c) for c in CHIPS}
#: Relative tolerance of a result in each storage precision (the golden cases' own).
RTOL = {"fp32": 1e-4, "fp16": 1e-2}
F32, F16 = np.dtype(np.float32), np.dtype(np.float16)
#: The combinations a symbol runs on: every chip with its precision.
COMBOS = [(s, chip) for s in kernels.symbols() for chip in CHIPS if s.precision in TARGETS[chip].precisions]


# --- the math, straight from the definitions (float64 loops; the shapes are tiny) ------------------------

def window(size: int, k: int, stride: int, dilation: int, padding: str, pads: tuple[int, int]) -> tuple[int, int]:
    """(output size, padding before) of one spatial axis as TensorFlow defines them (0: no output)."""
    eff = (k - 1) * dilation + 1
    if padding == "SAME":
        out = -(-size // stride)
        return out, max((out - 1) * stride + eff - size, 0) // 2
    before, after = pads if padding == "EXPLICIT" else (0, 0)
    return max(0, (size + before + after - eff) // stride + 1), before


@dataclass(frozen=True)
class Conv:
    """A convolution's attributes in NHWC terms, and its tensors' order."""

    n: int
    h: int
    w: int
    c: int
    fh: int
    fw: int
    oc: int  # out_c (backprop filter) or the depth multiplier (depthwise)
    sh: int
    sw: int
    dh: int
    dw: int
    padding: str
    pads: tuple[int, int, int, int]  # top, bottom, left, right (EXPLICIT only)
    fmt: str

    def out_hw(self) -> tuple[int, int, int, int]:
        """(out_h, out_w, pad_top, pad_left)."""
        oh, top = window(self.h, self.fh, self.sh, self.dh, self.padding, self.pads[:2])
        ow, left = window(self.w, self.fw, self.sw, self.dw, self.padding, self.pads[2:])
        return oh, ow, top, left

    def order(self, n: int, h: int, w: int, c: int) -> list[int]:
        """A 4-vector in the tensors' data_format order."""
        return [n, h, w, c] if self.fmt == "NHWC" else [n, c, h, w]

    def attrs(self) -> dict:
        """strides, padding, explicit_paddings, data_format, dilations as a call takes them."""
        out = dict(strides=self.order(1, self.sh, self.sw, 1), padding=self.padding, data_format=self.fmt,
                   dilations=self.order(1, self.dh, self.dw, 1))
        if self.padding == "EXPLICIT":
            top, bottom, left, right = self.pads
            pairs = self.order((0, 0), (top, bottom), (left, right), (0, 0))
            out["explicit_paddings"] = [p for pair in pairs for p in pair]
        return out

    def taps(self):
        """Every (i, j, kh, kw, ih, iw) whose input position lies inside the input."""
        oh, ow, top, left = self.out_hw()
        for i, j, kh, kw in itertools.product(range(oh), range(ow), range(self.fh), range(self.fw)):
            ih, iw = i * self.sh + kh * self.dh - top, j * self.sw + kw * self.dw - left
            if 0 <= ih < self.h and 0 <= iw < self.w:
                yield i, j, kh, kw, ih, iw


def nhwc(a: np.ndarray, fmt: str) -> np.ndarray:
    return a if fmt == "NHWC" else a.transpose(0, 2, 3, 1)


def from_nhwc(a: np.ndarray, fmt: str) -> np.ndarray:
    return a if fmt == "NHWC" else a.transpose(0, 3, 1, 2)


def filter_grad(x: np.ndarray, dy: np.ndarray, g: Conv) -> np.ndarray:
    """dW[kh, kw, c, o] = Σ x[n, i·sh + kh·dh − top, j·sw + kw·dw − left, c] · dy[n, i, j, o]."""
    x, dy = nhwc(x.astype(np.float64), g.fmt), nhwc(dy.astype(np.float64), g.fmt)
    out = np.zeros((g.fh, g.fw, g.c, g.oc))
    for i, j, kh, kw, ih, iw in g.taps():
        out[kh, kw] += np.einsum("nc,no->co", x[:, ih, iw, :], dy[:, i, j, :])
    return out


def depthwise_input_grad(f: np.ndarray, dy: np.ndarray, g: Conv) -> np.ndarray:
    """dx[n, ih, iw, c] = Σ dy[n, i, j, c·mult + m] · f[kh, kw, c, m] over the taps landing on (ih, iw)."""
    dy = nhwc(dy.astype(np.float64), g.fmt)
    f = f.astype(np.float64)
    dx = np.zeros((g.n, g.h, g.w, g.c))
    by_mult = dy.reshape(g.n, dy.shape[1], dy.shape[2], g.c, g.oc)
    for i, j, kh, kw, ih, iw in g.taps():
        dx[:, ih, iw, :] += (by_mult[:, i, j, :, :] * f[kh, kw]).sum(axis=-1)
    return from_nhwc(dx, g.fmt)


def batch_norm(x, dy, mean, invar, scale, train: bool):
    """(dx, dbias, dscale) of the library's BatchNormGrad, float64."""
    x, dy = x.astype(np.float64), dy.astype(np.float64)
    xh = (x - mean) * invar
    sdy, sdyxh = dy.sum(0), (dy * xh).sum(0)
    m = x.shape[0]
    dx = scale * invar / m * (m * dy - sdy - xh * sdyxh) if train else dy * scale * invar
    return dx, sdy, sdyxh


def fused_batch_norm(dy, x, scale, mean, var, eps, fmt, train: bool):
    """(x_backprop, scale_backprop, offset_backprop) of TensorFlow's FusedBatchNormGrad, float64."""
    axes = (0, 1, 2) if fmt == "NHWC" else (0, 2, 3)
    shape = (1, 1, 1, -1) if fmt == "NHWC" else (1, -1, 1, 1)
    x, dy = x.astype(np.float64), dy.astype(np.float64)
    rs = 1 / np.sqrt(var.astype(np.float64) + np.float64(np.float32(eps)))
    xh = (x - mean.reshape(shape)) * rs.reshape(shape)
    sdy, sdyxh = dy.sum(axes), (dy * xh).sum(axes)
    m = dy.size // len(scale)  # elements per channel
    k = (scale * rs).reshape(shape)
    if train:
        dx = k / m * (m * dy - sdy.reshape(shape) - xh * sdyxh.reshape(shape))
    else:
        dx = dy * k
    return dx, sdyxh, sdy


def nudged(lo: float, hi: float, bits: int, narrow: bool) -> tuple[float, float]:
    """TensorFlow's nudged bounds, float64 (inputs are kept away from them, so float32 agrees)."""
    qmin, qmax = (1 if narrow else 0), (1 << bits) - 1
    scale = (hi - lo) / (qmax - qmin)
    zp = min(max(qmin - lo / scale, qmin), qmax)
    zp = math.floor(zp + 0.5)
    return (qmin - zp) * scale, (qmax - zp) * scale


# --- running one case --------------------------------------------------------------------------------

def addresses(variant: str) -> list[int]:
    """Sixteen buffer addresses 1 MiB apart: DDR for shared calls, l2 for private ones."""
    base = 0x80000000 if variant == "s" else 0x10000000
    return [base + k * 0x100000 for k in range(16)]


def assert_close(name: str, got: np.ndarray, want: np.ndarray, precision: str) -> None:
    """``got`` within the precision's tolerance of ``want`` (atol scaled by the result's magnitude)."""
    tol = RTOL[precision]
    want = np.asarray(want, np.float64)
    atol = tol * (1 + float(np.abs(want).max(initial=0)))
    np.testing.assert_allclose(np.asarray(got, np.float64), want, rtol=tol, atol=atol, err_msg=name)


def run_case(sym: kernels.Symbol, chip: str, kind: str, spec: dict, where: dict, seed: int) -> None:
    """Place random inputs, call ``sym`` with its default tiling, compare every output with the math."""
    m = sim.Simulator(TARGETS[chip])
    core = where.get("core") if sym.variant == "p" else None
    A = addresses(sym.variant)
    rng = np.random.default_rng(seed)
    dt = F16 if sym.precision == "fp16" else F32
    # Storage precision of the big tensors: a reference from the stored (rounded) values.
    out_prec = sym.precision

    def put(addr: int, shape, dtype=dt, lo=-1.0, hi=1.0) -> np.ndarray:
        arr = rng.uniform(lo, hi, shape).astype(dtype)
        m.write(addr, arr, core=core)
        return arr

    def get(addr: int, shape, dtype=dt) -> np.ndarray:
        return m.read(addr, shape, dtype, core=core)

    name = sym.name
    if kind == "batch_norm_grad":
        b, c, train = spec["batch"], spec["channel"], spec["train"]
        x, dy = put(A[0], (b, c)), put(A[1], (b, c))
        mean, invar, scale = put(A[3], c, F32), put(A[4], c, F32, 0.5, 2), put(A[5], c, F32, 0.5, 1.5)
        m.call(name, x=A[0], dy=A[1], dx=A[2], params=[A[3], A[4], A[5], A[6], A[7], b, c, int(train)], **where)
        dx, sdy, sdyxh = batch_norm(x, dy, mean, invar, scale, train)
        assert_close("dx", get(A[2], (b, c)), dx, out_prec)
        assert_close("dbias", get(A[6], c, F32), sdy, "fp32")
        assert_close("dscale", get(A[7], c, F32), sdyxh, "fp32")
    elif kind == "fused_batch_norm_grad":
        shape, fmt, train, eps = spec["shape"], spec["fmt"], spec["train"], 1e-3
        c = shape[3] if fmt == "NHWC" else shape[1]
        dy, x = put(A[0], shape), put(A[1], shape)
        scale, mean, var = put(A[2], c, F32, 0.5, 1.5), put(A[3], c, F32), put(A[4], c, F32, 0.5, 2)
        m.call(name, y_backprop=A[0], x=A[1], scale=A[2], reserve_space_1=A[3], reserve_space_2=A[4],
               x_backprop=A[5], scale_backprop=A[6], offset_backprop=A[7], shape=list(shape), epsilon=eps,
               data_format=fmt, is_training=train, **where)
        dx, dscale, doffset = fused_batch_norm(dy, x, scale, mean, var, eps, fmt, train)
        assert_close("x_backprop", get(A[5], shape), dx, out_prec)
        assert_close("scale_backprop", get(A[6], c, F32), dscale, "fp32")
        assert_close("offset_backprop", get(A[7], c, F32), doffset, "fp32")
    elif kind == "fake_quant_with_min_max_vars_gradient":
        shape, bits, narrow = spec["shape"], spec["bits"], spec["narrow"]
        lo, hi = -0.7, 0.9
        nmin, nmax = nudged(lo, hi, bits, narrow)
        g = put(A[0], shape)
        x = rng.uniform(-1.5, 1.5, shape)
        x = np.where(np.abs(x - nmin) < 0.05, x - 0.1, x)  # away from the bounds: float32 and float64 agree
        x = np.where(np.abs(x - nmax) < 0.05, x + 0.1, x).astype(dt)
        m.write(A[1], x, core=core)
        m.write(A[2], np.float32(lo), core=core)
        m.write(A[3], np.float32(hi), core=core)
        m.call(name, gradients=A[0], inputs=A[1], min=A[2], max=A[3], backprops_wrt_input=A[4],
               backprop_wrt_min=A[5], backprop_wrt_max=A[6], shape=list(shape), num_bits=bits, narrow_range=narrow,
               **where)
        xf, gf = x.astype(np.float64), g.astype(np.float64)
        inside = (xf >= nmin) & (xf <= nmax)
        assert_close("backprops_wrt_input", get(A[4], shape), np.where(inside, gf, 0), out_prec)
        assert_close("backprop_wrt_min", get(A[5], (), F32), gf[xf < nmin].sum(), "fp32")
        assert_close("backprop_wrt_max", get(A[6], (), F32), gf[xf > nmax].sum(), "fp32")
    elif kind == "gemm":
        mm, nn, kk, ta, tb, beta, pad = (spec[x] for x in ("m", "n", "k", "trans_a", "trans_b", "beta", "pad"))
        a_shape = (kk, mm) if ta else (mm, kk)
        b_shape = (nn, kk) if tb else (kk, nn)
        lda, ldb, ldc = a_shape[1] + pad, b_shape[1] + pad, nn + pad
        a, b = put(A[0], (a_shape[0], lda)), put(A[1], (b_shape[0], ldb))
        c = put(A[2], (mm, ldc))
        m.call(name, a=A[0], b=A[1], c=A[2], m=mm, n=nn, k=kk, trans_a=ta, trans_b=tb, beta=beta, lda=lda, ldb=ldb,
               ldc=ldc, **where)
        oa = a[:, :a_shape[1]].astype(np.float64)
        ob = b[:, :b_shape[1]].astype(np.float64)
        want = (oa.T if ta else oa) @ (ob.T if tb else ob) + (c[:, :nn].astype(np.float64) if beta else 0)
        got = get(A[2], (mm, ldc))
        assert_close("c", got[:, :nn], want, out_prec)
        assert (got[:, nn:] == c[:, nn:]).all(), "the elements between a row's end and its pitch were written"
    else:
        g: Conv = spec["conv"]
        oh, ow, _, _ = g.out_hw()
        x_shape = g.order(g.n, g.h, g.w, g.c)
        if kind == "conv2d_backprop_filter":
            dy_shape = g.order(g.n, oh, ow, g.oc)
            x, dy = put(A[0], x_shape), put(A[1], dy_shape)
            m.call(name, input=A[0], out_backprop=A[1], output=A[2], input_shape=x_shape,
                   filter_sizes=[g.fh, g.fw, g.c, g.oc], **g.attrs(), **where)
            assert_close("output", get(A[2], (g.fh, g.fw, g.c, g.oc)), filter_grad(x, dy, g), out_prec)
        else:
            dy_shape = g.order(g.n, oh, ow, g.c * g.oc)
            f, dy = put(A[0], (g.fh, g.fw, g.c, g.oc)), put(A[1], dy_shape)
            m.call(name, filter=A[0], out_backprop=A[1], output=A[2], input_sizes=x_shape,
                   filter_shape=[g.fh, g.fw, g.c, g.oc], **g.attrs(), **where)
            assert_close("output", get(A[2], x_shape), depthwise_input_grad(f, dy, g), out_prec)


# --- the smallest shapes, named ----------------------------------------------------------------------

def conv(n=1, h=1, w=1, c=1, fh=1, fw=1, oc=1, s=(1, 1), d=(1, 1), padding="VALID", pads=(0, 0, 0, 0),
         fmt="NHWC") -> Conv:
    return Conv(n, h, w, c, fh, fw, oc, s[0], s[1], d[0], d[1], padding, pads, fmt)


CONV_CORNERS = {
    "one element": conv(),
    "one element SAME": conv(padding="SAME"),
    "filter as large as the input VALID": conv(h=3, w=2, fh=3, fw=2),
    "filter as large as the input SAME": conv(h=3, w=2, fh=3, fw=2, padding="SAME"),
    "filter larger than the input SAME": conv(h=1, w=2, fh=3, fw=4, padding="SAME"),
    "strides larger than the input": conv(h=2, w=3, s=(5, 7), padding="SAME"),
    "strides larger than the input VALID": conv(h=2, w=3, s=(5, 7)),
    "dilations larger than the input SAME": conv(h=2, w=2, fh=2, fw=2, d=(4, 5), padding="SAME"),
    "explicit padding around one element": conv(fh=2, fw=3, padding="EXPLICIT", pads=(1, 0, 1, 1)),
    "batch 2, 1x1 spatial, channels": conv(n=2, c=3, oc=2),
    "wide channels on 1x1": conv(c=33, oc=3, padding="SAME"),
}
SHAPE_CORNERS = {
    "batch_norm_grad": {f"{b}x{c} {'train' if t else 'infer'}": dict(batch=b, channel=c, train=t)
                        for b, c in ((1, 1), (1, 2), (2, 1), (1, 33)) for t in (True, False)},
    "fused_batch_norm_grad": {f"{s} {f} {'train' if t else 'infer'}": dict(shape=s, fmt=f, train=t)
                              for s in ((1, 1, 1, 1), (1, 1, 1, 3), (2, 1, 1, 1), (1, 2, 3, 1))
                              for f in ("NHWC", "NCHW") for t in (True, False)},
    "fake_quant_with_min_max_vars_gradient": {str(s): dict(shape=s, bits=8, narrow=False)
                                              for s in ((1,), (2,), (1, 1, 1, 1), (3, 1), (17,))},
    "conv2d_backprop_filter": {f"{k} {f}": dict(conv=Conv(**{**g.__dict__, "fmt": f}))
                               for k, g in CONV_CORNERS.items() for f in ("NHWC", "NCHW")},
    "depthwise_conv2d_backprop_input": {f"{k} {f}": dict(conv=Conv(**{**g.__dict__, "fmt": f}))
                                        for k, g in CONV_CORNERS.items() for f in ("NHWC", "NCHW")},
    "gemm": {f"{m}x{n}x{k} t{ta}{tb} beta{beta} pad{pad}": dict(m=m, n=n, k=k, trans_a=ta, trans_b=tb, beta=beta,
                                                               pad=pad)
             for m, n, k, ta, tb, beta, pad in ((1, 1, 1, 0, 0, 0, 0), (1, 1, 1, 1, 1, 1, 3), (2, 1, 3, 0, 1, 0, 1),
                                                (1, 33, 2, 1, 0, 1, 0), (7, 5, 1, 0, 0, 1, 2),
                                                (13, 3, 9, 1, 1, 0, 0))},
}


def corner_params():
    for sym, chip in COMBOS:
        for label, spec in SHAPE_CORNERS[sym.kernel.name].items():
            yield pytest.param(sym, chip, spec, id=f"{sym.name}-{chip}-{label}")


def placements(sym: kernels.Symbol, chip: str) -> list[dict]:
    """One core of a shared call, every core of it, and a private call on the last core."""
    t = TARGETS[chip]
    if sym.variant == "p":
        return [{"core": t.cores - 1}]
    return [{"core_mask": 0x1}, {"core_mask": t.all_cores_mask}]


@pytest.mark.parametrize("sym,chip,spec", list(corner_params()))
def test_smallest_shapes_run_the_default_tiling_and_match_the_math(sym, chip, spec):
    for seed, where in enumerate(placements(sym, chip)):
        run_case(sym, chip, sym.kernel.name, spec, where, seed)


def test_the_corners_cover_every_kernel():
    assert {s.kernel.name for s in kernels.symbols()} == set(SHAPE_CORNERS)


# --- a hypothesis sweep of tiny shapes ------------------------------------------------------------------

@st.composite
def tiny_conv(draw: st.DrawFn) -> Conv:
    h, w = draw(st.integers(1, 4)), draw(st.integers(1, 4))
    padding = draw(st.sampled_from(["SAME", "VALID", "EXPLICIT"]))
    pads = tuple(draw(st.lists(st.integers(0, 2), min_size=4, max_size=4))) if padding == "EXPLICIT" \
        else (0, 0, 0, 0)
    g = Conv(n=draw(st.integers(1, 2)), h=h, w=w, c=draw(st.sampled_from([1, 2, 3, 17, 40])),
             fh=draw(st.integers(1, 4)), fw=draw(st.integers(1, 4)), oc=draw(st.integers(1, 3)),
             sh=draw(st.integers(1, 6)), sw=draw(st.integers(1, 6)), dh=draw(st.integers(1, 5)),
             dw=draw(st.integers(1, 5)), padding=padding, pads=pads, fmt=draw(st.sampled_from(["NHWC", "NCHW"])))
    oh, ow, _, _ = g.out_hw()
    if oh <= 0 or ow <= 0:  # a VALID filter larger than the input: refused, and tested elsewhere
        g = Conv(**{**g.__dict__, "padding": "SAME", "pads": (0, 0, 0, 0)})
    return g


def tiny_spec(kind: str) -> st.SearchStrategy:
    if kind == "batch_norm_grad":
        return st.fixed_dictionaries(dict(batch=st.integers(1, 5), channel=st.integers(1, 70), train=st.booleans()))
    if kind == "fused_batch_norm_grad":
        return st.fixed_dictionaries(dict(
            shape=st.tuples(st.integers(1, 3), st.integers(1, 3), st.integers(1, 3), st.integers(1, 40)),
            fmt=st.sampled_from(["NHWC", "NCHW"]), train=st.booleans()))
    if kind == "fake_quant_with_min_max_vars_gradient":
        return st.fixed_dictionaries(dict(shape=st.lists(st.integers(1, 40), min_size=1, max_size=3).map(tuple),
                                          bits=st.integers(2, 8), narrow=st.booleans()))
    if kind == "gemm":
        return st.fixed_dictionaries(dict(m=st.integers(1, 20), n=st.integers(1, 40), k=st.integers(1, 20),
                                          trans_a=st.integers(0, 1), trans_b=st.integers(0, 1),
                                          beta=st.integers(0, 1), pad=st.integers(0, 3)))
    return st.fixed_dictionaries(dict(conv=tiny_conv()))


#: DSPSIM_FUZZ_EXAMPLES=200 sweeps deeper, randomised (the suite runs a small derandomised sweep: about 8
#: tiny calls per symbol and chip, a few seconds in all).
DEEP = int(os.environ.get("DSPSIM_FUZZ_EXAMPLES", "0") or 0)
SWEEP = settings(max_examples=DEEP or 8, deadline=None, database=None, derandomize=not DEEP,
                 suppress_health_check=[HealthCheck.too_slow])


@pytest.mark.parametrize("sym,chip", COMBOS, ids=[f"{s.name}-{c}" for s, c in COMBOS])
def test_tiny_shapes_sweep(sym, chip):
    t = TARGETS[chip]
    where = (st.integers(0, t.cores - 1).map(lambda c: {"core": c}) if sym.variant == "p"
             else st.integers(1, t.all_cores_mask).map(lambda mask: {"core_mask": mask}))

    @SWEEP
    @given(spec=tiny_spec(sym.kernel.name), where=where, seed=st.integers(0, 2 ** 16))
    def check(spec, where, seed):
        run_case(sym, chip, sym.kernel.name, spec, where, seed)

    check()


# --- TensorFlow's small golden cases on one core --------------------------------------------------------

#: Golden cases small enough to run on one core in a moment.
SMALL_GOLDEN = [c for k in SHAPE_CORNERS for c in cases(k)
                if max(math.prod(o["shape"]) for o in c["outputs"].values()) <= 1200]


def golden_params():
    for case in SMALL_GOLDEN:
        for chip in chips_for(case):
            for variant in ("s", "p"):
                yield pytest.param(case, chip, variant, id=f"{case['id']}-{chip}-{variant}")


@pytest.mark.parametrize("case,chip,variant", list(golden_params()))
def test_small_golden_cases_on_one_core(case, chip, variant):
    data = arrays(case)
    kind = case["kernel"]
    sym = kernels.lookup(f"{'hp' if case['precision'] == 'fp16' else 'fp'}_{kind}_{variant}")
    m = sim.Simulator(chip)
    core = TARGETS[chip].cores - 1 if variant == "p" else None
    where = {"core": core} if variant == "p" else {"core_mask": 0x1}
    addr = dict(zip(data, addresses(variant)))
    for name, arr in data.items():
        if name not in case["outputs"]:
            m.write(addr[name], arr, core=core)
    attrs = dict(case["attrs"])
    if kind == "batch_norm_grad":
        args = dict(x=addr["x"], dy=addr["dy"], dx=addr["dx"],
                    params=[addr[k] for k in ("mean", "invar", "scale", "dbias", "dscale")]
                    + [attrs["batch"], attrs["channel"], attrs["is_train"]])
    else:
        pointers = {a.name for a in sym.kernel.args if a.kind in ("in_ptr", "out_ptr")}
        args = {k: v for k, v in addr.items() if k in pointers}
        args.update({k: v for k, v in attrs.items() if v is not None})
    m.call(sym.name, **args, **where)
    for name, out in case["outputs"].items():
        got = m.read(addr[name], tuple(out["shape"]), np.dtype(out["dtype"]), core=core)
        assert_matches(case, name, got, data[name])
