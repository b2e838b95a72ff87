"""Kinds that are one matrix product: fully connected, einsum, embedding."""

from __future__ import annotations

from dataclasses import dataclass
from typing import ClassVar

import numpy as np

from errors import InputError
from kinds.base import Comm, Kind, Operator, Tensor, Work, gemm, register


def _fresh(taken: str, preferred: str) -> str:
    """``preferred`` if it is not taken, else the first free lowercase letter."""
    if preferred not in taken:
        return preferred
    return next(c for c in "nkmjiopqrtuxyzacdefglsvwh" if c not in taken)


@register
@dataclass(frozen=True)
class FC(Kind):
    """Fully connected layer of ``units`` outputs on the last axis of its input.

    Space: the input's leading letters, then ``n`` (units), then ``k`` (input
    features).  Input split ``C`` without ``n``; output ``C`` without ``k``;
    the weight ``(k, n)``.  Cost: GEMM with ``M`` the product of the leading
    dimensions, ``N = n``, ``K = k``.
    """

    units: int
    pw: int = 0
    bias: bool = False

    def build(self, name, refs):
        (x,) = refs
        lead, k = x.shape[:-1], x.shape[-1]
        ll = x.letters[:-1]
        nl = _fresh(ll, "n")
        kl = _fresh(ll + nl, "k")
        inputs = [Tensor(x.shape, tuple(ll) + (kl,), x.role), Tensor((k, self.units), (kl, nl), "weight")]
        if self.bias:
            inputs.append(Tensor((self.units,), (nl,), "weight"))
        out = Tensor(lead + (self.units,), tuple(ll) + (nl,))
        return Operator(self, ll + nl + kl, lead + (self.units, k), tuple(inputs), (out,), name), (ll + nl,)

    def work(self, op, D, C, rules):
        return gemm(D, C, "", op.dims[:-2], op.dims[-2], op.dims[-1], self.pw)

    def model_dims(self, op):
        return op.dims[-2]


def einsum_roles(equation: str) -> tuple[str, str, str, str, str]:
    """(space letters, batch, m, n, reduced) of ``in1,in2->out``: batch letters
    are in both inputs and the output, reduced ones in both inputs only, m
    only in ``in1`` (and the output), n only in ``in2``."""
    lhs, out = equation.split("->")
    in1, in2 = lhs.split(",")
    reduced = "".join(c for c in in1 if c in in2 and c not in out)
    batch = "".join(c for c in out if c in in1 and c in in2)
    m = "".join(c for c in out if c in in1 and c not in in2)
    n = "".join(c for c in out if c in in2 and c not in in1)
    return out + reduced, batch, m, n, reduced


@register
@dataclass(frozen=True)
class Einsum(Kind):
    """A two-operand einsum ``in1,in2->out`` that is a (batched) GEMM.

    Space: the output letters in order, then the reduced letters in order of
    appearance in ``in1``.  Every tensor is split by ``C`` restricted to its
    letters.  Cost: GEMM with one batch entry per batch letter, ``M``, ``N``,
    ``K`` the products of the m, n and reduced letters.  Needs at least one
    m and one n letter.  A letter of size 1 that only one operand has (and
    not the output) is squeezed away; it ends the space.  ``bias``: a weight
    over the output letters the second operand has (the n letters, and the
    batch letters of a stack of weights: one bias per expert) is added to
    the output (free, as in :class:`FC`); ``unsplit``: letters never split
    (e.g. a head's width).  What a training framework reads (its cost here
    is the same either way): ``activation``, the pointwise epilogue is an
    activation function (GeLU), whose input a framework may keep;
    ``products``, the separate matrix products a fused one stands for, as
    the parts of its output each makes, in order (a fused q, k, v
    projection of ``r`` query heads per key: ``(r, 1, 1)``; empty: one
    product).
    """

    equation: str
    pw: int = 0
    bias: bool = False
    unsplit: str = ""
    activation: bool = False
    products: tuple = ()

    def build(self, name, refs):
        x, y = refs
        lhs, out = self.equation.split("->")
        in1, in2 = lhs.split(",")
        letters, _, m, n, _ = einsum_roles(self.equation)
        squeezed = "".join(c for c in dict.fromkeys(in1 + in2) if c not in letters)
        if not set(out) <= set(in1 + in2) or len(set(letters)) != len(letters) or len(set(out)) != len(out):
            raise InputError(f"{name}: unsupported einsum {self.equation!r}")
        if not m or not n:
            raise InputError(f"{name}: einsum {self.equation!r} needs an M and an N dimension")
        if not set(self.unsplit) <= set(letters):
            raise InputError(f"{name}: unsplit letters {self.unsplit!r} are not all in {self.equation!r}")
        size = {}
        for ref, sub in ((x, in1), (y, in2)):
            if len(ref.shape) != len(sub):
                raise InputError(f"{name}: operand {ref.shape} does not match {sub!r}")
            for c, s in zip(sub, ref.shape):
                if size.setdefault(c, s) != s:
                    raise InputError(f"{name}: dimension {c!r} is {size[c]} and {s}")
        for c in squeezed:
            if size[c] != 1:
                raise InputError(f"{name}: {c!r} is in one operand only and not in the output of "
                                 f"{self.equation!r}: it must have size 1, not {size[c]}")
        letters += squeezed
        inputs = [Tensor(x.shape, tuple(in1), x.role), Tensor(y.shape, tuple(in2), y.role)]
        if self.bias:  # over the output letters of the second operand (an expert's bias is the expert's)
            own = "".join(c for c in out if c in in2)
            inputs.append(Tensor(tuple(size[c] for c in own), tuple(own), "weight"))
        outputs = (Tensor(tuple(size[c] for c in out), tuple(out)),)
        return Operator(self, letters, tuple(size[c] for c in letters), tuple(inputs), outputs, name), (out,)

    def never_split(self, op):
        return self.unsplit

    def work(self, op, D, C, rules):
        _, batch, m, n, k = einsum_roles(self.equation)
        return gemm(D, C, batch, m, n, k, self.pw)


@register
@dataclass(frozen=True)
class Embedding(Kind):
    """Token embedding of a ``vocab x width`` table, read by integer ids.

    The original model: an Einsum of a one-hot ``(ids..., v)`` input with the
    weight ``(v, d)``; space ``(ids..., d, v)``, a GEMM with ``M`` the tokens,
    ``N = d`` (``letter``), ``K = v``.

    With ``model.embedding_lookup`` it is costed as what it is, a gather of
    the rows the device's tokens need and a scatter-add of their gradients,
    ``2 * mm * nn``; the ids have no gradient, so the GEMM's input-gradient
    reduction ``AR(mm*kk, n)`` goes, while the reduction of partial rows over
    a split vocabulary ``AR(mm*nn, k)`` stays.  The weight gradient among the
    ``m`` devices that split the tokens (and share a ``kk x nn`` shard) is
    exchanged per ``model.embedding_sync``: a dense all-reduce
    ``AR(nn*kk, m)``, a sparse push and pull of only the rows touched,
    ``2 * u * nn`` words with ``u = min(distinct rows, mm, kk)`` (none when
    ``m = 1``), or the cheaper of the two (``best``).
    """

    vocab: int
    width: int
    letter: str = "d"
    sparse_rows: ClassVar[bool] = True

    def build(self, name, refs):
        (ids,) = refs
        ll = ids.letters
        if self.letter in ll or "v" in ll:
            raise InputError(f"{name}: the ids' letters {ll!r} collide with {self.letter!r} or 'v'")
        inputs = (Tensor(ids.shape, tuple(ll), ids.role),
                  Tensor((self.vocab, self.width), ("v", self.letter), "weight"))
        out = Tensor(ids.shape + (self.width,), tuple(ll) + (self.letter,))
        space = ids.shape + (self.width, self.vocab)
        return Operator(self, ll + self.letter + "v", space, inputs, (out,), name), (ll + self.letter,)

    def work(self, op, D, C, rules):
        m, n, k = op.dims[:-2], op.dims[-2], op.dims[-1]
        if rules.realistic:
            return self._lookup(op, D, C)
        if rules.original:
            return gemm(D, C, "", m, n, k)
        mm, nn, kk = D[m] / C[m], D[n] / C[n], D[k] / C[k]  # (K,) each
        dense = Comm("gradients", "allreduce", nn * kk, m)
        rows = mm if rules.distinct_rows is None else np.minimum(mm, float(rules.distinct_rows))
        sparse = Comm("gradients", "send", 2.0 * np.minimum(rows, kk) * nn, m)  # none when m = 1
        sync = {"dense": dense, "sparse": sparse,
                "best": Comm("gradients", "cheapest", None, m, options=(dense, sparse))}[rules.embedding_sync]
        if rules.embedding_lookup:  # gather and scatter-add of rows: memory traffic, no matrix product
            lookup = 2.0 * mm * nn  # (K,)
            return Work(lookup, lookup / 2.0, (Comm("partial sums", "allreduce", mm * nn, k), sync))
        return gemm(D, C, "", m, n, k, weight_sync=sync)

    def _lookup(self, op, D, C) -> Work:
        """On a real device an embedding is a lookup, costed by the
        elements it moves: each of the ``mm`` tokens of a device reads its
        ids and ``nn`` elements of a row, writes them; the backward pass
        reads their gradient and adds it into the rows (read and write).
        With the vocabulary split ``k`` ways each device looks up the rows
        it holds and the partial outputs are summed; the table's gradient
        is all-reduced (densely) among the ``m`` devices that share a shard."""
        m, n, k = op.dims[:-2], op.dims[-2], op.dims[-1]
        mm, nn, kk = D[m] / C[m], D[n] / C[n], D[k] / C[k]  # (K,) each
        rows = mm * nn  # (K,)
        return Work(2.0 * rows, rows, (Comm("partial sums", "allreduce", rows, k),
                                      Comm("gradients", "allreduce", nn * kk, m)),
                    moved=mm + 2.0 * rows, moved_back=3.0 * rows)
