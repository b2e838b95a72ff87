"""Kinds of mixture-of-experts layers: the gating that routes tokens to experts.

A mixture-of-experts layer in the style of GShard (Lepikhin et al., ICLR
2021) and Mesh-TensorFlow is a few einsums with an expert dimension ``x``
around this gating: the router's logits ``(..., x)`` become combine weights
``(..., x, c)`` that say in which of the ``c`` slots of each expert's buffer
(its capacity) a token lands, and with what weight.  Dispatching the tokens
(``bsxc,bse->xbce``) and combining the experts' outputs
(``bsxc,xbce->bse``) are einsums with that tensor, so expert parallelism is a
split of ``x``.
"""

from __future__ import annotations

from dataclasses import dataclass

from errors import InputError
from kinds.base import Comm, Kind, Operator, Tensor, Work, register


@register
@dataclass(frozen=True)
class TopKGating(Kind):
    """Top-``k`` gating of router logits ``(..., x)`` over ``x`` experts (the
    last axis) into combine weights ``(..., x, c)``, ``c = capacity`` slots
    per expert.

    Space: the logits' letters, then ``letter`` (the capacity, never split).
    The logits are split by ``C`` without it, the weights by ``C``.  With
    ``e`` the per-device volume of the weights, ``e_x = e / D_c`` that of the
    logits and ``e' = e_x / d_x`` the tokens a device holds:

        comp = 4 * e_x + e_x * D_x          # softmax over the experts (Softmax's count)
             + k * e_x                      # choosing the k largest
             + e                            # writing the combine weights
        comm = 2 * AR(e', c_x) + AR(e' * D_x, c_x)   # the softmax's reductions over split experts
    """

    k: int
    capacity: int
    letter: str = "c"

    def build(self, name, refs):
        (x,) = refs
        if self.letter in x.letters:
            raise InputError(f"{name}: the logits' letters {x.letters!r} already hold {self.letter!r}")
        if not 1 <= self.k <= x.shape[-1] or self.capacity < 1:
            raise InputError(f"{name}: top-{self.k} of {x.shape[-1]} experts with capacity {self.capacity}")
        dims = x.letters + self.letter
        space = x.shape + (self.capacity,)
        out = Tensor(space, tuple(dims))
        return Operator(self, dims, space, (Tensor(x.shape, tuple(x.letters), x.role),), (out,), name), (dims,)

    def never_split(self, op):
        return self.letter

    def work(self, op, D, C, rules):
        x = op.dims[-2]
        e = (D / C).all  # (K,) combine weights per device
        ex = e / D[self.letter]  # (K,) logits per device (the capacity is never split)
        tokens = ex / (D[x] / C[x])  # (K,) e'
        comp = 4.0 * ex + ex * D[x] + self.k * ex + e
        return Work(comp, comms=(Comm("statistics", "allreduce", tokens, x, count=2.0),
                                 Comm("statistics", "allreduce", tokens * D[x], x)))
