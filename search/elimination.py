"""The dynamic program over an elimination order: bucket elimination.

Bucket elimination (Dechter, "Bucket elimination: A unifying framework for
reasoning", Artificial Intelligence 113, 1999) on the PaSE cost function: a
strategy's cost is a sum of factors (each operator's cost vector, each
edge's cost matrix); in an order ``v1..vn`` every factor goes to the bucket
of its earliest operator, and processing ``vi`` adds its bucket's factors
(and the tables of earlier buckets that name it) over the axes ``(vi,
D(i)...)`` and takes the minimum over ``vi``: a (min, +) contraction whose
result is ``vi``'s table over its dependent set ``D(i)`` (the PaSE paper's
connected subsets are exactly the earlier tables a bucket receives).  The
last table is the optimum; walking back through the arg-minima recovers
the strategy.

:func:`elimination` works out every table's axes before any exists (an
:class:`Elimination`), so that the memory is known first (:func:`check_fits`);
:func:`solve` prunes dominated configurations (:mod:`search.prune`), folds
operators left with one configuration into their neighbours, and runs the
contractions (:mod:`search.contract`).  Everything here reads plain arrays.
"""

from __future__ import annotations

import math
import os
import time
from dataclasses import dataclass, field

import numpy as np

from errors import SettingError
from result import SearchStats
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

__all__ = ["SearchTooLarge", "Elimination", "elimination", "SearchResult", "solve", "worth_pruning", "check_fits",
           "cores", "default_memory_limit", "KERNELS"]

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


@dataclass(frozen=True)
class Elimination:
    """The tables the dynamic program will compute, before any exists.

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


def _elimination(order, sizes, edges) -> Elimination:
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
    return Elimination(tuple(order), scope, {v: tuple(b) for v, b in bucket.items()}, tuple(sizes))


def elimination(order, sizes, edges) -> Elimination:
    """Assign every factor to the bucket of its earliest vertex in ``order``
    and derive each table's scope (bucket elimination)."""
    if sorted(order) != list(range(len(sizes))):
        raise ValueError("the order must be a permutation of the vertices")
    return _elimination(order, sizes, edges)


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


def check_fits(pl: Elimination, limit: int, names=None, threads: int = 1, held: int = 0, fused: bool = False) -> None:
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
    pruning left; ``elimination`` the dynamic program that ran (over the operators
    with more than one configuration left, with their pruned sizes)."""

    cost: float
    index: list[int]
    elimination: Elimination
    seconds: float
    stats: SearchStats
    kept: list = field(default_factory=list, repr=False)
    strategy: list = field(default_factory=list)  # decisions (config_space.Decision), filled by search()
    choice: object = None  # with execution options: the search.options.Choice it stands for
    choices: dict | None = None  # and per operator the position of each searched option's value


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


def worth_pruning(pl: Elimination) -> list[int]:
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
    unpruned = elimination(order, sizes0, edges0)
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
    pl = unpruned if len(free) == len(sizes) and not examine else _elimination(free, sizes, free_edges)
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
