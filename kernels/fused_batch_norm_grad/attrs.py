"""A batch-norm gradient call as planned: the tensor as [A, C, B] (:class:`View`), its buffers, its attributes."""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass


@dataclass(frozen=True)
class View:
    """The 4-D tensor seen as [A, C, B]: channels in the middle, the summed-over positions on both sides."""

    a: int
    c: int
    b: int
    channels_on_lanes: bool  # NHWC: the channels fill the vector lanes; NCHW: the spatial positions do

    @staticmethod
    def of(shape: Sequence[int], data_format: str) -> View:
        """The view of a 4-D ``shape`` in ``data_format`` order."""
        n, d1, d2, d3 = (int(s) for s in shape)
        if data_format == "NHWC":
            return View(n * d1 * d2, d3, 1, True)
        return View(n, d1, d2 * d3, False)

    @property
    def shape(self) -> tuple[int, int, int]:
        """(A, C, B)."""
        return self.a, self.c, self.b

    @property
    def m(self) -> int:
        """Elements per channel (N·H·W)."""
        return self.a * self.b


@dataclass(frozen=True)
class Tensors:
    """The buffer names of a batch-norm gradient call, by role (the two kernels name them differently)."""

    dy: str
    x: str
    scale: str
    mean: str
    variance: str  # the variance, or rs itself when the call gives it (BatchNormGrad's invar)
    dx: str
    scale_grad: str
    offset_grad: str


@dataclass(frozen=True)
class BatchNormAttrs:
    """A batch-norm gradient call as the planner sees it (FusedBatchNormGrad's, and BatchNormGrad's with
    H = W = 1 and rs given: ``epsilon`` None)."""

    view: View
    is_training: bool
    epsilon: float | None
    tensors: Tensors
    #: The training x_backprop's form: TensorFlow's (FusedBatchNormGrad) or the library page's (BatchNormGrad):
    #: :func:`~kernels.fused_batch_norm_grad.numerics.x_backprop_train`.
    tf_form: bool = True


FUSED_TENSORS = Tensors("y_backprop", "x", "scale", "reserve_space_1", "reserve_space_2", "x_backprop",
                        "scale_backprop", "offset_backprop")
