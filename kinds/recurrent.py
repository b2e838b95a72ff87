"""Recurrent kinds: the stacked LSTM."""

from __future__ import annotations

from dataclasses import dataclass, replace

import numpy as np

from errors import InputError
from kinds.base import Comm, Kind, Operator, Tensor, gemm_extents, need, register


@register
@dataclass(frozen=True)
class LSTM(Kind):
    """A stack of ``layers`` LSTM layers of ``units`` hidden units over an
    input ``(b, s, u)``.

    Space ``(l, s, b, n, k)``: layers, sequence (never split), batch, hidden
    units as output and as input.  Input split ``C[b, s, k]``, output
    ``C[b, s, n]``.  Cost: GEMM with batch ``L`` (split ``c_l``),
    ``M = s*b``, ``N = 4u`` (the gates), ``K = 2u`` (input and recurrent
    state), ``pw = 3``; plus, at every layer and step, the re-distribution of
    the cell output ``(b/c_b, u/c_n)`` on ``c_b*c_n`` devices to the cell
    input ``(b/c_b, u/c_k)`` on ``c_b*c_k`` devices: ``L * s * need`` words.
    """

    units: int
    layers: int
    pw: int = 3

    def build(self, name, refs):
        (x,) = refs
        b, s, u = x.shape
        if u != self.units:
            raise InputError(f"{name}: input width {u} is not the {self.units} units")
        L = self.layers
        inputs = (Tensor(x.shape, ("b", "s", "k"), x.role),
                  Tensor((L, 2 * u, 4 * u), ("l", "k", "n"), "weight"),
                  Tensor((L, 4 * u), ("l", "n"), "weight"))
        out = Tensor((b, s, u), ("b", "s", "n"))
        return Operator(self, "lsbnk", (L, s, b, u, u), inputs, (out,), name), (x.letters,)

    def never_split(self, op):
        return "s"

    def work(self, op, D, C, rules):
        L, s, b, u = D["l"], D["s"], D["b"], D["n"]
        cl, cb, cn, ck = C["l"], C["b"], C["n"], C["k"]  # (K,) each
        w = gemm_extents(L / cl, s * b / C["sb"], 4 * u / cn, 2 * u / ck, "sb", "n", "k", self.pw)
        cell_out = np.stack([b / cb, u / cn], axis=1)  # (K, 2) on cb*cn devices
        cell_in = np.stack([b / cb, u / ck], axis=1)  # (K, 2) on cb*ck devices
        steps = L * s  # one re-distribution per layer and step
        state = Comm("exchange", "send", steps * need(cell_out, cell_in, cb * cn, cb * ck), "nk", rounds=steps)
        return replace(w, comms=w.comms + (state,))

    def saved(self, op):
        """The input, and per layer and step the four gates and the cell state."""
        L, s, b, _, u = op.space
        gates = Tensor((L, s, b, 4 * u), ("l", "s", "b", "n"))
        return (op.inputs[0], gates, Tensor((L, s, b, u), ("l", "s", "b", "n")))

    def stage_dim(self, op):
        return "l"
