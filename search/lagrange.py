"""The cheapest strategy within a memory capacity: Lagrangian relaxation on
the dynamic program, then local repair.

Memory is a sum over operators, so the constrained problem is the same
dynamic program with a budget.  For a multiplier ``lam >= 0`` the minimum
of ``cost + lam * memory`` (each operator's cost vector plus ``lam`` times
its memory vector) bounds the constrained optimum from below; the classic
treatment is Fisher, "The Lagrangian relaxation method for solving integer
programming problems", Management Science 27 (1981).  :func:`within_memory`
walks the multipliers where two strategies' lines cross, and
:func:`improve` moves one operator at a time to repair a strategy that does
not fit and improve one that does.
"""

from __future__ import annotations

import math
from dataclasses import dataclass

import numpy as np

from result import total
from search.elimination import SearchResult

__all__ = ["DoesNotFit", "Bounded", "within_memory", "improve", "objective"]


class DoesNotFit(MemoryError):
    """No strategy fits the device memory."""

    def __init__(self, least: float, capacity: float):
        digits = next(d for d in range(4, 18) if f"{least / 1e9:.{d}g}" != f"{capacity / 1e9:.{d}g}" or d == 17)
        super().__init__(f"no strategy fits in {capacity / 1e9:.{digits}g} GB per device: the smallest any strategy "
                         f"of this graph needs at this p is {least / 1e9:.{digits}g} GB")
        self.least, self.capacity = least, capacity


@dataclass(frozen=True)
class Bounded:
    """The outcome of :func:`within_memory`."""

    result: SearchResult  # the cheapest strategy found that fits
    cost: float
    memory: float
    lower_bound: float  # no strategy that fits costs less
    status: str  # "unconstrained optimum fits", "optimal" or "bound"
    lam: float
    searches: int
    least_memory: float

    @property
    def gap(self) -> float:
        return 0.0 if self.lower_bound <= 0 else max(0.0, (self.cost - self.lower_bound) / self.lower_bound)


def objective(node_costs, edge_costs, index) -> float:
    return total((float(c[i]) for c, i in zip(node_costs, index)),
                 (float(m[index[u], index[v]]) for (u, v), m in edge_costs.items()))


def within_memory(node_costs, node_memory, edge_costs, capacity: float, run, *, max_searches: int = 8,
                  rtol: float = 1e-9) -> Bounded:
    """The cheapest strategy whose memory, a sum over operators, is at most
    ``capacity``, by Lagrangian relaxation on the same dynamic program.

    ``run(nodes)`` solves the unconstrained problem for node cost vectors
    ``nodes`` (same edges) and returns a :class:`SearchResult`.  For a
    multiplier ``lam >= 0``, the minimum of ``cost + lam * (memory -
    capacity)`` is a lower bound on the constrained optimum (a strategy that
    fits adds a non-positive term).  Starting from the unconstrained optimum
    (too large) and the strategy of least memory (which fits), each step takes
    the ``lam`` at which the two lines ``cost + lam * memory`` cross and solves
    there: a strategy below both replaces the one on its side of the
    capacity; none means ``lam`` maximises the bound.  The strategy returned
    always fits; it is ``"optimal"`` when its cost meets the bound, else the
    bound says how far from optimal it can be.
    """
    least = math.fsum(float(m.min()) for m in node_memory)
    if least > capacity:
        raise DoesNotFit(least, capacity)

    def memory_of(index):
        return math.fsum(float(m[i]) for m, i in zip(node_memory, index))

    def at(lam):
        r = run([c + lam * m for c, m in zip(node_costs, node_memory)] if lam else list(node_costs))
        return r, objective(node_costs, edge_costs, r.index), memory_of(r.index)

    r0, cost0, mem0 = at(0.0)
    searches = 1
    if mem0 <= capacity:
        return Bounded(r0, cost0, mem0, cost0, "unconstrained optimum fits", 0.0, searches, least)
    # What fits to start from: the unconstrained optimum repaired by local
    # moves, else the strategy of least memory (each operator its smallest,
    # ties by its own cost).
    index = improve(node_costs, node_memory, edge_costs, list(r0.index), capacity)
    if index is None:
        index = [int(np.lexsort((c, m))[0]) for c, m in zip(node_costs, node_memory)]
    start = SearchResult(objective(node_costs, edge_costs, index), index, r0.elimination, 0.0, r0.stats)
    lo, hi = (r0, cost0, mem0), (start, start.cost, memory_of(index))
    best, bound, lam_best = hi, cost0, 0.0  # the unconstrained optimum bounds every strategy from below
    while searches < max_searches and best[1] > bound * (1 + rtol):
        (_, c_lo, m_lo), (_, c_hi, m_hi) = lo, hi
        if m_lo <= m_hi:
            break
        lam = (c_hi - c_lo) / (m_lo - m_hi)  # where cost + lam * memory is equal for both
        if not lam > 0 or not math.isfinite(lam):
            break
        r, c, m = at(lam)
        searches += 1
        dual = c + lam * (m - capacity)
        if dual > bound:
            bound, lam_best = dual, lam
        fixed = improve(node_costs, node_memory, edge_costs, list(r.index), capacity)
        if fixed is not None and objective(node_costs, edge_costs, fixed) < best[1]:
            c_fixed = objective(node_costs, edge_costs, fixed)
            best = (SearchResult(c_fixed, fixed, r.elimination, 0.0, r.stats), c_fixed, memory_of(fixed))
        if c + lam * m >= (c_lo + lam * m_lo) * (1 - 1e-12):  # nothing below both lines: lam is optimal
            break
        if m > capacity:
            lo = (r, c, m)
        else:
            hi = (r, c, m)
    r, c, m = best
    status = "optimal" if c <= bound * (1 + rtol) else "bound"
    return Bounded(r, c, m, min(bound, c), status, lam_best, searches, least)


def improve(node_costs, node_memory, edge_costs, index, capacity, max_moves: int = 100000):
    """Local search from ``index``: while over ``capacity``, the move (one
    operator to another configuration) that frees memory at the least cost
    per byte; then, while any, the move that lowers the cost most and stays
    within it.  Returns the strategy, or ``None`` when it cannot fit."""
    n, width = len(node_costs), max(len(c) for c in node_costs)
    nbrs = [[] for _ in range(n)]
    for (u, v), m in edge_costs.items():
        nbrs[u].append((v, m, False))  # v's configuration picks a column of m
        nbrs[v].append((u, m, True))  # u's picks a row
    cost = np.full((n, width), np.inf)  # (n, K_max) cost of each configuration, neighbours fixed
    mem = np.full((n, width), np.inf)  # (n, K_max) memory of each configuration
    for v in range(n):
        mem[v, : len(node_memory[v])] = node_memory[v]

    def local(v):
        out = np.array(node_costs[v], dtype=float)
        for u, m, row in nbrs[v]:
            out += m[index[u], :] if row else m[:, index[u]]
        cost[v, : len(out)] = out

    for v in range(n):
        local(v)
    rows = np.arange(n)
    cur = np.asarray(index)
    used = math.fsum(float(node_memory[v][index[v]]) for v in range(n))
    for _ in range(max_moves):
        d_cost = cost - cost[rows, cur][:, None]  # (n, K_max)
        d_mem = mem - mem[rows, cur][:, None]
        with np.errstate(invalid="ignore", divide="ignore"):
            if used > capacity:  # free memory at the least cost per byte
                score = np.where(d_mem < 0, d_cost / -d_mem, np.inf)
            else:  # lower the cost, staying within the capacity
                score = np.where((used + d_mem <= capacity) & (d_cost < 0), d_cost, np.inf)
        v, k = np.unravel_index(int(np.argmin(score)), score.shape)
        if not np.isfinite(score[v, k]):
            break
        used += float(mem[v, k] - mem[v, cur[v]])
        cur[v] = index[v] = int(k)
        for u, _, _ in nbrs[v]:
            local(u)
    used = math.fsum(float(node_memory[v][index[v]]) for v in range(n))  # without the moves' rounding
    return index if used <= capacity else None
