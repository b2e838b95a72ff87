"""The fused (min, +) kernel, compiled by numba: ``out = min(out, P (min,+) Q)``.

    out[o, c] = min(out[o, c], min_i P[o, i] + Q[i, c])

numpy needs two passes through memory for this (a broadcast add into a
block, then a min over it); here one loop adds and takes the minimum while
the operands sit in cache.  Four rows of ``out`` share each row of ``Q``,
and ``Q`` is walked in tiles of ``_TILE_I x _TILE_C`` (1 MB) that stay in
the core's L2 cache while the rows of a block pass over them.  The compiled code releases the GIL, so threads can
work on disjoint row blocks of ``out`` at once.

Every entry is one IEEE addition and one comparison, exactly as numpy
computes ``P[:, :, None] + Q[None]`` and its minimum: the two give the same
bits.  The tables stay float64: float32's 24-bit mantissa rounds each cost
by up to 6e-8 of itself; rounding the cost arrays alone moves the optimum's
value by up to 2e-8 (RNNLM at p = 64, 8e-9 for the Transformer), above the
1e-9 relative agreement the search keeps with the original tool, and would
decide near-ties between configurations arbitrarily.

Importing this module loads numba and compiles the kernel (once per
machine: numba caches the machine code next to this file, or in its user
cache directory when this one is read-only).
"""

from __future__ import annotations

import numba

__all__ = ["minplus"]

_TILE_C = 256  # columns of Q per tile
_TILE_I = 512  # rows of Q per tile
_SIGNATURE = "void(float64[:, ::1], float64[:, ::1], float64[:, ::1])"


def _minplus(P, Q, out):
    rows, inner = P.shape
    cols = Q.shape[1]
    for c0 in range(0, cols, _TILE_C):
        c1 = min(c0 + _TILE_C, cols)
        n = c1 - c0
        for i0 in range(0, inner, _TILE_I):
            i1 = min(i0 + _TILE_I, inner)
            o = 0
            while o + 4 <= rows:
                # slices starting at 0 let LLVM vectorise the inner loop
                a0 = out[o, c0:c1]
                a1 = out[o + 1, c0:c1]
                a2 = out[o + 2, c0:c1]
                a3 = out[o + 3, c0:c1]
                for i in range(i0, i1):
                    p0 = P[o, i]
                    p1 = P[o + 1, i]
                    p2 = P[o + 2, i]
                    p3 = P[o + 3, i]
                    q = Q[i, c0:c1]
                    for c in range(n):
                        qc = q[c]
                        x = p0 + qc
                        a0[c] = x if x < a0[c] else a0[c]
                        x = p1 + qc
                        a1[c] = x if x < a1[c] else a1[c]
                        x = p2 + qc
                        a2[c] = x if x < a2[c] else a2[c]
                        x = p3 + qc
                        a3[c] = x if x < a3[c] else a3[c]
                o += 4
            while o < rows:
                a0 = out[o, c0:c1]
                for i in range(i0, i1):
                    p0 = P[o, i]
                    q = Q[i, c0:c1]
                    for c in range(n):
                        x = p0 + q[c]
                        a0[c] = x if x < a0[c] else a0[c]
                o += 1


try:
    minplus = numba.njit(_SIGNATURE, nogil=True, cache=True)(_minplus)
except RuntimeError:  # no cache directory numba can write: compile in memory
    minplus = numba.njit(_SIGNATURE, nogil=True)(_minplus)
