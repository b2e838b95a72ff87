"""Exact minimum-cost strategy search: the PaSE dynamic program.

Implements section IV of "PaSE: Parallelization Strategies for Efficient DNN
Training" (Elango, IPDPS 2021).  A strategy picks one configuration per
operator; its cost is the sum of every operator's cost vector and every edge's
cost matrix at the chosen configurations.  The search treats the graph as
undirected and returns a strategy of minimum cost.

Vertices are processed in an order ``v1..vn``.  The *dependent set* ``D(i)``
of ``vi`` holds the later vertices its table is indexed by.  Processing ``vi``
adds, by numpy broadcasting over the axes ``(vi, D(i)...)``, its cost vector,
the edge matrices to later neighbours and the tables of the *connected
subsets* it joins (earlier tables whose first axis is ``vi``), then takes the
minimum over ``vi``: a (min, +) contraction.  The orders are

* ``generate_seq``: GENERATESEQ, which keeps dependent sets small (``--algo 0``);
* ``breadth_first``: breadth-first from vertex 0, whose dependent set is the
  whole frontier (``--algo 1``, the paper's baseline).

The arrays are taken as given: nothing here checks that they came from a
cost model, only that their shapes agree with each other.
"""

from __future__ import annotations

import math
import os
import time
from collections import deque
from dataclasses import dataclass, field

import numpy as np

from errors import SettingError

__all__ = [
    "ALGOS",
    "SearchTooLarge",
    "Plan",
    "SearchResult",
    "generate_seq",
    "breadth_first",
    "plan",
    "solve",
    "search",
    "default_memory_limit",
    "within_memory",
    "Bounded",
    "DoesNotFit",
]

ALGOS = {0: "GENERATESEQ", 1: "breadth-first"}
_CHUNK = 1 << 19  # entries per working block (4 MB): measured fastest here
_PARALLEL = 1 << 22  # contractions at least this large use every core
_BYTES = 8  # float64 tables


class SearchTooLarge(MemoryError):
    """The search's tables would not fit the memory limit."""


def _adjacency(n: int, edges) -> list[set[int]]:
    nbrs = [set() for _ in range(n)]
    for u, v in edges:
        if u != v:
            nbrs[u].add(v)
            nbrs[v].add(u)
    return nbrs


def generate_seq(n: int, edges) -> tuple[list[int], list[tuple[int, ...]]]:
    """GENERATESEQ: the order and each vertex's dependent set.

    Start with ``d(v) = neighbours(v)``; repeatedly take the undecided vertex
    with the smallest ``|d(u)|`` (ties: smallest id), record ``D = d(u)``, and
    for every ``w`` in ``D`` set ``d(w) = (d(w) | D) - {u, w}``.
    """
    d = _adjacency(n, edges)
    undecided = set(range(n))
    order, dependent = [], []
    for _ in range(n):
        u = min(undecided, key=lambda v: (len(d[v]), v))
        undecided.remove(u)
        D = d[u]
        order.append(u)
        dependent.append(tuple(sorted(D)))
        for w in D:
            d[w] = (d[w] | D) - {u, w}
    return order, dependent


def breadth_first(n: int, edges) -> tuple[list[int], list[tuple[int, ...]]]:
    """Breadth-first order from vertex 0 (neighbours by ascending id; a new
    root at the smallest unvisited id if the graph is disconnected), with the
    plain dependent set ``N(v1..vi) & {v(i+1)..vn}``: the frontier."""
    nbrs = _adjacency(n, edges)
    seen, order = [False] * n, []
    for root in range(n):
        if seen[root]:
            continue
        seen[root] = True
        queue = deque([root])
        while queue:
            u = queue.popleft()
            order.append(u)
            for w in sorted(nbrs[u]):
                if not seen[w]:
                    seen[w] = True
                    queue.append(w)
    done, frontier, dependent = set(), set(), []
    for u in order:
        done.add(u)
        frontier = (frontier | nbrs[u]) - done
        dependent.append(tuple(sorted(frontier)))
    return order, dependent


@dataclass(frozen=True)
class Plan:
    """What the dynamic program will compute, before any table exists.

    ``scope[v]``: the axes of ``v``'s table (its dependent set), sorted by
    position in ``order``; ``bucket[v]``: the factors ``v`` absorbs, each
    ``("node", v)``, ``("edge", (a, b))`` or ``("table", u)``.
    """

    order: tuple[int, ...]
    scope: dict
    bucket: dict
    sizes: tuple[int, ...]  # K per vertex

    def table_entries(self, v: int) -> int:
        return math.prod(self.sizes[w] for w in self.scope[v])

    @property
    def largest_table(self) -> int:
        return max(self.table_entries(v) for v in self.order)

    @property
    def largest_dependent_set(self) -> int:
        return max(len(s) for s in self.scope.values())

    @property
    def work(self) -> int:
        """Table entries evaluated: sum over vertices of K_v * |table|."""
        return sum(self.sizes[v] * self.table_entries(v) for v in self.order)

    @property
    def table_bytes(self) -> int:
        """Memory of all tables, kept for the back-substitution."""
        return _BYTES * sum(self.table_entries(v) for v in self.order)

    def peak_bytes(self, threads: int = 1) -> int:
        """Estimated peak memory of :func:`solve` beyond the cost arrays: all
        tables, plus per thread a block of rows and a partial table, plus the
        copies made when small factors are merged."""
        work = max(
            min(self.sizes[v] * self.table_entries(v), max(_CHUNK, self.table_entries(v)))
            for v in self.order
        )
        return self.table_bytes + (2 * threads + 2) * _BYTES * work


def plan(order, sizes, edges) -> Plan:
    """Assign every factor to the bucket of its earliest vertex in ``order``
    and derive each table's scope (bucket elimination)."""
    n = len(sizes)
    if sorted(order) != list(range(n)):
        raise ValueError("the order must be a permutation of the vertices")
    pos = {v: i for i, v in enumerate(order)}
    bucket = {v: [("node", v)] for v in order}
    fscope = {}
    for a, b in edges:
        first = a if pos[a] < pos[b] else b
        bucket[first].append(("edge", (a, b)))
        fscope[("edge", (a, b))] = {a, b}
    scope = {}
    for v in order:
        s = set()
        for f in bucket[v]:
            s |= fscope.get(f, {v})
        s.discard(v)
        scope[v] = tuple(sorted(s, key=pos.__getitem__))
        if scope[v]:
            bucket[scope[v][0]].append(("table", v))
            fscope[("table", v)] = set(scope[v])
    return Plan(tuple(order), scope, {v: tuple(b) for v, b in bucket.items()}, tuple(sizes))


def _cores() -> int:
    try:
        return len(os.sched_getaffinity(0))
    except AttributeError:
        return os.cpu_count() or 1


def default_memory_limit() -> int:
    """Half of the memory the machine has available now (bytes)."""
    try:
        with open("/proc/meminfo") as f:
            for line in f:
                if line.startswith("MemAvailable:"):
                    return int(line.split()[1]) * 1024 // 2
    except OSError:
        pass
    try:
        return os.sysconf("SC_AVPHYS_PAGES") * os.sysconf("SC_PAGE_SIZE") // 2
    except (ValueError, OSError, AttributeError):
        return 4 << 30


def _gb(nbytes: float) -> str:
    return f"{nbytes / 1e9:.3g} GB"


def check_fits(pl: Plan, limit: int, names=None, threads: int = 1) -> None:
    """Raise :class:`SearchTooLarge` when ``pl`` needs more than ``limit`` bytes."""
    need = pl.peak_bytes(threads)
    if need <= limit:
        return
    v = max(pl.order, key=pl.table_entries)
    name = f" ({names[v]})" if names else ""
    dep = ", ".join(map(str, sorted(pl.scope[v])))
    entries = pl.table_entries(v)
    raise SearchTooLarge(
        f"the search needs {_gb(need)} but the limit is {_gb(limit)}: operator {v}{name} has "
        f"{len(pl.scope[v])} dependent operators {{{dep}}} and a table of {entries:.3g} entries "
        f"({_gb(entries * _BYTES)})"
    )


@dataclass
class SearchResult:
    """The optimum: ``index[v]`` is the position of node ``v``'s configuration."""

    cost: float
    index: list[int]
    plan: Plan
    seconds: float
    stats: dict = field(default_factory=dict)
    strategy: list = field(default_factory=list)  # configurations, filled by search()


def _factor(kind_arg, pos, node_costs, edge_costs, tables, scope):
    """A factor as (array, scope), its axes sorted by position."""
    kind, arg = kind_arg
    if kind == "node":
        return node_costs[arg], (arg,)
    if kind == "edge":
        a, b = arg
        m = edge_costs[arg]
        return (m, (a, b)) if pos[a] < pos[b] else (m.T, (b, a))
    return tables[arg], scope[arg]


def _premerge(fs, full_size):
    """Add together, once and outside the block loop, factors whose axes are
    a subset of a smaller-than-full factor's (a vertex's own costs, two edges
    to the same neighbour); return the rest smallest first, the order in
    which the block loop and the back-substitution add them."""
    fs = sorted(fs, key=lambda a: a.size)
    merged = []
    while fs:
        a = fs.pop(0)
        for j, h in enumerate(fs):
            if h.size < full_size and np.broadcast_shapes(a.shape, h.shape) == h.shape:
                fs[j] = h + a
                break
        else:
            merged.append(a)
    return sorted(merged, key=lambda a: a.size)


def _contract(fs, shape, threads=1):
    """``min`` over axis 0 of the broadcast sum of ``fs`` (each a factor
    reshaped to broadcast against ``shape``), in blocks of rows so that the
    working memory stays about one output table or ``_CHUNK`` entries per
    thread.  Large contractions split their rows among ``threads`` (numpy
    releases the GIL inside its loops)."""
    if threads > 1 and math.prod(shape) >= _PARALLEL and shape[0] >= threads:
        from concurrent.futures import ThreadPoolExecutor

        cuts = [shape[0] * t // threads for t in range(threads + 1)]
        with ThreadPoolExecutor(threads) as pool:
            parts = list(pool.map(lambda t: _contract_rows(fs, shape, cuts[t], cuts[t + 1]), range(threads)))
        best = parts[0]
        for part in parts[1:]:
            np.minimum(best, part, out=best)
        return best
    return _contract_rows(fs, shape, 0, shape[0])


def _contract_rows(fs, shape, start, stop):
    """:func:`_contract` over rows ``start:stop`` of axis 0."""
    out_shape = shape[1:]
    rows = max(1, _CHUNK // max(math.prod(out_shape), 1))
    buf = np.empty((min(rows, stop - start),) + out_shape)
    best = np.full(out_shape, np.inf)
    for i in range(start, stop, rows):
        j = min(i + rows, stop)
        block = buf[: j - i]
        acc, into_block = fs[0][i:j], False
        for a in fs[1:]:
            x = a[i:j]
            if into_block:
                np.add(acc, x, out=acc)
            elif np.broadcast_shapes(acc.shape, x.shape) == block.shape:
                acc, into_block = np.add(acc, x, out=block), True
            else:
                acc = acc + x
        if len(block) == 1:
            np.minimum(best, acc[0], out=best)
        else:
            np.minimum(best, np.minimum.reduce(np.broadcast_to(acc, block.shape), axis=0), out=best)
    return best


def solve(node_costs, edge_costs, order, *, memory_limit: int | None = None, names=None,
          progress=None, threads: int | None = None) -> SearchResult:
    """Run the dynamic program over ``order``.

    ``node_costs[v]``: (K_v,) array; ``edge_costs[(u, v)]``: (K_u, K_v).
    Raises :class:`SearchTooLarge` before allocating anything when the plan's
    tables exceed ``memory_limit`` bytes (default: :func:`default_memory_limit`).
    ``progress(done, total)`` is called after each vertex.
    """
    t0 = time.perf_counter()
    threads = _cores() if threads is None else threads
    sizes = [len(c) for c in node_costs]
    for (u, v), m in edge_costs.items():
        if m.shape != (sizes[u], sizes[v]):
            raise ValueError(f"edge ({u}, {v}) has shape {m.shape}, expected ({sizes[u]}, {sizes[v]})")
    pl = plan(order, sizes, list(edge_costs))
    check_fits(pl, default_memory_limit() if memory_limit is None else memory_limit, names, threads)
    pos = {v: i for i, v in enumerate(pl.order)}

    tables, factors, total = {}, {}, 0.0
    for step, v in enumerate(pl.order):
        out = pl.scope[v]
        full = (v,) + out
        shape = tuple(sizes[w] for w in full)
        fs = []
        for f in pl.bucket[v]:
            a, s = _factor(f, pos, node_costs, edge_costs, tables, pl.scope)
            fs.append(a.reshape([sizes[w] if w in s else 1 for w in full]))
        fs = _premerge(fs, math.prod(shape))
        factors[v] = fs
        tables[v] = _contract(fs, shape, threads)
        if not out:
            total += float(tables[v])
        if progress is not None:
            progress(step + 1, len(pl.order))

    # Back-substitution: latest first, each vertex's dependent set is decided.
    index = [0] * len(sizes)
    for v in reversed(pl.order):
        full = (v,) + pl.scope[v]
        acc = None
        for a in factors[v]:  # the forward pass's order, so the sums agree bit for bit
            at = (slice(None),) + tuple(index[w] if k > 1 else 0 for w, k in zip(full[1:], a.shape[1:]))
            acc = a[at] if acc is None else acc + a[at]
        index[v] = int(np.argmin(np.broadcast_to(acc, (sizes[v],))))
    seconds = time.perf_counter() - t0
    stats = {
        "K": max(sizes),
        "M": pl.largest_dependent_set,
        "largest_table": pl.largest_table,
        "work": pl.work,
        "table_bytes": pl.table_bytes,
    }
    return SearchResult(total, index, pl, seconds, stats)


def search(costed, algo: int = 0, *, memory_limit: int | None = None, progress=None,
           threads: int | None = None) -> SearchResult:
    """Optimal strategy of a :class:`cost_model.CostedGraph`.

    ``algo`` 0 uses GENERATESEQ, 1 the breadth-first order.  The returned
    ``cost`` is the DP's optimum, ``strategy`` one configuration per node;
    ``costed.cost_at(result.index)`` re-evaluates it.
    """
    if algo not in ALGOS:
        raise SettingError("algo", f"must be one of {sorted(ALGOS)}, got {algo!r}")
    edges = list(costed.edge_costs)
    order, _ = (generate_seq if algo == 0 else breadth_first)(costed.n, edges)
    g = costed.graph
    names = [g.nodes[v]["op"].name for v in range(costed.n)]
    result = solve(costed.node_costs, costed.edge_costs, order, memory_limit=memory_limit,
                   names=names, progress=progress, threads=threads)
    result.strategy = [tuple(int(c) for c in costed.configs[v][i]) for v, i in enumerate(result.index)]
    return result


# -- within the device memory ---------------------------------------------------------


class DoesNotFit(MemoryError):
    """No strategy fits the device memory."""

    def __init__(self, least: float, capacity: float):
        super().__init__(f"no strategy fits in {capacity / 1e9:.4g} GB per device: the smallest any strategy "
                         f"of this graph needs at this p is {least / 1e9:.4g} GB")
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


def _total(node_costs, edge_costs, index) -> float:
    return math.fsum(float(c[i]) for c, i in zip(node_costs, index)) + math.fsum(
        float(m[index[u], index[v]]) for (u, v), m in edge_costs.items())


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
        return r, _total(node_costs, edge_costs, r.index), memory_of(r.index)

    r0, cost0, mem0 = at(0.0)
    searches = 1
    if mem0 <= capacity:
        return Bounded(r0, cost0, mem0, cost0, "unconstrained optimum fits", 0.0, searches, least)
    # What fits to start from: the unconstrained optimum repaired by local
    # moves, else the strategy of least memory (each operator its smallest,
    # ties by its own cost).
    index = _improve(node_costs, node_memory, edge_costs, list(r0.index), capacity)
    if index is None:
        index = [int(np.lexsort((c, m))[0]) for c, m in zip(node_costs, node_memory)]
    start = SearchResult(_total(node_costs, edge_costs, index), index, r0.plan, 0.0, dict(r0.stats))
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
        fixed = _improve(node_costs, node_memory, edge_costs, list(r.index), capacity)
        if fixed is not None and _total(node_costs, edge_costs, fixed) < best[1]:
            c_fixed = _total(node_costs, edge_costs, fixed)
            best = (SearchResult(c_fixed, fixed, r.plan, 0.0, dict(r.stats)), c_fixed, memory_of(fixed))
        if c + lam * m >= (c_lo + lam * m_lo) * (1 - 1e-12):  # nothing below both lines: lam is optimal
            break
        if m > capacity:
            lo = (r, c, m)
        else:
            hi = (r, c, m)
    r, c, m = best
    status = "optimal" if c <= bound * (1 + rtol) else "bound"
    return Bounded(r, c, m, min(bound, c), status, lam_best, searches, least)


def _improve(node_costs, node_memory, edge_costs, index, capacity, max_moves: int = 100000):
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
    return index if used <= capacity * (1 + 1e-12) else None


def search_within(costed, capacity: float, algo: int = 0, *, memory_limit: int | None = None, progress=None,
                  threads: int | None = None) -> Bounded:
    """:func:`within_memory` for a :class:`cost_model.CostedGraph`: the
    cheapest strategy whose per-device memory (``costed.memory``, bytes) is
    at most ``capacity`` bytes, with the search order of ``algo``."""
    if algo not in ALGOS:
        raise SettingError("algo", f"must be one of {sorted(ALGOS)}, got {algo!r}")
    edges = list(costed.edge_costs)
    order, _ = (generate_seq if algo == 0 else breadth_first)(costed.n, edges)
    g = costed.graph
    names = [g.nodes[v]["op"].name for v in range(costed.n)]

    def run(nodes):
        return solve(nodes, costed.edge_costs, order, memory_limit=memory_limit, names=names, progress=progress,
                     threads=threads)

    t0 = time.perf_counter()
    b = within_memory(costed.node_costs, costed.memory, costed.edge_costs, capacity, run)
    b.result.seconds = time.perf_counter() - t0
    b.result.cost = b.cost
    b.result.strategy = [tuple(int(c) for c in costed.configs[v][i]) for v, i in enumerate(b.result.index)]
    return b
