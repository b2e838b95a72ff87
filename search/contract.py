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

Configurations of a neighbour ``o_j`` that every factor sees alike (two
splits of an operator that leave the tensor it shares with ``v`` laid out
the same way) give equal table entries: a large step computes those of one
of each class (:func:`_merge_equal`), and its table is kept that way, once
per class with a map from each configuration to its class
(:class:`Spread`).  A later step that reads such a table refines the
classes along the axes it merges too, and spreads the rest out a block of
rows at a time, so the whole table never exists.  On the Transformer at
p = 1024, the four steps over three neighbours (5.3e9 entries each) shrink
27-fold, and the tables kept for the back-substitution from 1.2 GB to
0.6 GB.  Merged or not, every entry is the same sum of the same numbers:
the tables and the strategy are the same bits.

For few columns, the fused kernel runs transposed (``Q``'s rows against
``P``'s columns), keeping its vectorised inner loop long.

numpy computes the table in blocks of ``v``'s rows: a broadcast add into a
block, then a min over it (:func:`contract`).  For large separable steps the
fused kernel of :mod:`search.fused` (numba) does the add and the min in one
pass in cache, on all cores.
"""

from __future__ import annotations

import math

import numpy as np

from search.prune import weights

__all__ = ["Workers", "Step", "Spread", "whole", "separable_axis", "prepare", "contract", "row_at", "fused_available"]

CHUNK = 1 << 19  # entries per numpy working block (4 MB): measured fastest here
PARALLEL = 1 << 22  # numpy contractions at least this large use every core
FUSED_BLOCK = 1 << 24  # entries of work per fused task
FUSED_ROWS = 1 << 18  # entries of P per fused task at most (2 MB)
NARROW = 64  # a fused step with fewer columns than this runs transposed
MERGE_WORK = 1 << 28  # steps at least this large look for neighbour configurations seen alike
MERGE_SHARE = 8  # ... reading at most 1/MERGE_SHARE of the step's work to find them


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
    two-group form, or ``None``; ``shape``: ``(K_v, K_o1, ..., K_om)`` as
    computed; ``spread``: ``(axis, inverse)`` pairs that copy a merged axis
    back to its full length (``inverse[i]``: the computed row equal to
    configuration ``i``'s), empty when nothing was merged.
    """

    __slots__ = ("groups", "recipes", "inner", "shape", "spread")

    def __init__(self, groups, recipes, inner, shape, spread=()):
        self.groups, self.recipes, self.inner, self.shape = groups, recipes, inner, shape
        self.spread = spread

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


class Spread:
    """A table kept once per class of equal configurations: ``array`` holds
    one slice per class along each axis ``j`` whose ``maps[j]`` is given
    (``maps[j][i]``: the slice of configuration ``i``), whole along the
    others.  ``shape`` is the table's own."""

    __slots__ = ("array", "maps")

    def __init__(self, array, maps):
        self.array, self.maps = array, tuple(maps)

    @property
    def shape(self) -> tuple:
        return tuple(s if m is None else len(m) for s, m in zip(self.array.shape, self.maps))

    @property
    def size(self) -> int:
        return math.prod(self.shape)

    @property
    def nbytes(self) -> int:
        """The memory it is kept in."""
        return self.array.nbytes

    def full(self) -> np.ndarray:
        """The whole table (one copy, no intermediate)."""
        if sum(m is not None for m in self.maps) == 1:
            j = next(j for j, m in enumerate(self.maps) if m is not None)
            return self.array.take(self.maps[j], axis=j)
        return self.array[np.ix_(*(np.arange(s) if m is None else m for s, m in zip(self.array.shape, self.maps)))]

    def placed(self, axes) -> "Spread":
        """The table with unit axes inserted: ``axes[j]`` is the position
        of this table's axis ``j`` among ``len`` of the result, ``None``
        for a new unit axis (the order of the table's axes is kept)."""
        shape = [1 if i is None else self.array.shape[i] for i in axes]
        return Spread(self.array.reshape(shape), [None if i is None else self.maps[i] for i in axes])


def _premerge(fs, full_size):
    """Add together, once, factors whose axes are a subset of a
    smaller-than-full factor's (a vertex's own costs, two edges to the same
    neighbour); return ``(arrays, recipes)``, smallest first, the order in
    which they are summed.  ``fs``: ``(array, leaf, size)`` triples, the
    array as summed, the leaf as the recipe names it and its size in the
    step's full shape (which orders and merges them, whatever was merged
    away along the step's axes)."""
    fs = sorted(fs, key=lambda x: x[2])
    merged = []
    while fs:
        a, ra, na = fs.pop(0)
        for j, (h, rh, nh) in enumerate(fs):
            if nh < full_size and np.broadcast_shapes(a.shape, h.shape) == h.shape:
                fs[j] = (whole(h) + whole(a), (rh, ra), nh)
                break
        else:
            merged.append((a, ra, na))
    merged.sort(key=lambda x: x[2])
    return [a for a, _, _ in merged], [r for _, r, _ in merged]


def prepare(factors, shape) -> Step:
    """Group ``factors`` (arrays, or :class:`Spread` tables, broadcasting
    against ``shape``) for :func:`contract`.  A step of at least
    :data:`MERGE_WORK` entries is shrunk to its distinct neighbour
    configurations first (:func:`_merge_equal`)."""
    shape = tuple(shape)
    m = len(shape) - 1
    full = math.prod(shape)
    sizes = [f.size for f in factors]
    if full >= MERGE_WORK:
        arrays, computed, spread = _merge_equal(factors, shape)
    else:
        arrays, computed, spread = list(factors), shape, ()
    k = separable_axis([tuple(a.shape[j] > 1 for j in range(1, m + 1)) for a in arrays], shape[1:])
    if k is not None:  # the fused kernel's operands are whole arrays
        arrays = [whole(a) for a in arrays]
    triples = list(zip(arrays, factors, sizes))
    if k is None:
        arrays, recipes = _premerge(triples, full)
        return Step([arrays], [recipes], None, computed, spread)
    p = _premerge([t for t in triples if t[0].shape[k] == 1], full)
    q = _premerge([t for t in triples if t[0].shape[k] > 1], full)
    return Step([p[0], q[0]], [p[1], q[1]], k, computed, spread)


_MIX = np.uint64(0x9E3779B97F4A7C15)


def _row_hash(a: np.ndarray, axis: int, sample: int | None = None) -> np.ndarray:
    """A 64-bit hash of each slice of ``a`` along ``axis`` (of its bits, so
    ``-0.0`` and ``0.0`` differ), or of ``sample`` of its entries spread
    evenly over the slice."""
    if sample is not None:  # every few entries along each other axis (a view): about ``sample`` of them
        others = [d for d in range(a.ndim) if d != axis and a.shape[d] > 1]
        each = max(2, int(sample ** (1 / max(len(others), 1))))
        a = a[tuple(slice(None, None, max(1, a.shape[d] // each)) if d in others else slice(None)
                    for d in range(a.ndim))]
    rows = np.ascontiguousarray(np.moveaxis(a, axis, 0).reshape(a.shape[axis], -1)).view(np.uint64)
    return (rows * weights(rows.shape[1])).sum(axis=1, dtype=np.uint64)  # wraps modulo 2^64


def _classes(arrays, maps, j: int, n: int, sample: int | None = None):
    """Configurations ``0..n-1`` of axis ``j`` grouped by a hash of their
    slices of every array (through its map, when it has one): ``(first,
    inverse)`` as :func:`numpy.unique` gives them."""
    h = np.zeros(n, dtype=np.uint64)
    for a, mp in zip(arrays, maps):
        x = _row_hash(a, j, sample)
        h = h * _MIX + (x if mp[j] is None else x[mp[j]])
    _, first, inverse = np.unique(h, return_index=True, return_inverse=True)
    return first, inverse.reshape(-1)


def _same_slices(arrays, maps, j: int, n: int, like) -> bool:
    """Whether every configuration's slices equal those of configuration
    ``like[i]``, bit for bit, in every array."""
    for a, mp in zip(arrays, maps):
        at = np.arange(n) if mp[j] is None else mp[j]
        pairs = np.unique(np.stack([at, at[like]]), axis=1)
        pairs = pairs[:, pairs[0] != pairs[1]]
        if pairs.size and not np.array_equal(a.take(pairs[0], axis=j).view(np.uint64),
                                             a.take(pairs[1], axis=j).view(np.uint64)):
            return False
    return True


def _merge_equal(factors, shape):
    """Shrink each output axis of a step to its distinct configurations:
    those whose slices of every factor spanning the axis are equal bit for
    bit (hashed, then checked).  Every table entry of a merged
    configuration is then computed from the same numbers in the same order
    as its representative's, so copying the representative's is exact.

    Returns the factors over the shrunk axes (a :class:`Spread` factor's
    classes are refined, never expanded, along a shrunk axis, and kept
    along the others), the shape computed, and the ``(axis, inverse)``
    pairs that spread the table back.  An axis keeps at least two configurations (so that the factors
    spanning it still do).  Axes whose factors would cost more than
    ``1/MERGE_SHARE`` of the step to read are left whole."""
    shape = list(shape)
    arrays = [f.array if isinstance(f, Spread) else f for f in factors]
    maps = [list(f.maps) if isinstance(f, Spread) else [None] * len(shape) for f in factors]
    budget = math.prod(shape) // MERGE_SHARE
    spread = []
    for j in range(1, len(shape)):
        n = shape[j]
        held = [i for i, a in enumerate(arrays) if a.shape[j] > 1]
        size = sum(arrays[i].size for i in held)
        first = None
        if held and size <= budget:
            budget -= size
            hs, ms = [arrays[i] for i in held], [maps[i] for i in held]
            if len(_classes(hs, ms, j, n, sample=64)[0]) < n:  # a cheap look first: some may be equal
                first, inverse = _classes(hs, ms, j, n)
                if len(first) == n or not _same_slices(hs, ms, j, n, first[inverse]):
                    first = None  # all distinct, or a hash collision: the axis stays whole
        if first is None:
            continue
        for i in held:  # the classes' representatives, through a Spread's own classes
            at = np.arange(n) if maps[i][j] is None else maps[i][j]
            arrays[i] = arrays[i].take(at[first] if len(first) > 1 else at[[first[0], first[0]]], axis=j)
            maps[i][j] = None
        shape[j] = max(len(first), 2)
        spread.append((j, inverse))
    out = [a if not any(m is not None for m in mp) else Spread(a, mp) for a, mp in zip(arrays, maps)]
    return out, tuple(shape), tuple(spread)


def whole(a) -> np.ndarray:
    """An array as it is, a :class:`Spread` spread out."""
    return a.full() if isinstance(a, Spread) else a


def _rows(a, i: int, j: int) -> np.ndarray:
    """Rows ``i:j`` (axis 0) of an array or, spread out, of a :class:`Spread`."""
    if not isinstance(a, Spread):
        return a[i:j]
    if a.maps[0] is None:
        return Spread(a.array[i:j], a.maps).full()
    return Spread(a.array, (a.maps[0][i:j],) + a.maps[1:]).full()


def _sum_rows(fs, i, j, buf):
    """``sum(f[i:j] for f in fs)``, in order; into ``buf`` once the sum
    has its full shape.  A :class:`Spread` factor is spread out a block of
    rows at a time."""
    acc, into = _rows(fs[0], i, j), False
    for a in fs[1:]:
        x = _rows(a, i, j)
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
    Qt = np.ascontiguousarray(Q.T) if Kc < NARROW else None  # (K_c, K_v)
    rows = max(32, FUSED_BLOCK // (Kv * Kc))  # rows sharing each tile of Q
    rows = max(1, min(rows, FUSED_ROWS // Kv, -(-math.prod(outer) // (2 * threads))))

    def task(block):
        prefix, axis, lo, hi = block
        acc = None
        for g in views:
            at = tuple(i if g.shape[d] > 1 else 0 for d, i in enumerate(prefix))
            at += (slice(lo, hi) if g.shape[axis] > 1 else slice(0, 1),)
            acc = g[at] if acc is None else acc + g[at]
        P = np.broadcast_to(acc, (hi - lo,) + outer[axis + 1:] + (Kv,)).reshape(-1, Kv)
        o = np.reshape(out[prefix][lo:hi], (-1, Kc), copy=False)  # a view: the kernel writes the table
        if Qt is None:
            o.fill(np.inf)
            minplus(np.array(P, order="C"), Q, o)
        else:  # few columns: the rows of P are the kernel's long, vectorised axis
            ot = np.full((Kc, len(o)), np.inf)
            minplus(Qt, np.array(P.T, order="C"), ot)
            o[...] = ot.T

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
    table = _fused(step, threads, pool) if fused and step.inner is not None else _numpy(step, threads, pool)
    if not step.spread:
        return table
    maps = [None] * table.ndim
    for axis, inverse in step.spread:
        maps[axis - 1] = inverse
    return Spread(table, maps)


def _value(recipe, index):
    if isinstance(recipe, tuple):
        return _value(recipe[0], index) + _value(recipe[1], index)
    if isinstance(recipe, Spread):
        maps = recipe.maps
        at = (slice(None),) + tuple(int(m[i]) if m is not None else (i if s > 1 else 0)
                                    for i, s, m in zip(index, recipe.array.shape[1:], maps[1:]))
        row = recipe.array[at]
        return row if maps[0] is None else row[maps[0]]
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
