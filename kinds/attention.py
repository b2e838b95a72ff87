"""Fused attention (FlashAttention, Dao et al. 2022; PyTorch's
``scaled_dot_product_attention``): scores, mask, softmax and context in one
operator that never materialises the score matrix."""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from errors import InputError
from kinds.base import Kind, Operator, Tensor, Work, register


@register
@dataclass(frozen=True)
class FusedAttention(Kind):
    """``softmax(q k^T / sqrt(d) + mask) v`` of queries ``q`` (batch,
    heads..., ``s`` positions, ``d`` width) against keys and values ``k``,
    ``v`` (batch, key/value heads..., ``t`` positions, ``d``), in one kernel.

    Space: the queries' letters with the query positions ``s``, then the
    key positions ``t``: ``(b, heads..., s, d, t)``.  ``d`` and ``t`` are
    never split: a device holds whole keys and values of its heads, so
    splitting ``s`` is context parallelism, the keys and values it lacks
    arriving by the edges' re-distribution.  Grouped-query attention reads
    keys and values with a head axis of size 1 (one per group), broadcast
    over the group's query heads.

    It keeps ``q``, ``k``, ``v``, the output and one statistic per query
    row (the softmax's log-sum-exp) for the backward pass, which recomputes
    the scores.  With ``E = b h s t`` score elements (times the share a
    ``causal`` mask leaves, ``(t + 1) / (2 t)`` when ``s = t``) and width
    ``d``:

        macs    = 2 E d                 # q k^T and p v, forward
        backward_macs = 5 E d           # q k^T again, then dv, dp, dq, dk
        compute = 7 E d + 13 E          # the paper's count: a FLOP per multiply-add, and per element
                                        # 5 operations forward (scale, mask, max, exp, sum) and 8 backward
        forward = 2 E d + 5 E

    Nothing is communicated inside the operator: its splits (batch, heads,
    query positions) are independent.
    """

    causal: bool = True
    letter: str = "t"

    def build(self, name, refs):
        q, k, v = refs
        lq = q.letters
        if len(q.shape) < 3 or "b" not in lq:
            raise InputError(f"{name}: queries {q.shape} need a batch, positions and a width")
        if k.shape != v.shape or len(k.shape) != len(q.shape):
            raise InputError(f"{name}: keys {k.shape} and values {v.shape} do not match the queries {q.shape}")
        t_letter = self.letter
        if t_letter in lq:
            raise InputError(f"{name}: the queries' letters {lq!r} already hold {t_letter!r}")
        d_letter = lq[-1]
        if k.shape[-1] != q.shape[-1]:
            raise InputError(f"{name}: keys of width {k.shape[-1]} against queries of width {q.shape[-1]}")
        kv_axes = []
        for j, (sq, sk) in enumerate(zip(q.shape[:-2], k.shape[:-2])):
            if sk == sq:
                kv_axes.append(lq[j])
            elif sk == 1:  # one key/value head for a group of query heads
                kv_axes.append("")
            else:
                raise InputError(f"{name}: key/value axis {j} of size {sk} against {sq} query heads")
        kv_axes = tuple(kv_axes) + (t_letter, d_letter)
        dims = lq + t_letter
        space = q.shape + (k.shape[-2],)
        inputs = (Tensor(q.shape, tuple(lq), q.role), Tensor(k.shape, kv_axes, k.role),
                  Tensor(v.shape, kv_axes, v.role))
        out = Tensor(q.shape, tuple(lq))
        return Operator(self, dims, space, inputs, (out,), name), (lq,)

    def never_split(self, op):
        return op.dims[-2] + op.dims[-1]  # the width d and the key positions t

    def _share(self, op) -> float:
        """The share of the score matrix a causal mask leaves."""
        s, t = op.space[-3], op.space[-1]
        if not self.causal:
            return 1.0
        return (t + 1) / (2 * t) if s == t else 1.0

    def work(self, op, D, C, rules):
        d = D[op.dims[-2]]
        E = (D / C).all / d * self._share(op)  # (K,) score elements per device: b h s t / splits
        macs = 2.0 * E * d
        compute = 7.0 * E * d + 13.0 * E
        return Work(compute, forward=2.0 * E * d + 5.0 * E, macs=macs, backward_macs=2.5 * macs,
                    kernel="attention")

    def model_macs(self, op, work):
        """The whole score matrix, masked or not, as Narayanan et al. (SC'21)
        and the MFU conventions count attention: the forward ``2 E d`` and a
        backward of twice that (not the recomputed scores)."""
        return float(3.0 * np.sum(work.macs) / self._share(op))

    def saved(self, op):
        q = op.inputs[0]
        stats = Tensor(q.shape[:-1], q.axes[:-1])  # one statistic per query row
        return op.inputs + op.outputs + (stats,)

    def model_dims(self, op):
        return ""
