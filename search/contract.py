"""The dynamic program's (min, +) contraction: one operator's table from its factors.

Processing operator ``v`` with dependent set ``(o1..om)`` computes

    table[o1..om] = min over i of  sum_f f[i, o1..om]

where every factor ``f`` (``v``'s cost vector, an edge matrix, an earlier
table) is an array over ``v`` and a subset of the ``o``'s, reshaped to
broadcast against the full shape ``(K_v, K_o1, ..., K_om)``.

The factors are summed in a fixed grouping that both ways of computing the
table, and the back-substitution, follow bit for bit (so the strategy does
not depend on which way ran):

* when some axis ``o_c`` is *separable* (every factor that has it has no
  other ``o``), the factors split into ``P`` (those without ``o_c``) and
  ``Q`` (those over ``(v, o_c)``), and ``table = min_i P[i, ..] + Q[i, c]``:
  a (min, +) matrix product between the rows of ``P`` and ``Q``.  This is
  the common case (a table over three operators that each meet ``v`` by one
  edge or table);
* otherwise one group, summed as given.

Within a group, factors whose axes are a subset of another's are added to it
once beforehand (:func:`_premerge`).

numpy computes the table in blocks of ``v``'s rows: a broadcast add into a
block, then a min over it (:func:`contract`).  For large separable steps the
fused kernel of :mod:`search.fused` (numba) does the add and the min in one
pass in cache, on all cores.
"""

from __future__ import annotations

import math

import numpy as np

__all__ = ["Workers", "Step", "separable_axis", "prepare", "contract", "row_at", "fused_available"]

CHUNK = 1 << 19  # entries per numpy working block (4 MB): measured fastest here
PARALLEL = 1 << 22  # numpy contractions at least this large use every core
FUSED_BLOCK = 1 << 24  # entries of work per fused task
FUSED_ROWS = 1 << 18  # entries of P per fused task at most (2 MB)


class Workers:
    """A pool of ``threads`` worker threads, started on first use (small
    searches never need it, nor the ~10 ms import of concurrent.futures)."""

    def __init__(self, threads: int):
        self.threads = threads
        self._pool = None

    def map(self, fn, items):
        if self._pool is None:
            from concurrent.futures import ThreadPoolExecutor

            self._pool = ThreadPoolExecutor(self.threads)
        return self._pool.map(fn, items)

    def close(self) -> None:
        if self._pool is not None:
            self._pool.shutdown()


class Step:
    """One operator's contraction: its factor groups and separable axis.

    ``groups``: one or two lists of arrays, each list summed in order, the
    sums then added; ``recipes``: how each of those arrays was made from the
    original factors (an array, or ``(left, right)`` for ``left + right``),
    which the back-substitution re-evaluates at one index instead of
    keeping the merged copies; ``inner``: the separable axis (1..m) of the
    two-group form, or ``None``; ``shape``: ``(K_v, K_o1, ..., K_om)``.
    """

    __slots__ = ("groups", "recipes", "inner", "shape")

    def __init__(self, groups, recipes, inner, shape):
        self.groups, self.recipes, self.inner, self.shape = groups, recipes, inner, shape

    @property
    def work(self) -> int:
        return math.prod(self.shape)

    def release(self) -> None:
        """Drop the merged arrays; :func:`row_at` still works."""
        self.groups = None


def separable_axis(has, sizes) -> int | None:
    """The axis (1..m) of the two-group form, or ``None``.

    ``has[f][j]`` says whether factor ``f`` spans output axis ``j + 1``,
    ``sizes[j]`` that axis's length.  An axis qualifies when every factor
    that spans it spans no other output axis and some factor does not span
    it; the longest qualifying axis is taken (the last one on ties)."""
    best = None
    for j in range(len(sizes)):
        holders = [h for h in has if h[j]]
        if holders and len(holders) < len(has) and all(sum(h) == 1 for h in holders):
            if best is None or sizes[j] >= sizes[best - 1]:
                best = j + 1
    return best


def _premerge(fs, full_size):
    """Add together, once, factors whose axes are a subset of a
    smaller-than-full factor's (a vertex's own costs, two edges to the same
    neighbour); return ``(arrays, recipes)``, smallest first, the order in
    which they are summed."""
    fs = sorted(((a, a) for a in fs), key=lambda x: x[0].size)
    merged = []
    while fs:
        a, ra = fs.pop(0)
        for j, (h, rh) in enumerate(fs):
            if h.size < full_size and np.broadcast_shapes(a.shape, h.shape) == h.shape:
                fs[j] = (h + a, (rh, ra))
                break
        else:
            merged.append((a, ra))
    merged.sort(key=lambda x: x[0].size)
    return [a for a, _ in merged], [r for _, r in merged]


def prepare(factors, shape) -> Step:
    """Group ``factors`` (arrays broadcasting against ``shape``) for
    :func:`contract`."""
    shape = tuple(shape)
    m = len(shape) - 1
    full = math.prod(shape)
    k = separable_axis([tuple(f.shape[j] > 1 for j in range(1, m + 1)) for f in factors], shape[1:])
    if k is None:
        arrays, recipes = _premerge(factors, full)
        return Step([arrays], [recipes], None, shape)
    p = _premerge([f for f in factors if f.shape[k] == 1], full)
    q = _premerge([f for f in factors if f.shape[k] > 1], full)
    return Step([p[0], q[0]], [p[1], q[1]], k, shape)


def _sum_rows(fs, i, j, buf):
    """``sum(f[i:j] for f in fs)``, in order; into ``buf`` once the sum
    has its full shape."""
    acc, into = fs[0][i:j], False
    for a in fs[1:]:
        x = a[i:j]
        if into:
            np.add(acc, x, out=acc)
        elif buf is not None and np.broadcast_shapes(acc.shape, x.shape) == buf.shape:
            acc, into = np.add(acc, x, out=buf), True
        else:
            acc = acc + x
    return acc


def _numpy_rows(step: Step, start: int, stop: int):
    """The table's minimum over rows ``start:stop`` of ``v``, with numpy, in
    blocks of about ``CHUNK`` entries."""
    out_shape = step.shape[1:]
    rows = max(1, CHUNK // max(math.prod(out_shape), 1))
    buf = np.empty((min(rows, stop - start),) + out_shape)
    best = np.full(out_shape, np.inf)
    for i in range(start, stop, rows):
        j = min(i + rows, stop)
        block = buf[: j - i]
        if len(step.groups) == 1:
            acc = _sum_rows(step.groups[0], i, j, block)
        else:
            acc = np.add(_sum_rows(step.groups[0], i, j, None), _sum_rows(step.groups[1], i, j, None), out=block)
        if len(block) == 1:
            np.minimum(best, acc[0], out=best)
        else:
            np.minimum(best, np.minimum.reduce(np.broadcast_to(acc, block.shape), axis=0), out=best)
    return best


def _numpy(step: Step, threads: int, pool):
    K = step.shape[0]
    if pool is not None and threads > 1 and step.work >= PARALLEL and K >= threads:
        cuts = [K * t // threads for t in range(threads + 1)]
        parts = list(pool.map(lambda t: _numpy_rows(step, cuts[t], cuts[t + 1]), range(threads)))
        best = parts[0]
        for part in parts[1:]:
            np.minimum(best, part, out=best)
        return best
    return _numpy_rows(step, 0, K)


def _blocks(outer, rows_wanted: int):
    """Cover the C-ordered index space ``outer`` with blocks
    ``(prefix, axis, lo, hi)``: ``prefix`` fixes the axes before ``axis``,
    ``lo:hi`` is a range on it, and the axes after it are whole.  A block
    holds about ``rows_wanted`` index points (at least one row of ``axis``)."""
    axis = len(outer) - 1
    tail = 1
    while axis > 0 and tail * outer[axis] <= rows_wanted:
        tail *= outer[axis]
        axis -= 1
    step = max(1, rows_wanted // tail)
    for prefix in np.ndindex(*outer[:axis]):
        for lo in range(0, outer[axis], step):
            yield prefix, axis, lo, min(lo + step, outer[axis])


def _fused(step: Step, threads: int, pool):
    """The two-group form with the fused kernel: the rows of ``P`` (all
    axes but the separable one, flattened) against ``Q`` (``v`` by the
    separable axis)."""
    from search.fused import minplus

    shape, k = step.shape, step.inner
    Kv, Kc, m = shape[0], shape[k], len(shape) - 1
    outer = tuple(shape[j] for j in range(1, m + 1) if j != k) or (1,)
    qs = step.groups[1]
    Q = qs[0]
    for a in qs[1:]:
        Q = Q + a
    q_shape = tuple(s if j in (0, k) else 1 for j, s in enumerate(shape))
    Q = np.array(np.broadcast_to(Q, q_shape).reshape(Kv, Kc), order="C")  # (K_v, K_c), contiguous
    views = []  # P's factors as (outer..., K_v), the separable axis dropped
    for f in step.groups[0]:
        g = np.moveaxis(f.reshape(tuple(s for j, s in enumerate(f.shape) if j != k)), 0, -1)
        views.append(g if m > 1 else g.reshape(1, -1))
    out = np.empty(outer + (Kc,))
    rows = max(32, FUSED_BLOCK // (Kv * Kc))  # rows sharing each tile of Q
    rows = max(1, min(rows, FUSED_ROWS // Kv, -(-math.prod(outer) // (2 * threads))))

    def task(block):
        prefix, axis, lo, hi = block
        acc = None
        for g in views:
            at = tuple(i if g.shape[d] > 1 else 0 for d, i in enumerate(prefix))
            at += (slice(lo, hi) if g.shape[axis] > 1 else slice(0, 1),)
            acc = g[at] if acc is None else acc + g[at]
        P = np.array(np.broadcast_to(acc, (hi - lo,) + outer[axis + 1:] + (Kv,)), order="C").reshape(-1, Kv)
        o = np.reshape(out[prefix][lo:hi], (-1, Kc), copy=False)  # a view: the kernel writes the table
        o.fill(np.inf)
        minplus(P, Q, o)

    blocks = list(_blocks(outer, rows))
    if pool is not None and threads > 1 and len(blocks) > 1:
        list(pool.map(task, blocks))
    else:
        for b in blocks:
            task(b)
    table = out.reshape(tuple(shape[j] for j in range(1, m + 1) if j != k) + (Kc,))
    return np.ascontiguousarray(np.moveaxis(table, -1, k - 1)) if k != m else table


def contract(step: Step, *, threads: int = 1, pool=None, fused: bool = False):
    """The table of ``step``: ``min`` over axis 0 of its factors' sum.

    ``fused`` uses the compiled kernel (two-group steps only); ``pool``
    (:class:`Workers`, or any executor with ``threads`` workers) spreads
    large contractions over the cores."""
    if fused and step.inner is not None:
        return _fused(step, threads, pool)
    return _numpy(step, threads, pool)


def _value(recipe, index):
    if isinstance(recipe, tuple):
        return _value(recipe[0], index) + _value(recipe[1], index)
    at = (slice(None),) + tuple(i if s > 1 else 0 for i, s in zip(index, recipe.shape[1:]))
    return recipe[at]


def row_at(step: Step, index) -> np.ndarray:
    """The sum of ``step``'s factors along ``v``'s axis with every other
    axis fixed at ``index`` (one entry per axis ``o1..om``), with the same
    additions in the same order as the contraction: what the
    back-substitution minimises."""
    sums = []
    for recipes in step.recipes:
        acc = None
        for r in recipes:
            x = _value(r, index)
            acc = x if acc is None else acc + x
        sums.append(acc)
    total = sums[0] if len(sums) == 1 else sums[0] + sums[1]
    return np.broadcast_to(total, (step.shape[0],))


def fused_available() -> bool:
    """Whether the compiled kernel can be used: numba imports and compiles
    it (any failure there leaves the search to numpy, with the same
    result)."""
    try:
        import search.fused  # noqa: F401
    except Exception:
        return False
    return True
