"""Kinds that only move data between tensors: concatenation and splitting,
stacking, reshapes and transposes.  They cost nothing themselves (the
re-distribution their inputs and outputs need is charged on the edges) and
keep nothing for the backward pass.  On a real device a split, a reshape
or a transpose is a view (nothing moved); a concatenation or a stack
copies its inputs."""

from __future__ import annotations

from dataclasses import dataclass
from math import prod
from typing import ClassVar

import numpy as np

from errors import InputError
from kinds.base import Kind, Operator, Tensor, Work, normalize_axis, register


class _Free(Kind):
    #: a view of its input (nothing read or written on a device), or a copy (concatenating, stacking)
    copies: ClassVar[bool] = False

    def work(self, op, D, C, rules):
        zero = np.zeros(len(C))
        return Work(zero) if self.copies else Work(zero, moved=zero, moved_back=zero)

    def saved(self, op):
        return ()


@register
@dataclass(frozen=True)
class Concat(_Free):
    """Concatenation along ``axis``.  Space: the first input's shape with 1 at
    the axis, which is never split; every input and the output use ``C``."""

    axis: int
    copies: ClassVar[bool] = True

    def build(self, name, refs):
        first, r = refs[0].shape, len(refs[0].shape)
        axis = normalize_axis(self.axis, r, name)
        for x in refs:
            if len(x.shape) != r or any(x.shape[i] != first[i] for i in range(r) if i != axis):
                raise InputError(f"{name}: cannot concatenate {x.shape} to {first} along axis {axis}")
        letters = refs[0].letters
        space = first[:axis] + (1,) + first[axis + 1:]
        out = first[:axis] + (sum(x.shape[axis] for x in refs),) + first[axis + 1:]
        inputs = tuple(Tensor(x.shape, tuple(letters), x.role) for x in refs)
        return Operator(type(self)(axis), letters, space, inputs, (Tensor(out, tuple(letters)),), name), (letters,)

    def never_split(self, op):
        return op.dims[self.axis]


@register
@dataclass(frozen=True)
class Split(_Free):
    """Split along ``axis`` into pieces of ``sizes``: the inverse of Concat.
    Space: the input's shape with 1 at the axis, which is never split."""

    axis: int
    sizes: tuple[int, ...]

    def build(self, name, refs):
        (x,) = refs
        r = len(x.shape)
        axis = normalize_axis(self.axis, r, name)
        sizes = tuple(int(s) for s in self.sizes)
        if sum(sizes) != x.shape[axis] or min(sizes, default=0) < 1:
            raise InputError(f"{name}: pieces {sizes} do not split axis {axis} of {x.shape}")
        space = x.shape[:axis] + (1,) + x.shape[axis + 1:]
        outs = tuple(Tensor(x.shape[:axis] + (s,) + x.shape[axis + 1:], tuple(x.letters)) for s in sizes)
        op = Operator(type(self)(axis, sizes), x.letters, space, (Tensor(x.shape, tuple(x.letters), x.role),), outs,
                      name)
        return op, (x.letters,) * len(sizes)

    def never_split(self, op):
        return op.dims[self.axis]


@register
@dataclass(frozen=True)
class Stack(_Free):
    """Stack inputs of one shape along a new leading axis ``letter``, which
    is never split.  Inputs: ``C`` without it; output ``C``."""

    letter: str = "s"
    copies: ClassVar[bool] = True

    def build(self, name, refs):
        shape, letters = refs[0].shape, refs[0].letters
        if any(x.shape != shape for x in refs):
            raise InputError(f"{name}: cannot stack tensors of shapes {sorted({x.shape for x in refs})}")
        inputs = tuple(Tensor(shape, tuple(letters), x.role) for x in refs)
        out = Tensor((len(refs),) + shape, (self.letter,) + tuple(letters))
        return Operator(self, self.letter + letters, (1,) + shape, inputs, (out,), name), (self.letter + letters,)

    def never_split(self, op):
        return op.dims[0]


@register
@dataclass(frozen=True)
class Unstack(_Free):
    """Split the leading axis into its slices (never split); each output uses
    ``C`` without it."""

    def build(self, name, refs):
        (x,) = refs
        n, rest = x.shape[0], x.shape[1:]
        outs = tuple(Tensor(rest, tuple(x.letters[1:])) for _ in range(n))
        op = Operator(self, x.letters, (1,) + rest, (Tensor(x.shape, tuple(x.letters), x.role),), outs, name)
        return op, (x.letters[1:],) * n

    def never_split(self, op):
        return op.dims[0]


class _Reshape(_Free):
    """A reshape is two operators (the original's way): Ravel to a flat
    tensor, then Unravel to the new shape.  Space: the multi-dimensional
    side; only *contiguous* configurations, so that the flat side is split
    into contiguous blocks, ``(P(C),)``."""

    contiguous_only: ClassVar[bool] = True


@register
@dataclass(frozen=True)
class Ravel(_Reshape):
    """Flatten the input (first half of a reshape)."""

    def build(self, name, refs):
        (x,) = refs
        flat = Tensor((prod(x.shape),), (x.letters,))
        return Operator(self, x.letters, x.shape, (Tensor(x.shape, tuple(x.letters), x.role),), (flat,), name), ("f",)


@register
@dataclass(frozen=True)
class Unravel(_Reshape):
    """Give a flat input the shape ``shape`` with ``letters`` (second half of
    a reshape)."""

    shape: tuple[int, ...]
    letters: str

    def build(self, name, refs):
        (x,) = refs
        shape = tuple(int(s) for s in self.shape)
        if x.shape != (prod(shape),):
            raise InputError(f"{name}: cannot reshape {x.shape} to {shape}")
        kind = type(self)(shape, self.letters)
        op = Operator(kind, self.letters, shape, (Tensor(x.shape, (self.letters,), x.role),),
                      (Tensor(shape, tuple(self.letters)),), name)
        return op, (self.letters,)


@register
@dataclass(frozen=True)
class Transpose(_Free):
    """Permute the axes: output axis ``j`` is input axis ``perm[j]``.  Space:
    the input's shape; the output is split like the input, axes permuted, so
    a transpose moves no data between devices."""

    perm: tuple[int, ...]

    def build(self, name, refs):
        (x,) = refs
        perm = tuple(int(i) for i in self.perm)
        if sorted(perm) != list(range(len(x.shape))):
            raise InputError(f"{name}: {perm} is not a permutation of the {len(x.shape)} axes of {x.shape}")
        letters = "".join(x.letters[i] for i in perm)
        out = Tensor(tuple(x.shape[i] for i in perm), tuple(letters))
        op = Operator(type(self)(perm), x.letters, x.shape, (Tensor(x.shape, tuple(x.letters), x.role),), (out,), name)
        return op, (letters,)


@register
@dataclass(frozen=True)
class Expand(_Free):
    """A new axis ``letter`` of ``size`` at ``axis`` over which the input is
    repeated (a broadcast view: a key's rotary part shared by every head).
    Space: the output's; the input is split by ``C`` without the new
    letter, so every device that holds a slice of the new axis reads the
    input whole along it."""

    axis: int
    size: int
    letter: str

    def build(self, name, refs):
        (x,) = refs
        r = len(x.shape) + 1
        axis = normalize_axis(self.axis, r, name)
        if self.letter in x.letters or self.size < 1:
            raise InputError(f"{name}: cannot add axis {self.letter!r} of {self.size} to {x.letters!r}")
        letters = x.letters[:axis] + self.letter + x.letters[axis:]
        shape = x.shape[:axis] + (self.size,) + x.shape[axis:]
        op = Operator(type(self)(axis, self.size, self.letter), letters, shape,
                      (Tensor(x.shape, tuple(x.letters), x.role),), (Tensor(shape, tuple(letters)),), name)
        return op, (letters,)
