"""Dominance pruning: configurations that can go before the dynamic program
without changing its optimum.

A strategy's cost is ``sum_v cost_v(x_v) + sum_(u,v) E_uv(x_u, x_v)``.  A
configuration ``a`` of operator ``v`` is *dominated* by another one, ``b``,
when

    cost_v(a) - cost_v(b) >= sum over the edges (v, u) of max_x (E_vu(b, x) - E_vu(a, x))

with ``x`` over the configurations ``u`` still has: swapping ``a`` for ``b``
never raises the cost, whatever the neighbours pick.  A strategy that uses
``a`` then has a counterpart with ``b`` that costs no more, so removing ``a``
keeps an optimal strategy.  Each removal is judged against the
configurations that remain at that moment, which still hold an optimal
strategy, so repeating while anything changes keeps the optimum too.  The
rule reads only the dynamic program's own terms; it needs no knowledge of
what the arrays mean.

Ties are broken by a fixed total order: ``b`` may remove ``a`` only if it
comes first by worst case ``cost_v(x) + sum_u max E_vu(x, .)`` (which a
dominator never exceeds), then by index.  Two equivalent configurations
therefore never remove each other (the lower index survives), and as the
order has no cycles, every removed configuration has a dominator that
stays.  The comparisons are made in floating point; a removal can
therefore be wrong only by the rounding of the costs compared (relative
~1e-16).

Testing every pair would cost ``K^2 * sum_u K_u`` per operator, as much as
the dynamic program itself on graphs whose dependent sets hold two
operators.  The work here is bounded per operator instead:

* rows of an edge matrix that are equal (configurations that split the
  edge's tensor alike) form one *class*, and so do equal columns; all
  arithmetic is per class;
* each configuration ``a`` is tested only against a few *candidates*: the
  ``candidates`` first in the order above, the ``candidates`` cheapest, and
  for each edge the first configuration of ``a``'s class (same row, so that
  edge adds 0);
* a cheap lower bound first discards most pairs: the difference at one
  *probe* column per edge, the neighbour configuration that is cheapest
  for ``a`` (usually the one that needs no re-distribution at all);
* the pairs that pass are checked exactly, the most promising first, at
  most ``rounds`` per configuration.

Operators with identical arrays and identical remaining neighbours (the
repeated layers of a network) are decided once.
"""

from __future__ import annotations

import numpy as np

__all__ = ["prune", "working_bytes", "weights", "CANDIDATES", "ROUNDS", "PASSES"]

CANDIDATES = 32  # cheapest and lowest-worst-case candidates per operator
ROUNDS = 4  # exact checks per configuration and pass
PASSES = 8  # sweeps over the operators whose neighbourhood changed
_CHUNK = 1 << 18  # entries per block of the exact check


def _distinct(x: np.ndarray) -> np.ndarray:
    """The sorted distinct values of ``x`` (plain ``np.unique`` would load
    ``numpy.ma``, a noticeable cost for small searches)."""
    x = np.sort(x)
    return x[np.concatenate(([True], x[1:] != x[:-1]))] if len(x) else x


def weights(n: int) -> np.ndarray:
    """``n`` fixed, well-mixed odd 64-bit weights (SplitMix64 of 1..n)."""
    z = np.arange(1, n + 1, dtype=np.uint64) * np.uint64(0x9E3779B97F4A7C15)
    z = (z ^ (z >> np.uint64(30))) * np.uint64(0xBF58476D1CE4E5B9)
    z = (z ^ (z >> np.uint64(27))) * np.uint64(0x94D049BB133111EB)
    return (z ^ (z >> np.uint64(31))) | np.uint64(1)


class _Classes:
    """Rows (or columns) of a matrix that are equal bit for bit: ``of[i]``
    is row ``i``'s class, ``rep[c]`` the first row of class ``c``."""

    __slots__ = ("of", "rep")

    def __init__(self, of: np.ndarray, rep: np.ndarray):
        self.of, self.rep = of.reshape(-1).astype(np.int64), rep.astype(np.int64)

    @staticmethod
    def of_matrix(m: np.ndarray) -> tuple["_Classes", "_Classes"]:
        """The row classes and the column classes of ``m``, found by hashing
        the bits of each row and column (in blocks of rows, so that no copy
        of the matrix is made) and checking every member against its class's
        first; a hash collision falls back to sorting."""
        bits = np.ascontiguousarray(m, dtype=np.float64).view(np.uint64)  # (K, C)
        K, C = bits.shape
        step = max(1, _CHUNK // max(C, 1))
        w_cols, w_rows = weights(C), weights(K)
        h_rows = np.empty(K, np.uint64)
        h_cols = np.zeros(C, np.uint64)
        for i in range(0, K, step):
            block = bits[i:i + step]
            h_rows[i:i + step] = (block * w_cols).sum(axis=1, dtype=np.uint64)  # wraps modulo 2^64
            h_cols += (block * w_rows[i:i + step, None]).sum(axis=0, dtype=np.uint64)
        _, r_rep, r_of = np.unique(h_rows, return_index=True, return_inverse=True)
        _, c_rep, c_of = np.unique(h_cols, return_index=True, return_inverse=True)
        r_of, c_of = r_of.reshape(-1), c_of.reshape(-1)
        rows_ok = cols_ok = True
        for i in range(0, K, step):
            block = bits[i:i + step]
            rows_ok = rows_ok and np.array_equal(block, bits[r_rep[r_of[i:i + step]]])
            cols_ok = cols_ok and np.array_equal(block, block[:, c_rep[c_of]])
        if not rows_ok:  # two different rows hashed alike
            _, r_rep, r_of = np.unique(bits, axis=0, return_index=True, return_inverse=True)
        if not cols_ok:
            _, c_rep, c_of = np.unique(bits.T, axis=0, return_index=True, return_inverse=True)
        return _Classes(r_of, r_rep), _Classes(c_of, c_rep)


class _Side:
    """One edge seen from one end: rows are this end's configurations."""

    __slots__ = ("m", "rows", "cols", "key")

    def __init__(self, m, rows: _Classes, cols: _Classes, key):
        self.m, self.rows, self.cols, self.key = m, rows, cols, key

    def reduced(self, keep_v, keep_u):
        """(class of each kept row (K,), the distinct rows restricted to the
        distinct kept columns (r, q))."""
        used, of = np.unique(self.rows.of[keep_v], return_inverse=True)
        cols = self.cols.rep[_distinct(self.cols.of[keep_u])]
        return of.reshape(-1), self.m[np.ix_(self.rows.rep[used], cols)]


def _max_gap(R, rb, ra):
    """``max_x R[rb, x] - R[ra, x]`` for each pair, once per distinct pair."""
    r = len(R)
    keys, back = np.unique(rb * r + ra, return_inverse=True)
    kb, ka = keys // r, keys % r
    out = np.empty(len(keys))
    step = max(1, _CHUNK // max(R.shape[1], 1))
    for i in range(0, len(keys), step):
        out[i:i + step] = (R[kb[i:i + step]] - R[ka[i:i + step]]).max(axis=1)
    return out[back.reshape(-1)]


def _dominated(c, reduced, candidates: int, rounds: int) -> np.ndarray:
    """Mask of the configurations (costs ``c``) that a candidate dominates;
    ``reduced``: per edge, :meth:`_Side.reduced`."""
    K = len(c)
    idx = np.arange(K)
    worst = c.copy()  # cost_v(x) + sum_u max E_vu(x, .): never more for a dominator than for what it dominates
    for of, R in reduced:
        worst += R.max(axis=1)[of]
    first = np.lexsort((idx, worst))  # the order a dominator must come first in: worst case, then index
    rank = np.empty(K, np.int64)
    rank[first] = idx
    pool = _distinct(np.concatenate([first[:candidates], np.lexsort((idx, c))[:candidates]]))
    bs, as_ = [np.repeat(pool, K)], [np.tile(idx, len(pool))]
    for of, _ in reduced:  # the first configuration of each row class
        _, at = np.unique(of[first], return_index=True)
        best = np.empty(of.max() + 1, np.int64)
        best[of[first[at]]] = first[at]
        bs.append(best[of])
        as_.append(idx)
    pairs = _distinct(np.concatenate(bs) * K + np.concatenate(as_))
    b, a = pairs // K, pairs % K
    ahead = rank[b] < rank[a]
    b, a = b[ahead], a[ahead]
    budget = c[a] - c[b]  # what b saves on v itself
    bound = np.zeros(len(a))  # a lower bound of what b may cost more on the edges
    for of, R in reduced:
        probe = R.argmin(axis=1)  # per row class, the column where it is cheapest
        ra, rb = of[a], of[b]
        bound += R[rb, probe[ra]] - R[ra, probe[ra]]
    hope = bound <= budget
    a, b, budget, slack = a[hope], b[hope], budget[hope], (budget - bound)[hope]
    o = np.lexsort((rank[b], -slack, a))  # per a, the most promising first
    a, b, budget = a[o], b[o], budget[o]
    turn = np.arange(len(a)) - np.searchsorted(a, a)  # position among a's candidates
    gone = np.zeros(K, bool)
    for r in range(rounds):
        sel = np.nonzero((turn == r) & ~gone[a])[0]
        if not len(sel):
            break
        ta, tb, tbud = a[sel], b[sel], budget[sel]
        gap = np.zeros(len(sel))
        alive = np.ones(len(sel), bool)
        for of, R in reduced:
            s = np.nonzero(alive)[0]
            gap[s] += _max_gap(R, of[tb[s]], of[ta[s]])
            alive[s] = gap[s] <= tbud[s]
        gone[ta[alive]] = True
    return gone


def prune(node_costs, edge_costs, *, nodes=None, candidates: int = CANDIDATES, rounds: int = ROUNDS,
          passes: int = PASSES) -> list[np.ndarray]:
    """The configurations of every node that dominance does not exclude.

    ``node_costs[v]``: (K_v,) array; ``edge_costs[(u, v)]``: (K_u, K_v);
    ``nodes``: the nodes to examine (default: all; the others keep every
    configuration).  Returns ``kept[v]``, ascending indices into
    ``node_costs[v]`` (never empty); the minimum of the strategy cost over
    the kept configurations equals the minimum over all of them.
    Deterministic: the result depends only on the arrays' values.
    """
    n = len(node_costs)
    costs = [np.asarray(c, dtype=np.float64).reshape(-1) for c in node_costs]
    kept = [np.arange(len(c)) for c in costs]
    examined = set(range(n)) if nodes is None else {int(v) for v in nodes}
    sides: list[list[tuple[int, _Side]]] = [[] for _ in range(n)]
    classes: dict[int, tuple[_Classes, _Classes, np.ndarray]] = {}
    for (u, v), m in edge_costs.items():
        if u == v:
            raise ValueError(f"edge ({u}, {v}) is a loop")
        if u not in examined and v not in examined:
            continue
        if id(m) not in classes:
            classes[id(m)] = _Classes.of_matrix(m) + (m,)  # the array is held: ids stay unique
        rows, cols, _ = classes[id(m)]
        sides[u].append((v, _Side(m, rows, cols, (id(m), 0))))
        sides[v].append((u, _Side(m.T, cols, rows, (id(m), 1))))
    decided: dict[tuple, np.ndarray] = {}  # identical operators in identical surroundings
    dirty = set(examined)
    for _ in range(passes):
        changed = set()
        for v in sorted(dirty):
            kv = kept[v]
            if len(kv) < 2:
                continue
            c = costs[v][kv]
            key = (c.tobytes(), kv.tobytes()) + tuple((s.key, kept[u].tobytes()) for u, s in sides[v])
            gone = decided.get(key)
            if gone is None:
                reduced = [s.reduced(kv, kept[u]) for u, s in sides[v]]
                gone = decided[key] = _dominated(c, reduced, candidates, rounds)
            if gone.any():
                kept[v] = kv[~gone]
                changed.add(v)
                changed.update(u for u, _ in sides[v])
        dirty = changed & examined
        if not dirty:
            break
    return kept


def working_bytes(sizes, edges, candidates: int = CANDIDATES) -> int:
    """An upper estimate of the memory :func:`prune` allocates at once
    beyond its inputs and result: the distinct rows of the largest edge
    matrix (at most a copy of it), blocks of rows while classes are found,
    and the candidate pairs of the largest node."""
    degree = [0] * len(sizes)
    for u, v in edges:
        degree[u] += 1
        degree[v] += 1
    largest_edge = max((sizes[u] * sizes[v] for u, v in edges), default=0)
    pairs = max((k * (2 * candidates + d) for k, d in zip(sizes, degree)), default=0)
    return 8 * (largest_edge + 12 * pairs + 6 * _CHUNK + 4 * sum(sizes))
