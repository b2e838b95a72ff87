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
:class:`Elimination`), so that the memory is known first (:func:`check_fits`;
an upper bound: tables kept merged can take less, and are then counted as
they come);
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
from search import contract as contraction  # its merging thresholds, read as they stand (tests change them)
from search.contract import (
    CHUNK,
    FUSED_ROWS,
    PARALLEL,
    Spread,
    Workers,
    contract,
    fused_available,
    prepare,
    row_at,
    separable_axis,
    whole,
)
from search.prune import prune as prune_configurations
from search.prune import working_bytes

__all__ = ["SearchTooLarge", "Elimination", "elimination", "SearchResult", "solve", "worth_pruning", "check_fits",
           "cores", "default_memory_limit", "KERNELS", "Reduced", "reduce_problem", "Eliminated", "eliminate"]

KERNELS = ("auto", "numpy", "fused")
FUSED_WORK = 10**9  # searches evaluating this many table entries load the fused kernel
_FUSED_STEP = 1 << 22  # and use it for the separable steps at least this large
FUSED_BYTES = 150 * 10**6  # numba, its compiler and the kernel in memory, counted in the limit
MERGED_TRY = 8  # an estimate up to this many times the limit: run, counting the tables as they are kept merged
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
        step = max((self.step_entries(v, threads, fused) for v in self.order), default=0)
        return self.table_bytes + _BYTES * step

    def step_entries(self, v: int, threads: int = 1, fused: bool = False) -> int:
        """An upper estimate of the entries ``v``'s step holds while it runs,
        its table included (see :meth:`peak_bytes`), and what finding the
        configurations it sees alike takes when it is large enough to merge;
        the earlier tables it reads are not counted here (they are kept)."""
        t = self.table_entries(v)
        work = self.sizes[v] * t
        merged = sum(n for n in (math.prod(self.sizes[w] for w in f) for f in self.factor_scopes(v)) if n < work)
        k = self.separable(v) if fused and work >= _FUSED_STEP else None
        if k is not None:
            way = t + 3 * self.sizes[v] * self.sizes[self.scope[v][k - 1]] + threads * FUSED_ROWS
        else:
            busy = threads if work >= PARALLEL else 1
            way = busy * (min(work, max(CHUNK, t)) + 2 * t)
        if work >= contraction.MERGE_WORK:  # finding the configurations alike: hashes, checks and shrunk copies
            spanning = sum(math.prod(self.sizes[w] for w in f) for f in self.factor_scopes(v) if f != {v})
            way += 3 * min(spanning, int(work / contraction.MERGE_SHARE))
        return merged + way

    def merges(self) -> bool:
        """Whether some step is large enough to merge the configurations it
        sees alike (:data:`search.contract.MERGE_WORK`): then its tables
        may take less than :attr:`table_bytes`."""
        return any(self.sizes[v] * self.table_entries(v) >= contraction.MERGE_WORK for v in self.order)


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
    from report import fmt_bytes

    return fmt_bytes(nbytes)


def check_fits(pl: Elimination, limit: int, names=None, threads: int = 1, held: int = 0, fused: bool = False) -> None:
    """Raise :class:`SearchTooLarge` when ``pl``'s tables have more axes
    than numpy handles, or when they and the ``held`` bytes already in use
    need more than ``limit`` bytes."""
    named = _namer(names)
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
    _check_axes(pl, named)


def _namer(names):
    return lambda v: f"operator {v}" + (f" ({names[v]})" if names else "")


def _check_axes(pl: Elimination, named) -> None:
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


def _copies(edge_costs, kept, free=frozenset()) -> dict:
    """The pruned edge matrices to make: key -> (edge, entries).  Edges
    with an end left with one configuration need none (it is folded into
    the other end, unless ``free``), nor do edges whose two ends kept
    everything (used as they are), and identical layers with identical
    kept configurations share one copy."""
    out = {}
    for (u, v), m in edge_costs.items():
        ku, kv = kept[u], kept[v]
        folded = (len(ku) == 1 and u not in free) or (len(kv) == 1 and v not in free)
        if not folded and (len(ku), len(kv)) != m.shape:
            out.setdefault((id(m), ku.tobytes(), kv.tobytes()), ((u, v), len(ku) * len(kv)))
    return out


def _reduce(node_costs, edge_costs, kept, copies, free=frozenset()):
    """The problem over the kept configurations, with every operator left
    with one configuration folded into its neighbours' cost vectors (but
    those of ``free``).  Returns (constant cost, {v: costs}, {(u, v):
    matrix}) over the others."""
    fixed = {v: int(k[0]) for v, k in enumerate(kept) if len(k) == 1 and v not in free}
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


@dataclass
class Reduced:
    """A problem after pruning: ``kept[v]`` the configurations each operator
    keeps (ascending positions in the arrays as given), ``sizes`` their
    counts, ``nodes[v]`` and ``edges[(u, v)]`` the cost vectors and matrices
    over them of the operators left with several, those left with one
    folded into their neighbours and ``constant``; ``unpruned`` the
    elimination over the given order without pruning, and what a search
    needs to run (memory limit, threads, kernel, names)."""

    kept: list
    sizes: list
    nodes: dict
    edges: dict
    constant: float
    unpruned: Elimination
    examined: bool
    prune_seconds: float
    limit: int
    threads: int
    kernel: str
    names: object
    held_bytes: int
    t0: float


def reduce_problem(node_costs, edge_costs, order, *, prune: bool | str = "auto", memory_limit: int | None = None,
                   names=None, threads: int | None = None, kernel: str = "auto", held_bytes: int = 0,
                   free=(), alike=()) -> Reduced:
    """Prune ``node_costs`` and ``edge_costs`` (see :func:`solve`) and fold
    the operators left with one configuration, except those of ``free``
    (the boundaries of repeated blocks); operators in a group of ``alike``
    keep the same configurations (the union of what each keeps)."""
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
    for group in alike:  # the same configurations for each: the union of what each keeps
        union = np.unique(np.concatenate([kept[v] for v in group]))
        for v in group:
            kept[v] = union
    prune_seconds = time.perf_counter() - t0
    free = set(free)
    copies = _copies(edge_costs, kept, free)
    constant, nodes, edges = _reduce(node_costs, edge_costs, kept, copies, free)
    return Reduced(kept, [len(k) for k in kept], nodes, edges, constant, unpruned, bool(examine), prune_seconds,
                   limit, threads, kernel, names, held_bytes, t0)


@dataclass
class Eliminated:
    """What :func:`eliminate` computed: the ``table`` over the kept
    variables (a number when none are kept), and the steps that recover the
    eliminated ones (``elimination`` their order and scopes)."""

    table: object
    elimination: Elimination
    steps: dict
    keep: tuple
    fused: bool
    saved: int = 0  # table entries not computed: those of configurations a step saw alike

    def recover(self, values: dict) -> dict:
        """The position (among its kept configurations) of every eliminated
        variable, given those of the kept ones (``values``), by
        back-substitution: latest first, each one's dependent set is
        decided."""
        local = dict(values)
        pl = self.elimination
        for v in reversed(pl.order[:len(pl.order) - len(self.keep)]):
            row = row_at(self.steps[v], [local[w] for w in pl.scope[v]])
            local[v] = int(np.argmin(row))
        return local


def eliminate(red: Reduced, order, keep=(), nodes=None, pool=None, progress=None, check: bool = True,
              held: int = 0) -> Eliminated:
    """Eliminate the variables of ``order`` from the pruned problem ``red``,
    keeping those of ``keep`` (eliminated last, not minimised over): the
    factors are the cost vectors ``nodes`` (variable -> vector over its kept
    configurations; default: ``red``'s of every variable of ``order`` and
    ``keep``) and ``red``'s edges among those variables.  With ``check``,
    raises :class:`SearchTooLarge` first when the tables (and ``held`` bytes
    more) would not fit the memory limit.  When some step merges the
    configurations it sees alike and the estimate of whole tables is
    within ``MERGED_TRY`` times the limit, the search runs instead and
    checks each step before it runs against what is held then (the tables
    as they are kept, merged), raising when the step could pass the limit."""
    sizes = red.sizes
    every = list(order) + list(keep)
    inside = set(every)
    nodes = {v: red.nodes[v] for v in every} if nodes is None else dict(nodes)
    for v in every:
        if v not in nodes:
            nodes[v] = np.zeros(sizes[v])
    edges = {e: m for e, m in red.edges.items() if e[0] in inside and e[1] in inside}
    pl = _elimination(every, sizes, list(edges))
    kernel = red.kernel
    fused = kernel == "fused" or (kernel == "auto" and pl.work >= FUSED_WORK and fused_available())
    tally = None  # bytes held before the tables, when they are counted as they come
    if check:
        base = red.held_bytes + held + (FUSED_BYTES if fused else 0)
        if pl.merges() and base < red.limit < base + pl.peak_bytes(red.threads, fused) <= MERGED_TRY * red.limit:
            _check_axes(pl, _namer(red.names))
            tally = base  # merged tables take less than the estimate: each step is checked before it runs
        else:
            check_fits(pl, red.limit, red.names, red.threads, base, fused)
    pos = {v: i for i, v in enumerate(pl.order)}
    tables, steps, total, used_fused, saved, stored = {}, {}, 0.0, False, 0, 0
    own_pool = pool is None and red.threads > 1
    pool = Workers(red.threads) if own_pool else pool
    gone = len(every) - len(keep)
    try:
        for n_done, v in enumerate(pl.order[:gone]):
            if tally is not None:
                _check_step(pl, v, tables, tally + stored, red, fused, n_done, gone)
            full = (v,) + pl.scope[v]
            shape = tuple(sizes[w] for w in full)
            fs = []
            for f in pl.bucket[v]:
                a, s = _factor(f, pos, nodes, edges, tables, pl.scope)
                if isinstance(a, Spread):
                    fs.append(a.placed([s.index(w) if w in s else None for w in full]))
                else:
                    fs.append(a.reshape([sizes[w] if w in s else 1 for w in full]))
            step = steps[v] = prepare(fs, shape)
            use = fused and step.inner is not None and (kernel == "fused" or math.prod(shape) >= _FUSED_STEP)
            used_fused |= use
            saved += math.prod(shape) - step.work
            tables[v] = contract(step, threads=red.threads, pool=pool, fused=use)
            stored += tables[v].nbytes  # as kept: a Spread's classes, or the whole array
            step.release()
            if not pl.scope[v]:
                total += float(tables[v])  # no axes, nothing merged: an array
            if progress is not None:
                progress(n_done + 1, gone)
    finally:
        if own_pool and pool is not None:
            pool.close()
    if not keep:
        return Eliminated(total, pl, steps, (), used_fused, saved)
    shape = tuple(sizes[w] for w in keep)
    table = np.full(shape, total)
    for v in keep:  # what is left: factors over the kept variables only
        for f in pl.bucket[v]:
            if f[0] == "table" and f[1] in keep:  # a kept variable is never eliminated: no table of its own
                continue
            a, s = _factor(f, pos, nodes, edges, tables, pl.scope)
            a = np.asarray(whole(a))
            axes = [keep.index(w) for w in s]
            a = np.transpose(a.reshape([sizes[w] for w in s]), np.argsort(axes))
            table = table + a.reshape([sizes[w] if w in s else 1 for w in keep])
    return Eliminated(table, pl, steps, tuple(keep), used_fused, saved)


def _check_step(pl: Elimination, v: int, tables: dict, holding: int, red: Reduced, fused: bool, done: int,
                of: int) -> None:
    """Raise :class:`SearchTooLarge` when ``v``'s step could take the memory
    in use (``holding`` bytes: what was held before the tables, and the
    tables so far as they are kept) beyond the limit: its estimate of
    :meth:`Elimination.step_entries`, plus the tables it reads that are
    kept merged, at their full size."""
    spread = sum(pl.table_entries(arg) for kind, arg in pl.bucket[v]
                 if kind == "table" and isinstance(tables.get(arg), Spread))
    if spread:  # spread out whole, or a block of rows per thread at a time
        spread += red.threads * min(pl.sizes[v] * pl.table_entries(v), CHUNK)
    step = _BYTES * (pl.step_entries(v, red.threads, fused) + spread)
    if holding + step > red.limit:
        raise SearchTooLarge(
            f"the search needs more than the limit of {_gb(red.limit)}: after {done} of its {of} steps it holds "
            f"{_gb(holding)}, and {_namer(red.names)(v)} may need {_gb(step)} more (a table of "
            f"{pl.table_entries(v):.3g} entries before configurations seen alike are merged)"
        )


def _stats(red: Reduced, pl: Elimination, used_fused: bool, seconds: float, saved: int = 0) -> SearchStats:
    sizes0 = list(red.unpruned.sizes)
    return SearchStats(
        algo=None, order="given", seconds=seconds, largest_K=max(sizes0, default=0),
        largest_dependent_set=pl.largest_dependent_set, largest_table=pl.largest_table, work=pl.work,
        work_computed=pl.work - saved,
        largest_K_pruned=max(red.sizes, default=0), configurations=sum(sizes0), configurations_kept=sum(red.sizes),
        work_unpruned=red.unpruned.work, prune_seconds=red.prune_seconds if red.examined else 0.0,
        kernel="fused" if used_fused else "numpy", pruned=red.examined,
    )


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
    than numpy allows; or, when merged tables may fit where whole ones do
    not, at the first step that could pass the limit (see
    :func:`eliminate`).  ``kernel``: ``"auto"`` (the fused kernel for
    searches of at least :data:`FUSED_WORK` entries when numba is
    installed), ``"numpy"`` or ``"fused"``.  ``progress(done, total)`` is
    called after each vertex.
    """
    red = reduce_problem(node_costs, edge_costs, order, prune=prune, memory_limit=memory_limit, names=names,
                         threads=threads, kernel=kernel, held_bytes=held_bytes)
    free = [v for v in red.unpruned.order if red.sizes[v] > 1]
    copies_bytes = sum(m.nbytes for m in {id(m): m for m in red.edges.values()}.values()
                       if not any(m is e for e in edge_costs.values()))
    done = eliminate(red, free, (), progress=progress,
                     held=_BYTES * sum(red.sizes[v] for v in free) + copies_bytes)
    local = done.recover({})
    index = [int(k[local.get(v, 0)]) for v, k in enumerate(red.kept)]
    seconds = time.perf_counter() - red.t0
    return SearchResult(red.constant + done.table, index, done.elimination, seconds,
                        _stats(red, done.elimination, done.fused, seconds, done.saved), red.kept)
