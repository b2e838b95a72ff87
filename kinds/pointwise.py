"""Kinds that work element by element or along one axis: elementwise
arithmetic, normalisations, softmax, the loss, and reductions.

Their iteration space is the shape of their (first) input with its letters;
input and output are split by the configuration itself.  ``e`` is the
per-device volume ``prod(D / C)``.
"""

from __future__ import annotations

from dataclasses import dataclass, replace
from typing import ClassVar

import numpy as np

from errors import InputError
from kinds.base import Comm, Kind, Operator, Tensor, Work, normalize_axis, register


def _same(x):
    """Iteration space, input and output tensors of a shape-preserving kind."""
    t = Tensor(x.shape, tuple(x.letters), x.role)
    return x.letters, x.shape, (t,), (Tensor(x.shape, tuple(x.letters)),)


@register
@dataclass(frozen=True)
class Elementwise(Kind):
    """Elementwise arithmetic of inputs of one shape, or broadcast to the
    first input's shape (size-1 axes are never split).  Cost ``(1 + pw) * e``.

    ``keeps_inputs``: the gradient needs the inputs (a product or quotient),
    not only the output's gradient (a sum); a folded activation (``pw > 0``)
    keeps the output."""

    pw: int = 0
    keeps_inputs: bool = False

    def build(self, name, refs):
        x = refs[0]
        r = len(x.shape)
        inputs = [Tensor(x.shape, tuple(x.letters), x.role)]
        for y in refs[1:]:
            if len(y.shape) > r:
                raise InputError(f"{name}: cannot broadcast {y.shape} to {x.shape}")
            lead = r - len(y.shape)
            axes = []
            for j, s in enumerate(y.shape):
                full = x.shape[lead + j]
                if s not in (1, full):
                    raise InputError(f"{name}: cannot broadcast {y.shape} to {x.shape}")
                axes.append(x.letters[lead + j] if s == full and full > 1 else "")
            inputs.append(Tensor(y.shape, tuple(axes), y.role))
        out = Tensor(x.shape, tuple(x.letters))
        return Operator(self, x.letters, x.shape, tuple(inputs), (out,), name), (x.letters,)

    def work(self, op, D, C, rules):
        e = (D / C).all  # (K,)
        return Work((1.0 + self.pw) * e)

    def saved(self, op):
        if self.keeps_inputs:
            return super().saved(op)
        return op.outputs if self.pw else ()


@register
@dataclass(frozen=True)
class Dropout(Kind):
    """Dropout of a fraction ``p`` of the elements (training): the output,
    and a mask of one byte per element that the backward pass keeps.
    Space: the input's; cost ``2 e`` (drawing and applying the mask,
    forward and backward), nothing communicated."""

    p: float = 0.1

    def build(self, name, refs):
        (x,) = refs
        if not 0 < self.p < 1:
            raise InputError(f"{name}: a dropout probability must be between 0 and 1, got {self.p}")
        dims, space, inputs, outputs = _same(x)
        return Operator(self, dims, space, inputs, outputs, name), (x.letters,)

    def work(self, op, D, C, rules):
        return Work(2.0 * (D / C).all)

    def saved(self, op):
        x = op.inputs[0]
        return (Tensor(x.shape, x.axes, bytes=1),)


@register
@dataclass(frozen=True)
class Norm(Kind):
    """Normalisation with statistics along ``axis`` (BatchNorm: axis 0;
    LayerNorm: the last axis) and ``params`` weight vectors (scale, shift)
    along ``param_axis`` (default ``axis``); ``pw`` pointwise operations per
    element follow it (an activation).  With ``d_a = D_a / c_a``:

        comp = (16 + pw) * e
        comm = 4 * AR(e / d_a, c_a) + 4 * AR(d_a, P(C) / c_a)
    """

    axis: int
    param_axis: int | None = None
    params: int = 2
    pw: int = 0

    def build(self, name, refs):
        (x,) = refs
        r = len(x.shape)
        axis = normalize_axis(self.axis, r, name)
        pa = axis if self.param_axis is None else normalize_axis(self.param_axis, r, name)
        kind = replace(self, axis=axis, param_axis=pa)
        dims, space, inputs, outputs = _same(x)
        weights = tuple(Tensor((x.shape[pa],), (x.letters[pa],), "weight") for _ in range(self.params))
        return Operator(kind, dims, space, inputs + weights, outputs, name), (x.letters,)

    #: operations per element, and all-reduces of the statistics and of the weight gradients
    COMPUTE: ClassVar[float] = 16.0
    SYNCS: ClassVar[float] = 4.0

    def work(self, op, D, C, rules):
        a = op.dims[self.axis]
        e = (D / C).all  # (K,)
        da = D[a] / C[a]  # (K,)
        if rules.realistic:
            # the statistics' all-reduces, forward and backward, over a split normalised axis; over the batch
            # (batch normalisation) each device normalises with its own samples' statistics, as PyTorch's
            # BatchNorm does unless it is SyncBatchNorm; one all-reduce of the weights' gradients
            comms = () if a == "b" else (Comm("statistics", "allreduce", e / da, a, count=self.SYNCS),)
            if self.params:
                comms += (Comm("gradients", "allreduce", self.params * da, C.other(a)),)
            return Work((self.COMPUTE + self.pw) * e, comms=comms)
        stats = Comm("statistics", "allreduce", e / da, a, count=self.SYNCS)
        grads = Comm("gradients", "allreduce", da, C.other(a), count=self.SYNCS)
        return Work((self.COMPUTE + self.pw) * e, comms=(stats, grads))


@register
@dataclass(frozen=True)
class RMSNorm(Norm):
    """Root-mean-square normalisation along ``axis`` with one scale vector
    (Llama, Mistral): the :class:`Norm` formula with one statistic (the mean
    square) instead of two (mean, variance) and one weight instead of two,
    i.e. half of it:

        comp = (8 + pw) * e
        comm = 2 * AR(e / d_a, c_a) + 2 * AR(d_a, P(C) / c_a)
    """

    axis: int = -1
    param_axis: int | None = None
    params: int = 1
    pw: int = 0
    COMPUTE: ClassVar[float] = 8.0
    SYNCS: ClassVar[float] = 2.0


@register
@dataclass(frozen=True)
class RMSNormOver(Kind):
    """Root-mean-square normalisation over several ``axes`` at once, with
    one scale over all of them (OLMo 2 normalises its queries and keys over
    every head together).  With ``a`` the letters of the axes and ``d_a =
    D_a / c_a``:

        comp = 8 * e
        comm = 2 * AR(e / d_a, c_a) + AR(d_a, P(C) / c_a)   # statistics; the scale's gradient
    """

    axes: tuple[int, ...]

    def build(self, name, refs):
        (x,) = refs
        r = len(x.shape)
        axes = tuple(sorted({normalize_axis(a, r, name) for a in self.axes}))
        dims, space, inputs, outputs = _same(x)
        weight = Tensor(tuple(x.shape[a] for a in axes), tuple(x.letters[a] for a in axes), "weight")
        return Operator(type(self)(axes), dims, space, inputs + (weight,), outputs, name), (x.letters,)

    def work(self, op, D, C, rules):
        a = "".join(op.dims[i] for i in self.axes)
        e = (D / C).all  # (K,)
        da = D[a] / C[a]  # (K,)
        return Work(8.0 * e, comms=(Comm("statistics", "allreduce", e / da, a, count=2.0),
                                    Comm("gradients", "allreduce", da, C.other(a))))


@register
@dataclass(frozen=True)
class ReduceMean(Kind):
    """Mean over ``axes`` (global average pooling: axes 2 and 3).  The output
    keeps the other axes, split like them, and with ``keepdims`` the reduced
    ones too, of size 1 (never split).  Cost ``AR(e, prod c_A)``."""

    axes: tuple[int, ...]
    keepdims: bool = False

    def build(self, name, refs):
        (x,) = refs
        r = len(x.shape)
        axes = tuple(sorted({normalize_axis(a, r, name) for a in self.axes}))
        if self.keepdims:
            letters = x.letters
            out = Tensor(tuple(1 if i in axes else s for i, s in enumerate(x.shape)),
                         tuple("" if i in axes else c for i, c in enumerate(x.letters)))
        else:
            kept = [i for i in range(r) if i not in axes]
            letters = "".join(x.letters[i] for i in kept)
            out = Tensor(tuple(x.shape[i] for i in kept), tuple(letters))
        op = Operator(replace(self, axes=axes), x.letters, x.shape, (Tensor(x.shape, tuple(x.letters), x.role),),
                      (out,), name)
        return op, (letters,)

    def work(self, op, D, C, rules):
        e = (D / C).all  # (K,)
        reduced = "".join(op.dims[i] for i in self.axes)
        return Work(np.zeros_like(e), comms=(Comm("partial sums", "allreduce", e, reduced),))

    def saved(self, op):
        return ()


@register
@dataclass(frozen=True)
class Softmax(Kind):
    """Softmax along ``axis``.  With ``e' = e / d_a``:

        comp = 4 * e + e * D_a
        comm = 2 * AR(e', c_a) + AR(e' * D_a, c_a)
    """

    axis: int

    def build(self, name, refs):
        (x,) = refs
        dims, space, inputs, outputs = _same(x)
        return Operator(type(self)(normalize_axis(self.axis, len(x.shape), name)), dims, space, inputs, outputs,
                        name), (x.letters,)

    def work(self, op, D, C, rules):
        a = op.dims[self.axis]
        e = (D / C).all  # (K,)
        e1 = e / (D[a] / C[a])  # e'
        if rules.realistic:  # the maximum and the sum forward, a dot product backward, over a split axis
            return Work(4.0 * e + e * D[a], comms=(Comm("statistics", "allreduce", e1, a, count=3.0),))
        return Work(4.0 * e + e * D[a], comms=(Comm("statistics", "allreduce", e1, a, count=2.0),
                                               Comm("statistics", "allreduce", e1 * D[a], a)))

    def saved(self, op):
        return op.outputs


@register
@dataclass(frozen=True)
class SoftmaxCrossEntropy(Kind):
    """Softmax and cross-entropy loss over the classes, ``axis`` (default the
    last; axis 1 for an NCHW classifier's ``(b, classes, 1, 1)``).  With
    ``bs = e / d_classes`` (the samples a device holds):

        comp = 4 * e + 2 * bs
        comm = 2 * bs words when the classes are split
    """

    axis: int = -1

    def build(self, name, refs):
        (x,) = refs
        r = len(x.shape)
        axis = normalize_axis(self.axis, r, name)
        dims, space, inputs, outputs = _same(x)
        return Operator(replace(self, axis=-1 if axis == r - 1 else axis), dims, space, inputs, outputs,
                        name), (x.letters,)

    def work(self, op, D, C, rules):
        cls = op.dims[self.axis]
        e = (D / C).all  # (K,)
        bs = e / (D[cls] / C[cls])  # (K,)
        if rules.realistic:  # over split classes (Megatron's vocabulary-parallel loss): maximum, sum, target logit
            return Work(4.0 * e + 2.0 * bs, comms=(Comm("statistics", "allreduce", bs, cls, count=3.0),))
        return Work(4.0 * e + 2.0 * bs, comms=(Comm("exchange", "send", 2.0 * bs, cls),))

    def saved(self, op):
        return op.outputs

    def model_dims(self, op):
        return op.dims[self.axis]
