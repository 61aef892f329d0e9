"""GEMM's constants (its tiling keys' choices and the published schedule's block sizes), attributes and tiling."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

import numpy as np

from kernels.base import PlanContext

F32 = np.dtype(np.float32)
#: How the cores share the work (the ``split`` key of a tiling).
SPLITS = ("n", "m", "k")
#: Where C lives over the k loop (the ``c_home`` key): ``am``, a core's C block resident in AM for every k block
#: (loaded, when at all, and stored once); ``ddr``, C streamed per k block (the published library's loop order:
#: k blocks outermost, each tile loads its C rows, accumulates one k block into them and stores them back).
C_HOMES = ("am", "ddr")
#: Where a core's A panels come from (the ``a_staging`` key): ``gsm``, A's blocks staged in the shared level first
#: (one copy for every core: split n on several cores always, split m by choice, and on one core the published
#: single-core blocking, M_G x K_G of A in GSM); ``memory``, each panel read straight from memory (split k, a _p
#: call, split m by choice, or one core).
A_STAGINGS = ("gsm", "memory")
#: Who loads a GSM block of A (the ``a_loader`` key): ``cores``, the call's cores a share each; ``core0``, the
#: first core of the call the whole block (the published library), the others waiting for it.
A_LOADERS = ("cores", "core0")
#: Where a core's B blocks come from (the ``b_staging`` key): ``am``, memory straight into AM; ``gsm``, split m
#: only, memory into GSM once (the cores a share each), then GSM into each core's AM; ``broadcast``, split m only,
#: memory straight into every core's AM as one synchronised transfer (``Transfer.sync``): read once, each core's
#: engine carrying its copy.
B_STAGINGS = ("am", "gsm", "broadcast")
#: How a B stored transposed (trans_b = 1) is multiplied (the ``nt_kernel`` key): ``transpose``, each B block
#: transposed in AM and the NN micro-kernel run on it; ``reduce``, the published merged NT micro-kernel
#: (BLAS-for-multi-core-DSP): dot products of A's and B's rows, both contiguous in k, read from AM as vectors,
#: one vector accumulator per element of C, reduced across its lanes into C's rows in SM, each block's reduction
#: overlapping the next block's dot products; ``reduce_serial``, Yu et al.'s NT micro-kernel (IPDPS 2024), the
#: same dot products in larger blocks, each block reduced before the next starts (asked for only: ``reduce``
#: does the same work in fewer cycles).
NT_KERNELS = ("transpose", "reduce", "reduce_serial")
#: How the product is formulated (the ``formulation`` key): ``direct``, C = op(A)·op(B), A's rows in SM panels and
#: B's columns in AM blocks; ``transposed``, Cᵀ = op(B)ᵀ·op(A)ᵀ, A's and B's roles swapped (B's rows in the panels,
#: A's in the blocks) and each finished tile of Cᵀ transposed in AM into C's rows (C's old rows, beta = 1,
#: transposed on their way in): the published TT loop nest (BLAS-for-multi-core-DSP, TT), where it computes
#: Cᵀ = B·A of the operands as stored, and the transposed scheme for thin C (few columns: the micro-kernel's A
#: broadcasts would bound it; swapped, C's many rows are the vectors).
FORMULATIONS = ("direct", "transposed")
#: The ``nt_kernel`` values that reduce dot products into C's rows in SM (A's panel in AM, C streamed).
NT_REDUCTIONS = ("reduce", "reduce_serial")
#: A panels in AM with an NT reduction kernel: double-buffered (one loading, one computing), while C's rows in SM
#: are triple-buffered (Yu et al.'s capacity constraints: (2 M_S + 2 N_A) K_A in AM, 3 M_A N_A in SM).
NT_A_PANELS = 2
#: C tiles in flight per core when C is streamed: the library triple-buffers C (one loading, one computing, one
#: storing).
STREAMED_C_SLOTS = 3
#: The values of the blocking keys the search tries, the published schedule's first (SPEC §2): rows of op(A)
#: per GSM block, depth of a block, columns of a B block.
M_BLOCKS = (576, 288, 144, 48)
K_BLOCKS = (256, 512, 128)
N_BLOCK = 128
#: A depth this many times the larger side of C tries split k first (each core a range of the depth).
LONG_K = 8
#: Micro-kernel heights the search tries (rows of C in registers), the published 6 first: with n_micro vectors
#: per row, m_micro x n_micro / lanes accumulators, fewer than the FMAC units times their latency stall.
MICRO_ROWS = (6, 8, 12)
#: Precision a symbol computes in, by storage precision: hp products of fp16 values accumulated in fp32 (the
#: chip's mixed-precision rate where the target lists it, else its fp32 rate).
MIXED = "fp16_fp32acc"


def compute_precision(ctx: PlanContext) -> str:
    """The precision the chip computes this call's multiply-adds in."""
    if ctx.precision == "fp16":
        return MIXED if MIXED in ctx.target.core.precisions else "fp32"
    return "fp32"



@dataclass(frozen=True)
class GemmAttrs:
    """What binding found out about a call: sizes, transposes, beta and pitches (elements)."""

    m: int
    n: int
    k: int
    trans_a: bool
    trans_b: bool
    beta: bool
    lda: int
    ldb: int
    ldc: int


@dataclass(frozen=True)
class GemmTiling:
    """A full tiling of the space, as the planner takes it (the keys of :meth:`Gemm.tiling_space`)."""

    split: str
    m_block: int
    n_block: int
    k_block: int
    m_panel: int
    m_micro: int
    n_micro: int
    c_home: str = "am"
    a_loader: str = "cores"
    a_buffers: int = 2
    b_staging: str = "am"
    nt_kernel: str = "transpose"
    a_staging: str = "gsm"

    @property
    def nt_reduces(self) -> bool:
        """Whether the tiling multiplies by an NT micro-kernel that reduces into C's rows in SM."""
        return self.nt_kernel in NT_REDUCTIONS

    def as_dict(self) -> dict[str, Any]:
        """The tiling as the mapping a caller gives."""
        return dict(split=self.split, c_home=self.c_home, a_loader=self.a_loader, a_buffers=self.a_buffers,
                    b_staging=self.b_staging, nt_kernel=self.nt_kernel, a_staging=self.a_staging,
                    m_block=self.m_block,
                    n_block=self.n_block, k_block=self.k_block, m_panel=self.m_panel, m_micro=self.m_micro,
                    n_micro=self.n_micro)


@dataclass(frozen=True)
class Step:
    """One step of the plan, the same on every core: GSM block ``block`` = (m block, k block), B block column
    chunk ``chunk`` (an index into the core's column chunks, or the global ones with split m)."""

    mb: int
    kb: int
    chunk: int
