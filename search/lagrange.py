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
from search.options import Choice, Problem

__all__ = ["DoesNotFit", "Bounded", "within_memory", "relax", "crossing", "none_below", "repair", "polish",
           "block_moves", "improve", "objective"]


class DoesNotFit(MemoryError):
    """No strategy fits the device memory."""

    def __init__(self, least: float, capacity: float):
        digits = next(d for d in range(4, 18) if f"{least / 1e9:.{d}g}" != f"{capacity / 1e9:.{d}g}" or d == 17)
        super().__init__(f"no strategy fits in {capacity / 1e9:.{digits}g} GB per device: the smallest any strategy "
                         f"of this graph needs at this p is {least / 1e9:.{digits}g} GB")
        self.least, self.capacity = least, capacity


class NotBetter(Exception):
    """The search was given up: no solution that fits can cost less than
    the ``cutoff`` it was given (a plan found otherwise)."""


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
    """:func:`relax` on the plain problem (one cost and memory vector per
    operator): ``run(nodes)`` solves it for node cost vectors ``nodes``
    (same edges) and returns a :class:`SearchResult`."""
    return relax(Problem(node_costs, node_memory, edge_costs), capacity, lambda nodes, edges, groups: run(nodes),
                 max_searches=max_searches, rtol=rtol)


def relax(problem: Problem, capacity: float, solve, *, max_searches: int = 8, rtol: float = 1e-9,
          memo: dict | None = None, cutoff: float | None = None) -> Bounded:
    """The cheapest solution of ``problem`` (a :class:`search.options.Problem`)
    whose memory, a sum over operators, is at most ``capacity``, by
    Lagrangian relaxation on the same dynamic program.

    ``solve(nodes, edges, groups)`` solves the plain problem
    :meth:`~search.options.Problem.at` makes (``groups``: with its block
    variables) and returns a :class:`SearchResult`.  For a multiplier
    ``lam >= 0``, the minimum of ``cost + lam * (memory - capacity)`` is a
    lower bound on the constrained optimum (a solution that fits adds a
    non-positive term).  Starting from the unconstrained optimum (too large)
    and a solution that fits, each step takes the ``lam`` at which the two
    lines ``cost + lam * memory`` cross and solves there: a solution below
    both replaces the one on its side of the capacity; none means ``lam``
    maximises the bound.  The solution returned always fits (its
    :class:`SearchResult` carries it as ``choice``); it is ``"optimal"``
    when its cost meets the bound, else the bound says how far from optimal
    it can be.

    ``memo`` (multiplier -> solution) keeps the solves for a later call on
    the same problem at another capacity: each earlier solve's dual value
    bounds that capacity too, the one closest above it and the repaired ones
    start the crossing there, so that a call at a slightly smaller capacity
    takes a few solves more, not all again.

    ``cutoff``: :class:`NotBetter` as soon as the lower bound reaches it.
    """
    least = problem.least_memory
    if least > capacity:
        raise DoesNotFit(least, capacity)
    memo = {} if memo is None else memo
    searches = 0

    def at(lam):
        nonlocal searches
        if lam not in memo:
            groups = bool(problem.groups) and problem.groups_matter(lam)
            nodes, edges = problem.at(lam, groups)
            r = solve(nodes, edges, groups)
            s = problem.decode(r.index, lam, groups)
            memo[lam] = (r, s, problem.cost(s), problem.memory(s))
            searches += 1
        return memo[lam]

    def result(r, s, c):
        return SearchResult(c, list(s.index), r.elimination, 0.0, r.stats, choice=s)

    r0, s0, cost0, mem0 = at(0.0)
    if cutoff is not None and cost0 >= cutoff:
        raise NotBetter
    if mem0 <= capacity:
        return Bounded(result(r0, s0, cost0), cost0, mem0, cost0, "unconstrained optimum fits", 0.0, searches, least)
    # What fits to start from: the unconstrained optimum repaired by local
    # moves, else the solution of least memory (each operator its smallest,
    # ties by its own cost; every block at its most memory-saving value).
    start = repair(problem, s0, capacity)
    if start is None:
        start = _leanest(problem, capacity)
    if start is None:
        raise DoesNotFit(least, capacity)
    lo, hi = (r0, s0, cost0, mem0), (r0, start, problem.cost(start), problem.memory(start))
    best, bound, lam_best = hi, cost0, 0.0  # the unconstrained optimum bounds every solution from below
    lam_lo, lam_hi = 0.0, math.inf
    for lam, (r, s, c, m) in sorted(memo.items()):  # earlier solves, at another capacity
        if lam == 0.0:
            continue
        dual = c + lam * (m - capacity)
        if dual > bound:
            bound, lam_best = dual, lam
        if m > capacity and lam > lam_lo:  # the closest above the capacity
            lo, lam_lo = (r, s, c, m), lam
        elif m <= capacity and lam < lam_hi:  # the closest below it
            hi, lam_hi = (r, s, c, m), lam
        fixed = repair(problem, s, capacity) if m > capacity else s
        if fixed is not None and problem.cost(fixed) < best[2]:
            best = (r, fixed, problem.cost(fixed), problem.memory(fixed))
    steps = 0
    while steps < max_searches - 1 and searches < max_searches and best[2] > bound * (1 + rtol):
        steps += 1
        (_, _, c_lo, m_lo), (_, _, c_hi, m_hi) = lo, hi
        lam = crossing(c_lo, m_lo, c_hi, m_hi)
        if lam is None:
            break
        r, s, c, m = at(lam)
        dual = c + lam * (m - capacity)
        if dual > bound:
            bound, lam_best = dual, lam
        if cutoff is not None and bound >= cutoff:
            raise NotBetter
        fixed = repair(problem, s, capacity)
        if fixed is not None and problem.cost(fixed) < best[2]:
            best = (r, fixed, problem.cost(fixed), problem.memory(fixed))
        if none_below(c, m, lam, c_lo, m_lo):
            break
        if m > capacity:
            lo = (r, s, c, m)
        else:
            hi = (r, s, c, m)
    r, s, c, m = best
    if problem.groups and c > bound * (1 + rtol):  # blocks' values too, then operators again
        polished = polish(problem, s, capacity)
        c2 = problem.cost(polished)
        if c2 < c:
            s, c, m = polished, c2, problem.memory(polished)
    status = "optimal" if c <= bound * (1 + rtol) else "bound"
    return Bounded(result(r, s, c), c, m, min(bound, c), status, lam_best, searches, least)


def crossing(c_lo: float, m_lo: float, c_hi: float, m_hi: float) -> float | None:
    """The multiplier at which the lines ``cost + lam * memory`` of a
    solution above the capacity (``c_lo``, ``m_lo``) and one within it
    (``c_hi``, ``m_hi``) cross; ``None`` where they cross at no positive,
    finite one (the walk is over)."""
    if m_lo <= m_hi:
        return None
    lam = (c_hi - c_lo) / (m_lo - m_hi)
    return lam if lam > 0 and math.isfinite(lam) else None


def none_below(c: float, m: float, lam: float, c_lo: float, m_lo: float) -> bool:
    """Whether the solution (``c``, ``m``) found at the crossing ``lam`` lies
    below neither line (within rounding): ``lam`` maximises the bound."""
    return c + lam * m >= (c_lo + lam * m_lo) * (1 - 1e-12)


def _leanest(problem: Problem, capacity: float):
    """The solution of least memory (each operator its smallest, ties by its
    own cost, every block at the value that saves the most), repaired."""
    groups = []
    for g in problem.groups:
        saved = sum((m.min(axis=0) for _, _, m in g.members), np.zeros(g.n))
        groups.append(int(np.argmin(saved)))
    s = Choice(tuple(0 for _ in range(problem.n)), tuple(0 for _ in range(problem.n)), tuple(groups))
    costs, mems, _, widths = problem.flat(s)
    pos = [int(np.lexsort((c, m))[0]) for c, m in zip(costs, mems)]
    s = problem.unflat(pos, widths, s)
    return s if problem.memory(s) <= capacity else repair(problem, s, capacity)


def polish(problem: Problem, s: Choice, capacity: float, rounds: int = 4) -> Choice:
    """Lower the cost of ``s``, which fits, by moves of one block's value
    (:func:`block_moves`) and then of one operator's (:func:`repair`), in
    turn, while either gains."""
    for _ in range(rounds):
        moved = block_moves(problem, s, capacity)
        if moved is None:
            break
        fixed = repair(problem, moved, capacity)
        s = moved if fixed is None or problem.cost(fixed) > problem.cost(moved) else fixed
    return s


def block_moves(problem: Problem, s: Choice, capacity: float):
    """From ``s`` (which fits), moves of one block's value, the operators'
    choices kept: first those that lower the cost and free memory, then the
    one that lowers the cost the most per byte it adds, while the memory
    allows; ``None`` when no move lowers the cost."""
    values = list(s.groups)
    used = problem.memory(s)
    moved = False
    while True:
        best = None  # (score, group, value, memory added)
        for b, g in enumerate(problem.groups):
            j = values[b]
            dc = np.zeros(g.n)
            dm = np.zeros(g.n)
            for v, c, m in g.members:
                k = s.index[v]
                dc += c[k] - c[k, j]
                dm += m[k] - m[k, j]
            ok = (dc < 0) & (dm <= capacity - used)
            if not ok.any():
                continue
            with np.errstate(divide="ignore", invalid="ignore"):
                score = np.where(dm > 0, dc / np.where(dm > 0, dm, 1.0), -np.inf)  # cost per byte added
            score = np.where(ok, score, np.inf)
            k = int(np.lexsort((dc, score))[0])  # free moves first, the largest gain among them
            key = (score[k], dc[k])
            if best is None or key < best[0]:
                best = (key, b, k, float(dm[k]))
        if best is None:
            break
        _, b, k, dm = best
        values[b] = k
        used += dm
        moved = True
    if not moved:
        return None
    out = Choice(s.index, s.own, tuple(values))
    return out if problem.memory(out) <= capacity else None


def repair(problem: Problem, s: Choice, capacity: float, max_moves: int = 100000):
    """:func:`improve` on ``s`` with its blocks' values kept: moves of one
    operator's configuration and own options.  ``None`` when it cannot fit."""
    costs, mems, pos, widths = problem.flat(s)
    fixed = improve(costs, mems, problem.edge_costs, pos, capacity, max_moves, widths)
    return None if fixed is None else problem.unflat(fixed, widths, s)


def improve(node_costs, node_memory, edge_costs, index, capacity, max_moves: int = 100000, widths=None):
    """Local search from ``index``: while over ``capacity``, the move (one
    operator to another choice) that frees memory at the least cost per
    byte; then, while any, the move that lowers the cost most and stays
    within it.  Returns the strategy, or ``None`` when it cannot fit.

    With ``widths``, operator ``v``'s choices are its configurations times
    ``widths[v]`` values of its own options (``node_costs[v]`` flattened,
    configuration-major); the edges read the configuration,
    ``index[v] // widths[v]``.

    Each operator's best move is kept and worked out again only when its
    choices' costs change (a neighbour moved) or, in the second phase, when
    the memory left no longer allows it; before stopping, every operator's
    best move is worked out afresh."""
    n = len(node_costs)
    widths = [1] * n if widths is None else list(widths)
    index = list(index)
    nbrs = [[] for _ in range(n)]
    for (u, v), m in edge_costs.items():
        nbrs[u].append((v, m, False))  # v's configuration picks a column of m
        nbrs[v].append((u, m, True))  # u's picks a row
    mem = [np.asarray(m, dtype=float) for m in node_memory]
    cost = [None] * n  # each operator's cost for each of its choices, its neighbours fixed

    def local(v):
        out = np.zeros(len(node_costs[v]) // widths[v])
        for u, m, row in nbrs[v]:
            k = index[u] // widths[u]
            out += m[k, :] if row else m[:, k]
        cost[v] = np.asarray(node_costs[v], dtype=float) + np.repeat(out, widths[v])

    for v in range(n):
        local(v)
    used = math.fsum(float(mem[v][index[v]]) for v in range(n))
    best_s = np.full(n, np.inf)  # each operator's best move: its score and choice
    best_k = np.zeros(n, dtype=np.int64)

    def best(v, slack):
        d_cost = cost[v] - cost[v][index[v]]
        d_mem = mem[v] - mem[v][index[v]]
        with np.errstate(invalid="ignore", divide="ignore"):
            if slack is None:  # over the capacity: free memory at the least cost per byte
                score = np.where(d_mem < 0, d_cost / -d_mem, np.inf)
            else:  # lower the cost, staying within the capacity
                score = np.where((d_mem <= slack) & (d_cost < 0), d_cost, np.inf)
        k = int(np.argmin(score))
        best_s[v], best_k[v] = score[k], k

    def move(v, k):
        nonlocal used
        used += float(mem[v][k] - mem[v][index[v]])
        moved_config = k // widths[v] != index[v] // widths[v]
        index[v] = k
        touched = [v]
        if moved_config:
            for u, _, _ in nbrs[v]:
                local(u)
                touched.append(u)
        return touched

    moves = 0
    if used > capacity:
        for v in range(n):
            best(v, None)
        while used > capacity and moves < max_moves:
            v = int(np.argmin(best_s))
            if not np.isfinite(best_s[v]):
                return None
            for u in move(v, int(best_k[v])):
                best(u, None)
            moves += 1
    best_s[:] = np.inf  # the second phase's bests, worked out when first needed
    fresh = False
    while moves < max_moves:
        v = int(np.argmin(best_s))
        if not np.isfinite(best_s[v]):
            if fresh:  # every operator's best move was just worked out afresh: none is left
                break
            for u in range(n):
                best(u, capacity - used)
            fresh = True
            continue
        k = int(best_k[v])
        if float(mem[v][k] - mem[v][index[v]]) > capacity - used:  # no longer fits: work it out again
            best(v, capacity - used)
            continue
        for u in move(v, k):
            best(u, capacity - used)
        moves += 1
        fresh = False
    used = math.fsum(float(mem[v][index[v]]) for v in range(n))  # without the moves' rounding
    return index if used <= capacity else None
