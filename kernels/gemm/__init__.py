"""GEMM: ``{fp,hp}_gemm_{s,p}``, the library's matrix product C = op(A)·op(B) + beta·C (row-major, as in C).

op(A) is m×k: A stored [m, lda ≥ k] when ``trans_a`` = 0, [k, lda ≥ m] when 1; op(B) is k×n: B stored
[k, ldb ≥ n] when ``trans_b`` = 0, [n, ldb ≥ k] when 1; C stored [m, ldc ≥ n].  ``beta`` is 0 or 1 (then C is
an input and an output of the call, in place).  ``lda``/``ldb``/``ldc`` are row pitches in elements (default:
dense); the elements between a row's end and its pitch are never read or written (every descriptor moves whole
rows of the matrix only).  ``hp_gemm`` takes fp16 A, B, C, multiplies fp16 values (their products are exact in
fp32), accumulates in fp32 and rounds C to fp16 once, when it is stored.

A call with both A and B transposed (C = Aᵀ·Bᵀ) is planned as the published library computes it: Cᵀ = B·A of the
operands as stored (an NN product, B in A's role), each finished tile of Cᵀ transposed in AM into C's rows; its
tiling keys name the blocks of that product (docs/gemm.md, "TT").

Blocking (SPEC §2: DDR → GSM → AM/SM → registers):

* **GSM blocks of A** (``m_block`` rows × ``k_block`` of op(A)), shared by the cores of an ``_s`` call: the
  cores split each block's loading (one descriptor each, rows of A in its own orientation), and the next block
  streams into the other half of the GSM window while the cores compute on this one (staged buffers
  ``gsm.a0`` / ``gsm.a1``, :class:`~sim.model.plan.Tile` ``fills`` / ``uses``: no barrier).  A ``_p`` call
  (one core, private memory) and split k read A's panels straight from memory (nothing to share); one core of an
  ``_s`` call, and split m on several, choose (the ``a_staging`` key).
* **B blocks in AM** (``k_block`` × ``n_block`` of op(B)) per core, double-buffered the same way (staged
  buffers ``am.b<core>.0`` / ``.1``).
* **A micro-panels in SM** (``m_panel`` rows × ``k_block``), one per tile, through the two SM slots: the
  scalar level, whose elements the micro-kernel loads and broadcasts.
* **C accumulated in registers and held in AM**: a core's C block (its rows of the GSM block × ``n_block``,
  fp32) stays in AM across the k blocks; each tile's micro-kernels (``m_micro`` × ``n_micro``,
  :func:`kernels.common.loops.gemm_micro_kernel`) load it, accumulate ``k_block`` steps in registers and
  store it back.  With ``beta`` = 1 the first k block adds the old C (loaded into the tile's AM slot); the
  last k block writes the tile's rows of C into its slot (rounded to fp16 for hp) and stores them from there.

Where C lives over the k loop is the ``c_home`` key: ``am`` as above, or ``ddr`` (the published library's loop
order: k blocks outermost, each tile loads its C rows, accumulates one k block into them and stores them back,
C triple-buffered); who loads a GSM block is ``a_loader`` (``cores``: a share each; ``core0``: the call's first
core, the others waiting for the block); how many GSM blocks are in flight is ``a_buffers`` (2: double-buffered;
1: one block the size of the staging window); with split m, ``b_staging`` ``gsm`` loads each B block into GSM
once for every core.  docs/gemm.md gives every algorithm's loop nest and memory traffic.

The cores split the work by ``split``: ``n`` (each core its columns of C, every core reading the shared GSM
block: square and wide shapes), ``m`` (each core its micro-panels of the GSM block, every core loading the
same B block: skinny n) or ``k`` (each core a range of the depth, storing its fp32 partial C block to the
``gsm_blocks`` level; after a barrier each core sums its rows of C over the partials: small m × n, long k).
Transposes cost no extra pass where a descriptor's strides can take them: the GSM
block and the SM panels keep A's own orientation (the micro-kernel's scalar loads take A's pairs along k or
along m alike), so op(A) = Aᵀ only changes the descriptors' strides (its SM panels are rows of ``m_panel``
elements: short runs, whole bursts).  A B stored transposed is staged as it is ([n_block, k_block] rows) and
transposed in AM once per B block, a vector loop of loads, shuffles and stores charged to the block's first
tile (loads and stores: the micro-kernel needs rows of op(B) as vectors), or, with ``nt_kernel`` ``reduce``
or ``reduce_serial`` (fp32, A not transposed, C streamed), multiplied by a published NT micro-kernel: dot
products of A's and B's rows read from AM as vectors, A's panel in AM and C's rows in SM, where each reduced dot
product is added.

The package: :mod:`~kernels.gemm.constants` (the keys' choices, the attributes, a tiling),
:mod:`~kernels.gemm.numerics`, :mod:`~kernels.gemm.state` (a call's shares and steps),
:mod:`~kernels.gemm.layout` (the staging levels' layout), :mod:`~kernels.gemm.space` (the tiling space),
:mod:`~kernels.gemm.build` (the plan) and :mod:`~kernels.gemm.kernel` (the registry entry).
"""

from kernels.gemm.constants import (
    A_LOADERS,
    B_STAGINGS,
    C_HOMES,
    F32,
    K_BLOCKS,
    LONG_K,
    M_BLOCKS,
    MICRO_ROWS,
    MIXED,
    N_BLOCK,
    NT_KERNELS,
    NT_REDUCTIONS,
    SPLITS,
    STREAMED_C_SLOTS,
    GemmAttrs,
    GemmTiling,
    compute_precision,
)
from kernels.gemm.kernel import KERNEL, Gemm
from kernels.gemm.numerics import gemm_reference

__all__ = ["A_LOADERS", "B_STAGINGS", "C_HOMES", "F32", "K_BLOCKS", "LONG_K", "M_BLOCKS", "MICRO_ROWS", "MIXED",
           "N_BLOCK", "NT_KERNELS", "NT_REDUCTIONS", "SPLITS", "STREAMED_C_SLOTS", "GemmAttrs", "GemmTiling",
           "compute_precision", "KERNEL", "Gemm",
           "gemm_reference"]
