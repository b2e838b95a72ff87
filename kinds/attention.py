"""Fused attention (FlashAttention, Dao et al. 2022; PyTorch's
``scaled_dot_product_attention``): scores, mask, softmax and context in one
operator that never materialises the score matrix, over the whole causal
sequence, a sliding window or chunks of it."""

from __future__ import annotations

from dataclasses import dataclass, replace

import numpy as np

from errors import InputError
from kinds.base import Comm, Kind, Operator, Tensor, Work, register, shard

#: bytes per output element of one merge of a ring step's partial result (fp32, one kernel per operation): the
#: step's output to fp32 (read 2, write 4), its difference to the running output (read 8, write 4), scaled by
#: the rows' softmax weights (read 4, write 4), taken from the running output (read 8, write 4)
MERGE_BYTES = 38.0


@register
@dataclass(frozen=True)
class FusedAttention(Kind):
    """``softmax(q k^T / sqrt(d) + mask) v`` of queries ``q`` (batch,
    heads..., ``s`` positions, ``d`` width) against keys ``k`` (batch,
    key/value heads..., ``t`` positions, ``d``) and values ``v`` (the same,
    of their own width ``d_v``: multi-head latent attention's values are
    narrower than its queries and keys), in one kernel.

    Space: the queries' letters with the query positions ``s``, then the
    key positions ``t``: ``(b, heads..., s, d, t)``.  ``d`` and ``t`` are
    never split: a device holds whole keys and values of its heads, so
    splitting ``s`` is context parallelism, the keys and values it lacks
    arriving by the edges' re-distribution.  Grouped-query attention reads
    keys and values with a head axis of size 1 (one per group), broadcast
    over the group's query heads.

    The mask: ``causal`` (every earlier key), and with ``window`` only the
    last ``window`` keys (sliding-window attention: Mistral, Gemma, gpt-oss)
    or with ``chunk`` only the earlier keys of the query's own chunk of
    ``chunk`` positions (Llama 4's chunked attention).  Such a layer costs
    its window: its score elements are the pairs the mask leaves, and its
    keys and values are split along the positions with the queries, a
    device receiving from its neighbours only the window's keys and values
    that precede its positions (a halo: ``min(window - 1, S - S/c_s)``
    positions, or for chunks the start of its chunk when its positions do
    not begin one), forward, and their gradients backward.  ``softcap``:
    the scores pass ``cap * tanh(x / cap)`` (Gemma 2), four more operations
    per score element.  An optional fourth input, one weight per query head
    (gpt-oss's attention sinks), joins each row's softmax.

    Ring attention (context parallelism as a framework runs it: its
    ``ring``, see :func:`cost.time.ring_parts`): with the query positions
    split over ``c`` devices, each device's keys and values arrive split
    with its queries (its edges move nothing more) and the operator passes
    them between the devices itself, in ``c`` steps of one kernel each
    under which the exchange runs, merging each step's partial result; the
    causal mask's work is balanced over the devices (each holds two of
    ``2 c`` chunks, one from each end of the sequence), so that each does
    ``E / c`` of the score elements below.  Without a framework (or with
    one that does not declare a ring) the keys and values are gathered on
    the edges before the operator, as the PaSE model moves any input.

    It keeps ``q``, ``k``, ``v``, the output and one statistic per query
    row (the softmax's log-sum-exp) for the backward pass, which recomputes
    the scores.  With ``E = b h s t`` score elements times the share the
    mask leaves (``(t + 1) / (2 t)`` causal when ``s = t``) and widths ``d``
    and ``d_v``:

        macs    = E (d + d_v)           # q k^T and p v, forward
        backward_macs = 2.5 macs        # q k^T again, then dv, dp, dq, dk
        compute = 3.5 E (d + d_v) + 13 E   # the paper's count: a FLOP per multiply-add, and per element
                                        # 5 operations forward (scale, mask, max, exp, sum) and 8 backward
        forward = E (d + d_v) + 5 E

    (``7 E d + 13 E`` and ``2 E d + 5 E`` when ``d_v = d``).  Nothing else
    is communicated inside the operator: its splits (batch, heads, query
    positions) are independent.
    """

    causal: bool = True
    letter: str = "t"
    window: int = 0
    chunk: int = 0
    softcap: bool = False

    def build(self, name, refs):
        if len(refs) not in (3, 4):
            raise InputError(f"{name}: attention reads queries, keys, values and optionally sinks")
        q, k, v = refs[:3]
        lq = q.letters
        if len(q.shape) < 3 or "b" not in lq:
            raise InputError(f"{name}: queries {q.shape} need a batch, positions and a width")
        if k.shape[:-1] != v.shape[:-1] or len(k.shape) != len(q.shape):
            raise InputError(f"{name}: keys {k.shape} and values {v.shape} do not match the queries {q.shape}")
        if self.window < 0 or self.chunk < 0 or (self.window and self.chunk):
            raise InputError(f"{name}: a window of {self.window} and chunks of {self.chunk}")
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
        local = self.window or self.chunk
        if local and k.shape[-2] != q.shape[-2]:
            raise InputError(f"{name}: a window needs as many keys as queries, not {k.shape[-2]} and {q.shape[-2]}")
        positions = lq[-2] if local else t_letter  # a window's keys are split with the queries
        k_axes = tuple(kv_axes) + (positions, d_letter)
        v_axes = tuple(kv_axes) + (positions, d_letter if v.shape[-1] == q.shape[-1] else "")
        dims = lq + t_letter
        space = q.shape + (k.shape[-2],)
        inputs = [Tensor(q.shape, tuple(lq), q.role), Tensor(k.shape, k_axes, k.role), Tensor(v.shape, v_axes, v.role)]
        if len(refs) == 4:
            sinks = refs[3]
            heads = tuple(c for c, n in zip(lq[:-2], q.shape[:-2]) if c != "b")
            if sinks.shape != tuple(n for c, n in zip(lq[:-2], q.shape[:-2]) if c != "b"):
                raise InputError(f"{name}: sinks {sinks.shape} are not one per query head")
            inputs.append(Tensor(sinks.shape, heads, sinks.role))
        out = Tensor(q.shape[:-1] + (v.shape[-1],), tuple(lq))
        return Operator(self, dims, space, tuple(inputs), (out,), name), (lq,)

    def ring(self, op, rules) -> str:
        """The framework's ring rotation when this operator runs as ring
        attention under the modelling rules ``rules`` (a real device, a
        framework that declares one, self-attention over the whole
        sequence), else ``""``."""
        fw = getattr(rules, "framework", None)
        if fw is None or not fw.ring or not getattr(rules, "realistic", False):
            return ""
        if self.window or self.chunk or op.space[-3] != op.space[-1]:
            return ""
        return fw.ring

    def arriving(self, op, i, rules):
        t = op.inputs[i]
        if i not in (1, 2) or not self.ring(op, rules):
            return t
        s_letter = op.dims[-3]  # the keys and values arrive split with the queries
        return replace(t, axes=tuple(s_letter if a == self.letter else a for a in t.axes))

    def never_split(self, op):
        return op.dims[-2] + op.dims[-1]  # the width d and the key positions t

    def _share(self, op) -> float:
        """The share of the score matrix the mask leaves."""
        s, t = op.space[-3], op.space[-1]
        if not self.causal:
            return 1.0
        if s != t:
            return 1.0
        if self.window:
            w = min(self.window, s)
            return (w * (w + 1) / 2 + (s - w) * w) / (s * s)
        if self.chunk:
            c = min(self.chunk, s)
            whole, rest = divmod(s, c)
            return (whole * c * (c + 1) / 2 + rest * (rest + 1) / 2) / (s * s)
        return (t + 1) / (2 * t)

    def _halo(self, op, D, C):
        """Key positions a device receives from its neighbours (K,)."""
        s_letter = op.dims[-3]
        S = D[s_letter]
        L = S / C[s_letter]  # (K,) query (and key) positions a device holds
        if self.window:
            return np.where(C[s_letter] > 1, np.minimum(self.window - 1, S - L), 0.0)
        chunk = float(self.chunk)
        aligned = np.isclose(np.mod(L, chunk), 0.0)
        inside = np.isclose(np.mod(chunk, L), 0.0)  # slices tile a chunk: the last reads the chunk's others
        return np.where(aligned, 0.0, np.where(inside, chunk - L, np.minimum(chunk - 1, S - L)))

    def work(self, op, D, C, rules):
        d = D[op.dims[-2]]
        dv = float(op.inputs[2].shape[-1])
        E = (D / C).all / d * self._share(op)  # (K,) score elements per device: b h s t / splits
        macs = E * (d + dv)
        compute = 3.5 * macs + 13.0 * E + (6.0 * E if self.softcap else 0.0)
        forward = macs + 5.0 * E + (2.0 * E if self.softcap else 0.0)
        comms = ()
        if self.window or self.chunk:
            s_letter = op.dims[-3]
            per_position = sum(shard(t, C) for t in op.inputs[1:3]) / (D[s_letter] / C[s_letter])  # (K,)
            comms += (Comm("halo", "send", self._halo(op, D, C) * per_position, s_letter, count=2.0),)
        if len(op.inputs) == 4:  # the sinks' gradients, over the devices that share their heads
            sinks = op.inputs[3]
            comms += (Comm("gradients", "allreduce", shard(sinks, C), C.other("".join(sinks.axes))),)
        return Work(compute, forward=forward, comms=comms, macs=macs, backward_macs=2.5 * macs, kernel="attention",
                    ring=op.dims[-3] if self.ring(op, rules) else "")

    def model_macs(self, op, work):
        """The whole score matrix, masked or not, as Narayanan et al. (SC'21)
        and the MFU conventions count causal attention: the forward and a
        backward of twice that (not the recomputed scores); a window or
        chunks shorter than the sequence count the pairs they leave (one
        as long masks nothing more than causality: counted as without)."""
        s = op.space[-3]
        local = (self.window and self.window < s) or (self.chunk and self.chunk < s)
        whole = 1.0 if local else self._share(op)
        return float(3.0 * np.sum(work.macs) / whole)

    def saved(self, op):
        q = op.inputs[0]
        stats = Tensor(q.shape[:-1], q.axes[:-1])  # one statistic per query row
        return op.inputs[:3] + op.outputs + (stats,)

    def model_dims(self, op):
        return ""
