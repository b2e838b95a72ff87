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

Before the dynamic program, :func:`search.prune.prune` drops the
configurations that dominance proves unnecessary, and operators left with
one configuration are folded into their neighbours' cost vectors; the
result still indexes the unpruned arrays.  The contractions run in
:mod:`search.contract` (numpy, or a compiled kernel for large searches).
Every array the search allocates is estimated first and checked against a
memory limit.

The arrays are taken as given: nothing here checks that they came from a
cost model, only that their shapes agree with each other.
"""

from __future__ import annotations

import math
import os
import time
from collections import deque
from dataclasses import dataclass, field, replace

import numpy as np

from errors import SettingError
from result import SearchStats, total
from search.contract import (
    CHUNK,
    FUSED_ROWS,
    PARALLEL,
    Workers,
    contract,
    fused_available,
    prepare,
    row_at,
    separable_axis,
)
from search.prune import prune as prune_configurations
from search.prune import working_bytes

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
    "worth_pruning",
    "check_fits",
    "default_memory_limit",
    "within_memory",
    "Bounded",
    "DoesNotFit",
]

ALGOS = {0: "GENERATESEQ", 1: "breadth-first"}
KERNELS = ("auto", "numpy", "fused")
FUSED_WORK = 10**9  # searches evaluating this many table entries load the fused kernel
_FUSED_STEP = 1 << 22  # and use it for the separable steps at least this large
FUSED_BYTES = 150 * 10**6  # numba, its compiler and the kernel in memory, counted in the limit
MAX_AXES = 32  # numpy broadcasts at most 32 axes: a table has at most 31
PRUNE_WORTH = 1 << 22  # table entries an operator must take part in to be worth pruning
PRUNE_MIN_WORK = 10**8  # and the search must evaluate at least this many
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

    ``order``: the vertices processed, in order; ``scope[v]``: the axes of
    ``v``'s table (its dependent set), sorted by position in ``order``;
    ``bucket[v]``: the factors ``v`` absorbs, each ``("node", v)``,
    ``("edge", (a, b))`` or ``("table", u)``; ``sizes``: K per vertex.
    """

    order: tuple[int, ...]
    scope: dict
    bucket: dict
    sizes: tuple[int, ...]

    def table_entries(self, v: int) -> int:
        return math.prod(self.sizes[w] for w in self.scope[v])

    @property
    def largest_table(self) -> int:
        return max((self.table_entries(v) for v in self.order), default=1)

    @property
    def largest_dependent_set(self) -> int:
        return max((len(s) for s in self.scope.values()), default=0)

    @property
    def work(self) -> int:
        """Table entries evaluated: sum over vertices of K_v * |table|."""
        return sum(self.sizes[v] * self.table_entries(v) for v in self.order)

    @property
    def table_bytes(self) -> int:
        """Memory of all tables, kept for the back-substitution."""
        return _BYTES * sum(self.table_entries(v) for v in self.order)

    def factor_scopes(self, v: int) -> list[set]:
        """The operators each factor in ``v``'s bucket spans."""
        return [{v} if kind == "node" else set(arg) if kind == "edge" else set(self.scope[arg])
                for kind, arg in self.bucket[v]]

    def separable(self, v: int) -> int | None:
        """The axis of ``v``'s table (1..m) whose factors span only ``v``
        and it, as :func:`search.contract.prepare` will pick it, or ``None``."""
        scope = self.scope[v]
        has = [tuple(w in f for w in scope) for f in self.factor_scopes(v)]
        return separable_axis(has, [self.sizes[w] for w in scope])

    def peak_bytes(self, threads: int = 1, fused: bool = False) -> int:
        """Estimated peak memory of the dynamic program beyond its input
        arrays: all tables (kept for the back-substitution) plus the largest
        step's working memory: the merged factors, and per thread a block
        of rows and a partial table (numpy), or the blocks of rows, the
        table before its axes are put in order and the matrix of the
        separable axis (``fused``: the compiled kernel runs the large
        separable steps)."""
        step = 0
        for v in self.order:
            t = self.table_entries(v)
            work = self.sizes[v] * t
            merged = sum(n for n in (math.prod(self.sizes[w] for w in f) for f in self.factor_scopes(v)) if n < work)
            k = self.separable(v) if fused and work >= _FUSED_STEP else None
            if k is not None:
                way = t + 3 * self.sizes[v] * self.sizes[self.scope[v][k - 1]] + threads * FUSED_ROWS
            else:
                busy = threads if work >= PARALLEL else 1
                way = busy * (min(work, max(CHUNK, t)) + 2 * t)
            step = max(step, merged + way)
        return self.table_bytes + _BYTES * step


def _plan(order, sizes, edges) -> Plan:
    """Bucket elimination over ``order`` (any vertices; ``edges`` among them)."""
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


def plan(order, sizes, edges) -> Plan:
    """Assign every factor to the bucket of its earliest vertex in ``order``
    and derive each table's scope (bucket elimination)."""
    if sorted(order) != list(range(len(sizes))):
        raise ValueError("the order must be a permutation of the vertices")
    return _plan(order, sizes, edges)


def cores() -> int:
    """The cores this process may run on."""
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


def check_fits(pl: Plan, limit: int, names=None, threads: int = 1, held: int = 0, fused: bool = False) -> None:
    """Raise :class:`SearchTooLarge` when ``pl``'s tables have more axes
    than numpy handles, or when they and the ``held`` bytes already in use
    need more than ``limit`` bytes."""
    def named(v):
        return f"operator {v}" + (f" ({names[v]})" if names else "")

    need = held + pl.peak_bytes(threads, fused)
    if need > limit:
        v = max(pl.order, key=pl.table_entries)
        dep = ", ".join(map(str, sorted(pl.scope[v])))
        entries = pl.table_entries(v)
        raise SearchTooLarge(
            f"the search needs {_gb(need)} but the limit is {_gb(limit)}: {named(v)} has "
            f"{len(pl.scope[v])} dependent operators {{{dep}}} and a table of {entries:.3g} entries "
            f"({_gb(entries * _BYTES)})"
        )
    wide = [v for v in pl.order if 1 + len(pl.scope[v]) > MAX_AXES]
    if wide:
        v = max(wide, key=lambda w: len(pl.scope[w]))
        raise SearchTooLarge(
            f"{named(v)} has {len(pl.scope[v])} dependent operators; the search handles at most "
            f"{MAX_AXES - 1} (its table would have {pl.table_entries(v):.3g} entries)"
        )


@dataclass
class SearchResult:
    """The optimum: ``index[v]`` is the position of node ``v``'s configuration
    in its (unpruned) cost arrays; ``kept[v]`` the configurations the
    pruning left; ``plan`` the dynamic program that ran (over the operators
    with more than one configuration left, with their pruned sizes)."""

    cost: float
    index: list[int]
    plan: Plan
    seconds: float
    stats: SearchStats
    kept: list = field(default_factory=list, repr=False)
    strategy: list = field(default_factory=list)  # decisions (config_space.Decision), filled by search()


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


def _copies(edge_costs, kept) -> dict:
    """The pruned edge matrices to make: key -> (edge, entries).  Edges
    between two operators left with one configuration need none, nor do
    edges whose two ends kept everything (used as they are), and identical
    layers with identical kept configurations share one copy."""
    out = {}
    for (u, v), m in edge_costs.items():
        ku, kv = kept[u], kept[v]
        if len(ku) > 1 and len(kv) > 1 and (len(ku), len(kv)) != m.shape:
            out.setdefault((id(m), ku.tobytes(), kv.tobytes()), ((u, v), len(ku) * len(kv)))
    return out


def _reduce(node_costs, edge_costs, kept, copies):
    """The problem over the kept configurations, with every operator left
    with one configuration folded into its neighbours' cost vectors.
    Returns (constant cost, {v: costs}, {(u, v): matrix}) over the others."""
    fixed = {v: int(k[0]) for v, k in enumerate(kept) if len(k) == 1}
    constant = 0.0
    nodes = {}
    for v, k in enumerate(kept):
        if v in fixed:
            constant += float(node_costs[v][fixed[v]])
        else:
            nodes[v] = np.asarray(node_costs[v], dtype=np.float64)[k]
    edges, made = {}, {}
    for (u, v), m in edge_costs.items():
        if u in fixed and v in fixed:
            constant += float(m[fixed[u], fixed[v]])
        elif u in fixed:
            nodes[v] = nodes[v] + m[fixed[u], kept[v]]
        elif v in fixed:
            nodes[u] = nodes[u] + m[kept[u], fixed[v]]
        else:
            key = (id(m), kept[u].tobytes(), kept[v].tobytes())
            if key not in copies:
                edges[(u, v)] = np.asarray(m, dtype=np.float64)
            else:
                if key not in made:
                    made[key] = np.ascontiguousarray(m[np.ix_(kept[u], kept[v])], dtype=np.float64)
                edges[(u, v)] = made[key]
    return constant, nodes, edges


def worth_pruning(pl: Plan) -> list[int]:
    """The operators whose configurations take part in at least
    :data:`PRUNE_WORTH` table entries of ``pl`` (unpruned): examining one
    costs about a millisecond, so the others cannot repay it.  None when
    the whole search evaluates fewer than :data:`PRUNE_MIN_WORK` entries
    (a tenth of a second): then pruning could save little more than it
    costs."""
    if pl.work < PRUNE_MIN_WORK:
        return []
    share = [0] * len(pl.sizes)
    for v in pl.order:
        work = pl.sizes[v] * pl.table_entries(v)
        for w in (v,) + pl.scope[v]:
            share[w] += work
    return [v for v, s in enumerate(share) if s >= PRUNE_WORTH]


def solve(node_costs, edge_costs, order, *, prune: bool | str = "auto", memory_limit: int | None = None, names=None,
          progress=None, threads: int | None = None, kernel: str = "auto", held_bytes: int = 0) -> SearchResult:
    """Run the dynamic program over ``order``, after dominance pruning.

    ``node_costs[v]``: (K_v,) array; ``edge_costs[(u, v)]``: (K_u, K_v).
    ``prune`` first drops the configurations :func:`search.prune.prune`
    proves unnecessary (the optimum is unchanged): ``True`` examines every
    operator, ``"auto"`` those worth it (:func:`worth_pruning`), ``False``
    none.  Operators left with one configuration are folded into their
    neighbours.  The result's ``index`` refers to the arrays as given.

    Raises :class:`SearchTooLarge` before allocating the tables when they,
    the pruned arrays and ``held_bytes`` (memory the caller already holds,
    e.g. the cost arrays) exceed ``memory_limit`` bytes (default:
    :func:`default_memory_limit`), or when a table would have more axes
    than numpy allows.  ``kernel``: ``"auto"`` (the fused kernel for
    searches of at least :data:`FUSED_WORK` entries when numba is
    installed), ``"numpy"`` or ``"fused"``.  ``progress(done, total)`` is
    called after each vertex.
    """
    t0 = time.perf_counter()
    threads = cores() if threads is None else threads
    if kernel not in KERNELS:
        raise SettingError("kernel", f"must be one of {', '.join(KERNELS)}, got {kernel!r}")
    sizes0 = [len(c) for c in node_costs]
    for v, k in enumerate(sizes0):
        if k == 0:
            raise ValueError(f"node {v} has no configurations")
    for (u, v), m in edge_costs.items():
        if m.shape != (sizes0[u], sizes0[v]):
            raise ValueError(f"edge ({u}, {v}) has shape {m.shape}, expected ({sizes0[u]}, {sizes0[v]})")
    edges0 = list(edge_costs)
    unpruned = plan(order, sizes0, edges0)
    limit = default_memory_limit() if memory_limit is None else memory_limit
    if prune not in (True, False, "auto"):
        raise SettingError("prune", f"must be true, false or 'auto', got {prune!r}")
    examine = worth_pruning(unpruned) if prune == "auto" else range(len(sizes0)) if prune else []
    if examine:
        need = held_bytes + working_bytes(sizes0, edges0)
        if need > limit:
            raise SearchTooLarge(f"pruning the configurations needs {_gb(need)} but the limit is {_gb(limit)}")
        kept = prune_configurations(node_costs, edge_costs, nodes=examine)
    else:
        kept = [np.arange(k) for k in sizes0]
    prune_seconds = time.perf_counter() - t0
    sizes = [len(k) for k in kept]
    free = [v for v in unpruned.order if sizes[v] > 1]
    free_edges = [(u, v) for u, v in edges0 if sizes[u] > 1 and sizes[v] > 1]
    pl = unpruned if len(free) == len(sizes) and not examine else _plan(free, sizes, free_edges)
    fused = kernel == "fused" or (kernel == "auto" and pl.work >= FUSED_WORK and fused_available())
    copies = _copies(edge_costs, kept)
    pruned_bytes = _BYTES * (sum(sizes[v] for v in free) + sum(n for _, n in copies.values()))
    check_fits(pl, limit, names, threads, held_bytes + pruned_bytes + (FUSED_BYTES if fused else 0), fused)
    constant, nodes, edges = _reduce(node_costs, edge_costs, kept, copies)

    pos = {v: i for i, v in enumerate(pl.order)}
    tables, steps, total, used_fused = {}, {}, constant, False
    pool = Workers(threads) if threads > 1 else None
    try:
        for n_done, v in enumerate(pl.order):
            full = (v,) + pl.scope[v]
            shape = tuple(sizes[w] for w in full)
            fs = []
            for f in pl.bucket[v]:
                a, s = _factor(f, pos, nodes, edges, tables, pl.scope)
                fs.append(a.reshape([sizes[w] if w in s else 1 for w in full]))
            step = steps[v] = prepare(fs, shape)
            use = fused and step.inner is not None and (kernel == "fused" or step.work >= _FUSED_STEP)
            used_fused |= use
            tables[v] = contract(step, threads=threads, pool=pool, fused=use)
            step.release()
            if not pl.scope[v]:
                total += float(tables[v])
            if progress is not None:
                progress(n_done + 1, len(pl.order))
    finally:
        if pool is not None:
            pool.close()

    # Back-substitution: latest first, each vertex's dependent set is decided.
    local = [0] * len(sizes)
    for v in reversed(pl.order):
        row = row_at(steps[v], [local[w] for w in pl.scope[v]])
        local[v] = int(np.argmin(row))
    index = [int(k[local[v]]) for v, k in enumerate(kept)]
    seconds = time.perf_counter() - t0
    stats = SearchStats(
        algo=None, order="given", seconds=seconds, largest_K=max(sizes0, default=0),
        largest_dependent_set=pl.largest_dependent_set, largest_table=pl.largest_table, work=pl.work,
        largest_K_pruned=max(sizes, default=0), configurations=sum(sizes0), configurations_kept=sum(sizes),
        work_unpruned=unpruned.work, prune_seconds=prune_seconds if examine else 0.0,
        kernel="fused" if used_fused else "numpy", pruned=bool(examine),
    )
    return SearchResult(total, index, pl, seconds, stats, kept)


def _solver(costed, algo: int, **options):
    """A function solving ``costed``'s edges for any node cost vectors, in
    the order of ``algo`` (the options are :func:`solve`'s)."""
    if algo not in ALGOS:
        raise SettingError("algo", f"must be one of {sorted(ALGOS)}, got {algo!r}")
    order, _ = (generate_seq if algo == 0 else breadth_first)(costed.n, list(costed.edge_costs))
    g = costed.graph
    names = [g.nodes[v]["op"].name for v in range(costed.n)]

    def run(node_costs):
        return solve(node_costs, costed.edge_costs, order, names=names, held_bytes=costed.nbytes, **options)

    return run


def _named(result: SearchResult, costed, algo: int, **stats) -> SearchResult:
    """``result`` with its order in the statistics and its configurations."""
    result.stats = replace(result.stats, algo=algo, order=ALGOS[algo], **stats)
    result.strategy = costed.decisions(result.index)
    return result


def search(costed, algo: int = 0, *, prune: bool | str = "auto", memory_limit: int | None = None, progress=None,
           threads: int | None = None, kernel: str = "auto") -> SearchResult:
    """Optimal strategy of a :class:`cost_model.CostedGraph`.

    ``algo`` 0 uses GENERATESEQ, 1 the breadth-first order; ``prune``
    applies dominance pruning first, as in :func:`solve` (the optimum is
    the same).  The returned ``cost`` is the DP's optimum, ``strategy`` one
    configuration per node; ``costed.cost_at(result.index)`` re-evaluates
    it.  The memory limit covers the cost arrays ``costed`` holds too.
    """
    run = _solver(costed, algo, prune=prune, memory_limit=memory_limit, progress=progress, threads=threads,
                  kernel=kernel)
    return _named(run(costed.node_costs), costed, algo)


# -- within the device memory ---------------------------------------------------------


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


def _total(node_costs, edge_costs, index) -> float:
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
    start = SearchResult(_total(node_costs, edge_costs, index), index, r0.plan, 0.0, r0.stats)
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
            best = (SearchResult(c_fixed, fixed, r.plan, 0.0, r.stats), c_fixed, memory_of(fixed))
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
    used = math.fsum(float(node_memory[v][index[v]]) for v in range(n))  # without the moves' rounding
    return index if used <= capacity else None


def search_within(costed, capacity: float, algo: int = 0, *, prune: bool | str = "auto",
                  memory_limit: int | None = None, progress=None, threads: int | None = None,
                  kernel: str = "auto") -> Bounded:
    """:func:`within_memory` for a :class:`cost_model.CostedGraph`: the
    cheapest strategy whose per-device memory (``costed.memory``, bytes) is
    at most ``capacity`` bytes, with the search order of ``algo``; each
    search of the relaxation prunes its own node costs."""
    run = _solver(costed, algo, prune=prune, memory_limit=memory_limit, progress=progress, threads=threads,
                  kernel=kernel)
    t0 = time.perf_counter()
    b = within_memory(costed.node_costs, costed.memory, costed.edge_costs, capacity, run)
    b.result.seconds = time.perf_counter() - t0
    b.result.cost = b.cost
    _named(b.result, costed, algo, seconds=b.result.seconds)
    return b
