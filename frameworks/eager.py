"""Eager PyTorch: what an operator costs when each of its element-wise
operations is a kernel of its own, beside the one fused pass the cost
model charges otherwise (``torch.compile``, or a framework's fused
kernels).

:func:`passes` gives, per element of an operator's result, the bytes its
forward and its backward pass move beyond the fused pass, and the kernels
each launches.  The counts follow the modules as torchtitan's Llama 3
writes them (December 2024) and PyTorch's autograd runs them in bf16:

* ``RMSNorm``: ``(x.float() * rsqrt(x.float().pow(2).mean(-1) + eps))
  .type_as(x) * weight``: to fp32 (read 2, write 4), square (4, 4), mean
  (4), multiply by the statistic (4, 4), to bf16 (4, 2), by the weight (2,
  2): 36 bytes and 7 kernels forward against a fused kernel's 4 bytes;
  autograd's backward of the same chain (the weight's gradient and its sum,
  to fp32, the two products' gradients, the square's and the mean's, their
  sum, to bf16) about 76 bytes and 11 kernels against a fused 8;
* an element-wise operator with ``pw`` pointwise operations on its first
  input and ``n`` inputs (SwiGLU's ``silu(gate) * up``): one kernel per
  operation, an activation reading and writing an element (2), a binary
  operation reading two and writing one (3), against the fused pass's
  ``n + 1`` elements; backward twice the forward's extra (a binary
  operation's gradient is two products);
* a matrix product's pointwise epilogue (the rotary embedding of ``q`` and
  ``k``: to fp32, a complex product, to bf16: read 2 + 8 + 4, write 4 + 8
  + 2 bytes, 4 kernels; the same backward) against the fused pass of the
  cost model (2 elements forward, 3 backward);
* fused attention (``scaled_dot_product_attention``): its output
  transposed back and made contiguous (read 2, write 2), forward and the
  same for its gradient backward.

Everything else (a residual addition, an embedding's lookup, PyTorch's own
fused layer norm, softmax and dropout kernels, views) runs as one kernel
either way.
"""

from __future__ import annotations

import numpy as np

from kinds.base import shard

__all__ = ["passes"]

#: per element of the result: (forward bytes beyond the fused pass, backward bytes, forward kernels, backward)
RMSNORM = (36.0 - 4.0, 76.0 - 8.0, 7.0, 11.0)
EPILOGUE = (28.0 - 4.0, 28.0 - 6.0, 4.0, 4.0)
ATTENTION = (4.0, 4.0, 1.0, 1.0)


def passes(op, C, work, word_bytes: int):
    """``(extra, extra_back, kernels)`` of ``op`` run eagerly: the bytes
    its forward and backward passes move beyond the fused pass (per
    configuration) and its (forward, backward) kernel launches."""
    name = op.kind.name
    out = shard(op.outputs[0], C) if op.outputs else 0.0
    if name == "RMSNorm":
        f, b, kf, kb = RMSNORM
        return f * out, b * out, (kf, kb)
    if name == "Elementwise":
        n, pw = len(op.inputs), op.kind.pw
        kernels = pw + n - 1
        if kernels <= 1:
            return 0.0, 0.0, (1.0, 1.0)
        extra = float(word_bytes) * (2.0 * pw + 3.0 * (n - 1) - (n + 1))
        return extra * out, 2.0 * extra * out, (float(kernels), 2.0 * kernels)
    if name == "FusedAttention":
        f, b, kf, kb = ATTENTION
        return f * out, b * out, (1.0 + kf, 2.0 + kb)
    if np.any(work.epilogue):
        f, b, kf, kb = EPILOGUE
        return f * work.epilogue, b * work.epilogue, (1.0 + kf, 2.0 + kb)
    if np.any(work.macs):
        return 0.0, 0.0, (1.0, 2.0)
    return 0.0, 0.0, (1.0, 1.0)
